//! `tcpstall scenarios`: the built-in catalogue.

use report::scenarios::{MatrixEntry, ScenarioEntry};
use report::{Export, ScenariosDoc};
use scenario::Scenario;

use super::output::{self, OutputFormat};

const EXAMPLES: &str = "\
Examples:
  tcpstall scenarios                      every built-in scenario: seed, finding, parameters, matrix
  tcpstall scenarios burst                one of them
  tcpstall scenarios --format json        the catalogue as JSON (also csv, markdown)
  tcpstall lab burst --set n=2            run one, overriding a parameter";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ScenariosArgs {
    /// Show only this scenario
    pub name: Option<String>,
    /// Print this built-in as a scenario file to start from (conversations as an exchange);
    /// save it, edit it, and run it with `tcpstall lab FILE.toml`
    #[arg(long, value_name = "NAME", conflicts_with = "name")]
    pub show: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}

/// The catalogue (or `list`) as the report's document.
pub(crate) fn document(list: &[Scenario]) -> ScenariosDoc {
    let opts = |o: &scenario::SideOpts| o.opts().iter().map(|o| o.as_str().to_string()).collect::<Vec<_>>();
    let entry = |s: &Scenario| ScenarioEntry {
        name: s.name.clone(),
        seed: s.seed.clone(),
        kind: s.workload.kind().to_string(),
        summary: s.summary.clone(),
        finding: s.finding.clone(),
        params: s.workload.params_json(),
        matrix: s
            .matrix
            .iter()
            .map(|p| MatrixEntry { label: p.label.clone(), client: opts(&p.client), server: opts(&p.server) })
            .collect(),
    };
    ScenariosDoc { scenarios: list.iter().map(entry).collect() }
}

/// A built-in as a file: conversations (chunked, multi-write, rr) in the exchange form with the
/// same matrix, the others as their own file.
pub(crate) fn show_text(name: &str) -> anyhow::Result<String> {
    let s = Scenario::builtin(name)?;
    let Some(e) = s.workload.as_exchange() else {
        return Ok(format!(
            "# built-in scenario '{name}' ({} is not a turn-by-turn exchange, so it keeps its kind)\n{}",
            s.workload.kind(),
            Scenario::builtin_text(name)?
        ));
    };
    let mut file = s.clone();
    file.workload = scenario::Workload::Exchange(e);
    Ok(format!(
        "# built-in scenario '{name}' as an exchange: the same programs as `tcpstall lab {name}`.\n\
         # Edit the turns (side, writes, call = write|send|sendmsg-gathered, think = \"1ms\", peer_reads)\n\
         # and run it with `tcpstall lab FILE.toml`, `tcpstall simulate FILE.toml` or `tcpstall advise FILE.toml`.\n{}",
        file.to_toml()?
    ))
}

pub(crate) fn run(args: ScenariosArgs) -> anyhow::Result<i32> {
    if let Some(name) = &args.show {
        output::write_bytes(show_text(name)?.as_bytes(), None)?;
        return Ok(0);
    }
    let list = match &args.name {
        Some(n) => vec![Scenario::builtin(n)?],
        None => Scenario::catalogue(),
    };
    let bytes = document(&list).export(args.format.into())?;
    output::write_bytes(&bytes, None)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lists_every_scenario_with_its_matrix() {
        let t = document(&Scenario::catalogue()).table();
        assert!(t.contains("chunked (seed 000)"));
        assert!(t.contains("params:  n_chunk=100 round=100 send=1000"), "{t}");
        assert!(t.contains("matrix:  default, nodelay, quickack-once, quickack-each, cork, msg-more, writev, buffer"));
        assert!(t.contains("\nrr\n"));
    }

    #[test]
    fn csv_and_markdown_have_one_line_per_scenario() {
        let list = Scenario::catalogue();
        let doc = document(&list);
        let csv = doc.csv().unwrap();
        assert_eq!(csv.lines().count(), 1 + list.len(), "{csv}");
        assert!(csv.lines().nth(1).unwrap().starts_with("chunked,000,chunked,"), "{csv}");
        assert!(csv.contains("nodelay=client:nodelay/server:nodelay"), "{csv}");
        let md = doc.markdown().unwrap();
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 1 + list.len(), "{md}");
        assert!(md.contains("| burst | 002 |"), "{md}");
    }

    #[test]
    fn json_has_the_fields() {
        let v = serde_json::to_value(document(&Scenario::catalogue())).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 6);
        assert_eq!(v[1]["name"], "multi-write");
        assert_eq!(v[1]["seed"], "001");
        assert_eq!(v[1]["matrix"][3]["client"][0], "nodelay-then-cork");
    }
}
