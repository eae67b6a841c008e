//! The one classifier: naming the cause of a stall from the packets around it.
//!
//! A cause is named only with its signature in the evidence; what the evidence cannot show is
//! said, with lower confidence, never guessed. The rules, in the order they are tried:
//!
//! 1. **Resent range** (the segment ending the gap resends sequence space already seen, or fills
//!    a hole the capture saw open): loss. Which recovery sent it follows from which range and
//!    when:
//!    - after three duplicate ACKs (or SACK blocks): **fast-retransmit** (RFC 5681 3.2, RFC 6675);
//!    - the LAST outstanding segment resent while earlier ones are still unacknowledged, sooner
//!      than the RTO: **tail-loss-probe** (RFC 8985 7.3; Linux `tcp_send_loss_probe` resends
//!      the tail, `tcp_retransmit_timer` the head);
//!    - the head (snd_una) resent at least TCP_RTO_MIN after its previous transmission:
//!      **retransmission-timeout** (RFC 6298 5.4-5.6; Linux `tcp_retransmit_timer`);
//!    - sooner than TCP_RTO_MIN with no duplicate ACKs: **retransmission-timeout** at low
//!      confidence (a lowered `rto_min` route metric or a RACK reordering timer, RFC 8985 6.2);
//!    - longer than TCP_RTO_MAX (120 s, backoff included): **unknown** (no timer is that long:
//!      the capture was paused or spliced).
//! 2. **Window** (the peer advertised a zero window, or a window the flight filled, scale
//!    known): **rwnd-limited** (RFC 9293 3.8.6.2.1; Linux `tcp_snd_wnd_test`, `tcp_send_probe0`).
//! 3. **An ACK released the data** (the peer's ACK of outstanding data came during the gap and
//!    the data left within the ACK's path share plus 2 ms). The ACK's lateness beyond the path
//!    is the peer's ACK delay (RFC 9293 3.8.6.3, RFC 1122 4.2.3.2; Linux `__tcp_ack_snd_check`,
//!    `tcp_delack_timer`). Then:
//!    - exactly one sub-MSS segment was unacknowledged and the released one is sub-MSS:
//!      **nagle-delayed-ack** (RFC 9293 3.7.4; Linux `tcp_nagle_check` with `tcp_minshall_check`);
//!    - only full-sized segments were unacknowledged, a sub-MSS segment was released, and by the
//!      ACK of everything sent (a window opens on a partial ACK; RFC 896's Nagle waits for all):
//!      classic Nagle without Minshall's rule (RFC 896, RFC 1122 4.2.3.4; not Linux):
//!      **nagle-delayed-ack**;
//!    - two or more segments in flight, as many as this sender ever had in flight (the window
//!      was never seen larger), two or more of them sub-MSS meaning Nagle was off:
//!      **cwnd-limited** (RFC 5681 3.1; Linux `tcp_cwnd_test`); below that largest flight the
//!      window was not full, and the release is the application's write: **application**;
//!    - otherwise (one full-sized segment out): **delayed-ack**, the mechanism not shown;
//!    - for the window and delayed-ACK cases, an ACK measured sooner than any delayed-ACK
//!      timer (TCP_DELACK_MIN less a jiffy) but late beyond the path shows no mechanism:
//!      **unknown** (a slow or descheduled receiver).
//! 4. **Nothing in flight**, no ACK released anything, a sub-MSS segment left at the probe
//!    timer's own interval after the last data (max(RTO, TCP_RTO_MIN), `tcp_probe0_base`):
//!    **probe-timer** (corked, MSG_MORE or held data; an application pausing exactly that long
//!    looks the same, said in the text).
//! 5. **Nothing in flight** otherwise: the writer had not written: **application**, not a stall.
//! 6. Data in flight, no ACK seen and nothing resent: **unknown** (the capture may have missed
//!    the ACKs, or the application wrote late).

use crate::flow::{seq_le, AckSeen, Snapshot};
use crate::timers::Timers;
use crate::{EvidenceItem, Stall};
use trace::{CapturePoint, Cause, Duration, Endpoint, Evidence, Instant, Segment};

