//! `tcpstall scenarios`: the built-in catalogue as a typed document (docs/json-schema.md,
//! "Scenarios"). JSON is an array with one object per scenario; the table, CSV and Markdown
//! are one scenario per entry or line.

use serde::Serialize;
use serde_json::Value;

use crate::cells::{csv_field, md_cell};
use crate::Export;

/// The catalogue (or one scenario of it), in catalogue order.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct ScenariosDoc {
    pub scenarios: Vec<ScenarioEntry>,
}

/// One built-in scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioEntry {
    pub name: String,
    /// The seed case it reproduces ("000"), if any.
    pub seed: Option<String>,
    /// The workload's kind (`chunked`, `multi-write`, `burst`, `stream`, `rr`, ...).
    pub kind: String,
    pub summary: String,
    /// What the seed found ("" when none).
    pub finding: String,
    /// The workload's parameters, as `--set` names them.
    pub params: Value,
    /// The strategy matrix `tcpstall lab NAME` runs.
    pub matrix: Vec<MatrixEntry>,
}

/// One row of a scenario's matrix: the options each side sets.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixEntry {
    pub label: String,
    pub client: Vec<String>,
    pub server: Vec<String>,
}

impl ScenariosDoc {
    /// The catalogue (or `list`) as the document.
    pub fn of(list: &[scenario::Scenario]) -> ScenariosDoc {
        ScenariosDoc { scenarios: list.iter().map(ScenarioEntry::from).collect() }
    }
}

impl From<&scenario::Scenario> for ScenarioEntry {
    fn from(s: &scenario::Scenario) -> ScenarioEntry {
        let opts = |o: &scenario::SideOpts| o.opts().iter().map(|o| o.as_str().to_string()).collect::<Vec<_>>();
        ScenarioEntry {
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
        }
    }
}

/// `k=v` pairs of the parameters, arrays as `k=a,b` (`k=[]` when empty).
fn params(p: &Value) -> String {
    match p {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::Array(a) if a.is_empty() => format!("{k}=[]"),
                Value::Array(a) => format!("{k}={}", a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// `label=client:a+b/server:none`.
fn strategies(p: &MatrixEntry) -> String {
    let side = |o: &[String]| if o.is_empty() { "none".to_string() } else { o.join("+") };
    format!("{}=client:{}/server:{}", p.label, side(&p.client), side(&p.server))
}

impl ScenarioEntry {
    fn labels(&self) -> String {
        self.matrix.iter().map(|p| p.label.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl Export for ScenariosDoc {
    const COMMAND: &'static str = "scenarios";

    /// The catalogue for people.
    fn table(&self) -> String {
        let mut out = String::new();
        for s in &self.scenarios {
            match &s.seed {
                Some(seed) => out.push_str(&format!("{} (seed {seed})\n", s.name)),
                None => out.push_str(&format!("{}\n", s.name)),
            }
            out.push_str(&format!("  {}\n", s.summary));
            if !s.finding.is_empty() {
                out.push_str(&format!("  finding: {}\n", s.finding));
            }
            out.push_str(&format!("  params:  {}\n", params(&s.params)));
            out.push_str(&format!("  matrix:  {}\n\n", s.labels()));
        }
        out.push_str("Run one with `tcpstall lab NAME`; override parameters with --set KEY=VALUE.\n");
        out
    }

    /// One line per scenario; the matrix as `label=client:..../server:...` entries separated
    /// by `;`.
    fn csv(&self) -> Option<String> {
        let mut out = String::from("name,seed,kind,summary,finding,params,matrix\n");
        for s in &self.scenarios {
            let matrix: Vec<String> = s.matrix.iter().map(strategies).collect();
            let f = [
                s.name.clone(),
                s.seed.clone().unwrap_or_default(),
                s.kind.clone(),
                s.summary.clone(),
                s.finding.clone(),
                params(&s.params),
                matrix.join(";"),
            ];
            out.push_str(&f.iter().map(|x| csv_field(x)).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        Some(out)
    }

    fn markdown(&self) -> Option<String> {
        let cell = md_cell;
        let mut out =
            String::from("| scenario | seed | summary | finding | parameters | matrix |\n|---|---|---|---|---|---|\n");
        for s in &self.scenarios {
            out.push_str(&format!(
                "| {} | {} | {} | {} | `{}` | {} |\n",
                cell(&s.name),
                cell(s.seed.as_deref().unwrap_or("")),
                cell(&s.summary),
                cell(&s.finding),
                cell(&params(&s.params)),
                cell(&s.labels())
            ));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn doc() -> ScenariosDoc {
        let entry = |name: &str, seed: Option<&str>| ScenarioEntry {
            name: name.into(),
            seed: seed.map(Into::into),
            kind: "chunked".into(),
            summary: "a, \"quoted\" | piped".into(),
            finding: String::new(),
            params: serde_json::json!({ "n_chunk": 100, "sizes": [1, 2], "none": [] }),
            matrix: vec![
                MatrixEntry { label: "default".into(), client: vec![], server: vec![] },
                MatrixEntry {
                    label: "nodelay".into(),
                    client: vec!["nodelay".into()],
                    server: vec!["a".into(), "b".into()],
                },
            ],
        };
        ScenariosDoc { scenarios: vec![entry("chunked", Some("000")), entry("rr", None)] }
    }

    #[test]
    fn table_csv_and_markdown_have_one_entry_per_scenario() {
        let d = doc();
        let t = d.table();
        assert!(t.starts_with("chunked (seed 000)\n"), "{t}");
        assert!(t.contains("\nrr\n"), "{t}");
        assert!(t.contains("  params:  n_chunk=100 none=[] sizes=1,2\n"), "{t}");
        assert!(t.contains("  matrix:  default, nodelay\n"), "{t}");
        let csv = d.csv().unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(csv.contains(",\"a, \"\"quoted\"\" | piped\","), "RFC 4180 quoting: {csv}");
        assert!(csv.contains("default=client:none/server:none;nodelay=client:nodelay/server:a+b"), "{csv}");
        let md = d.markdown().unwrap();
        assert!(md.contains("| chunked | 000 | a, \"quoted\" \\| piped |"), "{md}");
        let v: Value = serde_json::from_slice(&d.export(Format::Json).unwrap()).unwrap();
        assert_eq!(v[1]["seed"], Value::Null);
        assert_eq!(v[0]["matrix"][1]["server"][1], "b");
    }

    #[test]
    fn text_lists_every_scenario_with_its_matrix() {
        let t = ScenariosDoc::of(&scenario::Scenario::catalogue()).table();
        assert!(t.contains("chunked (seed 000)"));
        assert!(t.contains("params:  n_chunk=100 round=100 send=1000"), "{t}");
        assert!(t.contains("matrix:  default, nodelay, quickack-once, quickack-each, cork, msg-more, writev, buffer"));
        assert!(t.contains("\nrr\n"));
    }

    #[test]
    fn csv_and_markdown_have_one_line_per_scenario() {
        let list = scenario::Scenario::catalogue();
        let doc = ScenariosDoc::of(&list);
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
        let v = serde_json::to_value(ScenariosDoc::of(&scenario::Scenario::catalogue())).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 6);
        assert_eq!(v[1]["name"], "multi-write");
        assert_eq!(v[1]["seed"], "001");
        assert_eq!(v[1]["matrix"][3]["client"][0], "nodelay-then-cork");
    }
}
