//! How long before a deadline a forwarder thread stops sleeping and spins (pure: the
//! oversleeps are arguments).
//!
//! A thread that sleeps until `spin` before its next deadline is on time only if its timer
//! wakes it less than `spin` late. How late a timer wakes a thread depends on the machine: on
//! this 2-vCPU VM under load (the CPUs never idle) ppoll's oversleep was 15-20 us at p50; on the
//! same VM quiet, a vCPU halted in idle (cpuidle-haltpoll with guest_halt_poll_ns=0 halts at
//! once) wakes through the host, and the forwarder was written out 85 us after its deadline
//! with a spin of 100 us (calibration's `late`, docs/link.md "Issue 36, rate and accuracy").
//! So the spin follows the timer: each sleep the timer ended reports its oversleep (woke minus
//! the timeout's end, taken before ppoll started: an overestimate, which only spins longer)
//! less the scheduler's run_delay across the sleep (the time the woken thread waited for a CPU
//! that other work held: under load that is most of the oversleep, 2-3 ms at p90 with 4 busy
//! loops, and a spin against it would only take the CPU from that work), and the spin is the
//! configured one or, if longer, a high quantile of the recent oversleeps plus a margin, at
//! most `max`.

/// Recent timer wake-ups remembered.
pub(super) const WINDOW: usize = 32;
/// The quantile of the recent oversleeps the spin covers: the timer's usual lateness, not its
/// rare stalls (a stall of milliseconds under load is a CPU taken by other work, which a longer
/// spin would only take from it again).
pub(super) const QUANTILE: f64 = 0.9;
/// Added to that quantile.
pub(super) const MARGIN_NS: u64 = 20_000;
/// The default ceiling of the spin.
pub const DEFAULT_MAX_SPIN_NS: u64 = 500_000;

/// The spin before a deadline, from the configured floor and the timer's recent oversleeps.
#[derive(Debug, Clone)]
pub(super) struct Spin {
    floor: u64,
    max: u64,
    recent: [u64; WINDOW],
    len: usize,
    next: usize,
    spin: u64,
}

impl Spin {
    /// A spin of at least `floor` ns and at most `max` ns (`max <= floor`: always `floor`).
    pub(super) fn new(floor: u64, max: u64) -> Spin {
        Spin { floor, max: max.max(floor), recent: [0; WINDOW], len: 0, next: 0, spin: floor }
    }

    /// The spin now (ns).
    pub(super) fn ns(&self) -> u64 {
        self.spin
    }

    /// A sleep the timer ended woke `oversleep` ns after the timeout's end.
    pub(super) fn timer_woke(&mut self, oversleep: u64) {
        self.recent[self.next] = oversleep;
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
        let mut v = self.recent[..self.len].to_vec();
        v.sort_unstable();
        let q = v[((self.len - 1) as f64 * QUANTILE).round() as usize];
        self.spin = (q + MARGIN_NS).clamp(self.floor, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/link.md "Issue 36": the spin covers the timer's usual oversleep (a halted vCPU's
    /// 185 us) but not its rare stalls, never below the configured spin nor above the ceiling.
    #[test]
    fn the_spin_follows_the_timers_usual_oversleep_within_its_bounds() {
        let mut s = Spin::new(100_000, 500_000);
        assert_eq!(s.ns(), 100_000);
        // A loaded machine: the timer 20 us late; the configured spin stays.
        for _ in 0..WINDOW {
            s.timer_woke(20_000);
        }
        assert_eq!(s.ns(), 100_000);
        // A quiet VM: halted vCPUs wake 185 us late.
        for _ in 0..WINDOW {
            s.timer_woke(185_000);
        }
        assert_eq!(s.ns(), 205_000);
        // One stall of 3 ms in 32 is not followed...
        s.timer_woke(3_000_000);
        assert_eq!(s.ns(), 205_000);
        // ...several are, up to the ceiling.
        for _ in 0..8 {
            s.timer_woke(3_000_000);
        }
        assert_eq!(s.ns(), 500_000);
        // The window forgets: back to the configured spin once the timer is on time.
        for _ in 0..WINDOW {
            s.timer_woke(1_000);
        }
        assert_eq!(s.ns(), 100_000);
        // A ceiling at or below the floor fixes the spin.
        let mut fixed = Spin::new(100_000, 0);
        fixed.timer_woke(400_000);
        assert_eq!(fixed.ns(), 100_000);
    }
}
