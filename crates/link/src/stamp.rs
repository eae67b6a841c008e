//! When a packet entered the link: the forwarder's stamp, and the rule that keeps the link
//! from ever delivering early (docs/link.md, "Never early").
//!
//! The invariant:
//! 1. a packet read after a sleep cannot have arrived before the sleep began: no stamp is
//!    earlier than the start of the sleep before the packet's read;
//! 2. no packet leaves before its arrival plus its delay: a stamp is never earlier than the
//!    packet's arrival, the model's deadline is the stamp plus the packet's delay, and the
//!    forwarder writes nothing before its deadline (`forward::Forwarder::deliver_due` checks
//!    it again before each write, counts a packet that would leave early and holds it).
//!
//! What the forwarder knows of a packet's arrival: read(2) returned it at `read_at`, so it
//! arrived before that. A stamp earlier than the read is sound only for a moment when the
//! packet was already queued: the wake-up of a sleep that the input ended (tun_net_xmit queues
//! the packet, then wakes the reader: drivers/net/tun.c), which the scheduler ran
//! `run_delay` later (the time the thread waited runnable for a CPU,
//! `/proc/thread-self/schedstat`, Documentation/scheduler/sched-stats.rst). Earlier versions stamped every packet
//! of the first batch after any sleep `read_at - run_delay`, with run_delay taken across the
//! whole sleep: a packet that arrived while the thread waited for a CPU after a timer's
//! wake-up, or after a preemption just before the sleep was counted as part of the wait, was
//! stamped up to that wait before it arrived (on 2 CPUs under 6 busy loops, 85 of 500 round
//! trips through rtt=20ms came back in 10.2-20 ms: tests/never_early.rs). Now only the first
//! packet read after a sleep is stamped earlier than its read, and only when:
//! - ppoll returned with the input readable before its timeout (the timer did not end the
//!   sleep), with every signal blocked during the wait (no signal ended it);
//! - the thread switched out exactly once, voluntarily, and was not preempted
//!   (getrusage(RUSAGE_THREAD): ru_nvcsw + 1, ru_nivcsw + 0, between readings taken around
//!   the run_delay readings), so the wait counted is this wake-up's alone;
//!
//! and never to before the sleep began. The first packet read is the oldest queued (a TUN
//! device's queue is FIFO, and it was empty when the forwarder last read it before sleeping),
//! so it was there at the wake-up. Every other packet is stamped when read: late by the time it
//! waited unread, never early.

/// The calling thread's `run_delay` (ns): time spent runnable but waiting for a CPU, from
/// /proc/thread-self/schedstat (Documentation/scheduler/sched-stats.rst: "time spent waiting
/// on a runqueue"). Read before and after a sleep it gives how late the thread ran after the
/// kernel woke it: the part of a packet's wait the forwarder cannot see by its own clock.
pub(crate) struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    pub(crate) fn open() -> RunDelay {
        RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }
    pub(crate) fn now(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let f = self.0.as_ref()?;
        let mut b = [0u8; 96];
        let n = f.read_at(&mut b, 0).ok()?;
        std::str::from_utf8(&b[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()
    }
}

/// The calling thread's context switches so far: (voluntary, involuntary), from
/// getrusage(RUSAGE_THREAD) (ru_nvcsw: the thread blocked; ru_nivcsw: it was preempted).
fn switches() -> Option<Switches> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).ok()?;
    Some((u.voluntary_context_switches(), u.involuntary_context_switches()))
}

/// (voluntary, involuntary) context switches of a thread.
type Switches = (libc::c_long, libc::c_long);

/// What was read just before a sleep.
pub(crate) struct Before {
    /// CLOCK_MONOTONIC when the sleep began (after the read that found the input empty).
    pub(crate) from: u64,
    switches: Option<Switches>,
    run_delay: Option<u64>,
}

/// A sleep's end as the stamp needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakeUp {
    /// How long the thread waited for a CPU after the input woke it (ns).
    pub(crate) run_delay: u64,
    /// When the sleep began: no packet read after it arrived before.
    pub(crate) slept_from: u64,
}

