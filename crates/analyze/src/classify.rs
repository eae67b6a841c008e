//! Naming the cause of a stall from what the capture shows around the gap.
//!
//! Rules, in the order they are tried (each cites where the mechanism lives):
//! 0. The segment follows packets of its sender that the capture never saw (IPv4 ID gap, Linux
//!    `ip_select_ident_segs` numbers a socket's packets consecutively), fills a sequence hole, or
//!    acknowledges peer data that waited longer than any
//!    delayed-ACK timer (200 ms, TCP_DELACK_MAX) with no ACK at all: the held side's segments
//!    were lost before the capture point and this is their retransmission:
//!    **retransmission-timeout** (hidden loss, confidence 0.6).
//! 1. The segment ending the gap resends data already seen: **retransmission-timeout**
//!    (RFC 6298 5.4-5.6; Linux `tcp_retransmit_timer`). Shorter than 200 ms it may be a tail
//!    loss probe (RFC 8985 7); fast retransmit (RFC 5681 3.2) after duplicate ACKs is not a
//!    timeout and gets a lower confidence.
//! 2. The peer advertised a zero window at the start of or during the gap, or the sender had
//!    unacknowledged data filling the peer's window: **rwnd-limited** (RFC 9293 3.8.6.2.1; Linux `tcp_snd_wnd_test`).
//! 3. The sender had unacknowledged data, an ACK from the peer arrived during the gap and the
//!    data left right after it (the ACK released it). The ACK's lateness beyond the path RTT is
//!    the peer's ACK delay (RFC 9293 3.8.6.3, RFC 1122 4.2.3.2; Linux `__tcp_ack_snd_check`,
//!    `tcp_delack_timer`: 40 ms minimum, 200 ms maximum). Then:
//!    - exactly one sub-MSS segment was unacknowledged and the released segment is sub-MSS:
//!      **nagle-delayed-ack** (RFC 9293 3.7.4; Linux `tcp_nagle_check` with `tcp_minshall_check`:
//!      a small segment waits while an earlier small segment is unacknowledged);
//!    - two or more sub-MSS segments were unacknowledged: Nagle was off (with Nagle on, at most
//!      one small segment is ever in flight), so the sender waited for the congestion window:
//!      **cwnd-limited** (RFC 5681 3.1; Linux `tcp_cwnd_test`);
//!    - only full-sized segments were unacknowledged and a sub-MSS segment was released: classic
//!      Nagle without Minshall's rule (RFC 896; not Linux): **nagle-delayed-ack**, lower
//!      confidence;
//!    - a full-sized segment was released after several in flight: **cwnd-limited**;
//!    - otherwise **delayed-ack** alone.
//! 4. Nothing was unacknowledged, no ACK released the data, the gap is 190..300 ms and a
//!    sub-MSS segment ended it: corked or Nagle-held data pushed by the probe timer
//!    (Linux `tcp_probe_timer`, `tcp_send_probe0`; TCP_CORK's 200 ms ceiling, tcp(7)):
//!    **probe-timer**, with a confidence that admits an application sleeping 200 ms looks the same.
//! 5. Otherwise **application**: everything was acknowledged (or nothing released the data) and
//!    nobody sent.

use crate::flow::{AckSeen, Snapshot};
use crate::Stall;
use trace::{CapturePoint, Cause, Duration, Endpoint, Evidence, Instant, Segment};

/// The peer's ACK is "delayed" when it came this much later than the path explains.
/// Linux's delayed-ACK timer is 40 ms (TCP_DELACK_MIN) to 200 ms (TCP_DELACK_MAX); other stacks
/// use 100 ms (macOS) or up to 500 ms (RFC 1122 4.2.3.2). 30 ms leaves room for a timer that
/// fires early by a jiffy and for the capture point.
pub(crate) const DELAYED_ACK_MIN: Duration = Duration::from_millis(30);
pub(crate) const DELAYED_ACK_MAX: Duration = Duration::from_millis(520);

/// What the analyser knows at the end of a gap.
#[derive(Debug, Clone)]
pub(crate) struct GapContext {
    pub start: Instant,
    pub start_frame: Evidence,
    pub end: Instant,
    pub end_frame: Evidence,
    pub held: Endpoint,
    /// The segment that ended the gap.
    pub seg: Segment,
    pub mss: Option<u32>,
    /// The held direction's state when the gap began.
    pub snap: Snapshot,
    /// The last ACK from the peer during the gap that advanced the held direction.
    pub ack: Option<AckSeen>,
    /// The peer advertised a zero window at the gap's start or during it.
    pub zero_window: bool,
    /// The releasing ACK was stamped just after the released data (reordered timestamps).
    pub ack_after_release: bool,
    pub retransmission: bool,
    /// The segment fills a sequence hole: resent after a loss before the capture point.
    pub fills_hole: bool,
    /// How long the peer's oldest unacknowledged data had waited, with no ACK from the held
    /// side during the gap, when this segment finally acknowledged it.
    pub peer_unacked_for: Option<Duration>,
    /// Packets from the held side that the capture did not see just before this segment.
    pub unseen_before: u16,
    pub dupacks: u32,
    pub path_rtt: Option<Duration>,
    /// Path share between the held side's data and the peer's ACK, at this capture point.
    pub path_dir: Option<Duration>,
    pub capture_point: CapturePoint,
    pub super_packets: bool,
}

