//! Runs scenarios over real sockets (OS).
//!
//! Each row of a strategy matrix is one fresh TCP connection between two threads of this
//! process: the server thread and the client thread each run their side's step program
//! (`scenario::Workload::program`) with the strategy's exact socket operations. The client
//! times rounds (or reads) and every socket call; both read `tcp_info` before the measured
//! rounds and after them; when the run owns its network namespace the TcpExt counters of that
//! namespace are read too. The verdict is inferred from those numbers (`verdict::infer`). The
//! prologue and epilogue (outside the measured rounds) are timed too, and a wait there longer
//! than the stall threshold is named in the verdict, not counted (`outside`).

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod cancel;
pub mod capture;
pub mod cpu;
mod exec;
pub mod measure;
pub mod netstat;

mod pair;
mod placement;
mod schedule;
pub mod seed003;
pub mod side;
pub mod txstamp;
pub mod verdict;
pub mod veth;

pub use cancel::{Cancel, Interrupts};
pub use capture::{CaptureFile, CaptureFileError, KernelEvidence, KernelHandle, KernelOpenError, PacketTap, TapHandle};
pub use pair::{run_pair, run_pair_analysed, run_pair_noted};
pub use placement::Placement;

use std::net::IpAddr;
use std::time::Duration;

use report::{Report, RunResult};
use scenario::Scenario;

/// How the lab runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabOptions {
    /// A wait counts as a stall when it exceeds the round trip (tcpi_min_rtt) by more than this.
    /// None = 10 ms.
    pub stall_threshold: Option<Duration>,
    /// Port the server listens on; 0 = any free port.
    pub port: u16,
    /// Run each connection in a fresh private network namespace when the placement is plain
    /// loopback, so TcpExt counters belong to the run alone. Needs CAP_SYS_ADMIN; without it the
    /// run falls back to the caller's namespace and says so.
    pub own_netns: bool,
    /// MTU given to `lo` in the private namespace (None = leave loopback's 65536). Default 1500,
    /// Ethernet's, so segment counts (MSS 1448 with timestamps) are those of a LAN.
    pub lo_mtu: Option<u32>,
    /// A peer silent this long is an error.
    pub io_timeout: Duration,
    /// The row's packet ring on loopback is small (`capture::ring`): rows the schedule found
    /// waiting on timers, a few hundred packets a second, side by side.
    pub small_ring: bool,
    /// Time every write's stay inside TCP with SO_TIMESTAMPING (SCHED stamps, drained between
    /// rounds) and use it as evidence of which side held data. Off by default because it
    /// disturbs what it measures: on Linux 6.18, with TX timestamps enabled, TCP_QUICKACK set
    /// after every recv no longer prevents seed 000's stalls (measured: 19 stalls in 10 rounds
    /// with it, 0 without).
    pub tx_timestamps: bool,
    /// Record the row's packets and analyse them with the one classifier
    /// (`RunResult::stall_records`): on loopback with AF_PACKET on the row's `lo`, filtered to
    /// its port (needs CAP_NET_RAW; without it the row keeps its other measurements and the
    /// report says why); behind an emulated link from `tap`.
    pub capture: bool,
    /// Also write every row's frames to this pcapng file (one interface per row).
    pub capture_file: Option<capture::CaptureFile>,
    /// Keep each row's decoded packets in `RunResult::packets` (for `--report`).
    pub keep_packets: bool,
    /// Behind an emulated link: the forwarder's tap, the row's packets instead of a loopback
    /// capture (`capture` still decides whether they are used).
    pub tap: Option<capture::TapHandle>,
    /// Pin the client (sender) and server threads to these CPUs (sched_setaffinity), as on two
    /// hosts: seed 003's direct path. None = where the scheduler puts them. The row's readers
    /// (capture, kernel evidence) then run on the process's other CPUs, or on all of them when
    /// none is left (`capture::readers_cpus`).
    pub pin: Option<(usize, usize)>,
    /// Kernel evidence (eBPF on TCP tracepoints, `tcpstall-kevidence`) added to each row's
    /// packets before the classifier reads them: the writes, resends and windows of the row's
    /// connection. Off by default; the CLI turns it on when the machine allows (root).
    pub kernel: KernelEvidence,
    /// Cancellation (Ctrl-C): checked between rows; cancelling shuts the running row's sockets
    /// down so it stops at once. The rows finished before stay in the report.
    pub cancel: Cancel,
    /// Let `run_scenario` run the rows that wait on kernel timers side by side, each in its own
    /// namespace (`schedule`); CPU-bound rows always run alone.
    pub parallel: bool,
    /// Run at most this many measured rounds (or connections): `schedule`'s probes.
    pub probe_rounds: Option<u32>,
    /// Take the row's latency from a second, unrecorded run of its rounds right after the
    /// recorded one (loopback record only): the record's kernel copy costs about 0.3 us per
    /// packet, measurable when rounds take microseconds. Set for rows whose recorded run
    /// was CPU-bound (`pair::unrecorded`; timer-bound rows are never run twice).
    pub latency_apart: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            stall_threshold: None,
            port: 0,
            own_netns: true,
            lo_mtu: Some(1500),
            io_timeout: Duration::from_secs(10),
            small_ring: false,
            tx_timestamps: false,
            capture: true,
            capture_file: None,
            keep_packets: false,
            tap: None,
            pin: None,
            kernel: KernelEvidence::Off,
            cancel: Cancel::new(),
            parallel: true,
            probe_rounds: None,
            latency_apart: false,
        }
    }
}