/// How the segment that ended a gap relates to what was sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// New data.
    No,
    /// Resends the oldest unacknowledged range (snd_una): what an RTO or fast retransmit sends.
    Head,
    /// Resends the newest outstanding segment while older ones are unacknowledged: a TLP.
    Tail,
    /// Resends some other range already seen.
    Other,
    /// Fills a hole the capture saw open (a later range arrived first): the range was lost
    /// between the sender and the capture point.
    FillsHole,
}

/// A sender's earlier quiet pauses (nothing in flight, released by a sub-MSS segment, between
/// half and ten times the probe interval), by whether they lasted the probe timer's interval.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PauseCounts {
    pub at_probe_interval: u32,
    pub other: u32,
}

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
    pub mss: u32,
    /// The MSS came from the SYN's option (else estimated).
    pub mss_known: bool,
    /// The held direction's state when the gap began.
    pub snap: Snapshot,
    /// This sender's quiet pauses before this gap.
    pub quiet_pauses: PauseCounts,
    /// The largest IP TTL / hop limit seen from the held side (see [`initial_ttl`]).
    pub held_ttl: Option<u8>,
    /// The held side's own part of the gap: its length, less the path from the peer's data
    /// to the held side's answer when the gap began with the peer's data (a request answered
    /// can only be written after the request arrived).
    pub turnaround: Duration,
    /// The last ACK from the peer during the gap that advanced the held direction.
    pub ack: Option<AckSeen>,
    /// The peer advertised a zero window at the gap's start or during it.
    pub zero_window: bool,
    /// The releasing ACK was stamped just after the released data (reordered timestamps).
    pub ack_after_release: bool,
    pub resend: Resend,
    /// When the resent range was last sent before (RFC 6298 5.5 backoff counts from there).
    pub resent_prev_tx: Option<(Instant, Evidence)>,
    /// TSvals of the resent range's first transmission and of the resend (RFC 7323 3).
    pub eifel: Option<(u32, u32)>,
    /// The first ACK of the resent range echoed the first transmission's TSval: the resend was
    /// spurious (Eifel, RFC 3522 2). None: not known (no timestamps, or no ACK seen).
    pub spurious: Option<bool>,
    pub dupacks: u32,
    pub sack_seen: bool,
    /// Largest number of segments this sender ever had in flight before the gap, and whether
    /// it resent anything before (a loss may have shrunk the window, RFC 5681 3.1).
    pub max_flight_segs: usize,
    pub lost_before: bool,
    pub path_rtt: Option<Duration>,
    /// The path RTT was measured on the handshake (Karn-clean, RFC 6298 3); else estimated from
    /// data ACKs, which can include an ACK delay.
    pub rtt_from_handshake: bool,
    /// Path share between the held side's data and the peer's ACK, at this capture point.
    pub path_dir: Option<Duration>,
    pub capture_point: CapturePoint,
    pub super_packets: bool,
    pub timers: Timers,
}

/// The initial TTL a sender most likely used, from the largest TTL seen (each router on the
/// way took one, RFC 791 3.2): the next of the common defaults, 64 (Linux, the BSDs, macOS:
/// net.ipv4.ip_default_ttl, RFC 1700), 128 (Windows: DefaultTTL) or 255 (Solaris, network
/// gear), as passive fingerprinting tools (p0f) read it.
pub(crate) fn initial_ttl(seen: u8) -> u8 {
    match seen {
        0..=32 => 32,
        33..=64 => 64,
        65..=128 => 128,
        _ => 255,
    }
}

fn side(e: Endpoint) -> &'static str {
    match e {
        Endpoint::A => "A",
        Endpoint::B => "B",
    }
}

