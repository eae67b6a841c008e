//! Seed 003's experiment: one-way bulk over the direct veth path ([`crate::veth`]) with the
//! seed's knobs, and the columns that explain it: throughput, data segments and pure ACKs
//! (the receiver's sent, the sender's received, from tcp_info), and CPU on each side (its
//! thread's user+system time, its CPU's softirq time from /proc/stat, NET_RX/NET_TX from
//! /proc/softirqs), read before and after the row only. [`run_matrix`] runs every row,
//! summarises each (medians, a bootstrap interval of the throughput) and states the seed's
//! findings with this machine's numbers: the document `report::seed003` prints.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use report::seed003::{fmt_ratio, Interval, Seed003Doc, Seed003Row};
use report::stats;
use scenario::{SideOpts, StrategyPair, Workload};

use crate::veth::{CpuSnapshot, Knobs, VethPath};
use crate::{LabError, LabOptions, RunResult};

pub use report::seed003::Measured;

/// Why one run of a row failed.
#[derive(Debug, thiserror::Error)]
pub enum Seed003Error {
    /// The veth pair or its knobs could not be set up.
    #[error("{0}")]
    Veth(String),
    /// The row's socket options did not parse (a bug in [`matrix`]).
    #[error("{0}")]
    Strategy(String),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] LabError),
}

/// One row: the knobs, and the receiver's TCP_QUICKACK after every recv (the socket way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// The row of the seed's table it reproduces (1-5), if any.
    pub seed_row: Option<u8>,
    pub knobs: Knobs,
    pub socket_quickack: bool,
}

/// The seed's five rows and the neighbours that isolate one knob each.
pub fn matrix() -> Vec<Row> {
    let k = |gro_off, tso_off, rq, thin, drop| Knobs {
        rx_gro_off: gro_off,
        tx_tso_off: tso_off,
        route_quickack: rq,
        thin_rx_acks: thin,
        drop_tx_acks: drop,
    };
    let row =
        |name: &str, seed_row, knobs, socket_quickack| Row { name: name.into(), seed_row, knobs, socket_quickack };
    vec![
        row("1 GRO, delayed ACK, TSO", Some(1), k(false, false, false, None, None), false),
        row("2 no GRO, quick ACK, no TSO", Some(2), k(true, true, true, None, None), false),
        row("3 no GRO, quick ACK, rx drops 1/2, TSO", Some(3), k(true, false, true, Some(2), None), false),
        row("4 no GRO, quick ACK, rx drops 3/4, no TSO", Some(4), k(true, true, true, Some(4), None), false),
        row("5 no GRO, quick ACK, TSO, tx drops 1/2", Some(5), k(true, false, true, None, Some(2)), false),
        // Neighbours, each differing from a seed row in one knob. With TSO on, veth hands the
        // receiver whole 64 KB GSO packets (no segmentation on the way), so the ACK-rate rows
        // use TSO off: MSS segments, as on the seed's wire.
        row("no GRO, delayed ACK, no TSO", None, k(true, true, false, None, None), false),
        row("GRO, delayed ACK, no TSO", None, k(false, true, false, None, None), false),
        row("no GRO, socket quick ACK, no TSO", None, k(true, true, false, None, None), true),
        row("no GRO, quick ACK, TSO", None, k(true, false, true, None, None), false),
        row("no GRO, quick ACK, rx drops 7/8, no TSO", None, k(true, true, true, Some(8), None), false),
    ]
}

fn clk_tck() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100.0, |v| v as f64)
}

