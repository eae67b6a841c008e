//! Rule family 5: an ACK of outstanding data released the next data. The ACK's lateness
//! beyond the path is the peer's ACK delay (RFC 9293 3.8.6.3, RFC 1122 4.2.3.2; Linux
//! `__tcp_ack_snd_check`, `tcp_delack_timer`). Then:
//!
//! - exactly one sub-MSS segment was unacknowledged and the released one is sub-MSS, and the
//!   sender never showed Nagle off: **nagle-delayed-ack** (RFC 9293 3.7.4; Linux
//!   `tcp_nagle_check` with `tcp_minshall_check`);
//! - only full-sized segments were unacknowledged, a sub-MSS segment was released by the ACK of
//!   everything sent: classic Nagle without Minshall's rule (RFC 896, RFC 1122 4.2.3.4; not
//!   Linux): **nagle-delayed-ack**;
//! - a flight as many segments as this sender ever had, at least an initial window's worth (10
//!   segments, RFC 6928; or 4380 bytes, RFC 3390's largest, in 4 or more segments) or any after
//!   a loss (RFC 5681 3.1 shrinks the window only on loss): **cwnd-limited** (Linux
//!   `tcp_cwnd_test`); a smaller flight is ambiguous (no window is that small before a loss,
//!   and a writer writing just then looks the same); kernel evidence (`tcp:tcp_probe`'s cwnd)
//!   decides;
//! - below the largest flight the window was not full: the writer wrote then: **application**;
//! - one full-sized segment out, the ACK at a delayed-ACK timer's interval: **delayed-ack**,
//!   the mechanism that waited for it not shown; off the timer's interval: ambiguous;
//! - an ACK measured sooner than any delayed-ACK timer but late beyond the path shows no
//!   mechanism: ambiguous (a slow or descheduled receiver).

use super::confidence::{AMBIGUOUS, CONSISTENT, GAP_INFERRED, SIGNATURE, SIGNATURE_PARTIAL, WRITES_AND_SIGNATURE};
use super::{AckInfo, Derived, Ev, GapContext, Verdict};
use crate::dir::AckSeen;
use crate::timers::{ACK_TRIP_TICK, RELEASE_SLACK};
use trace::{Cause, Duration};

/// A flight that can fill a congestion window before any loss: the initial window of 10
/// segments (RFC 6928, Linux TCP_INIT_CWND), or RFC 3390's largest initial window (4380 bytes)
/// in at least 4 segments.
fn window_sized(out_count: usize, out_bytes: u64) -> bool {
    out_count >= 10 || (out_count >= 4 && out_bytes >= 4380)
}

/// What every ACK-release rule reads: the context, the ACK and how late it was.
struct Release<'a> {
    c: &'a GapContext,
    d: &'a Derived,
    ack: AckSeen,
    /// "B's pure ACK came 40.1 ms after the data it acknowledges (a delayed-ACK timer's interval)".
    delay_txt: String,
    /// The ACK came at a delayed-ACK timer's own interval (40, 100, 200 ms).
    timer: bool,
    /// The confidence the ACK's timing gives a release rule.
    base: f64,
    /// Sooner than any delayed-ACK timer (TCP_DELACK_MIN less a jiffy) yet late beyond the path.
    untimed: bool,
    /// As many segments in flight as the sender ever had (or any after a loss).
    full_window: bool,
}

