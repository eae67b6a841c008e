//! Rule families 4 and 6: the writer's own clock, and a sender nothing released.
//!
//! **Own clock** (pacing.rs): a sender whose sends keep a period whatever the ACKs do wrote on
//! its clock: a send on the clock is the application's (an ACK landing just before it released
//! nothing); a send that left late, right after an ACK, with one small segment outstanding,
//! was held by Nagle from the tick at which the writer wrote it, not from the previous send.
//!
//! **Quiet sender**: no resend, no window, no ACK release.
//! - A sub-MSS segment left with nothing in flight at the probe timer's interval
//!   (max(RTO, TCP_RTO_MIN), Linux `tcp_probe0_base`): corked or MSG_MORE data released by the
//!   probe timer, an application that paused that long, and a segment lost before the capture
//!   point and resent by the RTO look the same on the wire: **ambiguous**, below 0.5, with the
//!   command that settles it. On a long path the timer's band is too wide to name even that;
//!   a sender whose packets start at TTL 128 (Windows) has no such timer.
//! - Nothing in flight, or everything acknowledged during the gap: the writer had not written:
//!   **application**, a gap.
//! - Data in flight and no ACK: the new bytes were not shown waiting (a sender may write while
//!   data is in flight; a sub-MSS segment sent so shows Nagle off): **application**, unless the
//!   data in flight stayed unacknowledged past any delayed-ACK timer (RFC 1122 4.2.3.2's
//!   500 ms): a **wait** with no signature (the capture missed the ACKs, or the peer stalled).
//! - A capture of one direction shows no ACK at all: **ambiguous**, said once per flow.

use super::confidence::{AMBIGUOUS, GAP_INFERRED, GAP_SHOWN, NO_SIGNATURE, SIGNATURE_PARTIAL};
use super::{initial_ttl, AckInfo, Derived, Ev, GapContext, Verdict};
use crate::dir::Resend;
use trace::{Cause, Duration};

/// The capture skipped the sender's data during the gap (the peer acknowledged bytes never
/// captured): the connection was busy while the capture saw nothing. Not a wait.
pub(super) fn capture_skipped(c: &GapContext, d: &Derived) -> Option<Verdict> {
    if !c.capture_skipped || c.written.is_some() {
        return None;
    }
    Some(Verdict::ambiguous(
        Cause::Unknown,
        &[],
        NO_SIGNATURE - 0.15,
        format!(
            "the capture skipped {}'s data during this {} gap ({} acknowledged bytes the capture never saw, or the next \
             segment starts beyond them): the connection was sending while the capture recorded nothing (a filtered \
             or overrun capture), so the gap is the capture's, not a wait",
            d.h,
            d.length,
            d.p
        ),
    ))
}

