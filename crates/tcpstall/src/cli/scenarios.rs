//! `tcpstall scenarios`: the built-in catalogue.

use scenario::Scenario;
use serde_json::json;

use super::output::{self, OutputFormat};

#[derive(Debug, clap::Args)]
pub struct ScenariosArgs {
    /// Show only this scenario
    pub name: Option<String>,
    /// Output format (table or json)
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

pub fn run(args: ScenariosArgs) -> anyhow::Result<i32> {
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
        other => anyhow::bail!("--format {other:?} is not available for scenarios (use table or json)"),
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
    fn json_has_the_fields() {
        let v = catalogue_json(&Scenario::catalogue());
        assert_eq!(v.as_array().unwrap().len(), 6);
        assert_eq!(v[1]["name"], "multi-write");
        assert_eq!(v[1]["seed"], "001");
        assert_eq!(v[1]["matrix"][3]["client"][0], "nodelay-then-cork");
    }
}