/// Runs one row for `duration` on a fresh veth pair. Needs root.
pub fn run_one(row: &Row, duration: Duration, opts: &LabOptions) -> Result<Measured, Seed003Error> {
    let path = VethPath::open(&row.knobs).map_err(|e| Seed003Error::Veth(e.to_string()))?;
    // 128 KiB writes, as iperf3's: the bench compares the two on the same pair.
    let w = Workload::Stream(scenario::Stream { duration_ms: duration.as_millis() as u32, write_size: 131_072 });
    let server = if row.socket_quickack {
        SideOpts::parse_list("quickack-each").map_err(|e| Seed003Error::Strategy(e.to_string()))?
    } else {
        SideOpts::none()
    };
    let pair = StrategyPair::new(SideOpts::none(), server);
    let o = LabOptions {
        own_netns: false,
        capture: false,
        lo_mtu: None,
        pin: Some(path.cpus),
        keep_packets: false,
        capture_file: None,
        tap: None,
        ..opts.clone()
    };
    let before = CpuSnapshot::read();
    let r: RunResult = crate::run_pair(&w, &pair, &path.placement(&row.knobs.label()), &o)?;
    let after = CpuSnapshot::read();
    let (tx_cpu, rx_cpu) = path.cpus;
    let (tx_share, tx_rx, tx_tx, tx_si) = delta(&before, &after, tx_cpu);
    let (rx_share, rx_rx, rx_tx, rx_si) = delta(&before, &after, rx_cpu);
    let bytes = r.wire.client.bytes_sent;
    let gb = bytes as f64 / 1e9;
    let data = r.wire.client.data_segs_out;
    let pure = r.wire.server.non_data_segs_out;
    let got = r.tcp.as_ref().and_then(|t| t.client.segs_in);
    let tck = clk_tck();
    let thread = |us: f64| us / 1e6;
    let (c_cpu, s_cpu) = r.cpu.map_or((0.0, 0.0), |c| (thread(c.client_cpu_us), thread(c.server_cpu_us)));
    let per_gb = |s: f64| if gb > 0.0 { s / gb } else { 0.0 };
    Ok(Measured {
        throughput_bits_per_s: r.throughput_bytes_per_s * 8.0,
        bytes,
        data_segments: data,
        receiver_pure_acks: pure,
        sender_acks_received: got,
        acks_per_data_at_sender: got.map_or(f64::NAN, |g| g as f64 / data.max(1) as f64),
        acks_per_data_at_receiver: pure as f64 / data.max(1) as f64,
        sender_softirq_share: tx_share,
        receiver_softirq_share: rx_share,
        sender_net_rx: tx_rx,
        sender_net_tx: tx_tx,
        receiver_net_rx: rx_rx,
        receiver_net_tx: rx_tx,
        sender_cpu_s_per_gb: per_gb(c_cpu + tx_si as f64 / tck),
        receiver_cpu_s_per_gb: per_gb(s_cpu + rx_si as f64 / tck),
        readback: path.readback.clone(),
    })
}

/// (softirq share, NET_RX, NET_TX, softirq ticks) of one CPU between two snapshots.
fn delta(a: &CpuSnapshot, b: &CpuSnapshot, cpu: usize) -> (f64, u64, u64, u64) {
    let (share, rx, tx) = a.delta(b, cpu);
    (share, rx, tx, a.softirq_ticks(b, cpu))
}

/// `--matrix seed003`: every row `reps` times for `duration`, interleaved.
#[derive(Debug, Clone)]
pub struct MatrixRequest {
    pub reps: u32,
    pub duration: Duration,
    pub opts: LabOptions,
}

/// Why a [`MatrixRequest`] or a knob's value was refused (the flag's name is the caller's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{0}: expected 1 to 20")]
    Reps(u32),
    /// Seed 003's table measures a one-way stream.
    #[error("seed 003's table runs the stream workload, not {0}")]
    NotStream(String),
    #[error("{0}: expected on or off")]
    OnOff(String),
    #[error("{0}: expected 2 to 64 (keep 1 of every N)")]
    KeepOneOf(u32),
    #[error("{0}: expected loopback or veth")]
    Path(String),
}

impl MatrixRequest {
    /// Every row `reps` times (1 to 20), each as long as the stream workload says (at most 10 s).
    pub fn stream(workload: &Workload, reps: u32, opts: LabOptions) -> Result<MatrixRequest, RequestError> {
        let Workload::Stream(w) = workload else { return Err(RequestError::NotStream(workload.kind().into())) };
        if !(1..=20).contains(&reps) {
            return Err(RequestError::Reps(reps));
        }
        Ok(MatrixRequest { reps, duration: Duration::from_millis(u64::from(w.duration_ms).min(10_000)), opts })
    }
}

/// A knob's `on|off` value: true for on.
pub fn on(v: &str) -> Result<bool, RequestError> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        o => Err(RequestError::OnOff(o.into())),
    }
}

/// A thinning knob's N (keep 1 of every N pure ACKs): 2 to 64.
pub fn keep_one_of(n: Option<u32>) -> Result<Option<u32>, RequestError> {
    match n {
        Some(n) if !(2..=64).contains(&n) => Err(RequestError::KeepOneOf(n)),
        n => Ok(n),
    }
}

