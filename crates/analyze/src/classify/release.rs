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
use crate::dir::seq_le;
use trace::Cause;

/// A flight that can fill a congestion window before any loss: the initial window of 10
/// segments (RFC 6928, Linux TCP_INIT_CWND), or RFC 3390's largest initial window (4380 bytes)
/// in at least 4 segments.
fn window_sized(out_count: usize, out_bytes: u64) -> bool {
    out_count >= 10 || (out_count >= 4 && out_bytes >= 4380)
}

pub(super) fn rule(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Option<Verdict> {
    let AckInfo { ack: a, delay, released, .. } = ack?;
    if c.snap.out_count == 0 || !released || c.one_direction {
        return None;
    }
    let (h, p, t) = (d.h, d.p, &c.timers);
    if let Some(s) = c.snap.last_sent {
        ev.add(
            s.t,
            s.frame,
            format!("{h} data {} B, unacknowledged{}", s.len, if s.small { " (sub-MSS)" } else { "" }),
        );
    }
    let delay_txt = match delay {
        Some(dl) => format!(
            "{p}'s {}ACK came {dl} after the data it acknowledges{}",
            if a.pure { "pure " } else { "" },
            if t.at_timer_interval(dl) { " (a delayed-ACK timer's interval)" } else { "" }
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
    let timer = delay.is_some_and(|dl| t.at_timer_interval(dl));
    let delayed = delay.is_some_and(|dl| t.is_delayed_ack(dl));
    let base = if timer {
        SIGNATURE
    } else if delayed {
        SIGNATURE - 0.05
    } else if delay.is_none() {
        SIGNATURE_PARTIAL - 0.1
    } else {
        CONSISTENT
    };
    // An ACK sooner than any delayed-ACK timer (TCP_DELACK_MIN less a jiffy) yet late beyond the
    // path: the receiver answered late without a timer.
    let untimed = delay.is_some_and(|dl| dl.0 + t.jiffy.0 < t.delack_min.0);
    let mss_note = if c.mss_known { "" } else { " (MSS estimated: handshake not captured)" };
    let kernel = c.kernel_state.filter(|(kt, _, _)| *kt <= c.end && *kt >= c.start);
    let full_window = c.snap.out_count >= 2 && (c.snap.out_count >= c.max_flight_segs || c.lost_before);
    let mut v = if c.snap.out_small == 1 && d.released_small {
        if let Some((nt, nf)) = c.nagle_off {
            ev.add(nt, nf, format!("{h} sent a sub-MSS segment with another unacknowledged: Nagle off"));
            Verdict::gap(
                GAP_INFERRED - 0.1,
                format!(
                    "the next {} bytes left just after {p}'s ACK, but {h} showed Nagle off before (a sub-MSS segment \
                     sent while another was unacknowledged), so Nagle did not hold them: {h}'s application wrote them \
                     then; {delay_txt}",
                    c.seg.len
                ),
            )
        } else {
            Verdict::stall(
                Cause::NagleDelayedAck,
                base,
                format!(
                    "a {}-byte segment was unacknowledged, so Nagle held the next {} bytes{mss_note}; {delay_txt}, \
                     and they left right after it",
                    c.snap.last_small_len, c.seg.len
                ),
            )
        }
    } else if c.snap.out_small == 0 && d.released_small && seq_le(c.snap.snd_nxt, a.ack) && c.nagle_off.is_none() {
        // RFC 896's rule holds a small segment while ANY data is unacknowledged, so only the
        // ACK of everything releases it; a congestion window opens on a partial ACK.
        Verdict::stall(
            Cause::NagleDelayedAck,
            base * 0.75,
            format!(
                "only full-sized segments were unacknowledged, yet {} bytes waited for the ACK: classic Nagle \
                 without Minshall's rule (RFC 896; Linux would have sent){mss_note}; {delay_txt}",
                c.seg.len
            ),
        )
    } else if let Some((kt, kf, s)) = kernel.filter(|_| c.snap.out_count >= 2) {
        // The kernel's cwnd at the last ACK before the release decides the congestion window.
        let flight_segs = s.snd_nxt.wrapping_sub(s.snd_una) / c.mss.max(1);
        ev.add(
            kt,
            kf,
            format!("kernel: cwnd {} segments, {} bytes in flight", s.snd_cwnd, s.snd_nxt.wrapping_sub(s.snd_una)),
        );
        if flight_segs + 1 >= s.snd_cwnd {
            Verdict::stall(
                Cause::CwndLimited,
                WRITES_AND_SIGNATURE,
                format!(
                    "{} segments ({} bytes) were in flight and the kernel's congestion window was {} segments, so the \
                     next waited for the ACK; {delay_txt}",
                    c.snap.out_count, c.snap.out_bytes, s.snd_cwnd
                ),
            )
        } else {
            Verdict::gap(
                GAP_INFERRED,
                format!(
                    "{} segments were in flight, below the kernel's congestion window of {} segments, so the window \
                     did not hold the next data: {h}'s application wrote it then; {delay_txt}",
                    c.snap.out_count, s.snd_cwnd
                ),
            )
        }
    } else if untimed && (full_window || c.snap.out_count < 2) {
        Verdict::ambiguous(
            Cause::Unknown,
            &[Cause::Application],
            AMBIGUOUS + 0.05,
            format!(
                "{} segments ({} bytes) were in flight and the next left after the ACK; {delay_txt}: sooner than any \
                 delayed-ACK timer, so the receiver answered late without one (a slow or descheduled host), or the \
                 writer wrote just then",
                c.snap.out_count, c.snap.out_bytes
            ),
        )
    } else if full_window && (window_sized(c.snap.out_count, c.snap.out_bytes) || c.lost_before) {
        Verdict::stall(
            Cause::CwndLimited,
            if c.snap.out_small >= 2 { base * 0.8 } else { base * 0.9 },
            format!(
                "{} segments ({} bytes{}) were in flight, as many as {h} ever had{}, and the next waited for the ACK; \
                 {delay_txt}",
                c.snap.out_count,
                c.snap.out_bytes,
                if c.snap.out_small >= 2 {
                    format!(", {} of them sub-MSS, so Nagle was off", c.snap.out_small)
                } else {
                    String::new()
                },
                if c.lost_before { " since a loss shrank its window" } else { "" }
            ),
        )
    } else if full_window {
        Verdict::ambiguous(
            Cause::CwndLimited,
            &[Cause::Application],
            AMBIGUOUS + 0.1,
            format!(
                "{} segments ({} bytes) were in flight, as many as {h} ever had, and the next left after the ACK; \
                 {delay_txt}: no congestion window is that small before a loss (initial windows are 10 segments, \
                 RFC 6928, or 4380 bytes, RFC 3390), and a writer writing just then looks the same",
                c.snap.out_count, c.snap.out_bytes
            ),
        )
    } else if c.snap.out_count >= 2 {
        Verdict::gap(
            CONSISTENT - 0.05,
            format!(
                "{} segments were in flight, fewer than the {} {h} had in flight before, so neither the \
                 congestion window nor Nagle held the next data: the application wrote it then; {delay_txt}",
                c.snap.out_count, c.max_flight_segs
            ),
        )
    } else if timer {
        Verdict::stall(
            Cause::DelayedAck,
            base * 0.65,
            format!(
                "{h} waited for the ACK of its only outstanding ({}-byte) segment before sending {} bytes; \
                 {delay_txt}; the packets do not show whether a one-segment congestion window or the \
                 application held them",
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
    };
    v.ack_delay = delay;
    Some(v)
}
