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
    let mut s = String::from("\nthe experiments replayed on the model (rows marked ~ are predicted by the replay):\n");
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

/// behaviour | measured here | one column per era (its prediction, `*` where it differs).
pub fn table(fp: &Fingerprint, c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kernel {} ({}), experiments took {:.1} s",
        fp.kernel,
        if fp.private_netns { "private network namespace" } else { "this namespace's loopback" },
        fp.seconds
    );
    let head: Vec<String> = c.profiles.iter().map(|p| short(p).to_string()).collect();
    let bw = c.rows.iter().map(|r| r.behaviour.len() + 2).max().unwrap_or(9).max(9);
    let mw = c.rows.iter().map(|r| r.measured.len()).max().unwrap_or(8).clamp(8, 46);
    let cw: Vec<usize> = (0..head.len())
        .map(|i| c.rows.iter().map(|r| r.predicted[i].len() + 1).max().unwrap_or(1).max(head[i].len()))
        .collect();
    let _ = write!(s, "\n{:<bw$}  {:<mw$}", "behaviour", "measured here");
    for (h, w) in head.iter().zip(&cw) {
        let _ = write!(s, "  {h:<w$}");
    }
    s.push('\n');
    for r in &c.rows {
        let mut m = r.measured.clone();
        if m.len() > mw {
            m.truncate(mw - 1);
            m.push('~');
        }
        let name = format!("{}{}", r.behaviour, if r.replayed { " ~" } else { "" });
        let _ = write!(s, "{:<bw$}  {:<mw$}", name, m);
        for (p, w) in r.predicted.iter().zip(&cw) {
            let differs = if r.behaviour == "dating sysctls" {
                !p.ends_with('+')
            } else {
                r.scored && !r.category.is_empty() && *p != r.category
            };
            let cell = format!("{p}{}", if differs { "*" } else { "" });
            let _ = write!(s, "  {cell:<w$}");
        }
        if !r.scored {
            s.push_str("  (build/admin choice: not scored)");
        }
        s.push('\n');
    }
    let _ = writeln!(s, "\n* = the profile predicts otherwise. Each row's rule:");
    for r in &c.rows {
        let _ = writeln!(s, "  {}: {}", r.behaviour, r.rule);
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
