//! Peak memory of `tcpstall simulate` in rounds (issue 25 item 3): rr at 1,000,000 rounds and
//! seed 000's chunked matrix at 1,000 rounds, run as the command runs them (no --trace, --pcap
//! or --report: the classifier reads the segments as the model sends them and the samples are
//! summarised as they come). Target: rr at 1M rounds <= 16 MB peak RSS; the chunked matrix is
//! printed beside it (its stall records, two per round per stalling row, are the report's and
//! grow with the stalls). Peak RSS is `/usr/bin/time -v`'s maximum resident set size of the
//! child. Also prints rr at 10,000 rounds, so the growth from 10k to 1M rounds is in the same
//! run.
//!
//!   cargo build --release -p tcpstall
//!   cargo bench -p tcpstall-model --bench memory      # TCPSTALL_BIN=path overrides the binary

use std::path::PathBuf;
use std::process::Command;

fn bin() -> PathBuf {
    std::env::var_os("TCPSTALL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/tcpstall"))
}

/// Peak RSS (KB) of `tcpstall ARGS`.
fn peak_kb(args: &[&str]) -> Option<u64> {
    let out = Command::new("/usr/bin/time").arg("-v").arg(bin()).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):").and_then(|v| v.trim().parse().ok()))
}

fn main() {
    if !bin().exists() || !std::path::Path::new("/usr/bin/time").exists() {
        println!("memory: needs {} (cargo build --release -p tcpstall) and /usr/bin/time", bin().display());
        return;
    }
    let mb = |kb: u64| kb as f64 / 1024.0;
    let small = peak_kb(&["simulate", "rr", "--set", "rounds=10000"]);
    let big = peak_kb(&["simulate", "rr", "--set", "rounds=1000000"]);
    let chunked = peak_kb(&["simulate", "--set", "round=1000"]);
    println!("simulate peak RSS (the command as run, no --trace/--pcap/--report)");
    if let Some(s) = small {
        println!("  rr, 10,000 rounds:                  {:>7.1} MB", mb(s));
    }
    if let Some(b) = big {
        let ok = mb(b) <= 16.0;
        println!(
            "  rr, 1,000,000 rounds:               {:>7.1} MB (target <= 16 MB: {})",
            mb(b),
            if ok { "meets" } else { "misses" }
        );
        if let Some(s) = small {
            println!("  growth from 10k to 1M rounds:       {:>7.1} MB", mb(b) - mb(s));
        }
    }
    if let Some(c) = chunked {
        println!("  chunked matrix (8 rows), 1,000 rounds: {:>4.1} MB", mb(c));
    }
}