/// What the readings around one sleep say.
pub(crate) struct Slept {
    /// run_delay across the sleep (ns), if it could be read: how late the thread ran.
    pub(crate) run_delay: Option<u64>,
    /// Set when the first packet read may be stamped earlier than its read (see the module).
    pub(crate) wake: Option<WakeUp>,
    /// What the next sleep may start from without reading schedstat.
    pub(crate) settled: Option<Settled>,
}

/// The readings after a sleep that no preemption followed: run_delay as it was when the
/// switches were read. While the thread has not switched out since (the same switches), its
/// run_delay cannot have grown (a thread waits on a runqueue only after a switch out: a sleep
/// or a preemption), so the next sleep starts from these without reading schedstat again: one
/// read of /proc less per sleep (2.8 us here under load, against 1 us for getrusage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    switches: Switches,
    run_delay: u64,
}

/// Read just before sleeping, as late as possible: the time, then the context switches, then
/// the run delay (so a preemption after the time is read shows in the switches). The run delay
/// is `settled`'s if the switches have not moved since it was read.
pub(crate) fn before_sleep(rd: &RunDelay, now: u64, settled: Option<Settled>) -> Before {
    let switches = switches();
    let run_delay = match (settled, switches) {
        (Some(st), Some(sw)) if st.switches == sw => Some(st.run_delay),
        _ => rd.now(),
    };
    Before { from: now, switches, run_delay }
}

/// Read just after a sleep (ppoll returned at `woke`, the input `readable`, after asking for
/// at most `timeout` ns): the run delay, then the context switches.
pub(crate) fn after_sleep(rd: &RunDelay, b: &Before, woke: u64, readable: bool, timeout: Option<u64>) -> Slept {
    let now = rd.now();
    let run_delay = now.zip(b.run_delay).map(|(a, z)| a.saturating_sub(z));
    let after = switches();
    let sw = b.switches.zip(after);
    let wake = judge_wake(b.from, woke, readable, timeout, sw, run_delay);
    Slept { run_delay, wake, settled: settle(sw, now) }
}

/// The readings after a sleep as the next sleep may start from them: only if the thread slept
/// once and was not preempted, so that no wait fell between the run delay's reading and the
/// switches' (the run delay is read first: a preemption between the two shows in the switches).
fn settle(switches: Option<(Switches, Switches)>, run_delay: Option<u64>) -> Option<Settled> {
    let ((v0, i0), (v1, i1)) = switches?;
    (v1 == v0 + 1 && i1 == i0).then_some(Settled { switches: (v1, i1), run_delay: run_delay? })
}

/// The rule (pure): whether the first packet read after this sleep may be stamped earlier
/// than its read, and by how much at most.
fn judge_wake(
    from: u64,
    woke: u64,
    readable: bool,
    timeout: Option<u64>,
    switches: Option<(Switches, Switches)>,
    run_delay: Option<u64>,
) -> Option<WakeUp> {
    // The thread ran again at `woke` at the latest; the timer would have fired at `from +
    // timeout` at the earliest (ppoll started after `from`): returning before that, the timer
    // did not end the sleep.
    let before_timer = timeout.is_none_or(|t| woke < from.saturating_add(t));
    let ((v0, i0), (v1, i1)) = switches?;
    let one_sleep_no_preemption = v1 == v0 + 1 && i1 == i0;
    (readable && before_timer && one_sleep_no_preemption).then_some(WakeUp { run_delay: run_delay?, slept_from: from })
}