pub(crate) fn classify(c: &GapContext) -> Stall {
    let length = c.end.since(c.start);
    let t = &c.timers;
    let h = side(c.held);
    let p = side(c.held.peer());
    let mut ev: Vec<EvidenceItem> = Vec::new();
    // One item per packet: what a packet shows twice is said in one line.
    let mut add = |t: Instant, source: Evidence, what: String| match ev.iter_mut().find(|e| e.source == source) {
        Some(e) if !e.what.contains(&what) => e.what = format!("{}; {what}", e.what),
        Some(_) => {}
        None => ev.push(EvidenceItem { t, source, what }),
    };
    add(c.start, c.start_frame, "last data before the gap".to_string());
    let path_rtt = c.path_rtt.unwrap_or(Duration::ZERO);
    let released_small = c.seg.len < c.mss;
    // A sub-MSS segment left with nothing in flight at the probe timer's interval.
    let probe_pause =
        c.snap.out_count == 0 && released_small && t.is_probe_interval(c.turnaround, path_rtt, c.rtt_from_handshake);
    let mss_note = if c.mss_known { "" } else { " (MSS estimated: handshake not captured)" };

    // How late the ACK was beyond the path, and whether it released the data: the data leaves
    // as soon as the sender processes the ACK, so the capture sees it after the rest of the
    // round trip (the part not between the data and the ACK) plus scheduling (2 ms).
    let ack_info = c.ack.map(|a| {
        let raw = a.earliest_sent.map(|s| a.t.since(s));
        let delay = match (raw, c.path_dir) {
            (Some(r), Some(pd)) => Some(Duration(r.0.saturating_sub(pd.0))),
            _ => None,
        };
        let back = Duration(path_rtt.0.saturating_sub(c.path_dir.unwrap_or(Duration::ZERO).0));
        // No timer is involved: the sender transmits from the ACK's softirq (`tcp_data_snd_check`).
        let released = c.end.since(a.t) <= Duration::from_millis(2) + back;
        (a, delay, released)
    });

    let cause: Cause;
    let mut confidence: f64;
    let mut ack_delay = None;
    let detail: String;

    if c.resend != Resend::No {
        let (prev_t, prev_f) = c.resent_prev_tx.unwrap_or((c.start, c.start_frame));
        let since_prev = c.end.since(prev_t);
        add(prev_t, prev_f, format!("{h} sent this range before"));
        let rto_floor = Duration(t.rto_min.0.saturating_sub(t.jiffy.0));
        if c.spurious == Some(true) {
            // Not loss: the ACK was late. No timer's interval explains the wait at the sender's
            // peer, so the mechanism is not shown.
            cause = Cause::Unknown;
            confidence = 0.4;
            detail = format!(
                "{} bytes resent {since_prev} after their previous transmission, but the range had arrived: the \
                 first ACK after the resend echoes the original's timestamp (Eifel, RFC 3522), so the ACK came \
                 late, not the data lost (a slow or starved receiver)",
                c.seg.len
            );
        } else if length > t.rto_max + path_rtt {
            cause = Cause::Unknown;
            confidence = 0.3;
            detail = format!(
                "{} bytes resent after {length}, longer than any retransmission timer (TCP_RTO_MAX 120 s with \
                 backoff): the capture was paused, spliced or its clock jumped",
                c.seg.len
            );
        } else if c.dupacks >= 3 || (c.sack_seen && c.dupacks >= 1) {
            cause = Cause::FastRetransmit;
            confidence = 0.85;
            detail = format!(
                "{} bytes resent after {} duplicate ACKs{} from {p}: fast retransmit (RFC 5681 3.2), {length} \
                 after the last data",
                c.seg.len,
                c.dupacks,
                if c.sack_seen { " with SACK blocks" } else { "" }
            );
        } else if c.resend == Resend::Tail && since_prev < rto_floor {
            cause = Cause::TailLossProbe;
            confidence = 0.75;
            detail = format!(
                "the last outstanding segment ({} bytes) was resent {since_prev} after it was sent, before the \
                 RTO, with earlier data still unacknowledged: a tail-loss probe (RFC 8985 7.3)",
                c.seg.len
            );
        } else if since_prev + t.jiffy >= t.rto_min {
            cause = Cause::RetransmissionTimeout;
            confidence = if c.resend == Resend::FillsHole { 0.8 } else { 0.9 };
            let one_out = c.snap.out_count <= 1;
            detail = format!(
                "{} bytes {} {since_prev} after their previous transmission, with no ACK for them: the \
                 retransmission timer fired (at least TCP_RTO_MIN 200 ms, RFC 6298 5.5){}",
                c.seg.len,
                if c.resend == Resend::FillsHole {
                    "filled a sequence hole (lost between the sender and the capture point)"
                } else {
                    "were resent"
                },
                if one_out { "; with one segment in flight a tail-loss probe fires at the same time" } else { "" }
            );
        } else {
            cause = Cause::RetransmissionTimeout;
            confidence = 0.5;
            detail = format!(
                "{} bytes resent {since_prev} after their previous transmission with no duplicate ACKs: shorter \
                 than Linux's 200 ms minimum RTO, so a lowered rto_min route metric or a RACK reordering timer \
                 (RFC 8985 6.2) sent it",
                c.seg.len
            );
        }
    } else if c.zero_window || (c.snap.out_count > 0 && window_closed(c)) {
        let (wnd, _) = if c.zero_window { (0, true) } else { c.snap.peer_wnd.unwrap_or((0, true)) };
        cause = Cause::RwndLimited;
        confidence = if wnd == 0 { 0.9 } else { 0.75 };
        detail = format!(
            "{p} advertised a {} window with {} bytes in flight, so {h} could not send until the window opened",
            if wnd == 0 { "zero".to_string() } else { format!("{wnd}-byte") },
            c.snap.out_bytes
        );
        if let Some(a) = c.ack {
            add(a.t, a.frame, format!("{p} window update"));
        }
    } else if let (true, Some((a, delay, true))) = (c.snap.out_count > 0, ack_info) {
        // The ACK released held data.
        if let Some(s) = c.snap.last_sent {
            add(
                s.t,
                s.frame,
                format!("{h} data {} B, unacknowledged{}", s.len, if s.small { " (sub-MSS)" } else { "" }),
            );
        }
        ack_delay = delay;
        let delay_txt = match delay {
            Some(d) => format!(
                "{p}'s {}ACK came {d} after the data it acknowledges{}",
                if a.pure { "pure " } else { "" },
                if t.at_timer_interval(d) { " (a delayed-ACK timer's interval)" } else { "" }
            ),
            None => format!("{p}'s ACK (its delay could not be measured: no handshake RTT or the data was resent)"),
        };
        add(
            a.t,
            a.frame,
            match delay {
                Some(d) => format!("{p} ACK, {d} after the data"),
                None => format!("{p} ACK"),
            },
        );
        let delayed = delay.is_some_and(|d| t.is_delayed_ack(d));
        let timer = delay.is_some_and(|d| t.at_timer_interval(d));
        let base = if timer {
            0.95
        } else if delayed {
            0.85
        } else if delay.is_none() {
            0.6
        } else {
            0.5
        };
        let full_window = c.snap.out_count >= 2 && (c.snap.out_count >= c.max_flight_segs || c.lost_before);
        // An ACK measured to come sooner than any delayed-ACK timer (TCP_DELACK_MIN less a
        // jiffy) yet late beyond the path: the receiver answered late without a timer (a
        // starved or descheduled host), so waiting for it names no TCP mechanism of its own.
        let untimed = delay.is_some_and(|d| d.0 + t.jiffy.0 < t.delack_min.0);
        if c.snap.out_small == 1 && released_small {
            cause = Cause::NagleDelayedAck;
            confidence = base;
            detail = format!(
                "a {}-byte segment was unacknowledged, so Nagle held the next {} bytes{mss_note}; {delay_txt}, and \
                 they left right after it",
                c.snap.last_small_len, c.seg.len
            );
        } else if c.snap.out_small == 0 && released_small && seq_le(c.snap.snd_nxt, a.ack) {
            // RFC 896's rule holds a small segment while ANY data is unacknowledged, so only the
            // ACK of everything releases it; a congestion window opens on a partial ACK.
            cause = Cause::NagleDelayedAck;
            confidence = base * 0.75;
            detail = format!(
                "only full-sized segments were unacknowledged, yet {} bytes waited for the ACK: classic Nagle \
                 without Minshall's rule (RFC 896; Linux would have sent){mss_note}; {delay_txt}",
                c.seg.len
            );
        } else if untimed && (full_window || c.snap.out_count < 2) {
            cause = Cause::Unknown;
            confidence = 0.4;
            detail = format!(
                "{} segments ({} bytes) were in flight and the next waited for the ACK; {delay_txt}: sooner than \
                 any delayed-ACK timer, so the receiver answered late without one (a slow or descheduled host)",
                c.snap.out_count, c.snap.out_bytes
            );
        } else if full_window {
            cause = Cause::CwndLimited;
            confidence = if c.snap.out_small >= 2 { base * 0.8 } else { base * 0.85 };
            detail = format!(
                "{} segments ({} bytes{}) were in flight, as many as {h} ever had, and the next waited for the \
                 ACK; {delay_txt}",
                c.snap.out_count,
                c.snap.out_bytes,
                if c.snap.out_small >= 2 {
                    format!(", {} of them sub-MSS, so Nagle was off", c.snap.out_small)
                } else {
                    String::new()
                }
            );
        } else if c.snap.out_count >= 2 {
            cause = Cause::Application;
            confidence = 0.5;
            detail = format!(
                "{} segments were in flight, fewer than the {} {h} had in flight before, so neither the \
                 congestion window nor Nagle (Nagle off: several sub-MSS in flight) held the next data: the \
                 application wrote it then; {delay_txt}",
                c.snap.out_count, c.max_flight_segs
            );
        } else {
            cause = Cause::DelayedAck;
            confidence = base * 0.6;
            detail = format!(
                "{h} waited for the ACK of its only outstanding ({}-byte) segment before sending {} bytes; \
                 {delay_txt}; the packets do not show whether a one-segment congestion window or the \
                 application held them",
                c.snap.out_bytes, c.seg.len
            );
        }
    } else if probe_pause && {
        let (lo, hi) = t.probe_band(path_rtt, c.rtt_from_handshake);
        hi.0 - lo.0 > t.rto_min.0 / 2
    } {
        // On a long path the band where the timer can fire (TCP_RTO_MIN up to the RTO's
        // excess of two round trips) is wider than half the timer itself: a pause anywhere in
        // it looks the same, and a timer's firings would not spread over it. Not named.
        let (lo, hi) = t.probe_band(path_rtt, c.rtt_from_handshake);
        cause = Cause::Unknown;
        confidence = 0.25;
        detail = format!(
            "{} bytes left {length} after the last data with nothing in flight, inside the probe timer's band \
             ({lo}-{hi}, tcp_probe0_base on a {path_rtt} path{}), which is too wide here to tell the timer from \
             an application pause; not named",
            c.seg.len,
            if c.rtt_from_handshake { "" } else { " estimated without the handshake" }
        );
    } else if probe_pause && c.held_ttl.map(initial_ttl) == Some(128) {
        // The probe timer that releases corked or MSG_MORE data is Linux's (tcp_probe_timer,
        // tcp_probe0_base); a sender whose packets start at TTL 128 is a Windows stack (its
        // default, DefaultTTL), which has neither TCP_CORK nor MSG_MORE, and Nagle holds nothing
        // with nothing in flight (RFC 896): no mechanism there holds data, the writer paused.
        cause = Cause::Application;
        confidence = 0.6;
        detail = format!(
            "{} bytes left {length} after the last data with nothing in flight, at the interval of Linux's probe              timer, but {h}'s packets carry TTL {} (initial 128: a Windows stack, which has no TCP_CORK, no              MSG_MORE and no such timer): {h}'s application wrote them then",
            c.seg.len,
            c.held_ttl.unwrap_or(0)
        );
    } else if probe_pause && c.quiet_pauses.other > c.quiet_pauses.at_probe_interval {
        // The wire shows the same thing for the probe timer and for a writer that paused this
        // long. A writer seen pausing at other lengths more often than at the timer's interval
        // (an interactive session, a client thinking) is the likelier explanation: the base
        // rate decides, and the evidence names no mechanism.
        cause = Cause::Unknown;
        confidence = 0.3;
        detail = format!(
            "{} bytes left {length} after the last data with nothing in flight: the probe timer's interval \
             (max(RTO, 200 ms), tcp_probe0_base), but {h}'s earlier pauses lasted other lengths {} time(s) \
             and this one {} time(s), so an application pause is as likely as held data; not named",
            c.seg.len, c.quiet_pauses.other, c.quiet_pauses.at_probe_interval
        );
    } else if probe_pause {
        cause = Cause::ProbeTimer;
        // Only TCP_CORK or MSG_MORE hold data with nothing in flight (Nagle and autocork need
        // something unacknowledged), so the interval alone is a weak signature: a writer whose
        // pauses repeat at it is likelier held than one pausing there once.
        let q = c.quiet_pauses;
        let (conf, how) = if q.at_probe_interval > 0 && q.other == 0 {
            (0.75, format!("{h} paused at this interval {} time(s) before and at no other length", q.at_probe_interval))
        } else if q.at_probe_interval == 0 && q.other == 0 {
            (0.45, format!("the first such pause of {h}: an application pausing this long looks the same"))
        } else {
            (0.6, "an application pausing exactly this long would look the same".to_string())
        };
        confidence = conf;
        detail = format!(
            "{} bytes left {length} after the last data, with nothing in flight and no ACK to release them: the \
             probe timer's interval (max(RTO, 200 ms), tcp_probe0_base) that releases corked, MSG_MORE or \
             held data ({how})",
            c.seg.len
        );
    } else if let Some(a) = c.ack.filter(|a| seq_le(c.snap.snd_nxt, a.ack)) {
        // Everything in flight was acknowledged during the gap, and the data left later than
        // an ACK-released send would: the writer wrote then.
        cause = Cause::Application;
        confidence = 0.7;
        add(a.t, a.frame, format!("{p} ACK of everything {h} had sent"));
        detail = format!(
            "{p} acknowledged everything {h} had sent {} before the new data left, so nothing held it: \
             {h}'s application wrote it then, not a TCP stall",
            c.end.since(a.t)
        );
    } else if c.snap.out_count == 0 {
        cause = Cause::Application;
        confidence = 0.8;
        detail = format!(
            "everything {h} had sent was acknowledged and nothing held: {h}'s application wrote nothing for \
             {length} (think time or idle), not a TCP stall"
        );
    } else {
        cause = Cause::Unknown;
        confidence = 0.3;
        detail = format!(
            "{} bytes were unacknowledged and {}: the packets show nothing that held or released the new data \
             (the capture may have missed the ACKs, or the application wrote late)",
            c.snap.out_bytes,
            match ack_info {
                Some((a, _, _)) => format!("{p}'s ACK came {} before the data left", c.end.since(a.t)),
                None => format!("no ACK from {p} came during the gap"),
            }
        );
    }
    add(
        c.end,
        c.end_frame,
        format!("{h} data {} B{}", c.seg.len, if c.resend != Resend::No { ", resent" } else { ", released" }),
    );

    // What the capture point hides.
    let mut caveats = String::new();
    // A segment lost between its sender and the capture point, then resent by the RTO, looks
    // like new data here: only a capture at the sender (or on the same host) rules that out.
    let at_sender = matches!(
        (c.capture_point, c.held),
        (CapturePoint::SameHost, _) | (CapturePoint::AtA, Endpoint::A) | (CapturePoint::AtB, Endpoint::B)
    );
    if matches!(cause, Cause::Application | Cause::ProbeTimer)
        && !at_sender
        && length + t.jiffy >= t.rto_min
        && length <= t.rto_max
    {
        confidence = confidence.min(0.4);
        caveats.push_str(&format!(
            " [or a retransmission after a timeout: a segment {h} sent may have been lost before the capture \
             point, which this capture cannot show]"
        ));
    }
    let timing_based = matches!(
        cause,
        Cause::NagleDelayedAck | Cause::CwndLimited | Cause::DelayedAck | Cause::ProbeTimer | Cause::TailLossProbe
    );
    if !c.rtt_from_handshake && timing_based {
        confidence *= 0.85;
        caveats.push_str(if c.path_rtt.is_some() {
            " [no handshake: the path RTT is estimated from ACK timing]"
        } else {
            " [no handshake and no RTT sample: ACK delays unmeasured]"
        });
    }
    if c.ack_after_release && timing_based {
        confidence *= 0.95;
        caveats.push_str(" [the capture stamped the releasing ACK just after the data it released]");
    }
    if c.super_packets {
        confidence *= 0.85;
        caveats.push_str(" [GRO/TSO super-packets: segment boundaries hidden]");
    }
    if c.capture_point == CapturePoint::Unknown && !timing_based && cause != Cause::Application {
        confidence *= 0.95;
    }
    ev.sort_by_key(|e| e.t);
    Stall {
        start: c.start,
        length,
        waited: c.held.peer(),
        held: c.held,
        bytes_held: c.seg.len,
        cause,
        confidence: (confidence * 100.0).round() / 100.0,
        evidence: ev,
        ack_delay,
        detail: detail + &caveats,
    }
}

