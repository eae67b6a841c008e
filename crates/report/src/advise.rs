//! `tcpstall advise --format json`: the ranking of candidate fixes with their 95% intervals,
//! the decision among the tied ones, the recommendation and its code (docs/json-schema.md,
//! "Advise"). crates/advise computes it; this is the document and its table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cells::interval_ms_column;
use crate::{Export, Report, RunResult};

/// A statistic with its 95% confidence interval (`crate::stats`; crates/advise's bootstrap
/// computes it).
pub use crate::stats::Interval;

/// Where a row's stall count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum StallSource {
    /// The classifier's stall records naming a mechanism (model; lab with its packets).
    #[default]
    #[serde(rename = "stall records")]
    StallRecords,
    /// Rounds that waited over the stall threshold (the lab without packets: causes unknown).
    #[serde(rename = "slow samples")]
    SlowSamples,
}

/// One candidate's result, as printed and in the JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdviseRow {
    pub rank: usize,
    /// In the declared tie at the top of the ranking.
    pub tied: bool,
    pub label: String,
    pub client: Vec<String>,
    pub server: Vec<String>,
    pub runs: u32,
    pub rounds: u64,
    pub stalls: u64,
    pub stalls_per_round: f64,
    pub stall_source: StallSource,
    pub stalls_by_cause: BTreeMap<String, u64>,
    pub p50_us: Interval,
    pub p99_us: Interval,
    pub p999_us: Interval,
    pub segments_per_message: f64,
    pub wire_bytes_per_message: f64,
    /// Both sides' CPU time per round, µs (lab: CLOCK_THREAD_CPUTIME_ID of the two threads;
    /// absent on the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_round: Option<f64>,
    pub change_size: u32,
}

/// What decided the first place: the declared tie and the rule that chose within it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdviseDecision {
    /// The candidates equal to the first on stalls and p99, in rank order (one when none ties).
    pub tie: Vec<String>,
    pub chosen: String,
    /// The rule that put `chosen` before the next in the tie (`alone` when nothing ties).
    pub rule: &'static str,
    /// The rules, in the order they apply.
    pub rules: Vec<&'static str>,
    /// One sentence: who ties and why the chosen one is first.
    pub reason: String,
}

/// The advise document.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdviseDoc {
    pub tool: &'static str,
    /// "lab" or "simulate".
    pub mode: String,
    pub scenario: String,
    /// The exchange inline, or the workload's parameters.
    pub workload: String,
    pub peer_profile: Option<String>,
    pub runs_per_candidate: u32,
    pub rounds_per_run: u32,
    pub messages_per_round: usize,
    pub elapsed_s: f64,
    pub as_written_stalls: bool,
    /// Best first.
    pub ranking: Vec<AdviseRow>,
    pub decision: AdviseDecision,
    pub recommendation: String,
    pub lang: String,
    pub code: String,
    pub notes: Vec<String>,
}

/// Words to lines of at most `width` columns (a longer word stands alone).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += w;
    }
    out + &line
}

impl AdviseDoc {
    /// The header line and the ranking's rows (with their causes).
    fn ranking_table(&self) -> String {
        let mut out = format!(
            "advise: {} ({}), {} candidates x {} runs x {} rounds, interleaved; {} in {:.1} s\n",
            self.scenario,
            self.workload,
            self.ranking.len(),
            self.runs_per_candidate,
            self.rounds_per_run,
            self.mode,
            self.elapsed_s
        );
        out += &format!(
            "{:>4}  {:<40} {:>9}  {:>22}  {:>22}  {:>22}  {:>9}  {:>9}  {:>8}  {:>6}\n",
            "rank",
            "candidate",
            "stalls",
            "p50 ms [95% CI]",
            "p99 ms [95% CI]",
            "p99.9 ms [95% CI]",
            "segs/msg",
            "B/msg",
            "cpu us/r",
            "change"
        );
        for r in &self.ranking {
            let stalls = format!("{}/{}", r.stalls, r.rounds);
            out += &format!(
                "{:>4}{} {:<40} {:>9}  {:>22}  {:>22}  {:>22}  {:>9.2}  {:>9.0}  {:>8}  {:>6}\n",
                r.rank,
                if r.tied && self.decision.tie.len() > 1 { "=" } else { " " },
                r.label,
                stalls,
                interval_ms_column(&r.p50_us),
                interval_ms_column(&r.p99_us),
                interval_ms_column(&r.p999_us),
                r.segments_per_message,
                r.wire_bytes_per_message,
                r.cpu_us_per_round.map_or("-".to_string(), |c| format!("{c:.1}")),
                r.change_size
            );
            if !r.stalls_by_cause.is_empty() {
                let c: Vec<String> = r.stalls_by_cause.iter().map(|(k, v)| format!("{k} {v}")).collect();
                out += &format!("{:>6}{}\n", "", format_args!("stalls by cause: {}", c.join(", ")));
            }
        }
        out
    }

