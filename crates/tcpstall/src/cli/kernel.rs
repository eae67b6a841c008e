//! `tcpstall kernel`: fingerprint the running kernel's TCP rules and name the Linux era profile
//! that matches them best.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use model::fingerprint::{compare, replay_agreement, Comparison, Fingerprint, ReplayAgreement};
use model::Profile;

use super::output;

const EXAMPLES: &str = "\
Examples:
  tcpstall kernel                   measure this kernel (about 7 s) and compare with linux:4.19 .. linux
  tcpstall kernel --format json     the measurements, every row and the best match as JSON
  tcpstall simulate --profile linux:here burst
                                    simulate with the rules measured here

As root the experiments run in a private network namespace's loopback; otherwise on this
namespace's loopback (the TcpExt counters then include other connections, and the table says so).
The delayed-ACK maximum needs a round trip above 200 ms: it runs over an emulated 400 ms link
(root, or unprivileged user namespaces), about 5 s of the total.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KernelFormat {
    /// A table for people.
    Table,
    /// Measurements, rows and best match as JSON.
    Json,
}

#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub struct KernelArgs {
    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: KernelFormat,
    /// Write to FILE instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(args: KernelArgs) -> anyhow::Result<i32> {
    if let Some(p) = &args.output {
        output::check_writable("--output", p)?;
    }
    let fp = kernel::fingerprint();
    let eras = Profile::eras();
    let cmp = compare(&fp, &eras);
    let agreement = agreements(&fp, &cmp, &eras)?;
    let text = match args.format {
        KernelFormat::Json => {
            let v = serde_json::json!({ "fingerprint": fp, "comparison": cmp, "replay_agreement": agreement });
            serde_json::to_string_pretty(&v)? + "\n"
        }
        KernelFormat::Table => table(&fp, &cmp) + &agreement_text(&agreement),
    };
    output::write_bytes(text.as_bytes(), args.output.as_deref())?;
    Ok(0)
}

/// The profile `simulate --profile linux:here` uses: this kernel's measured rules.
pub fn here_profile() -> anyhow::Result<Profile> {
    let fp = kernel::fingerprint();
    let newest = Profile::builtin("linux")?;
    for n in &fp.notes {
        eprintln!("tcpstall: linux:here: {n}");
    }
    Ok(model::fingerprint::to_profile(&fp, &newest))
}

/// The experiments replayed on the model with this kernel's measured rules (`linux:here`) and
/// with each best-matching era: how many measured behaviours the model reproduces.
fn agreements(fp: &Fingerprint, cmp: &Comparison, eras: &[Profile]) -> anyhow::Result<Vec<ReplayAgreement>> {
    let here = model::fingerprint::to_profile(fp, &Profile::builtin("linux")?);
    let mut v = vec![replay_agreement(fp, &here)];
    for b in &cmp.best {
        if let Some(p) = eras.iter().find(|p| &p.name == b) {
            v.push(replay_agreement(fp, p));
        }
    }
    Ok(v)
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
fn otherwise(r: &model::fingerprint::Row, names: &[String]) -> String {
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
pub fn table(fp: &Fingerprint, c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kernel {} ({}), experiments took {:.1} s",
        fp.kernel,
        if fp.private_netns { "private network namespace" } else { "this namespace's loopback" },
        fp.seconds
    );
    let names: Vec<String> = c.profiles.iter().map(|p| short(p).to_string()).collect();
    let _ = writeln!(s, "profiles compared (Linux eras, oldest first): {}", names.join(", "));
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
            fit(&otherwise(r, &names), ow)
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
    let scores: Vec<String> = c.profiles.iter().zip(&c.scores).map(|(p, n)| format!("{}={n}", short(p))).collect();
    let _ = writeln!(s, "\nagreement (of {} scored rows): {}", c.scored_rows, scores.join(" "));
    let _ = writeln!(
        s,
        "best match: {}{}",
        c.best.join(", "),
        if c.best.len() > 1 { " (tied: the measured rules do not tell them apart)" } else { "" }
    );
    for n in &fp.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::fingerprint::Row;

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
        let fp = Fingerprint { kernel: "6.18".into(), ..Fingerprint::default() };
        let text = table(&fp, &c);
        for l in text.lines() {
            assert!(l.chars().count() <= 120, "{} columns: {l}", l.chars().count());
            assert!(!l.contains('~') && !l.contains('*'), "no other mark: {l}");
        }
        assert!(text.contains("5.4-5.15: 3"), "{text}");
        assert!(text.contains("all: per segment"), "{text}");
        assert!(text.contains("(not scored) all: 250"), "{text}");
        assert!(text.contains("..."), "{text}");
        assert_eq!(
            runs(&[0, 1, 3], &c.profiles.iter().map(|p| short(p).to_string()).collect::<Vec<_>>()),
            "4.19, 5.4, 5.15"
        );
    }
}
