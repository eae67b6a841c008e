//! `tcpstall kernel`: the running kernel's measured TCP rules compared with the Linux era
//! profiles (docs/json-schema.md, "Kernel"). The measurements are the model's `Fingerprint`
//! (this crate does not depend on the model: it is any `Serialize` value, with the few facts
//! the table prints beside it); the comparison and the replay agreement are typed here.

use std::fmt::Write as _;

use serde::Serialize;

use crate::Export;

/// The document: the measurements, the comparison with every era, the replay agreement.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelDoc<F: Serialize> {
    pub fingerprint: F,
    pub comparison: Comparison,
    pub replay_agreement: Vec<ReplayAgreement>,
    /// The table's heading and notes (all of it is also in `fingerprint`).
    #[serde(skip)]
    pub about: About,
}

/// What the table says of the run itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct About {
    pub kernel: String,
    pub private_netns: bool,
    pub seconds: f64,
    pub notes: Vec<String>,
}

/// The measured behaviours against each profile's prediction.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Comparison {
    pub profiles: Vec<String>,
    pub rows: Vec<Row>,
    /// Per profile: scored rows that agree.
    pub scores: Vec<u32>,
    /// Scored rows with a measurement.
    pub scored_rows: u32,
    /// The profiles with the highest score (several when tied).
    pub best: Vec<String>,
}

/// One behaviour.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Row {
    pub behaviour: String,
    /// The kernel function or commit the row tests.
    pub rule: String,
    /// What was measured, for people (with the raw numbers).
    pub measured: String,
    /// The category the measurement falls in ("" when not measured or unclear).
    pub category: String,
    /// Per profile (same order as `profiles`): the predicted category.
    pub predicted: Vec<String>,
    /// False for build/administrator choices: shown, not scored.
    pub scored: bool,
    /// The predictions come from replaying the experiment on each profile's model.
    pub replayed: bool,
}

/// How many measured behaviours a profile's model reproduces when the experiments replay on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayAgreement {
    pub profile: String,
    pub agree: u32,
    pub rows: u32,
    /// behaviour: measured category vs the replay's.
    pub disagree: Vec<String>,
}

fn short(name: &str) -> &str {
    name.strip_prefix("linux:").unwrap_or(name)
}

/// The table's width: it fits a 120-column terminal whatever the measurements say.
const WIDTH: usize = 120;

/// `text` cut to `w` characters, ending in "..." when cut (the JSON has the whole value).
fn fit(text: &str, w: usize) -> String {
    if text.chars().count() <= w {
        return text.to_string();
    }
    let mut s: String = text.chars().take(w.saturating_sub(3)).collect();
    s.push_str("...");
    s
}

/// Profile indices as consecutive runs: "5.4-5.15" for three or more in a row, else a list.
fn runs(idx: &[usize], names: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            out.push(format!("{}-{}", names[idx[i]], names[idx[j]]));
        } else {
            out.extend(idx[i..=j].iter().map(|&k| names[k].clone()));
        }
        i = j + 1;
    }
    out.join(", ")
}

/// What the profiles that disagree with the measurement predict, grouped by prediction.
fn otherwise(r: &Row, names: &[String]) -> String {
    let differs = |p: &String| {
        if r.behaviour == "dating sysctls" {
            !p.ends_with('+')
        } else {
            !r.scored || *p != r.category
        }
    };
    if r.scored && r.category.is_empty() && r.behaviour != "dating sysctls" {
        return "not measured".into();
    }
    let mut groups: Vec<(&String, Vec<usize>)> = Vec::new();
    for (k, p) in r.predicted.iter().enumerate().filter(|(_, p)| differs(p)) {
        match groups.iter_mut().find(|(v, _)| *v == p) {
            Some((_, g)) => g.push(k),
            None => groups.push((p, vec![k])),
        }
    }
    let text = groups
        .iter()
        .map(|(v, g)| if g.len() == names.len() { format!("all: {v}") } else { format!("{}: {v}", runs(g, names)) })
        .collect::<Vec<_>>()
        .join("; ");
    match (r.scored, text.is_empty()) {
        (true, true) => "none".into(),
        (true, false) => text,
        // A build or administrator choice: shown, not scored.
        (false, _) => format!("(not scored) {text}"),
    }
}