/// Rule family 4: the writer's own clock.
pub(super) fn own_clock(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Option<Verdict> {
    // Without the peer's packets, whether the sends follow its ACKs cannot be seen.
    if c.one_direction {
        return None;
    }
    let f = c.clock.filter(|f| f.paced())?;
    // A rhythm of a few timestamp ticks is the file's rounding, not the writer's clock.
    if c.ts_tick.is_some_and(|tick| f.period.0 < 5 * tick.0) {
        return None;
    }
    if c.written.is_some() || c.resend != Resend::No {
        return None;
    }
    let h = d.h;
    let rhythm = format!(
        "{h} sends on its own clock every {} ({} of its last {} intervals kept it, {} of {} sends right after an ACK)",
        f.period, f.in_phase, f.intervals, f.acked, f.sends
    );
    if f.on_clock {
        let released_nothing = match ack {
            Some(a) if a.released || a.too_soon => {
                ev.add(a.ack.t, a.ack.frame, format!("{} ACK, {} before the send", d.p, c.end.since(a.ack.t)));
                format!("; {}'s ACK {} before it released nothing", d.p, c.end.since(a.ack.t))
            }
            _ => String::new(),
        };
        return Some(Verdict::gap(
            GAP_SHOWN,
            format!("{rhythm}; this send kept it: {h}'s application wrote then, not a TCP stall{released_nothing}"),
        ));
    }
    // Off the clock, right after an ACK, one small segment outstanding: Nagle held a frame the
    // writer wrote at its tick (RFC 9293 3.7.4; tcp_nagle_check): the wait counts from the tick.
    // A send before the next tick says nothing of the clock: the other rules judge it.
    let a = ack.filter(|a| a.released)?;
    if c.snap.out_small != 1 || !d.released_small || c.nagle_off.is_some() || f.tick <= c.start || f.tick >= c.end {
        return None;
    }
    let waited = c.end.since(f.tick);
    if waited < c.min_gap {
        return Some(Verdict::gap(
            GAP_INFERRED,
            format!("{rhythm}; this send left {waited} after its tick, right after {}'s ACK: too short a hold to be a stall", d.p),
        ));
    }
    ev.add(a.ack.t, a.ack.frame, format!("{} ACK", d.p));
    let mut v = Verdict::stall(
        Cause::NagleDelayedAck,
        SIGNATURE_PARTIAL + 0.05,
        format!(
            "{rhythm}; its frame due at the tick {} left {waited} late, right after {}'s ACK, with a {}-byte segment \
             unacknowledged: Nagle held it from the tick until the ACK",
            Duration(f.tick.0.saturating_sub(c.start.0)),
            d.p,
            c.snap.last_small_len
        ),
    );
    v.ack_delay = a.delay;
    v.from = Some(f.tick);
    Some(v)
}

/// Rule family 6: a sender nothing released.
pub(super) fn rule(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Verdict {
    if let Some(a) = ack.filter(|a| a.too_soon) {
        ev.add(a.ack.t, a.ack.frame, format!("{} ACK, {} before the data", d.p, c.end.since(a.ack.t)));
    }
    one_direction(c, d)
        .or_else(|| probe_pause(c, d))
        .or_else(|| corked_after_a_pause(c, d))
        .or_else(|| nothing_held(c, d, ack, ev))
        .unwrap_or_else(|| in_flight(c, d, ack))
}

/// A capture of one direction: no ACK of the held side's data can be seen.
fn one_direction(c: &GapContext, d: &Derived) -> Option<Verdict> {
    let (h, p, len) = (d.h, d.p, c.seg.len);
    c.one_direction.then(|| {
        Verdict::ambiguous(
            Cause::Unknown,
            &[Cause::Application],
            NO_SIGNATURE - 0.05,
            format!(
                "the capture holds {h}'s packets only ({p}'s ACK numbers advance in {h}'s packets, yet none of {p}'s \
                 packets are in it): without {p}'s ACKs nothing shows whether these {len} bytes waited"
            ),
        )
    })
}

/// Nothing in flight, a sub-MSS segment at the probe timer's interval (`tcp_probe0_base`).
fn probe_pause(c: &GapContext, d: &Derived) -> Option<Verdict> {
    let (h, t, len) = (d.h, &c.timers, c.seg.len);
    // The held side's own wait: from the write when known, else its part of the gap.
    let wait = match d.held_from {
        Some(from) if from > c.start => d.length,
        _ => c.turnaround,
    };
    if c.snap.out_count > 0 || !d.released_small || !t.is_probe_interval(wait, d.path_rtt, c.rtt_from_handshake) {
        return None;
    }
    {
        let (lo, hi) = t.probe_band(d.path_rtt, c.rtt_from_handshake);
        if hi.0 - lo.0 > t.rto_min.0 / 2 {
            // On a long path the band where the timer can fire is wider than half the timer
            // itself: a pause anywhere in it looks the same. Not named.
            return Some(Verdict::ambiguous(
                Cause::Unknown,
                &[Cause::ProbeTimer, Cause::Application],
                NO_SIGNATURE,
                format!(
                    "{len} bytes left {wait} after the last data with nothing in flight, inside the probe timer's band \
                     ({lo}-{hi}, tcp_probe0_base on a {} path{}), which is too wide here to tell the timer from an \
                     application pause; not named",
                    d.path_rtt,
                    if c.rtt_from_handshake { "" } else { " estimated without the handshake" }
                ),
            ));
        }
        if c.held_ttl.map(initial_ttl) == Some(128) && c.written.is_none() {
            // Linux's probe timer releases corked or MSG_MORE data; a sender whose packets start
            // at TTL 128 is a Windows stack (DefaultTTL), which has neither: the writer paused.
            return Some(Verdict::gap(
                GAP_INFERRED,
                format!(
                    "{len} bytes left {wait} after the last data with nothing in flight, at the interval of Linux's \
                     probe timer, but {h}'s packets carry TTL {} (initial 128: a Windows stack, which has no TCP_CORK, \
                     no MSG_MORE and no such timer): {h}'s application wrote them then",
                    c.held_ttl.unwrap_or(0)
                ),
            ));
        }
        Some(Verdict::ambiguous(
            Cause::ProbeTimer,
            &[Cause::Application, Cause::RetransmissionTimeout],
            AMBIGUOUS,
            format!(
                "{len} bytes left {wait} after the last data with nothing in flight and no ACK to release them: the \
                 probe timer's interval (max(RTO, 200 ms), tcp_probe0_base) that releases corked or MSG_MORE data, \
                 an application pause of that length, or a segment lost before the capture point and resent by the \
                 RTO: the capture cannot tell"
            ),
        ))
    }
}

/// Nothing in flight, a sub-MSS segment after a pause longer than the probe timer's band: a
/// write after part of the pause, corked or sent with MSG_MORE and released by the probe
/// timer 200 ms later (tcp(7) TCP_CORK; `tcp_check_probe_timer` arms it at the write,
/// `tcp_probe0_base`), looks the same as a longer pause, unless the sender has shown it does
/// not hold its small writes (a sub-MSS segment with nothing in flight sooner than the timer
/// after the connection's last packet: `Dir::shown_uncorked`). Without the write times, not
/// named: ambiguous, below 0.5.
fn corked_after_a_pause(c: &GapContext, d: &Derived) -> Option<Verdict> {
    let t = &c.timers;
    let (lo, hi) = t.probe_band(d.path_rtt, c.rtt_from_handshake);
    let pause = c.turnaround;
    if c.written.is_some()
        || c.shown_uncorked
        || c.snap.out_count > 0
        || !d.released_small
        || pause <= hi
        || pause > t.rto_max
        || c.held_ttl.map(initial_ttl) == Some(128)
    {
        return None;
    }
    Some(Verdict::ambiguous(
        Cause::Application,
        &[Cause::ProbeTimer],
        AMBIGUOUS + 0.1,
        format!(
            "{} bytes left {pause} after the last data with nothing in flight: {}'s application paused, or wrote \
             them during the pause with TCP_CORK or MSG_MORE and the probe timer released them {lo}-{hi} later \
             (tcp_probe0_base); {} never showed it sends small writes at once, so the capture cannot tell",
            c.seg.len, d.h, d.h
        ),
    ))
}

/// Everything acknowledged during the gap, or nothing in flight: nothing held the data.
fn nothing_held(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Option<Verdict> {
    let (h, p) = (d.h, d.p);
    if let Some(a) = ack.filter(|a| c.snap.snd_nxt <= a.ack.ack && c.snap.out_count > 0) {
        // Everything in flight was acknowledged during the gap and the data left later than an
        // ACK-released send would (or sooner than the ACK could reach the sender).
        ev.add(a.ack.t, a.ack.frame, format!("{p} ACK of everything {h} had sent"));
        return Some(Verdict::gap(
            if a.too_soon { GAP_INFERRED } else { GAP_SHOWN - 0.1 },
            format!(
                "{p} acknowledged everything {h} had sent {} before the new data left{}, so nothing held it: {h}'s \
                 application wrote it then, not a TCP stall",
                c.end.since(a.ack.t),
                if a.too_soon {
                    format!(
                        " (sooner than the {} round trip between the capture point and {h}: the ACK could not have \
                         released it)",
                        d.back
                    )
                } else {
                    String::new()
                }
            ),
        ));
    }
    (c.snap.out_count == 0).then(|| {
        Verdict::gap(
            GAP_SHOWN,
            format!(
                "everything {h} had sent was acknowledged and nothing held: {h}'s application wrote nothing for {} \
                 (think time or idle), not a TCP stall",
                d.length
            ),
        )
    })
}

/// Data in flight, no ACK released the new bytes, nothing resent.
fn in_flight(c: &GapContext, d: &Derived, ack: Option<AckInfo>) -> Verdict {
    let (h, p, t, len) = (d.h, d.p, &c.timers, c.seg.len);
    // Data in flight, no ACK released anything, nothing resent: the new bytes left without a
    // release. A sub-MSS segment sent with a sub-MSS one unacknowledged (or by a sender that
    // showed Nagle off) was held by nothing: the writer wrote then. Otherwise the capture may
    // have missed the ACK that released it: ambiguous. Bytes unacknowledged past any delayed-ACK
    // timer (500 ms, RFC 1122 4.2.3.2) are said; they delayed nothing the packets show.
    let unacked_for = c.snap.first_sent.map_or(Duration::ZERO, |s| c.end.since(s.t));
    let past_timers = unacked_for > t.delack_max + d.path_rtt + c.min_gap;
    let missing = if past_timers {
        format!(
            "; {p}'s ACK of {} bytes was missing for {unacked_for}, past any delayed-ACK timer (the capture may have \
             missed it, or {p} stalled)",
            c.snap.out_bytes
        )
    } else {
        String::new()
    };
    let not_held = c.nagle_off.is_some() || (d.released_small && c.snap.out_small > 0);
    let no_ack = match ack {
        Some(a) => format!("{p}'s ACK {} before them could not have released them", c.end.since(a.ack.t)),
        None => format!("no ACK from {p} during the gap"),
    };
    if not_held {
        Verdict::gap(
            GAP_INFERRED - 0.1,
            format!(
                "{h} sent {len} new bytes with {} bytes still unacknowledged and {no_ack}: a sub-MSS segment sent with \
                 another unacknowledged, so Nagle did not hold it (off) and nothing released it: {h}'s application \
                 wrote it then{missing}",
                c.snap.out_bytes
            ),
        )
    } else {
        Verdict::ambiguous(
            Cause::Unknown,
            &[Cause::Application],
            NO_SIGNATURE + 0.05,
            format!(
                "{h} sent {len} new bytes with {} bytes still unacknowledged and {no_ack}: the writer wrote them then, \
                 or the capture missed the ACK that released them{missing}",
                c.snap.out_bytes
            ),
        )
    }
}