/// A SYN (or SYN-ACK) sent again: the connection waited for the SYN retransmission timer
/// (TCP_TIMEOUT_INIT 1 s, doubling: RFC 6298 5.7, Linux `tcp_retransmit_timer` on a SYN_SENT
/// socket). The resent SYN is the signature.
pub(crate) fn syn_stall(
    from: Endpoint,
    prev: (Instant, Evidence),
    now: (Instant, Evidence),
    what: &str,
    timers: &Timers,
) -> Stall {
    let length = now.0.since(prev.0);
    let at_timer = length + timers.jiffy >= Duration(timers.syn_rto.0 / 2) && length <= timers.rto_max;
    Stall {
        start: prev.0,
        length,
        waited: Endpoint::A,
        held: from,
        bytes_held: 0,
        cause: if at_timer { Cause::RetransmissionTimeout } else { Cause::Unknown },
        confidence: if at_timer { 0.9 } else { 0.3 },
        evidence: vec![
            EvidenceItem { t: prev.0, source: prev.1, what: format!("{} {what}", side(from)) },
            EvidenceItem { t: now.0, source: now.1, what: format!("{} {what} resent", side(from)) },
        ],
        ack_delay: None,
        detail: if at_timer {
            format!(
                "{} resent its {what} {length} later with no answer: the connection waited for the SYN \
                 retransmission timer (1 s, doubling; RFC 6298 5.7)",
                side(from)
            )
        } else {
            format!("{} resent its {what} {length} later, not at a SYN retransmission timer's interval", side(from))
        },
    }
}

