//! Application clocking: a sender whose departures keep their own clock.
//!
//! Telemetry, PMUs (IEEE C37.118 sends a frame every 20 ms), pollers and screen updates write
//! on a timer of their own, whatever the ACKs do. Their regular gaps are not stalls: nothing
//! held the bytes, the writer had not written. From packets alone the writer's clock shows in
//! two ways, and both must hold before the gaps are called the application's:
//!
//! - the intervals between the starts of its bursts cluster at a period P (or small multiples
//!   of it, for skipped ticks), within a tolerance of 15% of P (at least 300 us);
//! - the sends keep their phase whatever the peer does: at most half of them leave within the
//!   release window after a packet from the peer (the window in which an ACK-clocked sender,
//!   held by Nagle or the congestion window, sends: `tcp_data_snd_check` runs from the ACK's
//!   softirq; and in which a reply answers a request). A sender released by ACKs, or answering
//!   requests, is clocked by its peer, even when that is periodic (a delayed-ACK timer's 40 ms
//!   rhythm, a client polling), and is not paced.
//!
//! The detector is causal and runs in one pass (a live watcher uses it): each burst start is
//! judged against the clock fitted to the bursts before it. Pure: times are arguments.

use std::collections::VecDeque;
use trace::{Duration, Instant};

/// Segments less than this apart are one burst (one write cut into segments, or one tick's
/// writes): the clock is read from burst starts.
const BURST_GAP: Duration = Duration::from_millis(2);
/// Burst starts remembered to fit the clock.
const HISTORY: usize = 16;
/// Intervals needed before a clock is trusted.
const MIN_INTERVALS: usize = 6;
/// Largest multiple of the period an interval may span and still keep the clock (skipped ticks).
const MAX_MULTIPLE: u64 = 4;
/// Share of the intervals that must fit the clock, and share that must be one period.
const FIT_SHARE: f64 = 0.8;
const ONE_PERIOD_SHARE: f64 = 0.66;
/// Largest share of burst starts that may follow a packet from the peer within the release
/// window.
const MAX_ACKED_SHARE: f64 = 0.5;
/// Share of burst starts that answer the peer's data above which a side alternates with its
/// peer (request/response): its rhythm is the exchange's, not its own clock's.
const ANSWER_SHARE: f64 = 0.8;

/// What the detector knows of one sender's clock at a burst start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockFit {
    /// The period its sends keep.
    pub period: Duration,
    /// Burst starts in the history that kept the clock.
    pub in_phase: u32,
    /// Burst starts in the history.
    pub sends: u32,
    /// How many of them left within the release window after an ACK.
    pub acked: u32,
    /// Intervals in the history (what `in_phase` counts out of).
    pub intervals: u32,
    /// How many burst starts answered the peer's data (the peer sent data since this side's
    /// previous burst start), and whether the answers keep a delay steadier than the sends keep
    /// their period: then the rhythm is the peer's, passed on, not this side's own.
    pub answers: u32,
    pub answers_steady: bool,
    /// How tightly the intervals keep the period: the median distance of a fitting interval
    /// from its whole multiple of the period, as a share of the period. A writer's timer keeps
    /// a few percent; a rhythm made by alternating waits (a sleep, then a stall) is as loose as
    /// its two halves differ.
    pub residual: f64,
    /// The intervals that end in a send right after an ACK sit apart from those that end in
    /// another send (their mean deviations from the period differ by more than 2% of it and
    /// 300 us): the rhythm alternates between two processes, a wait released by the ACK and
    /// the writer's own pause, as a requester that sleeps between stalled requests does. A
    /// writer's timer keeps one rhythm, whatever ACKs land before some of its ticks.
    pub two_rhythms: bool,
    /// Burst starts in the history whose burst held a full-sized segment: no timer of the
    /// sender's stack holds those (a probe or loss-probe timer sends one sub-MSS segment).
    pub full_bursts: u32,
    /// This burst start kept the clock: it left k periods (1 <= k <= 4) after the previous one.
    pub on_clock: bool,
    /// The tick at or before this send, after the previous burst start, at which the writer's
    /// clock would have written (the previous burst start plus whole periods): when a frame
    /// that left late existed.
    pub tick: Instant,
}