/// Where seed 003's stream runs: loopback (false) or the veth pair (true).
pub fn veth_path(v: &str) -> Result<bool, RequestError> {
    match v {
        "loopback" => Ok(false),
        "veth" => Ok(true),
        o => Err(RequestError::Path(o.into())),
    }
}

/// Where [`run_matrix`] is, for a progress bar: a run of the row named starts, a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress<'a> {
    Start(&'a str),
    Done,
}

/// One row's runs: what they measured, the runs that failed twice (last reason) and the runs
/// that failed once and were run again (first try's reason).
#[derive(Debug, Clone, Default)]
struct Runs {
    measured: Vec<Measured>,
    failed: Vec<String>,
    retried: Vec<String>,
}

/// Runs the matrix (root: namespaces and a veth pair) and returns the document: each row
/// summarised, then the findings. A run that fails (the connection stops making progress when
/// too few ACKs get through, or a namespace's connection is not up yet: "Transport endpoint is
/// not connected") is run once more; one that fails twice is counted in its row; the other
/// rows go on.
pub fn run_matrix(req: &MatrixRequest, progress: &mut dyn FnMut(Progress<'_>)) -> Seed003Doc {
    let rows = matrix();
    let started = Instant::now();
    let mut got: Vec<Runs> = rows.iter().map(|_| Runs::default()).collect();
    for _ in 0..req.reps {
        for (row, runs) in rows.iter().zip(&mut got) {
            progress(Progress::Start(&row.name));
            match run_one(row, req.duration, &req.opts) {
                Ok(m) => runs.measured.push(m),
                Err(first) => match run_one(row, req.duration, &req.opts) {
                    Ok(m) => {
                        runs.measured.push(m);
                        runs.retried.push(first.to_string());
                    }
                    Err(e) => runs.failed.push(e.to_string()),
                },
            }
            progress(Progress::Done);
        }
    }
    // A fixed seed: the same runs give the same intervals.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let out: Vec<Seed003Row> = rows.iter().zip(got).map(|(row, runs)| summarise(row, runs, &mut rng)).collect();
    Seed003Doc {
        tool: "tcpstall",
        version: env!("CARGO_PKG_VERSION"),
        schema_version: report::SCHEMA_VERSION,
        mode: "lab",
        scenario: "stream",
        matrix: "seed003",
        kernel: sys::host::kernel_release(),
        duration_s_per_run: req.duration.as_secs_f64(),
        elapsed_s: started.elapsed().as_secs_f64(),
        findings: findings(&out),
        rows: out,
        reps: req.reps,
        cpus: VethPath::cpus_here(),
    }
}

/// A row's medians over its runs and the throughput's median with its 95% bootstrap interval
/// (the two-stage bootstrap over runs of `report::stats`, in kbit/s, then Gbit/s).
fn summarise(row: &Row, r: Runs, rng: &mut rand::rngs::SmallRng) -> Seed003Row {
    let m = r.measured;
    let runs: Vec<Vec<u64>> = m.iter().map(|x| vec![(x.throughput_bits_per_s / 1e3) as u64]).collect();
    let q = if runs.is_empty() {
        Interval { est: f64::NAN, lo: f64::NAN, hi: f64::NAN }
    } else {
        stats::bootstrap_quantiles(&runs, &[0.5], 1000, rng)[0]
    };
    let g = |x: f64| x / 1e6;
    // The median of the runs that measured the column (NaN when none did).
    let med = |f: fn(&Measured) -> f64| {
        stats::median(m.iter().map(f).filter(|x| x.is_finite()).collect()).unwrap_or(f64::NAN)
    };
    Seed003Row {
        name: row.name.clone(),
        seed_row: row.seed_row,
        runs: m.len() as u64,
        throughput_gbit_per_s: Interval { est: g(q.est), lo: g(q.lo), hi: g(q.hi) },
        acks_per_data_at_sender: med(|x| x.acks_per_data_at_sender),
        acks_per_data_at_receiver: med(|x| x.acks_per_data_at_receiver),
        sender_softirq_share: med(|x| x.sender_softirq_share),
        receiver_softirq_share: med(|x| x.receiver_softirq_share),
        sender_cpu_s_per_gb: med(|x| x.sender_cpu_s_per_gb),
        receiver_cpu_s_per_gb: med(|x| x.receiver_cpu_s_per_gb),
        readback: m.first().map(|x| x.readback.clone()).unwrap_or_default(),
        measured: m,
        failed: r.failed,
        retried: r.retried,
    }
}

fn gbit(r: &Seed003Row) -> f64 {
    r.throughput_gbit_per_s.est
}

/// One line per conclusion of the seed, with this machine's numbers (a conclusion whose rows
/// are missing is left out).
pub fn findings(rows: &[Seed003Row]) -> Vec<String> {
    let by = |name: &str| rows.iter().find(|r| r.name == name);
    [pure_acks(&by), gro(&by), sender_drops(&by), tso(&by)].into_iter().flatten().collect()
}

type By<'a, 'b> = dyn Fn(&str) -> Option<&'a Seed003Row> + 'b;

/// 1. Pure ACKs cost throughput in proportion (MSS segments: TSO off, GRO off).
fn pure_acks(by: &By<'_, '_>) -> Option<String> {
    let (q, d) = (by("2 no GRO, quick ACK, no TSO")?, by("no GRO, delayed ACK, no TSO")?);
    let t = gbit;
    let mut line = format!(
        "pure ACKs against throughput (GRO off, TSO off): quick ACK by route {} at {:.2} Gbit/s, delayed ACK {} at {:.2}",
        fmt_ratio(q.acks_per_data_at_sender),
        t(q),
        fmt_ratio(d.acks_per_data_at_sender),
        t(d)
    );
    if let Some(sq) = by("no GRO, socket quick ACK, no TSO") {
        line += &format!(", quick ACK by socket {} at {:.2}", fmt_ratio(sq.acks_per_data_at_sender), t(sq));
    }
    for name in ["4 no GRO, quick ACK, rx drops 3/4, no TSO", "no GRO, quick ACK, rx drops 7/8, no TSO"] {
        let Some(r) = by(name) else { continue };
        let shown = name.trim_start_matches("4 ");
        if r.runs > 0 {
            line += &format!("; {shown} {} at {:.2}", fmt_ratio(r.acks_per_data_at_sender), t(r));
        } else {
            line += &format!("; {shown}: the stream stopped (too few ACKs got through)");
        }
    }
    let agrees = t(d) > t(q) && !d.throughput_gbit_per_s.overlaps(&q.throughput_gbit_per_s);
    line += if agrees {
        ": more pure ACKs, less throughput, as the seed says; thinning them does not buy it back here"
    } else {
        ": this machine does not show the seed's cost of pure ACKs (intervals overlap or reversed)"
    };
    Some(line)
}

/// 2. GRO/LRO reduces pure ACKs.
fn gro(by: &By<'_, '_>) -> Option<String> {
    let (on, off) = (by("GRO, delayed ACK, no TSO")?, by("no GRO, delayed ACK, no TSO")?);
    Some(format!(
        "GRO: the receiver sent {} pure ACKs per data segment with GRO on and {} with it off ({:.2} against {:.2} Gbit/s){}",
        fmt_ratio(on.acks_per_data_at_receiver),
        fmt_ratio(off.acks_per_data_at_receiver),
        gbit(on),
        gbit(off),
        if on.acks_per_data_at_receiver < off.acks_per_data_at_receiver {
            ": GRO reduces them, as the seed says"
        } else {
            ": GRO did not reduce them here"
        }
    ))
}

/// 3. Dropping ACKs at the sender does not help.
fn sender_drops(by: &By<'_, '_>) -> Option<String> {
    let (drop, q) = (by("5 no GRO, quick ACK, TSO, tx drops 1/2")?, by("no GRO, quick ACK, TSO")?);
    let same = drop.throughput_gbit_per_s.overlaps(&q.throughput_gbit_per_s) || gbit(drop) <= gbit(q);
    Some(format!(
        "sender-side drops: {:.2} Gbit/s with half the pure ACKs dropped at the sender's INPUT against {:.2} without \
         (sender softirq {:.0}% against {:.0}%){}",
        gbit(drop),
        gbit(q),
        100.0 * drop.sender_softirq_share,
        100.0 * q.sender_softirq_share,
        if same {
            ": no gain, as the seed says (the softirq work is spent before the drop)"
        } else {
            ": this machine gains from them, unlike the seed"
        }
    ))
}

/// 4. TSO matters little.
fn tso(by: &By<'_, '_>) -> Option<String> {
    let (off, on) = (by("2 no GRO, quick ACK, no TSO")?, by("no GRO, quick ACK, TSO")?);
    let r = gbit(off) / gbit(on);
    Some(format!(
        "TSO: {:.2} Gbit/s without against {:.2} with (ratio {r:.2}){}",
        gbit(off),
        gbit(on),
        if (0.8..=1.25).contains(&r) {
            ": it matters little, as the seed says"
        } else {
            ": it matters here on veth (software segmentation costs the sender's CPU), unlike the seed's NIC"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_values_and_the_request_are_checked() {
        assert_eq!((on("on"), on("off")), (Ok(true), Ok(false)));
        assert_eq!(on("yes").unwrap_err().to_string(), "yes: expected on or off");
        assert_eq!(keep_one_of(Some(2)), Ok(Some(2)));
        assert_eq!(keep_one_of(None), Ok(None));
        assert_eq!(keep_one_of(Some(65)).unwrap_err().to_string(), "65: expected 2 to 64 (keep 1 of every N)");
        assert_eq!((veth_path("loopback"), veth_path("veth")), (Ok(false), Ok(true)));
        assert!(veth_path("tun").is_err());
        let stream = scenario::Scenario::builtin("stream").unwrap().workload;
        let r = MatrixRequest::stream(&stream, 3, LabOptions::default()).unwrap();
        assert_eq!(r.reps, 3);
        assert!(r.duration <= Duration::from_secs(10));
        assert_eq!(MatrixRequest::stream(&stream, 0, LabOptions::default()).unwrap_err(), RequestError::Reps(0));
        let rr = scenario::Scenario::builtin("chunked").unwrap().workload;
        assert!(matches!(MatrixRequest::stream(&rr, 3, LabOptions::default()), Err(RequestError::NotStream(_))));
    }

    fn row(name: &str, gbit: f64, at_sender: f64, runs: u64) -> Seed003Row {
        Seed003Row {
            name: name.into(),
            seed_row: None,
            runs,
            throughput_gbit_per_s: Interval { est: gbit, lo: gbit * 0.95, hi: gbit * 1.05 },
            acks_per_data_at_sender: at_sender,
            acks_per_data_at_receiver: at_sender,
            sender_softirq_share: 0.2,
            receiver_softirq_share: 0.3,
            sender_cpu_s_per_gb: 1.0,
            receiver_cpu_s_per_gb: 1.0,
            readback: String::new(),
            measured: Vec::new(),
            failed: Vec::new(),
            retried: Vec::new(),
        }
    }

    /// The seed's conclusions from the rows that test them: more pure ACKs, less throughput;
    /// a stopped stream is said so; a conclusion without its rows is left out.
    #[test]
    fn findings_compare_the_rows_that_test_each_conclusion() {
        let rows = vec![
            row("2 no GRO, quick ACK, no TSO", 1.0, 1.0, 3),
            row("no GRO, delayed ACK, no TSO", 2.0, 0.5, 3),
            row("no GRO, quick ACK, rx drops 7/8, no TSO", f64::NAN, f64::NAN, 0),
            row("no GRO, quick ACK, TSO", 1.1, 1.0, 3),
        ];
        let f = findings(&rows);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].starts_with("pure ACKs against throughput (GRO off, TSO off): quick ACK by route 1:1 at 1.00 Gbit/s, delayed ACK 1:2 at 2.00"), "{f:?}");
        assert!(f[0].contains("; no GRO, quick ACK, rx drops 7/8, no TSO: the stream stopped"), "{f:?}");
        assert!(f[0].ends_with("as the seed says; thinning them does not buy it back here"), "{f:?}");
        assert!(
            f[1].starts_with("TSO: 1.00 Gbit/s without against 1.10 with (ratio 0.91): it matters little"),
            "{f:?}"
        );
    }

    #[test]
    fn a_row_without_runs_has_no_figures() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let r = summarise(&matrix()[0], Runs { failed: vec!["stopped".into()], ..Runs::default() }, &mut rng);
        assert_eq!(r.runs, 0);
        assert!(r.throughput_gbit_per_s.est.is_nan() && r.sender_softirq_share.is_nan());
        assert_eq!(r.failed, ["stopped"]);
    }
}
