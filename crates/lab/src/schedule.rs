//! The order a scenario's rows run in.
//!
//! Most of seed 000's wall time is two rows waiting out real 40 ms delayed-ACK timers, at a few
//! percent of one CPU. Such rows can wait side by side: each row has a private network
//! namespace (its own loopback, sockets, TcpExt counters and packet record), and what it
//! measures is the kernel's timer, not the CPU. Rows that use the CPU run alone, as before.
//!
//! The rule, stated: every row first runs a probe of [`PROBE_ROUNDS`] measured rounds (its
//! warm-up as configured, no packet record; all probes side by side, their numbers discarded).
//! A row is *timer-bound* when its probe's p50 round is at least [`TIMER_P50`] and the two
//! threads' CPU time was under [`TIMER_CPU_SHARE`] of the probe's wall time: it spent its
//! time waiting for the kernel. Then the timer-bound rows run in full side by side, with the
//! other rows' recorded runs one at a time beside them (what those record is counted, not
//! timed), and after them the other rows' unrecorded runs one at a time, alone: their latency
//! ([`beside`]). The report lists the rows in the matrix's order.
//! Side by side pays only with two timer-bound rows or more: as soon as fewer than two rows
//! can still be timer-bound (the probes finished timer-bound plus those still running), the
//! probes still running are stopped and every row runs alone (a CPU-bound row's probe takes
//! milliseconds, a timer-bound row's its warm-up and probe rounds of timer waits: seed 001's
//! `lab multi-write` paid about 1 s for a probe no other row could pay back).
//!
//! Every row, in a run of any shape, also takes its latency apart from its evidence
//! (`LabOptions::latency_apart`) when its recorded run shows it CPU-bound ([`timer_bound`]
//! false on the recorded run): such a row runs twice in a row, recorded (stall records,
//! packets, wire and tcp_info) then unrecorded (latency, ms/round, CPU), because the record's
//! kernel copy, about 0.3 us per packet, is measurable in rounds of microseconds (`cargo bench
//! -p tcpstall-lab --bench rr`); in a timer-bound row's rounds of milliseconds it is not, and
//! those rows record every round they time (and are not run twice). Deciding on the recorded
//! run also catches a CPU-bound row whose probe was starved by other jobs into looking
//! timer-bound.
//!
//! Side by side only on loopback with a private namespace per row (root), with no `--capture
//! FILE` (the file keeps the rows in order), never for stream rows, and never behind an
//! emulated link (one link carries every row: rows side by side would share it). Otherwise
//! rows run one at a time.

use std::time::Duration;

use report::RunResult;
use scenario::{Scenario, StrategyPair, Workload};

use crate::{LabError, LabOptions, Placement, Progress};

/// Measured rounds of a probe.
pub(crate) const PROBE_ROUNDS: u32 = 3;
/// A probe's p50 round at least this long: the row waits.
pub(crate) const TIMER_P50: Duration = Duration::from_millis(5);
/// ... and its two threads used less than this share of the probe's wall time.
pub(crate) const TIMER_CPU_SHARE: f64 = 0.2;

/// One row to run.
pub(crate) struct Job<'a> {
    pub label: String,
    pub variant: String,
    pub workload: Workload,
    pub pair: &'a StrategyPair,
}

pub(crate) type RowOut = Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError>;

/// What became of a row.
pub(crate) enum Outcome {
    Done(Box<RowOut>),
    /// Not started: the run was cancelled (`during_cancel`: while rows were running) or an
    /// earlier row failed.
    NotRun {
        during_cancel: bool,
    },
}

/// Can rows of this run wait side by side?
fn eligible(s: &Scenario, place: &Placement, opts: &LabOptions) -> bool {
    opts.parallel
        && opts.own_netns
        && opts.probe_rounds.is_none()
        && opts.capture_file.is_none()
        && opts.pin.is_none()
        && place.client_netns.is_none()
        && place.server_netns.is_none()
        && !matches!(s.workload, Workload::Stream(_))
        // A private namespace per row needs CAP_SYS_ADMIN; without it the rows share the
        // caller's namespace and stay one at a time.
        && nix::unistd::geteuid().is_root()
}