/// A stall threshold ([`LabOptions::stall_threshold`]) out of range.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("{0}: expected milliseconds between 0 and 10000")]
pub struct StallThresholdError(pub f64);

impl LabOptions {
    /// The stall margin this run uses: `stall_threshold`, else the classifier's
    /// [`analyze::DEFAULT_MIN_GAP`].
    pub fn stall_margin(&self) -> Duration {
        self.stall_threshold.unwrap_or(Duration::from_nanos(analyze::DEFAULT_MIN_GAP.0))
    }

    /// A wait longer than the round trip by more than `ms` milliseconds (more than 0, at most
    /// 10 000) is a stall.
    pub fn set_stall_threshold_ms(&mut self, ms: f64) -> Result<(), StallThresholdError> {
        if !(ms > 0.0 && ms <= 10_000.0) {
            return Err(StallThresholdError(ms));
        }
        self.stall_threshold = Some(Duration::from_secs_f64(ms / 1000.0));
        Ok(())
    }

    /// Serve on a fixed `port`: it is for watching from the host (tcpdump -i lo port N), so the
    /// rows stay in the caller's namespace.
    pub fn set_fixed_port(&mut self, port: u16) {
        self.port = port;
        self.own_netns = false;
    }

    /// Rows on seed 003's veth pair: pinned to its CPUs, in its namespaces (as the placement
    /// says), without the loopback capture.
    pub fn set_veth(&mut self, path: &veth::VethPath) {
        self.pin = Some(path.cpus);
        self.own_netns = false;
        self.lo_mtu = None;
        self.capture = false;
    }
}

/// Progress of `run_scenario`, for progress bars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Row `index` (0-based) of `total` starts.
    Start { index: usize, total: usize, label: String },
    /// Row `index` finished (or failed).
    Done { index: usize, total: usize },
}

