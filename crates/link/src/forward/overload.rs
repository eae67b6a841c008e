//! The forwarder threads' scheduling: their configured priority, and the overload policy that
//! gives the CPU back to the workload when a sender outruns the forwarder.

use sys::clock::mono_ns;

/// Full batches in a row after which a forwarder thread with a raised priority drops to the
/// workload's (nice 0) until its input runs dry: see `run_direction`.
pub const OVERLOAD_BATCHES: u32 = 8;
/// Default scheduling of the forwarder threads.
pub const DEFAULT_PRIORITY: Priority = Priority::Nice(-10);

/// Scheduling of the forwarder threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Leave the thread as it is.
    Normal,
    /// A nice value (negative needs root).
    Nice(i32),
    /// SCHED_FIFO at this priority (needs root); falls back to `Nice(-10)`, then `Normal`.
    Fifo(i32),
}

pub(super) fn apply_priority(p: Priority) {
    // Best effort: without privilege the forwarder still works, only with later wake-ups.
    match p {
        Priority::Normal => {}
        Priority::Nice(n) => {
            let _ = sys::sched::set_thread_nice(n);
        }
        Priority::Fifo(prio) => {
            if sys::sched::set_thread_fifo(prio).is_err() {
                let _ = sys::sched::set_thread_nice(-10);
            }
        }
    }
}

/// Under sustained overload (full batches in a row: a sender outrunning the forwarder) a
/// forwarder at nice -10 would take the CPU from the receiving application on a machine with
/// few CPUs, and the packets it writes would be dropped at the receiver's socket (measured
/// with 64-byte UDP on 2 CPUs: 450k of 680k packets lost there, 90k at the TUN queue). So it
/// runs at the workload's priority until its input runs dry, then at its own again (a nice
/// change only, never while latency matters: an idle link never fills a batch).
///
/// A SCHED_FIFO forwarder is real-time only from a wake-up until it has been awake
/// `FIFO_AWAKE_NS`: enough to read, hold and deliver what woke it, and to spin to a deadline.
/// A thread that stays awake longer (a busy link: deadlines closer together than the spin, or
/// full batches) would otherwise never leave its CPU to the workload (real-time tasks preempt
/// every SCHED_OTHER task; only RT throttling, 5%, is left): it goes on at nice -10 and, under
/// overload, at nice 0, and is made real-time again before its next sleep.
pub(super) struct Overload {
    full_batches: u32,
    prio: Priority,
    level: Level,
    /// When the thread last woke from a sleep (CLOCK_MONOTONIC ns).
    awake_since: u64,
}

/// The priority a forwarder thread runs at now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The configured one.
    Own,
    /// A SCHED_FIFO thread awake too long: SCHED_OTHER at nice -10.
    Awake,
    /// Overloaded: SCHED_OTHER at nice 0, the workload's.
    Workload,
}

/// How long a SCHED_FIFO forwarder stays real-time after a wake-up.
pub const FIFO_AWAKE_NS: u64 = 500_000;

impl Overload {
    pub(super) fn new(prio: Priority) -> Overload {
        Overload { full_batches: 0, prio, level: Level::Own, awake_since: mono_ns() }
    }
    fn fifo(&self) -> bool {
        matches!(self.prio, Priority::Fifo(_))
    }
    fn demotable(&self) -> bool {
        matches!(self.prio, Priority::Nice(n) if n < 0) || self.fifo()
    }
    pub(super) fn full_batch(&mut self) {
        self.full_batches += 1;
        if self.demotable() && self.level != Level::Workload && self.full_batches >= OVERLOAD_BATCHES {
            // SCHED_OTHER at nice 0 (a SCHED_FIFO thread would otherwise keep preempting the
            // receiver on its CPU: 4x fewer packets/s, docs/link.md).
            if sys::sched::set_thread_other().is_ok() {
                self.level = Level::Workload;
            }
        }
    }
    pub(super) fn ran_dry(&mut self) {
        self.full_batches = 0;
        match self.level {
            // A real-time thread stays at nice -10 until its next sleep (`before_sleep`).
            Level::Own | Level::Awake => {}
            Level::Workload if self.fifo() => {
                let _ = sys::sched::set_thread_nice(-10);
                self.level = Level::Awake;
            }
            Level::Workload => {
                apply_priority(self.prio);
                self.level = Level::Own;
            }
        }
    }
    /// A turn of the loop that did not sleep.
    pub(super) fn awake(&mut self, now: u64) {
        if self.fifo() && self.level == Level::Own && now.saturating_sub(self.awake_since) > FIFO_AWAKE_NS {
            let _ = sys::sched::set_thread_other();
            let _ = sys::sched::set_thread_nice(-10);
            self.level = Level::Awake;
        }
    }
    pub(super) fn before_sleep(&mut self) {
        if self.fifo() && self.level != Level::Own {
            apply_priority(self.prio);
            self.level = Level::Own;
        }
    }
    pub(super) fn after_sleep(&mut self, now: u64) {
        self.awake_since = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCHED_FIFO forwarder is real-time from a wake-up until it has been awake
    /// `FIFO_AWAKE_NS` or overloaded, and real-time again before its next sleep.
    #[test]
    fn a_fifo_forwarder_is_real_time_only_until_awake_too_long_or_overloaded() {
        std::thread::spawn(|| {
            apply_priority(Priority::Fifo(1));
            if !sys::sched::thread_is_fifo().expect("sched_getscheduler") {
                assert!(!nix::unistd::geteuid().is_root(), "root could not set SCHED_FIFO");
                return; // without privilege there is no real-time to leave
            }
            let fifo = || sys::sched::thread_is_fifo().expect("sched_getscheduler");
            let mut o = Overload::new(Priority::Fifo(1));
            let t0 = mono_ns();
            o.after_sleep(t0);
            o.awake(t0 + FIFO_AWAKE_NS / 2);
            assert!(fifo(), "demoted before FIFO_AWAKE_NS");
            o.awake(t0 + FIFO_AWAKE_NS + 1);
            assert!(!fifo(), "still real-time after FIFO_AWAKE_NS awake");
            o.before_sleep();
            assert!(fifo(), "not real-time again before sleeping");
            for _ in 0..OVERLOAD_BATCHES {
                o.full_batch();
            }
            assert!(!fifo() && o.level == Level::Workload, "still real-time under overload");
            o.ran_dry();
            assert!(!fifo() && o.level == Level::Awake, "real-time again before sleeping");
            o.before_sleep();
            assert!(fifo());
        })
        .join()
        .expect("test thread");
    }
}