/// The probe's verdict (pure): does the row wait on kernel timers? `p50_us`: its p50 round;
/// `cpu_share`: its two threads' CPU time over the probe's wall time, if read.
pub(crate) fn timer_bound(p50_us: f64, cpu_share: Option<f64>) -> bool {
    let waits = p50_us * 1e3 >= TIMER_P50.as_nanos() as f64;
    let idle = cpu_share.is_some_and(|c| c < TIMER_CPU_SHARE);
    waits && idle
}

/// Can rows still run side by side (pure)? `found`: probes finished timer-bound; `running`:
/// probes not finished. Two timer-bound rows at least are needed for one to wait beside another.
pub(crate) fn side_by_side_can_win(found: usize, running: usize) -> bool {
    found + running >= 2
}

/// The probes, side by side: which rows are timer-bound. Stops the probes still running as soon
/// as fewer than two rows can still be timer-bound (those found so far plus those still
/// running): then no two rows can wait side by side, the probes cannot win, and every row runs
/// alone (all false). A probe of a CPU-bound row takes milliseconds; a timer-bound row's takes
/// its warm-up and [`PROBE_ROUNDS`] rounds of timer waits (seed 001's default row: about 1 s),
/// which only a second timer-bound row can pay back.
fn probe(jobs: &[Job<'_>], place: &Placement, opts: &LabOptions) -> Vec<bool> {
    let probe = LabOptions {
        probe_rounds: Some(PROBE_ROUNDS),
        capture: false,
        keep_packets: false,
        tx_timestamps: false,
        // The probes' numbers are discarded: no kernel evidence (its one filter is a row's).
        kernel: crate::KernelEvidence::Off,
        latency_apart: false,
        ..opts.clone()
    };
    // A token per probe, so that one can be stopped alone; Ctrl-C stops them all.
    let cancels: Vec<crate::Cancel> = jobs.iter().map(|_| crate::Cancel::new()).collect();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, bool)>();
    let mut timer = vec![false; jobs.len()];
    std::thread::scope(|sc| {
        for ((i, j), c) in jobs.iter().enumerate().zip(&cancels) {
            let (o, tx) = (LabOptions { cancel: c.clone(), ..probe.clone() }, tx.clone());
            sc.spawn(move || {
                let r = crate::run_row(&j.workload, j.pair, place, &o);
                let t = matches!(&r, Ok((row, _, _))
                    if timer_bound(row.latency_us.p50, row.cpu.map(|c| c.cpu_share_of_wall)));
                // The receiver outlives every probe (the scope joins them first).
                let _ = tx.send((i, t));
            });
        }
        drop(tx);
        let (mut running, mut found, mut stopped) = (jobs.len(), 0, false);
        while running > 0 {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok((i, t)) => {
                    running -= 1;
                    // A probe stopped early says nothing.
                    timer[i] = t && !stopped;
                    found += usize::from(timer[i]);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if !stopped && (!side_by_side_can_win(found, running) || opts.cancel.is_cancelled()) {
                stopped = running > 0;
                cancels.iter().for_each(crate::Cancel::cancel);
            }
        }
    });
    if timer.iter().filter(|&&t| t).count() < 2 {
        timer.iter_mut().for_each(|t| *t = false);
    }
    timer
}

/// The header's line for timer-bound rows run side by side (None for fewer than two).
fn side_by_side_line(jobs: &[Job<'_>], side_by_side: &[usize]) -> Option<String> {
    (side_by_side.len() > 1).then(|| {
        let names: Vec<&str> = side_by_side.iter().map(|&i| jobs[i].label.as_str()).collect();
        format!(
            "timer-bound rows side by side: {} (probe: {PROBE_ROUNDS} rounds, p50 >= {} ms at < {:.0}% CPU); the others alone (their evidence recorded beside them)",
            names.join(", "),
            TIMER_P50.as_millis(),
            TIMER_CPU_SHARE * 100.0
        )
    })
}

/// Run the jobs; outcomes in the jobs' order, and a line for the header: where a pinned run's
/// threads and readers ran, or which rows ran side by side (None for an unpinned run whose rows
/// all ran one at a time).
pub(crate) fn run(
    jobs: &[Job<'_>],
    s: &Scenario,
    place: &Placement,
    opts: &LabOptions,
    progress: &mut dyn FnMut(Progress),
) -> (Vec<Outcome>, Option<String>) {
    let total = jobs.len();
    let mut out: Vec<Option<Outcome>> = (0..total).map(|_| None).collect();
    let probed = eligible(s, place, opts) && total > 1;
    let timer = if probed { probe(jobs, place, opts) } else { vec![false; total] };
    let side_by_side: Vec<usize> = (0..total).filter(|&i| timer[i]).collect();
    // Pinned rows say where the readers went (pinned runs are one at a time: `eligible`).
    let plan = opts.pin.map(crate::capture::pin_note).or_else(|| side_by_side_line(jobs, &side_by_side));
    // Every row, whatever the run's shape (one row or a matrix, probed or not, `--client` and
    // `--server` pairs, exchanges, advise's rows), takes its latency from an unrecorded run after
    // the recorded one when the recorded run shows it CPU-bound (`LabOptions::latency_apart`,
    // decided by `timer_bound` on the recorded run; `pair::unrecorded` leaves out stream rows
    // and rows recorded elsewhere): a timer-bound row is not run twice, and a row a probe
    // starved by other jobs' CPU took for timer-bound still is, if its full run computes.
    let apart = LabOptions { latency_apart: true, ..opts.clone() };
    let mut failed = false;
    let own = if side_by_side.len() > 1 { own_options(side_by_side.len(), opts, &apart) } else { None };
    // The other rows' recorded runs, made beside the timer-bound rows (see `beside`).
    let mut recorded: Vec<Option<Result<crate::pair::Recorded, LabError>>> = (0..total).map(|_| None).collect();
    if let Some(own) = own {
        for &i in &side_by_side {
            progress(Progress::Start { index: i, total, label: jobs[i].pair.label.clone() });
        }
        let others: Vec<usize> = (0..total).filter(|i| !timer[*i]).collect();
        let (results, theirs) = std::thread::scope(|sc| {
            let hs: Vec<_> = side_by_side
                .iter()
                .zip(&own)
                .map(|(&i, o)| {
                    let j = &jobs[i];
                    sc.spawn(move || crate::run_row(&j.workload, j.pair, place, o))
                })
                .collect();
            let beside = sc.spawn(|| beside(jobs, &others, place, &apart));
            let results: Vec<RowOut> =
                hs.into_iter().map(|h| h.join().unwrap_or(Err(LabError::Panic("row")))).collect();
            (results, beside.join().unwrap_or_default())
        });
        for (&i, r) in side_by_side.iter().zip(results) {
            progress(Progress::Done { index: i, total });
            failed |= r.is_err();
            out[i] = Some(Outcome::Done(Box::new(r)));
        }
        theirs.into_iter().for_each(|(i, r)| recorded[i] = Some(r));
    }
    for i in 0..total {
        if out[i].is_some() {
            continue;
        }
        if failed || opts.cancel.is_cancelled() {
            out[i] = Some(Outcome::NotRun { during_cancel: false });
            continue;
        }
        progress(Progress::Start { index: i, total, label: jobs[i].pair.label.clone() });
        let (w, pair) = (&jobs[i].workload, jobs[i].pair);
        let r = match recorded[i].take() {
            // Its unrecorded run, alone: the row's latency.
            Some(rec) => rec.and_then(|rec| crate::pair::finish(rec, w, pair, place, &apart)),
            None => crate::run_row(w, pair, place, &apart),
        };
        progress(Progress::Done { index: i, total });
        failed |= r.is_err();
        out[i] = Some(Outcome::Done(Box::new(r)));
    }
    (out.into_iter().map(|o| o.unwrap_or(Outcome::NotRun { during_cancel: false })).collect(), plan)
}

/// The options of each of `n` rows side by side: `apart`, each row with a kernel-evidence source
/// of its own when the caller has one (kernel evidence filters on one row's port and namespace,
/// so none sees another's connection), recording what the caller's records, reads too (which
/// rows run side by side depends on the host's load; what a row records must not). The caller's
/// source records the other rows' recorded runs beside them ([`beside`]). The `n` sources are
/// opened each on a thread of its own, side by side (loading and relocating the BPF programs
/// takes CPU: tens of milliseconds a source here, seconds on a loaded host in a debug build),
/// and Ctrl-C meanwhile returns None at once (the threads finish and drop what they opened).
/// None too when cancelled before.
fn own_options(n: usize, opts: &LabOptions, apart: &LabOptions) -> Option<Vec<LabOptions>> {
    if opts.cancel.is_cancelled() {
        return None;
    }
    let crate::KernelEvidence::On(h) = opts.kernel.ready(&opts.cancel) else {
        return (!opts.cancel.is_cancelled()).then(|| vec![LabOptions { small_ring: true, ..apart.clone() }; n]);
    };
    let opening: Vec<crate::KernelEvidence> = (0..n).map(|_| crate::KernelEvidence::opening(h.reads())).collect();
    let mut rows = Vec::with_capacity(n);
    for k in opening {
        let kernel = k.ready(&opts.cancel);
        if opts.cancel.is_cancelled() {
            return None;
        }
        rows.push(LabOptions { kernel, small_ring: true, ..apart.clone() });
    }
    Some(rows)
}

/// The recorded runs of the rows that do not wait on timers (`others`), one at a time, while
/// the timer-bound rows wait side by side: what they record (stall records, packets, wire,
/// tcp_info) is counted, not timed, and a timer-bound row's few percent of a CPU leaves it as
/// it is alone. Their latency comes from their unrecorded runs after, alone
/// (`pair::finish`): the rows that use the CPU are still timed alone. Stops at the first
/// error or at Ctrl-C; the rows not reached run whole after.
fn beside(
    jobs: &[Job<'_>],
    others: &[usize],
    place: &Placement,
    apart: &LabOptions,
) -> Vec<(usize, Result<crate::pair::Recorded, LabError>)> {
    let mut done = Vec::new();
    for &i in others {
        if apart.cancel.is_cancelled() {
            break;
        }
        // A row of a connection per request runs whole after (`run_row`).
        if jobs[i].workload.per_connection().is_some() {
            continue;
        }
        let r = crate::pair::run_recorded(&jobs[i].workload, jobs[i].pair, place, apart);
        let stop = r.is_err();
        done.push((i, r));
        if stop {
            break;
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::{side_by_side_can_win, timer_bound};

    #[test]
    fn probes_stop_when_fewer_than_two_rows_can_be_timer_bound() {
        // Seed 001 (multi-write): seven CPU-bound probes done, the default row's still running.
        assert!(!side_by_side_can_win(0, 1));
        // Seed 000: one timer-bound row found, another still running: wait for it.
        assert!(side_by_side_can_win(1, 1));
        assert!(side_by_side_can_win(2, 0));
        assert!(side_by_side_can_win(0, 8));
        assert!(!side_by_side_can_win(1, 0));
    }

    #[test]
    fn a_row_is_timer_bound_when_it_waits_without_computing() {
        // Seed 000's default row: 88 ms rounds at a few percent of a CPU.
        assert!(timer_bound(88_000.0, Some(0.03)));
        // A fast row, or a slow row that computes (a starved CPU-bound row), is not.
        assert!(!timer_bound(60.0, Some(0.9)));
        assert!(!timer_bound(60.0, Some(0.01)));
        assert!(!timer_bound(20_000.0, Some(0.8)));
        // Without the CPU figure nothing is assumed.
        assert!(!timer_bound(88_000.0, None));
    }
}