/// The largest median residual (see [`ClockFit::residual`]) of a clock tight enough to
/// outweigh a release at a delayed-ACK timer's interval: 6% of the period.
const TIGHT_RESIDUAL: f64 = 0.06;

impl ClockFit {
    /// The clock keeps its period tightly (or within 300 us): a timer's, not a rhythm of waits.
    pub(crate) fn tight(&self) -> bool {
        !self.two_rhythms && (self.residual <= TIGHT_RESIDUAL || self.residual * self.period.0 as f64 <= 300_000.0)
    }

    /// The sender writes on its own clock: the intervals cluster and the sends ignore the ACKs.
    pub(crate) fn paced(&self) -> bool {
        let answering = f64::from(self.answers) >= ANSWER_SHARE * f64::from(self.sends) && self.answers_steady;
        f64::from(self.acked) <= MAX_ACKED_SHARE * f64::from(self.sends) && !(answering && self.full_bursts == 0)
    }
}

/// One direction's clock detector.
#[derive(Debug, Clone, Default)]
pub(crate) struct AppClock {
    last_seg: Option<Instant>,
    last_burst: Option<Instant>,
    /// Intervals between burst starts (ns), newest last.
    intervals: VecDeque<u64>,
    /// Per burst start: it left within the release window after an ACK.
    acked: VecDeque<bool>,
    /// Per burst start: the delay since the peer's data, when the peer sent data since this
    /// side's previous burst start (an answer); and whether its burst held a full segment.
    answers: VecDeque<Option<u64>>,
    full: VecDeque<bool>,
}

/// The tolerance a tick keeps: 15% of the period (an interval carries the jitter of both its
/// ends), at least 300 us (scheduling jitter).
fn tolerance(period: u64) -> u64 {
    (period * 3 / 20).max(300_000)
}

/// `interval` is `k` periods for a whole k in 1..=MAX_MULTIPLE, within the tolerance.
fn multiple_of(interval: u64, period: u64) -> Option<u64> {
    if period == 0 {
        return None;
    }
    let k = ((interval + period / 2) / period).max(1);
    (k <= MAX_MULTIPLE && interval.abs_diff(k * period) <= tolerance(period)).then_some(k)
}

/// The spread of a sample: the distance between its first and third quartiles.
fn spread(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() * 3 / 4] - v[v.len() / 4]
}

impl AppClock {
    /// See [`ClockFit::two_rhythms`]. Interval `i` (from the back) ends at burst start `i`
    /// (from the back).
    fn two_rhythms(&self, p: u64) -> bool {
        let (mut acked, mut free) = (Vec::new(), Vec::new());
        for (iv, &a) in self.intervals.iter().rev().zip(self.acked.iter().rev()) {
            let Some(k) = multiple_of(*iv, p) else { continue };
            let dev = *iv as i64 - (k * p) as i64;
            if a {
                acked.push(dev);
            } else {
                free.push(dev);
            }
        }
        if acked.len() < 2 || free.len() < 2 {
            return false;
        }
        let mean = |v: &[i64]| v.iter().sum::<i64>() as f64 / v.len() as f64;
        let split = (mean(&acked) - mean(&free)).abs();
        split > (0.02 * p as f64).max(300_000.0)
    }

    /// The period the history's intervals keep, when at least FIT_SHARE of them are whole
    /// multiples of it and at least half are one period.
    fn period(&self) -> Option<u64> {
        if self.intervals.len() < MIN_INTERVALS {
            return None;
        }
        let mut v: Vec<u64> = self.intervals.iter().copied().collect();
        v.sort_unstable();
        // The median, refined to the mean of the intervals within a quarter of it: jitter
        // spreads single intervals evenly around the period, and the median of an even split
        // would land on one side.
        let m = v[v.len() / 2];
        let near: Vec<u64> = v.iter().copied().filter(|&i| i.abs_diff(m) <= m / 4).collect();
        let p = near.iter().sum::<u64>() / near.len().max(1) as u64;
        if p < 2 * BURST_GAP.0 {
            return None;
        }
        let fits = v.iter().filter(|&&i| multiple_of(i, p).is_some()).count();
        let ones = v.iter().filter(|&&i| multiple_of(i, p) == Some(1)).count();
        (fits as f64 >= FIT_SHARE * v.len() as f64 && ones as f64 >= ONE_PERIOD_SHARE * v.len() as f64).then_some(p)
    }