pub(super) fn rule(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Option<Verdict> {
    let AckInfo { ack: a, delay, released, .. } = ack?;
    if c.snap.out_count == 0 || !released || c.one_direction {
        return None;
    }
    let r = describe(c, d, a, delay, ev);
    let mut v =
        nagle(&r, ev).or_else(|| kernel_cwnd(&r, ev)).or_else(|| window(&r)).unwrap_or_else(|| lone_segment(&r));
    v.ack_delay = delay;
    Some(v)
}

/// The ACK's evidence and timing, once for every rule.
fn describe<'a>(c: &'a GapContext, d: &'a Derived, a: AckSeen, delay: Option<Duration>, ev: &mut Ev) -> Release<'a> {
    let (h, p, t) = (d.h, d.p, &c.timers);
    if let Some(s) = c.snap.last_sent {
        ev.add(
            s.t,
            s.frame,
            format!("{h} data {} B, unacknowledged{}", s.len, if s.small { " (sub-MSS)" } else { "" }),
        );
    }
    let timer = delay.is_some_and(|dl| t.at_timer_interval(dl));
    let delay_txt = match delay {
        Some(dl) => format!(
            "{p}'s {}ACK came {dl} after the data it acknowledges{}",
            if a.pure { "pure " } else { "" },
            if timer { " (a delayed-ACK timer's interval)" } else { "" }
        ),
        None => format!("{p}'s ACK (its delay could not be measured: no handshake RTT or the data was resent)"),
    };
    ev.add(
        a.t,
        a.frame,
        match delay {
            Some(dl) => format!("{p} ACK, {dl} after the data"),
            None => format!("{p} ACK"),
        },
    );
    let base = if timer {
        SIGNATURE
    } else if delay.is_some_and(|dl| t.is_delayed_ack(dl)) {
        SIGNATURE - 0.05
    } else if delay.is_none() {
        SIGNATURE_PARTIAL - 0.1
    } else {
        CONSISTENT
    };
    Release {
        c,
        d,
        ack: a,
        delay_txt,
        timer,
        base,
        untimed: delay.is_some_and(|dl| dl.0 + t.jiffy.0 < t.delack_min.0),
        full_window: c.snap.out_count >= 2 && (c.snap.out_count >= c.max_flight_segs || c.lost_before),
    }
}

/// RFC 9293 3.7.4 (`tcp_nagle_check` + `tcp_minshall_check`): one sub-MSS segment out, a
/// sub-MSS segment released; or RFC 896's classic rule (only the ACK of everything releases).
fn nagle(r: &Release, ev: &mut Ev) -> Option<Verdict> {
    let (c, d, delay_txt) = (r.c, r.d, &r.delay_txt);
    let (h, p) = (d.h, d.p);
    let mss_note = if c.mss_known { "" } else { " (MSS estimated: handshake not captured)" };
    if c.snap.out_small == 1 && d.released_small {
        return Some(match c.nagle_off {
            Some((nt, nf)) => {
                ev.add(nt, nf, format!("{h} sent a sub-MSS segment with another unacknowledged: Nagle off"));
                Verdict::gap(
                    GAP_INFERRED - 0.1,
                    format!(
                        "the next {} bytes left just after {p}'s ACK, but {h} showed Nagle off before (a sub-MSS \
                         segment sent while another was unacknowledged), so Nagle did not hold them: {h}'s \
                         application wrote them then; {delay_txt}",
                        c.seg.len
                    ),
                )
            }
            None => Verdict::stall(
                Cause::NagleDelayedAck,
                r.base,
                format!(
                    "a {}-byte segment was unacknowledged, so Nagle held the next {} bytes{mss_note}; {delay_txt}, \
                     and they left right after it",
                    c.snap.last_small_len, c.seg.len
                ),
            ),
        });
    }
    // RFC 896's rule holds a small segment while ANY data is unacknowledged, so only the ACK
    // of everything releases it; a congestion window opens on a partial ACK.
    (c.snap.out_small == 0 && d.released_small && c.snap.snd_nxt <= r.ack.ack && c.nagle_off.is_none()).then(|| {
        Verdict::stall(
            Cause::NagleDelayedAck,
            r.base * 0.75,
            format!(
                "only full-sized segments were unacknowledged, yet {} bytes waited for the ACK: classic Nagle \
                     without Minshall's rule (RFC 896; Linux would have sent){mss_note}; {delay_txt}",
                c.seg.len
            ),
        )
    })
}

/// The kernel's cwnd at the last ACK before the release (`tcp:tcp_probe`) decides the
/// congestion window (RFC 5681 3.1, `tcp_cwnd_test`).
fn kernel_cwnd(r: &Release, ev: &mut Ev) -> Option<Verdict> {
    let c = r.c;
    let (kt, kf, s) = c.kernel_state.filter(|(kt, _, _)| *kt <= c.end && *kt >= c.start && c.snap.out_count >= 2)?;
    let flight = s.in_flight();
    ev.add(kt, kf, format!("kernel: cwnd {} segments, {flight} bytes in flight", s.snd_cwnd));
    Some(if flight / c.mss.max(1) + 1 >= s.snd_cwnd {
        Verdict::stall(
            Cause::CwndLimited,
            WRITES_AND_SIGNATURE,
            format!(
                "{} segments ({} bytes) were in flight and the kernel's congestion window was {} segments, so the \
                 next waited for the ACK; {}",
                c.snap.out_count, c.snap.out_bytes, s.snd_cwnd, r.delay_txt
            ),
        )
    } else {
        Verdict::gap(
            GAP_INFERRED,
            format!(
                "{} segments were in flight, below the kernel's congestion window of {} segments, so the window did \
                 not hold the next data: {}'s application wrote it then; {}",
                c.snap.out_count, s.snd_cwnd, r.d.h, r.delay_txt
            ),
        )
    })
}

/// Several segments in flight: the congestion window (RFC 5681 3.1), if the flight is as large
/// as it ever was and window-sized; below the largest flight, the writer.
fn window(r: &Release) -> Option<Verdict> {
    let (c, h, delay_txt) = (r.c, r.d.h, &r.delay_txt);
    let (n, bytes) = (c.snap.out_count, c.snap.out_bytes);
    if r.untimed && (r.full_window || n < 2) {
        return Some(Verdict::ambiguous(
            Cause::Unknown,
            &[Cause::Application],
            AMBIGUOUS + 0.05,
            format!(
                "{n} segments ({bytes} bytes) were in flight and the next left after the ACK; {delay_txt}: sooner than \
                 any delayed-ACK timer, so the receiver answered late without one (a slow or descheduled host), or \
                 the writer wrote just then"
            ),
        ));
    }
    if let Some(v) = partial_ack_sent_nothing(r) {
        return Some(v);
    }
    if r.full_window && (window_sized(n, bytes) || c.lost_before) {
        let nagle_off = if c.snap.out_small >= 2 {
            format!(", {} of them sub-MSS, so Nagle was off", c.snap.out_small)
        } else {
            String::new()
        };
        return Some(Verdict::stall(
            Cause::CwndLimited,
            if c.snap.out_small >= 2 { r.base * 0.8 } else { r.base * 0.9 },
            format!(
                "{n} segments ({bytes} bytes{nagle_off}) were in flight, as many as {h} ever had{}, and the next \
                 waited for the ACK; {delay_txt}",
                if c.lost_before { " since a loss shrank its window" } else { "" }
            ),
        ));
    }
    if r.full_window {
        return Some(Verdict::ambiguous(
            Cause::CwndLimited,
            &[Cause::Application],
            AMBIGUOUS + 0.1,
            format!(
                "{n} segments ({bytes} bytes) were in flight, as many as {h} ever had, and the next left after the ACK; \
                 {delay_txt}: no congestion window is that small before a loss (initial windows are 10 segments, \
                 RFC 6928, or 4380 bytes, RFC 3390), and a writer writing just then looks the same"
            ),
        ));
    }
    (n >= 2).then(|| {
        Verdict::gap(
            CONSISTENT - 0.05,
            format!(
                "{n} segments were in flight, fewer than the {} {h} had in flight before, so neither the congestion \
                 window nor Nagle held the next data: the application wrote it then; {delay_txt}",
                c.max_flight_segs
            ),
        )
    })
}

/// A partial ACK during the gap freed part of the flight, and nothing left within the release
/// window after it: the congestion window had room (each ACK of new data opens it, RFC 5681
/// 3.1; Linux `tcp_cwnd_test` lets the next segment go from the ACK's softirq,
/// `tcp_data_snd_check`), so it did not hold the next data: the send buffer (SO_SNDBUF, the
/// writer blocked) or the application did. Evidence against a window verdict.
fn partial_ack_sent_nothing(r: &Release) -> Option<Verdict> {
    let (c, d) = (r.c, r.d);
    let first = c.first_ack.filter(|f| f.t < r.ack.t && f.ack < c.snap.snd_nxt)?;
    let idle = r.ack.t.since(first.t);
    if c.snap.out_count < 2 || idle <= RELEASE_SLACK + ACK_TRIP_TICK + d.back {
        return None;
    }
    let freed = first.ack - c.snap.snd_una;
    Some(Verdict::ambiguous(
        Cause::Unknown,
        &[Cause::Application],
        AMBIGUOUS,
        format!(
            "{} segments ({} bytes) were in flight; {}'s partial ACK {} before the release freed {freed} bytes and \
             nothing left for {idle}: the congestion window had room, so it did not hold the next data; the send \
             buffer (SO_SNDBUF) or the application did, which the packets cannot tell apart; {}",
            c.snap.out_count,
            c.snap.out_bytes,
            d.p,
            c.end.since(first.t),
            r.delay_txt
        ),
    ))
}

/// One full-sized segment out, its ACK, then the next data: the wait for a delayed ACK, the
/// mechanism that waited not shown (RFC 9293 3.8.6.3).
fn lone_segment(r: &Release) -> Verdict {
    let (c, h, delay_txt) = (r.c, r.d.h, &r.delay_txt);
    if r.timer {
        Verdict::stall(
            Cause::DelayedAck,
            r.base * 0.65,
            format!(
                "{h} waited for the ACK of its only outstanding ({}-byte) segment before sending {} bytes; \
                 {delay_txt}; the packets do not show whether a one-segment congestion window or the application \
                 held them",
                c.snap.out_bytes, c.seg.len
            ),
        )
    } else {
        Verdict::ambiguous(
            Cause::DelayedAck,
            &[Cause::Application],
            AMBIGUOUS + 0.05,
            format!(
                "{h} sent {} bytes right after the ACK of its only outstanding ({}-byte) segment; {delay_txt}, not at \
                 a delayed-ACK timer's interval: whether anything held them, or the writer wrote just then, the \
                 packets cannot tell",
                c.seg.len, c.snap.out_bytes
            ),
        )
    }
}
