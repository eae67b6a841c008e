//! Does measuring disturb what is measured? The lab's rr row (1-byte request/response) as
//! `tcpstall lab` runs a CPU-bound row as root, with its evidence on (a private network
//! namespace per row, the row's packets recorded through the TPACKET_V3 ring and classified,
//! kernel evidence (`KernelHandle::open`, the eBPF programs attached while the row records),
//! the clock read after every client call, tcp_info and TcpExt read around the rounds; the
//! latency from an unrecorded run of the same rounds right after the recorded one, no packet
//! record and no program attached, `LabOptions::latency_apart`),
//! against a bare C ping-pong (benches/c/pingpong.c, compiled here with `cc`: the socket calls
//! and one clock read per round, nothing else; as root in a private network namespace of its
//! own like the lab's rows, so neither pays for a capture running on the host's loopback), in
//! every pinning: unpinned, client and server on
//! two CPUs, both on one CPU. Alternating runs in the same process and minute, the order
//! swapped every repeat; the medians of each side are printed, and the verdicts take the
//! median of the repeats' ratios (each C run against the lab run right beside it). Targets: round
//! trips/s >= 0.97x bare C and p99 <= 1.2x bare C's. The lab timing its recorded rounds runs
//! beside them, so the record's own cost is printed too, and the kernel's run-time statistics
//! of the eBPF programs (BPF_ENABLE_STATS) say what kernel evidence costs per recorded round
//! trip, program by program. Each row also prints both threads' CPU time per round trip, C's
//! and the lab's (the median of the pairs' ratios): the time other jobs take from a shared
//! machine lowers both rates, but barely this. The load average is printed at the start and
//! the end.
//!
//! Then busy-poll: the lab's busy-poll row (both readers spin on MSG_DONTWAIT), evidence on,
//! against the same C program with both ends spinning the same way (`spin`: `pp -b 1` style);
//! same targets. Not with both threads on one CPU: two spinning threads on one CPU take turns
//! by the scheduler's time slice, which measures the scheduler, for C and lab alike.
//!
//!     cargo bench -p tcpstall-lab --bench rr [-- ROUNDS REPEATS [ROW...]]
//!
//! ROW: run only the rows whose name contains it (`same`, `cross`, `unpinned`, `busy-poll`).

use std::path::{Path, PathBuf};

use report::stats;
use scenario::{Rr, SideOpts, StrategyPair, Workload};
use tcpstall_lab::{self as lab, KernelEvidence, KernelHandle, LabOptions, Placement};

/// One run: round trips per second, p99 of a round trip (µs), and both sides' CPU time per
/// round trip (ns; the threads' CLOCK_THREAD_CPUTIME_ID around their loops), the one figure
/// the other jobs on a shared machine barely move (they take wall time, not these threads' CPU).
#[derive(Clone, Copy)]
struct Run {
    rate: f64,
    p99_us: f64,
    cpu_ns: f64,
}

/// The lab's rr row: `strategy` on both sides, its packets recorded, pinned as asked; `apart`:
/// latency from an unrecorded run after the recorded one (as `tcpstall lab` does for CPU-bound
/// rows), else from the recorded rounds. Returns the run and the record's counters (drops,
/// reader CPU µs), None when nothing was recorded.
fn lab_rr(
    rounds: u32,
    strategy: &str,
    apart: bool,
    pin: Option<(usize, usize)>,
    kernel: &KernelEvidence,
) -> (Run, Option<(u64, f64)>) {
    let w = Workload::Rr(Rr { size: 1, rounds });
    let side = SideOpts::parse_list(strategy).expect("strategy");
    let pair = StrategyPair::new(side.clone(), side);
    let opts = LabOptions { pin, latency_apart: apart, kernel: kernel.clone(), ..LabOptions::default() };
    let r = lab::run_pair(&w, &pair, &Placement::loopback(), &opts).expect("lab rr");
    let cpu_ns = r.cpu.map_or(0.0, |c| c.cpu_us_per_round * 1e3);
    let run = Run { rate: r.rounds as f64 / r.wall_s, p99_us: r.latency_us.p99, cpu_ns };
    (run, r.capture.map(|c| (c.kernel_drops, c.reader_cpu_us.unwrap_or(0.0))))
}