/// What can go wrong in a lab run. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("port {port} is already in use on {ip} (choose another with --port, or 0 for any free port)")]
    PortInUse { ip: IpAddr, port: u16 },
    #[error("{side}: the peer closed the connection early in {phase} ({detail})")]
    PeerClosed { side: &'static str, phase: String, detail: String },
    #[error("{side}: no progress for {secs} s in {phase}: the peer stopped")]
    Timeout { side: &'static str, phase: String, secs: u64 },
    #[error("{side}: {what}: {source}")]
    Io {
        side: &'static str,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{side}: network namespace: {what}: {source}")]
    Netns {
        side: &'static str,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the {0} thread panicked")]
    Panic(&'static str),
}

impl LabError {
    /// Errors that are only the echo of the other side failing first.
    fn is_secondary(&self) -> bool {
        matches!(self, LabError::PeerClosed { .. } | LabError::Timeout { .. })
    }
}

/// The classifier's timer bands for this kernel: Linux's constants at its HZ, or HZ=100's
/// coarser tolerance when the tick cannot be read (analyze::Timers::default).
pub fn kernel_timers() -> analyze::Timers {
    analyze::Timers::of_hz(sys::host::kernel_hz().ok())
}

/// Run every row of the scenario (its matrix, for each workload variant) and return the report.
/// The first error stops the run; the rows measured before it stay in `report.results` and the
/// error is in `report.errors`. So does `opts.cancel`: the row in progress is abandoned and
/// `report.errors` says the run was interrupted.
pub fn run_scenario(s: &Scenario, place: &Placement, opts: &LabOptions, progress: &mut dyn FnMut(Progress)) -> Report {
    let variants = s.workload.variants();
    let total = variants.len() * s.matrix.len();
    let mut report = Report::new("lab", &s.name, s.workload.params_json(), &place.link);
    report.kernel = Some(sys::host::kernel_release());
    let mut notes: Vec<String> = Vec::new();
    let jobs: Vec<schedule::Job<'_>> = variants
        .iter()
        .flat_map(|(variant, workload)| {
            s.matrix.iter().map(move |pair| schedule::Job {
                label: if variant.is_empty() { pair.label.clone() } else { format!("{variant} / {}", pair.label) },
                variant: variant.clone(),
                workload: workload.clone(),
                pair,
            })
        })
        .collect();
    let (outcomes, plan) = schedule::run(&jobs, s, place, opts, progress);
    for (job, outcome) in jobs.iter().zip(outcomes) {
        let r = match outcome {
            schedule::Outcome::NotRun { during_cancel } => {
                report.errors.push(interrupted(&job.label, report.results.len(), total, during_cancel));
                break;
            }
            schedule::Outcome::Done(r) => *r,
        };
        match r {
            // A row that finished before the cancel took effect is complete: keep it.
            Ok((mut row, _analysis, note)) => {
                row.variant = job.variant.clone();
                for n in note {
                    if !n.is_empty() && !notes.contains(&n) {
                        notes.push(n);
                    }
                }
                report.results.push(row);
            }
            // Whatever the sockets reported after being shut down is the echo of the cancel.
            Err(_) if opts.cancel.is_cancelled() => {
                report.errors.push(interrupted(&job.label, report.results.len(), total, true));
                break;
            }
            Err(e) => {
                report.errors.push(format!("{}: {e}", job.pair.label));
                break;
            }
        }
    }
    notes.extend(plan);
    if !notes.is_empty() {
        report.link = format!("{} ({})", report.link, notes.join("; "));
    }
    if matches!(s.workload, scenario::Workload::Stream(_)) {
        add_throughput_comparison(&mut report.results);
    } else {
        add_cost_comparison(&mut report.results);
    }
    report
}

/// The error line of a cancelled run.
/// One row: one connection, or (`connection = "new"`) one single-round connection per round
/// folded into one row by `report::merge_connections`.
pub(crate) fn run_row(
    workload: &scenario::Workload,
    pair: &scenario::StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError> {
    let Some((one, n)) = workload.per_connection() else {
        return pair::run_pair_noted(workload, pair, place, opts);
    };
    let n = opts.probe_rounds.map_or(n, |p| n.min(p));
    let mut runs = Vec::with_capacity(n as usize);
    let mut notes = Vec::new();
    for k in 0..n {
        if opts.cancel.is_cancelled() {
            break;
        }
        // The report keeps the first connection's packets only.
        let o = LabOptions { keep_packets: opts.keep_packets && k == 0, ..opts.clone() };
        let (row, _, note) = pair::run_pair_noted(&one, pair, place, &o)?;
        for x in note {
            if !notes.contains(&x) {
                notes.push(x);
            }
        }
        runs.push(row);
    }
    let row = report::merge_connections(&runs).ok_or_else(|| LabError::Io {
        side: "client",
        what: "no connection ran".into(),
        source: std::io::Error::from(std::io::ErrorKind::Interrupted),
    })?;
    Ok((row, None, notes))
}

fn interrupted(label: &str, done: usize, total: usize, during: bool) -> String {
    let at = if during { "during" } else { "before" };
    format!("interrupted {at} row '{label}' (abandoned): {done} of {total} rows finished and are shown")
}

/// Stream rows: throughput relative to the first row (segment counts grow with throughput, so
/// comparing them would mislead).
pub fn add_throughput_comparison(rows: &mut [RunResult]) {
    let Some(base) = rows.first().map(|r| (r.strategy.clone(), r.throughput_bytes_per_s)) else { return };
    for r in rows.iter_mut().skip(1) {
        if base.1 > 0.0 {
            r.verdict =
                format!("{}; {:.0}% of {}'s throughput", r.verdict, 100.0 * r.throughput_bytes_per_s / base.1, base.0);
        }
    }
}

/// Add "fewest segments" / "Nx the segments of the best fix" to stall-free rows, per variant (before
/// any prologue/epilogue note, beside the verdict it qualifies).
pub fn add_cost_comparison(rows: &mut [RunResult]) {
    let mut variants: Vec<String> = rows.iter().map(|r| r.variant.clone()).collect();
    variants.dedup();
    for v in variants {
        let idx: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].variant == v).collect();
        let costs: Vec<verdict::Cost> = idx
            .iter()
            .map(|&i| verdict::Cost {
                stalls: rows[i].verdict_key.stalls,
                segments: rows[i].wire.client.segs_out + rows[i].wire.server.segs_out,
                wire_bytes: rows[i].wire.client.wire_bytes + rows[i].wire.server.wire_bytes,
            })
            .collect();
        let base = idx.iter().position(|&i| rows[i].strategy == "default").map(|k| costs[k]);
        for (&i, c) in idx.iter().zip(verdict::compare_cost(&costs, base)) {
            if let Some(c) = c {
                verdict::insert_before_notes(&mut rows[i].verdict, &format!(", {c}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stall_threshold_is_checked_and_a_fixed_port_keeps_the_callers_namespace() {
        let mut o = super::LabOptions::default();
        assert_eq!(o.set_stall_threshold_ms(0.0), Err(super::StallThresholdError(0.0)));
        assert!(o.set_stall_threshold_ms(f64::NAN).is_err() && o.set_stall_threshold_ms(10_001.0).is_err());
        assert_eq!(o.stall_threshold, None);
        o.set_stall_threshold_ms(2.5).unwrap();
        assert_eq!(o.stall_threshold, Some(std::time::Duration::from_micros(2500)));
        assert!(o.own_netns);
        o.set_fixed_port(8000);
        assert!(!o.own_netns && o.port == 8000);
    }

    /// CONFIG_HZ is one of the kernel's choices (kernel/Kconfig.hz: 100, 250, 300, 1000), and
    /// the classifier's jiffy follows it (include/net/tcp.h: timers in jiffies).
    #[test]
    fn kernel_hz_is_a_config_hz_choice_and_sets_the_jiffy() {
        let hz = sys::host::kernel_hz().expect("CLOCK_MONOTONIC_COARSE resolution");
        assert!([100, 250, 300, 1000].contains(&hz), "HZ {hz}");
        assert_eq!(super::kernel_timers().jiffy.0, 1_000_000_000 / hz as u64);
    }
}