pub(crate) fn classify(c: &GapContext) -> Stall {
    let length = c.end.since(c.start);
    let mut evidence = vec![c.start_frame];
    let push = |e: Evidence, ev: &mut Vec<Evidence>| {
        if !ev.contains(&e) {
            ev.push(e)
        }
    };
    let mss = c.mss.unwrap_or(536);
    let released_small = c.seg.len < mss;
    let path_rtt = c.path_rtt.unwrap_or(Duration::ZERO);
    let cause;
    let mut confidence: f64;
    let ack_delay;
    let detail: String;

    // How late the ACK was beyond the path, and whether it released the data.
    let ack_info = c.ack.map(|a| {
        let raw = a.earliest_sent.map(|s| a.t.since(s));
        let delay = raw.map(|r| Duration(r.as_nanos().saturating_sub(c.path_dir.unwrap_or(Duration::ZERO).as_nanos())));
        // The data leaves as soon as the ACK is processed: within a millisecond at the sender,
        // plus the path when the capture point sees the ACK leave the peer.
        let tolerance = Duration::from_millis(2) + path_rtt;
        let released = c.end.since(a.t) <= tolerance;
        (a, delay, released)
    });

    // No ACK for the peer's data for longer than any delayed-ACK timer (Linux TCP_DELACK_MAX
    // 200 ms, include/net/tcp.h) plus the path: the held side's segments (which would have
    // carried that ACK) were lost before the capture point, and this one is their retransmission.
    let hidden_loss =
        c.peer_unacked_for.is_some_and(|w| w > Duration::from_millis(210) + path_rtt && !c.retransmission);
    let id_gap = c.unseen_before > 0 && !c.retransmission;
    if c.fills_hole || hidden_loss || id_gap {
        cause = Cause::RetransmissionTimeout;
        ack_delay = None;
        confidence = 0.6;
        detail = if id_gap {
            format!(
                "the sender's IPv4 ID skipped {} packet(s) just before these {} bytes: what it sent in the gap was \
                 lost before the capture point, and this is the retransmission",
                c.unseen_before, c.seg.len
            )
        } else if c.fills_hole {
            format!(
                "{} bytes filled a sequence hole after {length}: resent after a loss between the sender and the \
                 capture point",
                c.seg.len
            )
        } else {
            format!(
                "the peer's data waited {} for any ACK, longer than any delayed-ACK timer: this side's segments \
                 were lost before the capture point and these {} bytes are the retransmission",
                c.peer_unacked_for.unwrap_or_default(),
                c.seg.len
            )
        };
    } else if c.retransmission {
        cause = Cause::RetransmissionTimeout;
        ack_delay = None;
        if c.dupacks >= 3 {
            confidence = 0.5;
            detail = format!(
                "{} bytes resent after {} duplicate ACKs: fast retransmit (RFC 5681 3.2) that still took {length}",
                c.seg.len, c.dupacks
            );
        } else if length >= Duration::from_millis(190) {
            confidence = 0.9;
            detail = format!("{} bytes resent after {length} with no ACK: the retransmission timer fired", c.seg.len);
        } else {
            confidence = 0.6;
            detail = format!(
                "{} bytes resent after {length}: shorter than Linux's 200 ms minimum RTO, possibly a tail loss probe \
                 (RFC 8985)",
                c.seg.len
            );
        }
        if let Some(s) = c.snap.last_sent {
            push(s.frame, &mut evidence);
        }
    } else if c.zero_window || (c.snap.out_count > 0 && window_closed(c)) {
        let (wnd, known) = if c.zero_window { (0, true) } else { c.snap.peer_wnd.unwrap_or((0, false)) };
        cause = Cause::RwndLimited;
        confidence = if wnd == 0 {
            0.9
        } else if known {
            0.75
        } else {
            0.5
        };
        ack_delay = None;
        detail = format!(
            "the peer advertised a {} window with {} bytes in flight{}",
            if wnd == 0 { "zero".to_string() } else { format!("{wnd}-byte") },
            c.snap.out_bytes,
            if known || wnd == 0 { "" } else { " (window scale unknown: handshake not captured)" }
        );
        if let Some(a) = c.ack {
            push(a.frame, &mut evidence);
        }
    } else if let (true, Some((a, delay, true))) = (c.snap.out_count > 0, ack_info) {
        // The ACK released held data.
        push(c.snap.last_sent.map_or(c.start_frame, |s| s.frame), &mut evidence);
        push(a.frame, &mut evidence);
        ack_delay = delay;
        let delayed = delay.is_some_and(|d| (DELAYED_ACK_MIN..=DELAYED_ACK_MAX).contains(&d));
        let timer_like = delay.is_some_and(|d| {
            let ms = d.as_millis_f64();
            (36.0..=48.0).contains(&ms) || (95.0..=110.0).contains(&ms) || (190.0..=215.0).contains(&ms)
        });
        let held_small = c.snap.last_sent.map(|s| s.len);
        let delay_txt = match delay {
            Some(d) => {
                format!("the peer's {}ACK came {d} after the data it acknowledges", if a.pure { "pure " } else { "" })
            }
            None => "the peer's ACK (delay unknown: acknowledged data was retransmitted)".to_string(),
        };
        if c.snap.out_small == 1 && released_small {
            cause = Cause::NagleDelayedAck;
            confidence = if timer_like {
                0.95
            } else if delayed {
                0.85
            } else {
                0.55
            };
            detail = format!(
                "a {}-byte segment was unacknowledged, so Nagle held the next {} bytes; {delay_txt}, and they left right \
                 after it",
                held_small.unwrap_or(0),
                c.seg.len
            );
        } else if c.snap.out_small >= 2 {
            cause = Cause::CwndLimited;
            confidence = if delayed { 0.75 } else { 0.6 };
            detail = format!(
                "{} segments ({} bytes, {} of them sub-MSS, so Nagle was off) were in flight and the sender waited; \
                 {delay_txt}",
                c.snap.out_count, c.snap.out_bytes, c.snap.out_small
            );
        } else if released_small {
            cause = Cause::NagleDelayedAck;
            confidence = if delayed { 0.6 } else { 0.45 };
            detail = format!(
                "only full-sized segments were unacknowledged, yet {} bytes waited for the ACK: classic Nagle without \
                 Minshall's rule (RFC 896; Linux would have sent); {delay_txt}",
                c.seg.len
            );
        } else if c.snap.out_count >= 2 {
            cause = Cause::CwndLimited;
            confidence = if delayed { 0.7 } else { 0.6 };
            detail = format!(
                "{} full-sized segments were in flight and the next one waited for the ACK; {delay_txt}",
                c.snap.out_count
            );
        } else {
            cause = Cause::DelayedAck;
            confidence = if delayed { 0.6 } else { 0.4 };
            detail = format!("the sender waited for the ACK of its only segment; {delay_txt}");
        }
    } else if c.snap.out_count == 0
        && released_small
        && (Duration::from_millis(190)..=Duration::from_millis(300)).contains(&length)
    {
        cause = Cause::ProbeTimer;
        ack_delay = None;
        detail = format!(
            "{} bytes left {length} after the last data with nothing in flight and no ACK to release them: the \
             200 ms TCP_CORK ceiling or probe timer (an application sleeping 200 ms would look the same){}",
            c.seg.len,
            if c.peer_unacked_for.is_some() {
                "; the peer's data went unacknowledged throughout, so a segment lost before the capture point and \
                 resent by the retransmission timer fits too"
            } else {
                ""
            }
        );
        confidence = if c.peer_unacked_for.is_some() { 0.4 } else { 0.55 };
    } else {
        cause = Cause::Application;
        ack_delay = ack_info.and_then(|(_, d, _)| d);
        if c.snap.out_count == 0 {
            confidence = 0.8;
            detail = format!(
                "nothing was unacknowledged and no segment was held: {:?}'s application sent nothing for {length}",
                c.held
            );
        } else {
            confidence = 0.5;
            detail = format!(
                "{} bytes were unacknowledged but no ACK released the new data: the application wrote late",
                c.snap.out_bytes
            );
        }
    }
    push(c.end_frame, &mut evidence);

    // What the capture point hides.
    let mut caveats = String::new();
    if c.capture_point == CapturePoint::Unknown {
        confidence *= 0.9;
        caveats.push_str(" [handshake not captured: RTT and ACK delay estimated]");
    }
    if c.ack_after_release && matches!(cause, Cause::NagleDelayedAck | Cause::CwndLimited | Cause::DelayedAck) {
        confidence *= 0.95;
        caveats.push_str(" [the capture stamped the releasing ACK just after the data it released]");
    }
    if c.super_packets {
        confidence *= 0.85;
        caveats.push_str(" [GRO/TSO super-packets: segment boundaries hidden]");
    }
    Stall {
        start: c.start,
        length,
        held: c.held,
        cause,
        confidence: (confidence * 100.0).round() / 100.0,
        evidence,
        ack_delay,
        released_bytes: c.seg.len,
        detail: detail + &caveats,
    }
}

/// RFC 9293 3.8.6.2.1: the usable window is snd_una + snd_wnd - snd_nxt; the sender cannot send
/// `len` bytes when it is smaller (Linux `tcp_snd_wnd_test`).
fn window_closed(c: &GapContext) -> bool {
    let Some((wnd, known)) = c.snap.peer_wnd else { return false };
    if wnd == 0 {
        return true;
    }
    if !known {
        return false;
    }
    let in_flight = u64::from(c.snap.snd_nxt.wrapping_sub(c.snap.snd_una));
    let usable = wnd.saturating_sub(in_flight);
    usable < u64::from(c.seg.len.min(c.mss.unwrap_or(536)))
}
