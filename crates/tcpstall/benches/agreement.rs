//! Agreement as a number (issue 13): every built-in scenario with a stall verdict x the `all`
//! strategy matrix, on the real kernel (`tcpstall lab`, real sockets) and on the model
//! (`tcpstall simulate --profile linux:here`, this kernel's fingerprint), on loopback, behind
//! `rtt=10ms`, and behind `rtt=10ms,rate=50mbit`. A cell agrees when the stall counts differ by
//! at most one and the verdict's cause is the same (both from the one classifier's records).
//! Prints the share of agreeing cells (target >= 95%) and every cell that does not agree.
//! Then the same for `tcpstall kernel`'s experiments replayed on the model (model::fingerprint::experiments):
//! measured behaviours the model reproduces, with this kernel's rules (`linux:here`) and with
//! the best-matching era, over three fingerprints.
//!
//!     cargo bench -p tcpstall --bench agreement [-- quick]
//!
//! `quick`: loopback only. Rounds are cut (see ROUNDS) so that a cell takes about a second:
//! enough rounds to see a per-round stall many times, few enough for the whole matrix.

use std::process::Command;

use serde_json::Value;

/// (scenario, the --set that sizes its rounds). stream has no stall verdict; rr never stalls
/// but is the control.
const ROUNDS: [(&str, &str); 5] = [
    ("chunked", "round=8"),
    ("multi-write", "requests=12"),
    ("burst", "rounds=8"),
    ("bulk-ack", "rounds=6"),
    ("rr", "rounds=200"),
];

fn run(args: &[&str]) -> Option<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall")).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!("tcpstall {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn rows(v: &Value) -> Vec<(String, u64, Option<String>)> {
    v["results"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let label =
                        format!("{} {}", r["strategy"].as_str().unwrap_or(""), r["variant"].as_str().unwrap_or(""));
                    (
                        label.trim().to_string(),
                        r["stall_count"].as_u64().unwrap_or(0),
                        r["verdict_key"]["cause"].as_str().map(String::from),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let links: &[Option<&str>] = if quick { &[None] } else { &[None, Some("rtt=10ms"), Some("rtt=10ms,rate=50mbit")] };
    let (mut cells, mut agree) = (0usize, 0usize);
    let mut bad = Vec::new();
    for link in links {
        for (scenario, set) in ROUNDS {
            let mut lab = vec!["lab", scenario, "--matrix", "all", "--set", set, "--format", "json", "-q"];
            let mut sim = vec![
                "simulate",
                scenario,
                "--matrix",
                "all",
                "--set",
                set,
                "--format",
                "json",
                "--profile",
                "linux:here",
            ];
            if let Some(l) = link {
                lab.extend(["--link", l]);
                sim.extend(["--link", l]);
            }
            let (Some(l), Some(m)) = (run(&lab), run(&sim)) else { continue };
            let model = rows(&m);
            for (label, n, cause) in rows(&l) {
                let Some((_, mn, mcause)) = model.iter().find(|(ml, _, _)| *ml == label) else { continue };
                cells += 1;
                let ok = n.abs_diff(*mn) <= 1 && cause == *mcause;
                if ok {
                    agree += 1;
                } else {
                    bad.push(format!(
                        "  {:<24} {:<14} {:<40} kernel {n} {}, model {mn} {}",
                        link.unwrap_or("loopback"),
                        scenario,
                        label,
                        cause.as_deref().unwrap_or("-"),
                        mcause.as_deref().unwrap_or("-")
                    ));
                }
            }
        }
    }
    let share = if cells > 0 { agree as f64 / cells as f64 } else { 0.0 };
    println!(
        "agreement kernel vs model (linux:here): {agree} of {cells} cells ({:.1}%), target >= 95%: {}",
        share * 100.0,
        if share >= 0.95 { "meets" } else { "misses" }
    );
    if !bad.is_empty() {
        println!("cells that disagree (stall count within one and the same cause needed):");
        for b in bad {
            println!("{b}");
        }
    }
    replayed_experiments();
}

/// `tcpstall kernel` three times; each run's replay agreement per profile, summed.
fn replayed_experiments() {
    let mut totals: Vec<(String, u64, u64)> = Vec::new();
    let mut differs = Vec::new();
    for _ in 0..3 {
        let Some(v) = run(&["kernel", "--format", "json"]) else { continue };
        for a in v["replay_agreement"].as_array().into_iter().flatten() {
            let name = a["profile"].as_str().unwrap_or("?").to_string();
            let (ok, n) = (a["agree"].as_u64().unwrap_or(0), a["rows"].as_u64().unwrap_or(0));
            match totals.iter_mut().find(|t| t.0 == name) {
                Some(t) => {
                    t.1 += ok;
                    t.2 += n;
                }
                None => totals.push((name.clone(), ok, n)),
            }
            for d in a["disagree"].as_array().into_iter().flatten() {
                differs.push(format!("  {name}: {}", d.as_str().unwrap_or("")));
            }
        }
    }
    for (name, ok, n) in totals {
        let share = if n > 0 { ok as f64 / n as f64 } else { 0.0 };
        println!(
            "kernel experiments replayed on the model ({name}): {ok} of {n} behaviours over 3 fingerprints ({:.1}%), target >= 95%: {}",
            share * 100.0,
            if share >= 0.95 { "meets" } else { "misses" }
        );
    }
    for d in differs {
        println!("{d}");
    }
}
