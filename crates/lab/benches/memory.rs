//! Is the lab's memory flat in rounds (issue 25)? One rr row (1-byte request/response, the
//! default strategy) as `tcpstall lab rr` runs it as root, evidence on: a private network
//! namespace, the row's packets recorded through the TPACKET_V3 ring and classified as they
//! come, kernel evidence attached while the row records, the latency from an unrecorded run
//! after the recorded one. Run at a small and a large round count, each in a process of its own
//! (this bench runs itself again per case, so each case's peak is its own): the peak resident
//! set (VmHWM) of each is printed, and "meets" when the large run's peak is within 16 MB of
//! the small one's. What still grows per round on purpose: one 8-byte latency sample per round
//! (the row's `samples_ns`, kept for advise and the report), 1.6 MB at 200,000 rounds.
//!
//! Needs root (a network namespace per row, AF_PACKET, eBPF): without it the bench says so and
//! skips.
//!
//!     cargo bench -p tcpstall-lab --bench memory [-- SMALL LARGE]
//!
//! Defaults: 1,000 and 200,000 rounds.

use std::process::Command;

use scenario::{Rr, SideOpts, StrategyPair, Workload};
use tcpstall_lab::{self as lab, KernelEvidence, KernelHandle, LabOptions, Placement};

/// The child's case: the round count to run.
const CASE_ENV: &str = "TCPSTALL_LAB_MEMORY_CASE";
/// The large run may peak this much above the small one and still be flat.
const FLAT_MB: f64 = 16.0;

/// This process's peak resident set (VmHWM), MB.
fn peak_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// One row of `rounds` rounds, in this process; prints one line for the parent.
fn child(rounds: u32) {
    let kernel = match KernelHandle::open() {
        Ok(h) => KernelEvidence::On(h),
        Err(e) => KernelEvidence::Unavailable(e.to_string()),
    };
    let w = Workload::Rr(Rr { size: 1, rounds });
    let side = SideOpts::parse_list("default").expect("strategy");
    let pair = StrategyPair::new(side.clone(), side);
    let opts = LabOptions { latency_apart: true, kernel, ..LabOptions::default() };
    let r = match lab::run_pair(&w, &pair, &Placement::loopback(), &opts) {
        Ok(r) => r,
        Err(e) => {
            println!("error {e}");
            return;
        }
    };
    let (frames, drops, cpu_us) =
        r.capture.as_ref().map_or((0, 0, 0.0), |c| (c.frames, c.kernel_drops, c.reader_cpu_us.unwrap_or(0.0)));
    println!("peak_mb {:.1} frames {frames} drops {drops} reader_cpu_us {cpu_us:.0}", peak_mb().unwrap_or(0.0));
}

/// Run `rounds` in a child process; its peak (MB) and the rest of its line.
fn case(rounds: u32) -> Option<(f64, String)> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe).env(CASE_ENV, rounds.to_string()).output().ok()?;
    let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").to_string();
    if let Some(e) = line.strip_prefix("error ") {
        println!("  {rounds:>9} rounds: failed: {e}");
        return None;
    }
    let peak: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((peak, line))
}

fn main() {
    if let Some(n) = std::env::var(CASE_ENV).ok().and_then(|v| v.parse().ok()) {
        child(n);
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        println!("lab memory bench: skipped: needs root (a network namespace per row, AF_PACKET, eBPF)");
        return;
    }
    let args: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (small, large) = (args.first().copied().unwrap_or(1_000), args.get(1).copied().unwrap_or(200_000));
    println!("lab rr, one row, evidence on: peak resident set by rounds (a process per case)");
    let mut peaks = Vec::new();
    for n in [small, large] {
        if let Some((peak, line)) = case(n) {
            println!("  {n:>9} rounds: {line}");
            peaks.push(peak);
        }
    }
    if let [a, b] = peaks[..] {
        let verdict = if b <= a + FLAT_MB { "meets" } else { "misses" };
        println!(
            "flat in rounds ({large} rounds' peak <= {small} rounds' + {FLAT_MB} MB): {b:.1} MB vs {a:.1} MB: {verdict}"
        );
    }
}
