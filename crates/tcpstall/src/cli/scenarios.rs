//! `tcpstall scenarios`: the built-in catalogue.

use scenario::Scenario;
use serde_json::json;

use super::output::{self, OutputFormat};

const EXAMPLES: &str = "\
Examples:
  tcpstall scenarios                      every built-in scenario: seed, finding, parameters, matrix
  tcpstall scenarios burst                one of them
  tcpstall scenarios --format json        the catalogue as JSON (also csv, markdown)
  tcpstall lab burst --set n=2            run one, overriding a parameter";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ScenariosArgs {
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

fn params(s: &Scenario) -> String {
    match s.workload.params_json() {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::Array(a) if a.is_empty() => format!("{k}=[]"),
                serde_json::Value::Array(a) => {
                    format!("{k}={}", a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
                }
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// The catalogue as JSON: one object per scenario.
pub fn catalogue_json(list: &[Scenario]) -> serde_json::Value {
    serde_json::Value::Array(
        list.iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "seed": s.seed,
                    "kind": s.workload.kind(),
                    "summary": s.summary,
                    "finding": s.finding,
                    "params": s.workload.params_json(),
                    "matrix": s.matrix.iter().map(|p| json!({
                        "label": p.label,
                        "client": p.client.opts().iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                        "server": p.server.opts().iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

fn strategies(p: &scenario::StrategyPair) -> String {
    let side = |o: &scenario::SideOpts| {
        let v: Vec<&str> = o.opts().iter().map(|o| o.as_str()).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join("+")
        }
    };
    format!("{}=client:{}/server:{}", p.label, side(&p.client), side(&p.server))
}

fn csv_field(s: &str) -> String {
    // RFC 4180 2.6/2.7: quote fields with commas, quotes or line breaks; double the quotes.
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The catalogue as CSV: one line per scenario; the matrix as `label=client:..../server:...`
/// entries separated by `;`.
pub fn catalogue_csv(list: &[Scenario]) -> String {
    let mut out = String::from("name,seed,kind,summary,finding,params,matrix\n");
    for s in list {
        let matrix: Vec<String> = s.matrix.iter().map(strategies).collect();
        let f = [
            s.name.clone(),
            s.seed.clone().unwrap_or_default(),
            s.workload.kind().to_string(),
            s.summary.clone(),
            s.finding.clone(),
            params(s),
            matrix.join(";"),
        ];
        out.push_str(&f.iter().map(|x| csv_field(x)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The catalogue as a Markdown table.
pub fn catalogue_markdown(list: &[Scenario]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out =
        String::from("| scenario | seed | summary | finding | parameters | matrix |\n|---|---|---|---|---|---|\n");
    for s in list {
        let labels: Vec<&str> = s.matrix.iter().map(|p| p.label.as_str()).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | `{}` | {} |\n",
            cell(&s.name),
            cell(s.seed.as_deref().unwrap_or("")),
            cell(&s.summary),
            cell(&s.finding),
            cell(&params(s)),
            cell(&labels.join(", "))
        ));
    }
    out
}

/// The catalogue for people.
pub fn catalogue_text(list: &[Scenario]) -> String {
    let mut out = String::new();
    for s in list {
        match &s.seed {
            Some(seed) => out.push_str(&format!("{} (seed {seed})\n", s.name)),
            None => out.push_str(&format!("{}\n", s.name)),
        }
        out.push_str(&format!("  {}\n", s.summary));
        if !s.finding.is_empty() {
            out.push_str(&format!("  finding: {}\n", s.finding));
        }
        out.push_str(&format!("  params:  {}\n", params(s)));
        let labels: Vec<_> = s.matrix.iter().map(|p| p.label.as_str()).collect();
        out.push_str(&format!("  matrix:  {}\n\n", labels.join(", ")));
    }
    out.push_str("Run one with `tcpstall lab NAME`; override parameters with --set KEY=VALUE.\n");
    out
}

/// A built-in as a file: conversations (chunked, multi-write, rr) in the exchange form with the
/// same matrix, the others as their own file.
pub fn show_text(name: &str) -> anyhow::Result<String> {
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

pub fn run(args: ScenariosArgs) -> anyhow::Result<i32> {
    if let Some(name) = &args.show {
        output::write_bytes(show_text(name)?.as_bytes(), None)?;
        return Ok(0);
    }
    let list = match &args.name {
        Some(n) => vec![Scenario::builtin(n)?],
        None => Scenario::catalogue(),
    };
    let bytes = match args.format {
        OutputFormat::Json => {
            let mut v = serde_json::to_vec_pretty(&catalogue_json(&list))?;
            v.push(b'\n');
            v
        }
        OutputFormat::Table => catalogue_text(&list).into_bytes(),
        OutputFormat::Csv => catalogue_csv(&list).into_bytes(),
        OutputFormat::Markdown => catalogue_markdown(&list).into_bytes(),
    };
    output::write_bytes(&bytes, None)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lists_every_scenario_with_its_matrix() {
        let t = catalogue_text(&Scenario::catalogue());
        assert!(t.contains("chunked (seed 000)"));
        assert!(t.contains("params:  n_chunk=100 round=100 send=1000"), "{t}");
        assert!(t.contains("matrix:  default, nodelay, quickack-once, quickack-each, cork, msg-more, writev, buffer"));
        assert!(t.contains("\nrr\n"));
    }

    #[test]
    fn csv_and_markdown_have_one_line_per_scenario() {
        let list = Scenario::catalogue();
        let csv = catalogue_csv(&list);
        assert_eq!(csv.lines().count(), 1 + list.len(), "{csv}");
        assert!(csv.lines().nth(1).unwrap().starts_with("chunked,000,chunked,"), "{csv}");
        assert!(csv.contains("nodelay=client:nodelay/server:nodelay"), "{csv}");
        let md = catalogue_markdown(&list);
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 1 + list.len(), "{md}");
        assert!(md.contains("| burst | 002 |"), "{md}");
    }

    #[test]
    fn json_has_the_fields() {
        let v = catalogue_json(&Scenario::catalogue());
        assert_eq!(v.as_array().unwrap().len(), 6);
        assert_eq!(v[1]["name"], "multi-write");
        assert_eq!(v[1]["seed"], "001");
        assert_eq!(v[1]["matrix"][3]["client"][0], "nodelay-then-cork");
    }
}
