//! A CPU-bound row's unrecorded run: the same rounds again right after the recorded one, its
//! latency, time and CPU taken into the row (`LabOptions::latency_apart`), under a watchdog.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use report::RunResult;
use scenario::{Program, StrategyPair, Workload};

use super::run_pair_once;
use crate::capture::KernelEvidence;
use crate::{LabError, LabOptions, Placement};

/// A row's recorded run, and what its unrecorded run needs ([`run_recorded`], [`finish`]).
pub(crate) struct Recorded {
    row: RunResult,
    analysis: Option<analyze::Analysis>,
    notes: Vec<String>,
    took: Duration,
    /// Wants its latency from an unrecorded run (`LabOptions::latency_apart`, CPU-bound).
    apart: bool,
}

/// Like `run_pair`, also returning notes on the namespace used ("" for the placement's own) and
/// on the packet capture. With `LabOptions::latency_apart` and the row's packets recorded on
/// loopback, a CPU-bound row (not `schedule::timer_bound` by its recorded run) runs a second
/// time right after, unrecorded, and the row's
/// latency, time and CPU are that run's (`apply_unrecorded`); the evidence stays the
/// recorded run's.
pub fn run_pair_noted(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError> {
    let rec = run_recorded(workload, pair, place, opts)?;
    finish(rec, workload, pair, place, opts)
}

/// The recorded half of [`run_pair_noted`]: the row's run with its evidence, and whether it
/// wants an unrecorded one. The schedule runs it beside timer-bound rows and [`finish`] later,
/// alone.
pub(crate) fn run_recorded(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<Recorded, LabError> {
    let t0 = Instant::now();
    let (row, analysis, notes) = run_pair_once(workload, pair, place, opts)?;
    let took = t0.elapsed();
    let recorded_here = row.capture.is_some() && opts.tap.is_none();
    // A row that waits on kernel timers (by the recorded run, `schedule::timer_bound`) is not
    // run twice: in rounds of milliseconds the record costs nothing measurable, and a second
    // run would double the row's time.
    let waits = crate::schedule::timer_bound(row.latency_us.p50, row.cpu.map(|c| c.cpu_share_of_wall));
    let apart = opts.latency_apart && recorded_here && !waits && !matches!(workload.program(), Program::Stream { .. });
    Ok(Recorded { row, analysis, notes, took, apart })
}

/// The unrecorded half of [`run_pair_noted`]: when the recorded run wants it, the same rounds
/// again without evidence, their latency, time and CPU taken into the row.
pub(crate) fn finish(
    rec: Recorded,
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError> {
    let Recorded { mut row, analysis, mut notes, took, apart } = rec;
    if apart {
        let bare = LabOptions {
            capture: false,
            capture_file: None,
            keep_packets: false,
            latency_apart: false,
            // Nor kernel evidence: its programs are detached between recorded rows, so this
            // run's sockets pay for no tracepoint.
            kernel: KernelEvidence::Off,
            // No per-call socket timeouts either (their kernel timer per blocking wait is
            // measurable here): a watchdog stops the run if it overruns the recorded one.
            cancel: crate::Cancel::watched(&opts.cancel),
            ..opts.clone()
        };
        match run_watched(workload, pair, place, &bare, unrecorded_limit(took, opts.io_timeout)) {
            Ok((u, _, _)) => {
                apply_unrecorded(&mut row, u);
                notes.push(LATENCY_APART_NOTE.into());
            }
            // Ctrl-C: as for any row.
            Err(e) if opts.cancel.is_cancelled() => return Err(e),
            Err(e) => notes.push(format!("the unrecorded run failed ({e}): latency from the recorded run")),
        }
    }
    Ok((row, analysis, notes))
}

/// How long the unrecorded run may take before its watchdog stops it (pure): twice the recorded
/// run of the same rounds, plus one I/O timeout (what a single call could wait with socket
/// timeouts).
pub(super) fn unrecorded_limit(recorded: Duration, io_timeout: Duration) -> Duration {
    recorded.saturating_mul(2).saturating_add(io_timeout)
}

/// `run_pair_once` with `opts.cancel` (a [`crate::Cancel::watched`] token, which Ctrl-C
/// cancels through its parent) cancelled once `limit` has passed. The watchdog sleeps until the
/// run ends or the limit: no wake-up beside the timed rounds (two threads spinning on two CPUs
/// lose a time slice to any thread that wakes).
fn run_watched(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
    limit: Duration,
) -> Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError> {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                opts.cancel.cancel();
            }
        });
        let r = run_pair_once(workload, pair, place, opts);
        drop(done_tx);
        r
    })
}