/// behaviour | how it was predicted | measured here | the profiles that predict otherwise.
fn rows_table(s: &mut String, c: &Comparison, names: &[String]) {
    let bw = c.rows.iter().map(|r| r.behaviour.chars().count()).max().unwrap_or(9).clamp(9, 34);
    let mw = 44;
    let hw = 6;
    let ow = WIDTH - bw - hw - mw - 6;
    let _ = writeln!(s, "\n{:<bw$}  {:<hw$}  {:<mw$}  predicted otherwise by", "behaviour", "how", "measured here");
    for r in &c.rows {
        let how = if r.replayed { "replay" } else { "facts" };
        let line = format!(
            "{:<bw$}  {how:<hw$}  {:<mw$}  {}",
            fit(&r.behaviour, bw),
            fit(&r.measured, mw),
            fit(&otherwise(r, names), ow)
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(
        s,
        "\npredicted otherwise by: the profiles whose prediction differs from the measurement, with what they \
         predict\n(a-b: every era from a to b); none: every profile agrees. how: replay = each profile's model ran \
         the experiment,\nfacts = the profile's stated rule; (not scored): a build or administrator choice. ... = cut to fit \
         120 columns\n(--format json has every value)."
    );
    let _ = writeln!(s, "\nEach row's rule:");
    for r in &c.rows {
        let _ = writeln!(s, "{}", fit(&format!("  {}: {}", r.behaviour, r.rule), WIDTH));
    }
}

/// The comparison for people: heading, one row per behaviour, scores, best match, notes.
pub fn comparison_table(a: &About, c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kernel {} ({}), experiments took {:.1} s",
        a.kernel,
        if a.private_netns { "private network namespace" } else { "this namespace's loopback" },
        a.seconds
    );
    let names: Vec<String> = c.profiles.iter().map(|p| short(p).to_string()).collect();
    let _ = writeln!(s, "profiles compared (Linux eras, oldest first): {}", names.join(", "));
    rows_table(&mut s, c, &names);
    let scores: Vec<String> = c.profiles.iter().zip(&c.scores).map(|(p, n)| format!("{}={n}", short(p))).collect();
    let _ = writeln!(s, "\nagreement (of {} scored rows): {}", c.scored_rows, scores.join(" "));
    let _ = writeln!(
        s,
        "best match: {}{}",
        c.best.join(", "),
        if c.best.len() > 1 { " (tied: the measured rules do not tell them apart)" } else { "" }
    );
    for n in &a.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

fn agreement_text(v: &[ReplayAgreement]) -> String {
    let mut s = String::from("\nthe experiments replayed on the model (the rows whose how is replay):\n");
    for a in v {
        let pct = if a.rows == 0 { 0.0 } else { 100.0 * f64::from(a.agree) / f64::from(a.rows) };
        let _ = writeln!(s, "  {}: {} of {} measured behaviours reproduced ({pct:.0} %)", a.profile, a.agree, a.rows);
        for d in &a.disagree {
            let _ = writeln!(s, "    differs: {d}");
        }
    }
    s
}

impl<F: Serialize> Export for KernelDoc<F> {
    const COMMAND: &'static str = "kernel";

    fn table(&self) -> String {
        comparison_table(&self.about, &self.comparison) + &agreement_text(&self.replay_agreement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(behaviour: &str, measured: &str, category: &str, predicted: &[&str], scored: bool) -> Row {
        Row {
            behaviour: behaviour.into(),
            rule: "tcp_send_delayed_ack; ".repeat(8),
            measured: measured.into(),
            category: category.into(),
            predicted: predicted.iter().map(|p| p.to_string()).collect(),
            scored,
            replayed: scored,
        }
    }

    /// Issue 26: the table fits 120 columns whatever the values, `...` is the only cut mark, and
    /// the profiles that disagree are named with their prediction (runs of eras as a-b).
    #[test]
    fn the_table_fits_120_columns_with_one_meaning_per_mark() {
        let profiles: Vec<String> = ["4.19", "5.4", "5.10", "5.15", "6.1", "6.6", "6.12", "linux"]
            .iter()
            .map(|p| format!("linux:{p}"))
            .collect();
        let long = "x".repeat(200);
        let c = Comparison {
            profiles,
            rows: vec![
                row(
                    "pingpong threshold",
                    "1 (sysctl tcp_pingpong_thresh = 1)",
                    "1",
                    &["1", "3", "3", "3", "1", "1", "1", "1"],
                    true,
                ),
                row(&long, &long, "a", &[&long, &long, "b", "b", "b", "b", "a", "a"], true),
                row("quick ACKs spent", "15 left", "per new-data ACK", &["per segment"; 8], true),
                row("HZ", "250", "", &["250"; 8], false),
            ],
            scores: vec![1; 8],
            scored_rows: 3,
            best: vec!["linux".into()],
        };
        let about = About { kernel: "6.18".into(), ..About::default() };
        let agree = ReplayAgreement { profile: "linux:here".into(), agree: 3, rows: 4, disagree: vec!["HZ".into()] };
        let doc = KernelDoc { fingerprint: (), comparison: c, replay_agreement: vec![agree], about };
        let text = doc.table();
        for l in text.lines() {
            assert!(l.chars().count() <= 120, "{} columns: {l}", l.chars().count());
            assert!(!l.contains('~') && !l.contains('*'), "no other mark: {l}");
        }
        assert!(text.starts_with("kernel 6.18 (this namespace's loopback), experiments took 0.0 s\n"), "{text}");
        assert!(text.contains("5.4-5.15: 3"), "{text}");
        assert!(text.contains("all: per segment"), "{text}");
        assert!(text.contains("(not scored) all: 250"), "{text}");
        assert!(text.contains("..."), "{text}");
        assert!(
            text.contains("  linux:here: 3 of 4 measured behaviours reproduced (75 %)\n    differs: HZ\n"),
            "{text}"
        );
        let names: Vec<String> = doc.comparison.profiles.iter().map(|p| short(p).to_string()).collect();
        assert_eq!(runs(&[0, 1, 3], &names), "4.19, 5.4, 5.15");
    }
}
