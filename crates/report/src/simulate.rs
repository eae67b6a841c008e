//! `tcpstall simulate --compare-profiles`: the scenario's strategies on several stack profiles
//! side by side (docs/json-schema.md, "Simulate: profile comparison"). A plain `simulate` run
//! prints the lab's [`crate::Report`].

use std::fmt::Write as _;

use serde::Serialize;

use crate::cells::{csv_field, md_cell};
use crate::{Export, Report, RunResult};

/// "strategy variant": how simulate names a row (its comparison, pcap lines, stall stories).
pub fn row_label(row: &RunResult) -> String {
    if row.variant.is_empty() {
        row.strategy.clone()
    } else {
        format!("{} {}", row.strategy, row.variant)
    }
}

/// `simulate --pcap FILE`: which connection of the capture is which row, one line each
/// ("pcap FILE: LABEL is 10.0.0.1:40000 -> 10.0.0.2:5001"); row k's client port is
/// `client_port0 + k`.
pub fn pcap_lines(file: &str, report: &Report, client_port0: u16, server_port: u16) -> Vec<String> {
    let port = |k: usize| client_port0 as usize + k;
    let line = |(k, row): (usize, &RunResult)| {
        format!("pcap {file}: {} is 10.0.0.1:{} -> 10.0.0.2:{server_port}", row_label(row), port(k))
    };
    report.results.iter().enumerate().map(line).collect()
}

/// The comparison: one column per profile (or CLIENT:SERVER pair), the same rows in each.
#[derive(Debug, Clone, Serialize)]
pub struct CompareProfilesDoc {
    pub tool: &'static str,
    pub version: &'static str,
    pub schema_version: u32,
    /// Always "compare-profiles".
    pub mode: &'static str,
    pub scenario: String,
    pub profiles: Vec<ProfileColumn>,
}

/// One profile's run of the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileColumn {
    /// The profile's name, or `CLIENT:SERVER` for a pair.
    pub profile: String,
    pub rows: Vec<CompareRow>,
}

/// One strategy (and workload variant) on one profile.
#[derive(Debug, Clone, Serialize)]
pub struct CompareRow {
    pub strategy: String,
    /// Stall records naming a mechanism (the row's `stall_count`).
    pub stall_count: Option<u64>,
    pub p50_ms: f64,
    pub max_ms: f64,
    pub verdict: String,
}

impl CompareRow {
    fn of(r: &RunResult) -> CompareRow {
        CompareRow {
            strategy: row_label(r),
            stall_count: r.stall_count,
            p50_ms: r.latency_us.p50 / 1e3,
            max_ms: r.latency_us.max / 1e3,
            verdict: r.verdict.clone(),
        }
    }

    /// The table's cell: "N stalls p50/max".
    fn cell(&self) -> String {
        format!("{} stalls {:.2}/{:.1}", self.stall_count.unwrap_or(0), self.p50_ms, self.max_ms)
    }
}

impl CompareProfilesDoc {
    /// `columns`: (profile label, that profile's report), in the order run.
    pub fn new(scenario: &str, version: &'static str, columns: &[(String, Report)]) -> Self {
        CompareProfilesDoc {
            tool: "tcpstall",
            version,
            schema_version: crate::SCHEMA_VERSION,
            mode: "compare-profiles",
            scenario: scenario.to_string(),
            profiles: columns
                .iter()
                .map(|(name, r)| ProfileColumn {
                    profile: name.clone(),
                    rows: r.results.iter().map(CompareRow::of).collect(),
                })
                .collect(),
        }
    }

    /// Rows per profile (the first profile's; every profile runs the same matrix).
    fn rows(&self) -> usize {
        self.profiles.first().map_or(0, |c| c.rows.len())
    }

    fn label(&self, i: usize) -> &str {
        self.profiles.first().and_then(|c| c.rows.get(i)).map_or("", |r| r.strategy.as_str())
    }

    /// Row `i` differs: a profile stalls where another does not, or in clearly more rounds
    /// (more than one more). The model's rows always classify: no count reads as 0.
    pub fn differs(&self, i: usize) -> bool {
        let stalls = self.profiles.iter().map(|c| c.rows.get(i).and_then(|x| x.stall_count).unwrap_or(0));
        let (lo, hi) = stalls.fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
        let lo = if self.profiles.is_empty() { 0 } else { lo };
        (lo == 0) != (hi == 0) || hi > lo + 1
    }

    fn differing(&self) -> usize {
        (0..self.rows()).filter(|&i| self.differs(i)).count()
    }

    fn cell(&self, col: &ProfileColumn, i: usize) -> String {
        col.rows.get(i).map_or_else(String::new, CompareRow::cell)
    }

    fn summary(&self) -> String {
        format!(
            "{} of {} strategies stall on some profiles and not on others, or in clearly more runs; the \
             profiles' differences are listed (with commits) by `tcpstall simulate --list-profiles`",
            self.differing(),
            self.rows()
        )
    }
}

impl Export for CompareProfilesDoc {
    const COMMAND: &'static str = "simulate --compare-profiles";

    fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "scenario {}: stalls per run and latency p50/max (ms) on each profile", self.scenario);
        let lw = self.profiles.first().map_or(8, |c| c.rows.iter().map(|x| x.strategy.len()).max().unwrap_or(8)).max(8);
        let cw = self.profiles.iter().map(|c| c.profile.len()).max().unwrap_or(10).max(22);
        let _ = write!(out, "{:<lw$}", "strategy");
        for c in &self.profiles {
            let _ = write!(out, "  {:<cw$}", c.profile);
        }
        out.push('\n');
        for i in 0..self.rows() {
            let _ = write!(out, "{:<lw$}", self.label(i));
            for c in &self.profiles {
                let _ = write!(out, "  {:<cw$}", self.cell(c, i));
            }
            if self.differs(i) {
                out.push_str("  <- differs");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "\n{}", self.summary());
        out
    }

    /// One line per profile and row.
    fn csv(&self) -> Option<String> {
        let mut out = String::from("scenario,profile,strategy,stall_count,p50_ms,max_ms,differs,verdict\n");
        for c in &self.profiles {
            for (i, r) in c.rows.iter().enumerate() {
                let stalls = r.stall_count.map(|n| n.to_string()).unwrap_or_default();
                let fields = [
                    csv_field(&self.scenario),
                    csv_field(&c.profile),
                    csv_field(&r.strategy),
                    stalls,
                    r.p50_ms.to_string(),
                    r.max_ms.to_string(),
                    self.differs(i).to_string(),
                    csv_field(&r.verdict),
                ];
                let _ = writeln!(out, "{}", fields.join(","));
            }
        }
        Some(out)
    }

    /// The table's grid as a Markdown table.
    fn markdown(&self) -> Option<String> {
        let esc = md_cell;
        let mut out =
            format!("Scenario `{}`: stalls per run and latency p50/max (ms) on each profile.\n\n", self.scenario);
        out.push_str("| strategy |");
        for c in &self.profiles {
            let _ = write!(out, " {} |", esc(&c.profile));
        }
        out.push_str(" differs |\n|---|");
        out.push_str(&"---|".repeat(self.profiles.len() + 1));
        out.push('\n');
        for i in 0..self.rows() {
            let _ = write!(out, "| {} |", esc(self.label(i)));
            for c in &self.profiles {
                let _ = write!(out, " {} |", self.cell(c, i));
            }
            let _ = writeln!(out, " {} |", if self.differs(i) { "yes" } else { "" });
        }
        let _ = writeln!(out, "\n{}", self.summary());
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn doc(stalls: &[(&str, &[Option<u64>])]) -> CompareProfilesDoc {
        let row = |n: &Option<u64>| CompareRow {
            strategy: "default".into(),
            stall_count: *n,
            p50_ms: 0.0101,
            max_ms: 42.0,
            verdict: "stalls, 40 ms".into(),
        };
        CompareProfilesDoc {
            tool: "tcpstall",
            version: "0",
            schema_version: 2,
            mode: "compare-profiles",
            scenario: "burst".into(),
            profiles: stalls
                .iter()
                .map(|(p, s)| ProfileColumn { profile: p.to_string(), rows: s.iter().map(row).collect() })
                .collect(),
        }
    }

    #[test]
    fn a_row_differs_when_one_profile_stalls_and_another_not_or_clearly_more() {
        let d = doc(&[
            ("linux", &[Some(19), Some(0), Some(3), Some(2)]),
            ("linux:5.10", &[Some(6), Some(0), Some(4), Some(0)]),
        ]);
        let got: Vec<bool> = (0..4).map(|i| d.differs(i)).collect();
        assert_eq!(got, [true, false, false, true]);
        assert_eq!(d.differing(), 2);
    }

    #[test]
    fn the_table_aligns_columns_and_marks_differences() {
        let d = doc(&[("linux:4.19", &[Some(19)]), ("linux", &[Some(0)])]);
        let t = d.table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "scenario burst: stalls per run and latency p50/max (ms) on each profile");
        assert_eq!(lines[1], format!("{:<8}  {:<22}  {:<22}", "strategy", "linux:4.19", "linux"));
        assert_eq!(
            lines[2],
            format!("default   {:<22}  {:<22}  <- differs", "19 stalls 0.01/42.0", "0 stalls 0.01/42.0")
        );
        assert!(lines[4].starts_with("1 of 1 strategies stall on some profiles"), "{t}");
    }

    #[test]
    fn every_format_has_a_form() {
        let d = doc(&[("linux", &[Some(1)])]);
        let csv = String::from_utf8(d.export(Format::Csv).unwrap()).unwrap();
        assert_eq!(csv.lines().nth(1), Some("burst,linux,default,1,0.0101,42,false,\"stalls, 40 ms\""));
        let md = String::from_utf8(d.export(Format::Markdown).unwrap()).unwrap();
        assert!(md.contains("| default | 1 stalls 0.01/42.0 |  |"), "{md}");
        let v: serde_json::Value = serde_json::from_slice(&d.export(Format::Json).unwrap()).unwrap();
        assert_eq!(v["profiles"][0]["rows"][0]["p50_ms"], 0.0101);
    }
}