/// The bare C ping-pong, compiled once; None when there is no C compiler.
fn c_binary() -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/pingpong.c");
    let out = std::env::temp_dir().join(format!("tcpstall-pingpong-{}", std::process::id()));
    let ok = std::process::Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(out)
}

/// Runs the C ping-pong as the lab runs a row: in a private network namespace with `lo` at MTU
/// 1500 (`unshare -n`, as root), so a capture someone else runs on the host's loopback (a
/// `tcpdump -i lo`, a `tcpstall watch`) taxes neither side; elsewhere on the host's loopback.
fn c_rr(bin: &Path, rounds: u32, mode: &str, pin: Option<(usize, usize)>) -> Run {
    let private = nix::unistd::geteuid().is_root();
    let mut cmd = if private {
        let mut c = std::process::Command::new("unshare");
        c.args(["-n", "sh", "-c", "ip link set lo mtu 1500 up && exec \"$0\" \"$@\""]).arg(bin);
        c
    } else {
        std::process::Command::new(bin)
    };
    cmd.arg(rounds.to_string()).arg(mode);
    if let Some((a, b)) = pin {
        cmd.arg(a.to_string()).arg(b.to_string());
    }
    let out = cmd.output().expect("run pingpong");
    assert!(out.status.success(), "pingpong: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|x| x.parse::<f64>().expect("pingpong output"));
    Run { rate: it.next().expect("rate"), p99_us: it.next().expect("p99") / 1e3, cpu_ns: it.next().unwrap_or(0.0) }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

/// Medians of a list of runs.
fn med(runs: &[Run]) -> Run {
    Run {
        rate: stats::median(runs.iter().map(|r| r.rate).collect()).unwrap_or(f64::NAN),
        p99_us: stats::median(runs.iter().map(|r| r.p99_us).collect()).unwrap_or(f64::NAN),
        cpu_ns: stats::median(runs.iter().map(|r| r.cpu_ns).collect()).unwrap_or(f64::NAN),
    }
}

struct Row {
    name: String,
    c: Run,
    lab: Run,
    /// Medians over the repeats of lab / C measured back to back (rate, p99): what the
    /// verdicts use, so that a minute when other jobs took the CPUs weighs on one pair only.
    ratio: (f64, f64),
    /// The median of the pairs' CPU-per-round-trip ratios lab / C.
    cpu_ratio: f64,
    recorded: Option<Run>,
}

/// The median of the per-repeat ratios lab / C (rate, p99): each pair ran back to back.
fn paired(c: &[Run], l: &[Run]) -> (f64, f64) {
    let rate = stats::median(c.iter().zip(l).map(|(c, l)| l.rate / c.rate).collect()).unwrap_or(f64::NAN);
    let p99 = stats::median(c.iter().zip(l).map(|(c, l)| l.p99_us / c.p99_us).collect()).unwrap_or(f64::NAN);
    (rate, p99)
}

/// Prints the row and returns whether both targets are met.
fn print_row(r: &Row) -> bool {
    let (rate, p99) = r.ratio;
    println!(
        "  {:<34} C {:>8.0}/s p99 {:>7.1} us | lab {:>8.0}/s p99 {:>7.1} us | rate {:.3}x ({}) p99 {:.2}x ({})",
        r.name,
        r.c.rate,
        r.c.p99_us,
        r.lab.rate,
        r.lab.p99_us,
        rate,
        verdict(rate >= 0.97),
        p99,
        verdict(p99 <= 1.2),
    );
    // Pinned blocking rows only: a spinning reader's CPU time is its wall time, and unpinned
    // threads share one CPU in one run and not in the next.
    let comparable = r.name.starts_with("blocking") && !r.name.contains("unpinned");
    if r.c.cpu_ns > 0.0 && r.lab.cpu_ns > 0.0 && comparable {
        println!(
            "  {:<34} CPU per round trip, both threads: C {:>6.0} ns | lab {:>6.0} ns: {:.3}x C's",
            "", r.c.cpu_ns, r.lab.cpu_ns, r.cpu_ratio
        );
    }
    if let Some(b) = r.recorded {
        println!(
            "  {:<34} lab timing its recorded rounds {:>8.0}/s p99 {:>7.1} us: {:.3}x C's rate, {:.2}x p99 (the record's cost)",
            "",
            b.rate,
            b.p99_us,
            b.rate / r.c.rate,
            b.p99_us / r.c.p99_us
        );
    }
    rate >= 0.97 && p99 <= 1.2
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// What the record cost the lab's recorded runs: packets lost, reader CPU µs, round trips.
#[derive(Default)]
struct RecordCost {
    drops: u64,
    reader_us: f64,
    rounds: u64,
}

impl RecordCost {
    fn add(&mut self, rec: Option<(u64, f64)>, rounds: u32) {
        if let Some((d, us)) = rec {
            self.drops += d;
            self.reader_us += us;
            self.rounds += u64::from(rounds);
        }
    }
}

/// Alternating runs of C (`mode`) and the lab (`strategy`, evidence on, latency apart), the
/// order swapped every repeat; with `recorded`, also the lab timing its recorded rounds.
#[allow(clippy::too_many_arguments)]
fn measure_row(
    bin: &Path,
    name: String,
    (mode, strategy): (&str, &str),
    pin: Option<(usize, usize)>,
    (rounds, repeats): (u32, u32),
    recorded: bool,
    kernel: &KernelEvidence,
    cost: &mut RecordCost,
) -> Row {
    let (mut c, mut l, mut b) = (Vec::new(), Vec::new(), Vec::new());
    c_rr(bin, rounds / 10 + 1, mode, pin);
    for k in 0..repeats {
        let mut lab_once = |l: &mut Vec<Run>| {
            let (run, rec) = lab_rr(rounds, strategy, true, pin, kernel);
            cost.add(rec, rounds);
            l.push(run);
        };
        if k % 2 == 0 {
            c.push(c_rr(bin, rounds, mode, pin));
            lab_once(&mut l);
        } else {
            lab_once(&mut l);
            c.push(c_rr(bin, rounds, mode, pin));
        }
        if recorded {
            b.push(lab_rr(rounds, strategy, false, pin, kernel).0);
        }
    }
    let cpu_ratio = stats::median(c.iter().zip(&l).map(|(c, l)| l.cpu_ns / c.cpu_ns).collect()).unwrap_or(f64::NAN);
    Row { name, c: med(&c), lab: med(&l), ratio: paired(&c, &l), cpu_ratio, recorded: recorded.then(|| med(&b)) }
}

// long: the bench's one sequence (arguments, kernel evidence, the rows, the report)
// reads top to bottom.
fn main() {
    let args: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    // Other arguments: run only the rows whose name contains one of them ("same", "busy-poll").
    let only: Vec<String> = std::env::args().skip(1).filter(|a| a.parse::<u32>().is_err() && a != "--bench").collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let rounds = args.first().copied().unwrap_or(20_000);
    let repeats = args.get(1).copied().unwrap_or(7).max(1);
    let Some(bin) = c_binary() else {
        println!("rr: no C compiler (cc): the lab against bare C is not measured");
        return;
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut pinnings: Vec<(&str, Option<(usize, usize)>)> = vec![("unpinned", None)];
    if cpus >= 2 {
        pinnings.push(("cross-CPU (client 0, server 1)", Some((0, 1))));
    }
    pinnings.push(("same CPU (both on 0)", Some((0, 0))));
    println!(
        "rr 1 byte, {rounds} round trips per run, medians of {repeats} alternating runs; {cpus} CPUs, load average {}",
        load_average()
    );
    // Kernel evidence as `tcpstall lab` turns it on as root: one source for every row, its
    // programs attached only while a row records. The kernel's run-time statistics of the
    // programs are on for the bench (BPF_ENABLE_STATS) to say what they cost per round trip.
    let kernel = match KernelHandle::open() {
        Ok(h) => KernelEvidence::On(h),
        Err(e) => KernelEvidence::Unavailable(e.to_string()),
    };
    let _stats = kevidence::Source::enable_run_stats().ok();
    // Warm up (page faults, CPU frequency, the compiler's binary in the page cache).
    c_rr(&bin, rounds / 10 + 1, "block", None);
    let (_, rec) = lab_rr(rounds / 10 + 1, "none", true, None, &kernel);
    match rec {
        Some(_) => println!("evidence on: the row's packets recorded (TPACKET_V3 ring) and classified"),
        None => println!("evidence: NOT recorded here (needs CAP_NET_RAW, run as root): the lab row runs without it"),
    }
    match &kernel {
        KernelEvidence::On(h) => println!("{} (attached only while a row records)", h.0.status()),
        KernelEvidence::Unavailable(why) => println!("{why}"),
        KernelEvidence::Off | KernelEvidence::Opening(_) => {}
    }
    let stats0 = match &kernel {
        KernelEvidence::On(h) => h.0.run_stats(),
        _ => Vec::new(),
    };
    let mut cost = RecordCost::default();
    let mut rows = Vec::new();
    for (name, pin) in &pinnings {
        let name = format!("blocking, {name}");
        if !wanted(&name) {
            continue;
        }
        rows.push(measure_row(&bin, name, ("block", "none"), *pin, (rounds, repeats), true, &kernel, &mut cost));
    }
    // Busy-poll, not on one CPU (see the module documentation).
    for (name, pin) in pinnings.iter().filter(|(_, p)| !matches!(p, Some((a, b)) if a == b)) {
        let name = format!("busy-poll, {name}");
        if !wanted(&name) {
            continue;
        }
        rows.push(measure_row(&bin, name, ("spin", "busy-poll"), *pin, (rounds, repeats), false, &kernel, &mut cost));
    }
    let _ = std::fs::remove_file(&bin);
    println!(
        "targets: lab rate >= 0.97x bare C, lab p99 <= 1.2x bare C's (same pinning, same run; ratios: medians of the back-to-back pairs' ratios)"
    );
    let mut all_ok = true;
    for r in &rows {
        all_ok &= print_row(r);
    }
    if cost.rounds > 0 {
        println!(
            "packet record: {} packets lost by the ring; its reader used {:.3} us of CPU per round trip",
            cost.drops,
            cost.reader_us / cost.rounds as f64
        );
    }
    if let KernelEvidence::On(h) = &kernel {
        // Every recorded run: the measured ones, and those timing their recorded rounds.
        let timed = rows.iter().filter(|r| r.recorded.is_some()).count() as f64;
        let recorded_rts = cost.rounds as f64 + f64::from(rounds * repeats) * timed;
        let per: Vec<String> =
            h.0.run_stats()
                .iter()
                .map(|(name, runs, ns)| {
                    let (r0, n0) = stats0.iter().find(|s| s.0 == *name).map_or((0, 0), |s| (s.1, s.2));
                    let (runs, ns) = (runs.saturating_sub(r0), ns.saturating_sub(n0));
                    format!("{name} {:.1} ns ({:.2} runs)", ns as f64 / recorded_rts, runs as f64 / recorded_rts)
                })
                .collect();
        println!("kernel evidence per recorded round trip (BPF_ENABLE_STATS): {}", per.join(", "));
    }
    println!("load average at the end {}", load_average());
    println!("rr with evidence on against bare C, every row: {}", verdict(all_ok));
}