/// The stamp of a packet read at `read_at` (the model's clock for it): `read_at`, or for the
/// first packet after a sleep the input ended, `read_at` less that wake-up's run delay but
/// never before the sleep began; never before `last`, the previous packet's stamp (the model's
/// clock does not go back; a later stamp is only later than the arrival).
pub(crate) fn stamp(read_at: u64, wake: Option<WakeUp>, last: u64) -> u64 {
    let at = match wake {
        Some(w) => read_at.saturating_sub(w.run_delay).max(w.slept_from),
        None => read_at,
    };
    at.max(last).min(read_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SW: Option<(Switches, Switches)> = Some(((10, 3), (11, 3)));

    /// docs/link.md "Never early": only a sleep the input ended, with one voluntary switch and
    /// no preemption, lets the first packet be stamped before its read.
    #[test]
    fn only_a_wake_up_by_the_input_alone_backdates() {
        let w = |readable, woke, timeout, sw, rd| judge_wake(1_000, woke, readable, timeout, sw, rd);
        assert_eq!(w(true, 5_000, None, SW, Some(300)), Some(WakeUp { run_delay: 300, slept_from: 1_000 }));
        assert_eq!(w(true, 5_000, Some(10_000), SW, Some(300)).map(|x| x.run_delay), Some(300));
        // The timer ended it (or may have): a packet may have come while the thread waited.
        assert_eq!(w(true, 11_000, Some(10_000), SW, Some(300)), None);
        // Not readable: nothing to stamp.
        assert_eq!(w(false, 5_000, None, SW, Some(300)), None);
        // Preempted around the sleep: the run delay may be a wait from before the sleep.
        assert_eq!(w(true, 5_000, None, Some(((10, 3), (11, 4))), Some(300)), None);
        // Did not sleep (the input was readable at once), or slept twice.
        assert_eq!(w(true, 5_000, None, Some(((10, 3), (10, 3))), Some(300)), None);
        assert_eq!(w(true, 5_000, None, Some(((10, 3), (12, 3))), Some(300)), None);
        // Nothing known.
        assert_eq!(w(true, 5_000, None, None, Some(300)), None);
        assert_eq!(w(true, 5_000, None, SW, None), None);
    }

    #[test]
    fn a_stamp_is_never_before_the_sleep_nor_the_previous_stamp_nor_after_the_read() {
        let wake = Some(WakeUp { run_delay: 4_000, slept_from: 9_000 });
        assert_eq!(stamp(10_000, None, 0), 10_000);
        assert_eq!(stamp(20_000, wake, 0), 16_000);
        // Never before the sleep began, however long the wait.
        assert_eq!(stamp(10_000, wake, 0), 9_000);
        assert_eq!(stamp(20_000, wake, 18_000), 18_000);
        assert_eq!(stamp(20_000, None, 25_000), 20_000);
    }

    /// The next sleep starts from the readings after the last one only when the thread slept
    /// once without preemption and has not switched out since.
    #[test]
    fn a_settled_run_delay_is_reused_only_while_the_switches_stand_still() {
        assert_eq!(settle(SW, Some(500)), Some(Settled { switches: (11, 3), run_delay: 500 }));
        // Preempted, slept twice or nothing read: the next sleep reads schedstat.
        assert_eq!(settle(Some(((10, 3), (11, 4))), Some(500)), None);
        assert_eq!(settle(Some(((10, 3), (12, 3))), Some(500)), None);
        assert_eq!(settle(SW, None), None);
        assert_eq!(settle(None, Some(500)), None);
        std::thread::spawn(|| {
            let rd = RunDelay::open();
            let Some(now) = switches() else { return };
            // The switches stand still: the settled run delay is taken as it is.
            let same = Settled { switches: now, run_delay: 7 };
            assert_eq!(before_sleep(&rd, 0, Some(same)).run_delay, Some(7));
            // They moved (a sleep since): schedstat is read again.
            std::thread::sleep(std::time::Duration::from_millis(1));
            let read = before_sleep(&rd, 0, Some(same)).run_delay;
            assert!(read != Some(7) || rd.now().is_none(), "a stale run delay was reused");
        })
        .join()
        .unwrap();
    }

    /// The readings work on this kernel: a sleep of 1 ms shows one voluntary switch.
    #[test]
    fn the_readings_see_a_sleep() {
        std::thread::spawn(|| {
            let rd = RunDelay::open();
            let (v0, _) = switches().expect("getrusage(RUSAGE_THREAD)");
            std::thread::sleep(std::time::Duration::from_millis(1));
            let (v1, _) = switches().unwrap();
            assert!(v1 > v0, "no voluntary switch across a sleep");
            assert!(rd.now().is_some() || !std::path::Path::new("/proc/thread-self/schedstat").exists());
        })
        .join()
        .unwrap();
    }
}