    /// A data segment (new data, not a resend) left at `t`; `last_ack`, the peer's latest packet
    /// before it; `peer_data`, the peer's latest data segment before it; `full`, the segment is
    /// full-sized; `release_window`, how soon after an ACK a release leaves.
    /// Returns the clock as judged before this burst start (None inside a burst, or while no
    /// clock is established).
    pub(crate) fn on_send(
        &mut self,
        t: Instant,
        last_ack: Option<Instant>,
        peer_data: Option<Instant>,
        full: bool,
        release_window: Duration,
    ) -> Option<ClockFit> {
        let prev_seg = self.last_seg.replace(t);
        if prev_seg.is_some_and(|p| t.since(p) < BURST_GAP) {
            if let Some(f) = self.full.back_mut() {
                *f |= full;
            }
            return None;
        }
        let acked = last_ack.is_some_and(|a| a <= t && t.since(a) <= release_window);
        let answer = match (peer_data, prev_seg) {
            (Some(pd), Some(prev)) if pd > prev && pd <= t => Some(t.since(pd).0),
            _ => None,
        };
        let fit = match (self.last_burst, self.period()) {
            (Some(b), Some(p)) => {
                let interval = t.since(b).0;
                let k = multiple_of(interval, p);
                let whole = (interval / p).clamp(1, MAX_MULTIPLE);
                let in_phase = self.intervals.iter().filter(|&&i| multiple_of(i, p).is_some()).count() as u32;
                let mut ans: Vec<u64> = self.answers.iter().flatten().copied().collect();
                let mut ivs: Vec<u64> = self.intervals.iter().copied().collect();
                let answers_steady = ans.len() >= MIN_INTERVALS && spread(&mut ans) <= spread(&mut ivs) + 300_000;
                let mut res: Vec<u64> =
                    self.intervals.iter().filter_map(|&i| multiple_of(i, p).map(|k| i.abs_diff(k * p))).collect();
                res.sort_unstable();
                let residual = res.get(res.len() / 2).map_or(1.0, |&r| r as f64 / p as f64);
                Some(ClockFit {
                    period: Duration(p),
                    residual,
                    two_rhythms: self.two_rhythms(p),
                    in_phase,
                    sends: self.acked.len() as u32,
                    acked: self.acked.iter().filter(|&&a| a).count() as u32,
                    intervals: self.intervals.len() as u32,
                    answers: ans.len() as u32,
                    answers_steady,
                    full_bursts: self.full.iter().filter(|&&f| f).count() as u32,
                    on_clock: k.is_some(),
                    tick: Instant(b.0 + whole * p).min(t),
                })
            }
            _ => None,
        };
        if let Some(b) = self.last_burst {
            if self.intervals.len() == HISTORY {
                self.intervals.pop_front();
            }
            self.intervals.push_back(t.since(b).0);
        }
        self.last_burst = Some(t);
        if self.acked.len() == HISTORY {
            self.acked.pop_front();
            self.answers.pop_front();
            self.full.pop_front();
        }
        self.acked.push_back(acked);
        self.answers.push_back(answer);
        self.full.push_back(full);
        fit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds sends at `times` (ms) with ACKs at `acks` (ms); returns the fit at each send.
    fn run(times: &[f64], acks: &[f64]) -> Vec<Option<ClockFit>> {
        let mut c = AppClock::default();
        times
            .iter()
            .map(|&t| {
                let t = Instant((t * MS as f64) as u64);
                let last = acks.iter().map(|&a| Instant((a * MS as f64) as u64)).filter(|a| *a <= t).max();
                c.on_send(t, last, None, false, Duration::from_millis(3))
            })
            .collect()
    }

    /// A PMU's 20 ms clock (IEEE C37.118), ACKs landing at their own times (every 40 ms, a
    /// delayed-ACK timer's rhythm, ~1 ms before every other send): paced, every send on clock.
    #[test]
    fn a_periodic_sender_is_paced_whatever_the_acks() {
        let sends: Vec<f64> = (0..40).map(|i| i as f64 * 20.0 + 0.05 * (i % 3) as f64).collect();
        let acks: Vec<f64> = (0..20).map(|i| i as f64 * 40.0 + 39.0).collect();
        let fits = run(&sends, &acks);
        let last = fits.last().unwrap().unwrap();
        assert!(last.paced() && last.on_clock, "{last:?}");
        assert_eq!(last.period.0 / MS, 20);
    }

    /// Sends that each leave right after an ACK (Nagle or the congestion window released them,
    /// clocked by a 40 ms delayed ACK) keep a period too, but not their own: not paced.
    #[test]
    fn an_ack_clocked_sender_is_not_paced() {
        let sends: Vec<f64> = (0..30).map(|i| i as f64 * 41.0 + 0.5).collect();
        let acks: Vec<f64> = (0..30).map(|i| i as f64 * 41.0).collect();
        let last = run(&sends, &acks).last().unwrap().unwrap();
        assert!(!last.paced(), "{last:?}");
    }

    /// Skipped ticks (2 and 3 periods) keep the clock; a pause of 10 periods is off it; jitter
    /// of 5% stays on it.
    #[test]
    fn skipped_ticks_and_jitter_keep_the_clock_a_long_pause_does_not() {
        let mut sends: Vec<f64> = (0..12).map(|i| i as f64 * 100.0 + if i % 2 == 0 { 4.0 } else { -4.0 }).collect();
        sends.push(1300.0); // two periods after 1100
        sends.push(1600.0); // three
        let fits = run(&sends, &[]);
        assert!(fits[12].unwrap().on_clock && fits[13].unwrap().on_clock, "{fits:?}");
        let mut c = AppClock::default();
        let mut last = None;
        for i in 0..10u64 {
            last = c.on_send(Instant(i * 100 * MS), None, None, false, Duration::from_millis(3));
        }
        assert!(last.unwrap().on_clock);
        let off = c.on_send(Instant(2_000 * MS), None, None, false, Duration::from_millis(3)).unwrap();
        assert!(!off.on_clock, "{off:?}");
    }

    /// Bursts (three segments per tick) are read from their starts; irregular sends have no clock.
    #[test]
    fn bursts_count_once_and_irregular_sends_have_no_clock() {
        let mut sends = Vec::new();
        for i in 0..10 {
            let t = i as f64 * 200.0;
            sends.extend([t, t + 0.01, t + 0.02]);
        }
        let fits = run(&sends, &[]);
        let last_start = fits[27].unwrap();
        assert!(last_start.on_clock && last_start.period.0 / MS == 200);
        assert!(fits[28].is_none(), "inside a burst");
        let irregular = [0.0, 13.0, 50.0, 61.0, 140.0, 170.0, 260.0, 271.0, 400.0, 433.0, 500.0];
        assert!(run(&irregular, &[]).iter().all(Option::is_none));
    }

    /// The tick a late frame was due at: the previous burst start plus whole periods.
    #[test]
    fn the_tick_before_a_late_send() {
        let mut c = AppClock::default();
        for i in 0..10u64 {
            c.on_send(Instant(i * 20 * MS), None, None, false, Duration::from_millis(3));
        }
        // The next frame was due at 200 ms and left at 213 ms.
        let f = c.on_send(Instant(213 * MS), None, None, false, Duration::from_millis(3)).unwrap();
        assert!(!f.on_clock);
        assert_eq!(f.tick, Instant(200 * MS));
    }
}