/// The note of a row whose latency comes from its unrecorded run.
pub(super) const LATENCY_APART_NOTE: &str = "CPU-bound rows: latency from an unrecorded run after the recorded one";

/// Take the timing of the unrecorded run `u` into the recorded row: latency, slow samples,
/// wall time, throughput and CPU. The stall records, the verdict, the packets and the wire and
/// tcp_info figures stay the recorded run's (pure).
pub(super) fn apply_unrecorded(row: &mut RunResult, u: RunResult) {
    row.latency_us = u.latency_us;
    row.latency_dist = u.latency_dist;
    row.samples_ns = u.samples_ns;
    row.slow_samples = u.slow_samples;
    row.slow_sample_threshold_us = u.slow_sample_threshold_us;
    row.wall_s = u.wall_s;
    row.throughput_bytes_per_s = u.throughput_bytes_per_s;
    row.cpu = u.cpu;
    if let Some(c) = row.capture.as_mut() {
        c.latency_unrecorded = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scenario::SideOpts;

    #[test]
    fn the_unrecorded_run_may_take_twice_the_recorded_one_and_one_io_timeout() {
        let l = unrecorded_limit(Duration::from_millis(300), Duration::from_secs(10));
        assert_eq!(l, Duration::from_millis(10_600));
        assert_eq!(unrecorded_limit(Duration::MAX, Duration::from_secs(1)), Duration::MAX);
    }

    /// A run under a watchdog has no socket timeouts; the watchdog stops it when it overruns:
    /// ten million round trips (tens of seconds here) stopped after 40 ms, well within 5 s.
    #[test]
    fn a_watched_run_that_overruns_is_stopped() {
        let w = Workload::Rr(scenario::Rr { size: 1, rounds: 10_000_000 });
        let side = SideOpts::none();
        let pair = StrategyPair::new(side.clone(), side);
        let user = crate::Cancel::new();
        let opts = LabOptions {
            own_netns: false,
            capture: false,
            cancel: crate::Cancel::watched(&user),
            ..LabOptions::default()
        };
        let t0 = Instant::now();
        let r = run_watched(&w, &pair, &Placement::loopback(), &opts, Duration::from_millis(40));
        assert!(r.is_err(), "the watchdog stopped the run");
        assert!(opts.cancel.is_cancelled() && !user.is_cancelled());
        assert!(t0.elapsed() < Duration::from_secs(5), "stopped after {:?}", t0.elapsed());
    }

    /// The unrecorded run has no socket timeouts on either side: the accepted socket would
    /// otherwise keep the listener's SO_RCVTIMEO (the accept timeout), inherited through
    /// sk_clone_lock, and arm a kernel timer on every blocking read of the server (about half a
    /// timer per round trip on one CPU, counted with the timer:timer_start tracepoint).
    #[test]
    fn an_accepted_socket_without_timeouts_drops_the_listeners() {
        let listener = socket2::Socket::from(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        listener.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let _c = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = listener.accept().unwrap();
        assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_secs(10)), "inherited from the listener");
        crate::side::setup_with(&s, &SideOpts::none(), "server", None).unwrap();
        assert_eq!((s.read_timeout().unwrap(), s.write_timeout().unwrap()), (None, None));
        crate::side::setup_with(&s, &SideOpts::none(), "server", Some(Duration::from_secs(3))).unwrap();
        assert_eq!(s.write_timeout().unwrap(), Some(Duration::from_secs(3)));
    }
}