    /// The ranking for the HTML page (error bars), with the recommendation and its code.
    pub fn html_ranking(&self) -> crate::html::Ranking {
        let iv = |i: &Interval| [i.est, i.lo, i.hi];
        crate::html::Ranking {
            rows: self
                .ranking
                .iter()
                .map(|r| crate::html::RankRow {
                    rank: r.rank,
                    label: r.label.clone(),
                    stalls: r.stalls,
                    rounds: r.rounds,
                    stalls_by_cause: r.stalls_by_cause.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    p50_us: iv(&r.p50_us),
                    p99_us: iv(&r.p99_us),
                    p999_us: iv(&r.p999_us),
                    segments_per_message: r.segments_per_message,
                    wire_bytes_per_message: r.wire_bytes_per_message,
                    change_size: r.change_size,
                })
                .collect(),
            recommendation: self.recommendation.clone(),
            lang: self.lang.clone(),
            code: self.code.clone(),
        }
    }

    /// What ran the candidates, for the HTML page's header: the model's profiles; None for the
    /// lab (the caller names its kernel).
    pub fn model_kernel(&self) -> Option<String> {
        let profiles = self.peer_profile.as_deref().map_or("linux".into(), |p| format!("linux and {p}"));
        (self.mode != "lab").then(|| format!("model ({profiles})"))
    }

    /// The HTML page's notes: the advice's, then what the page's rows are.
    pub fn html_notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        notes.push(format!(
            "The ranking pools all {} runs of each candidate; the strategy table, latency curves, wire bars and stalls \
             below are each candidate's first run.",
            self.runs_per_candidate
        ));
        notes
    }

    /// The candidates' first runs (in rank order) as one report, for the HTML page's rows.
    pub fn first_runs_report(&self, rows: Vec<RunResult>, version: &str, link: &str) -> Report {
        Report {
            tool: "tcpstall".into(),
            version: version.into(),
            schema_version: crate::SCHEMA_VERSION,
            kernel: None,
            profile: None,
            mode: self.mode.clone(),
            scenario: self.scenario.clone(),
            params: serde_json::Value::Null,
            link: link.into(),
            results: rows,
            errors: Vec::new(),
        }
    }
}

impl Export for AdviseDoc {
    const COMMAND: &'static str = "advise";

    fn table(&self) -> String {
        let mut out = self.ranking_table();
        out += "stalls: stalls / measured rounds (a round can hold several); p99.9 of fewer than 1000 rounds is the \
                slowest few rounds; cpu us/r: both sides' thread CPU time per round (lab, CLOCK_THREAD_CPUTIME_ID); change: size of the code change (1 one call after connect, 2 code around each \
                message or read, +1 a Linux-only option)\n";
        if self.decision.tie.len() > 1 {
            out += "=: in the declared tie (p99 within the best one's 95% interval, stalls alike); the smallest \
                    change comes first (tcpstall advise --help: the rules)\n";
        }
        for n in &self.notes {
            out += &format!("note: {n}\n");
        }
        out += &format!("\n{}\n", wrap(&format!("Decision: {}", self.decision.reason), 100));
        out += &format!("{}\n", wrap(&self.recommendation, 100));
        if !self.code.is_empty() {
            out += &format!("\n{}\n", self.code);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    #[test]
    fn the_paragraph_wraps_at_the_width() {
        let w = wrap("aaa bbb ccc ddd", 7);
        assert_eq!(w, "aaa bbb\nccc ddd");
        assert_eq!(wrap("", 10), "");
    }

    #[test]
    fn the_table_marks_the_tie_and_csv_is_unsupported() {
        let row = |rank, label: &str| AdviseRow {
            rank,
            tied: true,
            label: label.into(),
            rounds: 10,
            p99_us: Interval { est: 50.0, lo: 40.0, hi: 60.0 },
            ..AdviseRow::default()
        };
        let d = AdviseDoc {
            tool: "tcpstall",
            ranking: vec![row(1, "client:writev"), row(2, "client:cork")],
            decision: AdviseDecision { tie: vec!["client:writev".into(), "client:cork".into()], ..Default::default() },
            ..AdviseDoc::default()
        };
        let t = d.table();
        assert!(t.contains("   1= client:writev"), "{t}");
        assert!(t.contains("0.05 [0.04-0.06]"), "{t}");
        assert!(t.contains("=: in the declared tie"), "{t}");
        let e = d.export(Format::Csv).unwrap_err().to_string();
        assert_eq!(e, "`advise` output has no csv form (use table, json)");
        let v: serde_json::Value = serde_json::from_slice(&d.export(Format::Json).unwrap()).unwrap();
        assert_eq!(v["ranking"][0]["stall_source"], "stall records");
        assert!(v["ranking"][0].get("cpu_us_per_round").is_none());
    }
}