/// A window the peer closed and had not opened again when the capture ended: the held side
/// cannot send (RFC 9293 3.8.6.2.1, Linux `tcp_snd_wnd_test`) and can only probe the window
/// (RFC 9293 3.8.6.1; Linux `tcp_send_probe0`, backing off from the RTO). No data segment ends
/// this gap, so the gap detector never sees it: the flow's end does. `zero` is the peer's zero-
/// window advertisement, `start` when the wait began (it, or data sent into the closed window
/// after it), `last` the last packet of the flow, `probes` the held side's packets
/// since then (window probes), `last_probe` the latest of them.
pub(crate) fn open_window_stall(
    held: Endpoint,
    zero: (Instant, Evidence),
    start: Instant,
    last: Instant,
    probes: u32,
    last_probe: Option<(Instant, Evidence)>,
) -> Stall {
    let length = last.since(start);
    let (h, p) = (side(held), side(held.peer()));
    let mut evidence = vec![EvidenceItem { t: zero.0, source: zero.1, what: format!("{p} advertised a zero window") }];
    if let Some((t, f)) = last_probe {
        evidence.push(EvidenceItem {
            t,
            source: f,
            what: format!("{h} window probe {probes}, still answered with zero"),
        });
    }
    Stall {
        start,
        length,
        waited: held.peer(),
        held,
        bytes_held: 0,
        cause: Cause::RwndLimited,
        // Probes answered with a zero window show the sender wanted to send; without them the
        // sender may have had nothing to send.
        confidence: if probes > 0 { 0.9 } else { 0.6 },
        evidence,
        ack_delay: None,
        detail: format!(
            "{p} advertised a zero window and had not opened it when the capture ended {length} later: {h} could \
             not send; {} (the bytes waiting are not on the wire; the wait is longer than the capture shows)",
            if probes > 0 {
                format!("{h} probed the window {probes} time(s) and was answered with zero each time")
            } else {
                format!("{h} sent no window probe, so it may have had nothing to send")
            }
        ),
    }
}

/// RFC 9293 3.8.6.2.1: the usable window is snd_una + snd_wnd - snd_nxt; the sender cannot send
/// `len` bytes when it is smaller (Linux `tcp_snd_wnd_test`). Only with a known window scale:
/// an unscaled window is known exactly when the handshake showed no scale option.
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
    usable < u64::from(c.seg.len.min(c.mss))
}
