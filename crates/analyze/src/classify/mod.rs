//! The one classifier: naming the cause of a stall from the evidence around it.
//!
//! A cause is named only with its signature in the evidence; what the evidence cannot show is
//! said, with lower confidence, never guessed. Each record says what it proves
//! ([`RecordKind`]): a **stall** (bytes waited, and the mechanism's signature shows), a
//! **wait** (bytes provably waited, no signature: `unknown`), an **ambiguous** pause (several
//! explanations fit; `alternatives` lists them and `settle` names what would tell) or a
//! **gap** (nothing shows the bytes existed before they left: `application`).
//!
//! The rule families, in the order they are tried (one file each):
//!
//! 1. **Writes** (`writes.rs`): when the trace reports the writer's writes (kernel `sendmsg`,
//!    the lab's and the model's own record), bytes written as they left are the application's
//!    gap; bytes written before the gap began waited, and the rules below name why, with the
//!    write time as evidence (the top confidence band).
//!    A gap during which the capture skipped the sender's data (bytes acknowledged but never
//!    captured) is the capture's: ambiguous, never a wait.
//! 2. **Resent range** (`resend.rs`): loss, and which recovery resent it (path MTU discovery,
//!    fast retransmit, tail-loss probe, retransmission timeout); but a zero window whose
//!    update released the segment, resend or not, names the window first (`window.rs`).
//! 3. **Window** (`window.rs`): the peer's receive window, closed or full.
//! 4. **The writer's own clock** (`quiet.rs`, with pacing.rs) and 5. **ACK release**
//!    (`release.rs`), asked both and weighed (`weigh_clock_and_release`): a sender whose sends
//!    keep their own period whatever the ACKs do wrote on its clock; an ACK of outstanding
//!    data released the next data, after the physics check (no release sooner than the round
//!    trip between the capture point and the sender): Nagle x delayed ACK, congestion window,
//!    delayed ACK. A release at a delayed-ACK timer's interval beats a loose rhythm (one the
//!    stalls make); a writer's tight clock beats a release that lands just before its tick.
//! 6. **Quiet sender** (`quiet.rs`): nothing in flight or nothing released it: the probe timer
//!    (ambiguous from packets), the application, or a wait with no signature.
//! 7. **Caveats** (`caveats.rs`): what the capture point, a missing handshake or super-packets
//!    hide lowers the confidence, said in the text.

pub mod confidence;

mod caveats;
mod quiet;
mod release;

mod resend;
mod window;
mod writes;

use crate::dir::{AckSeen, Resend, Snapshot};
use crate::pacing::ClockFit;
use crate::timers::{Timers, ACK_TRIP_TICK, RELEASE_SLACK};
use crate::write_log::WriteRec;
use crate::{EvidenceItem, RecordKind, Stall};
use trace::{CapturePoint, Cause, Duration, Endpoint, Evidence, Instant, KernelState, Segment, SeqNum};

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
    /// The largest IP TTL / hop limit seen from the held side (see [`initial_ttl`]).
    pub held_ttl: Option<u8>,
    /// The held side's own part of the gap: its length, less the path from the peer's data
    /// to the held side's answer when the gap began with the peer's data.
    pub turnaround: Duration,
    /// The last ACK from the peer during the gap that advanced the held direction.
    pub ack: Option<AckSeen>,
    /// The first such ACK.
    pub first_ack: Option<AckSeen>,
    /// The peer advertised a zero window at the gap's start or during it.
    pub zero_window: bool,
    /// The peer's window went from zero to open during the gap: when, and the frame.
    pub window_opened: Option<(Instant, Evidence)>,
    /// The releasing ACK was stamped just after the released data (reordered timestamps).
    pub ack_after_release: bool,
    pub resend: Resend,
    /// When the resent range was last sent before (RFC 6298 5.5 backoff counts from there),
    /// and whether that earlier transmission was itself a resend (backoff under way).
    pub resent_prev_tx: Option<(Instant, Evidence)>,
    pub prev_was_resend: bool,
    /// The resent bytes were never seen before: the capture missed their first transmission.
    pub unseen_before: bool,
    /// TSvals of the resent range's first transmission and of the resend (RFC 7323 3).
    pub eifel: Option<(u32, u32)>,
    /// The first ACK of the resent range echoed the first transmission's TSval: the resend was
    /// spurious (Eifel, RFC 3522 2). None: not known.
    pub spurious: Option<bool>,
    /// The resent range had been acknowledged (cumulatively or by SACK) before the resend:
    /// how. The receiver had the bytes: the resend is spurious (RFC 3708 2).
    pub already_acked: Option<&'static str>,
    /// The peer's first packet after the segment that ended the gap, late enough to answer it.
    pub answer: Option<PeerAnswer>,
    /// A packet of the peer's, too soon after a resend to answer it, acknowledged the resent
    /// range: the first transmission had arrived.
    pub acked_before_answer: Option<(Instant, Evidence)>,
    /// How long the held side had neither sent data nor received an ACK before this segment:
    /// what a loss-probe or retransmission timer measures from.
    pub quiet_since: Option<Duration>,
    /// Duplicate ACKs since the range's previous transmission (RFC 5681 2), with SACK blocks,
    /// and when the third came.
    pub dupacks: u32,
    pub sack_seen: bool,
    pub third_dupack: Option<Instant>,
    /// The latest duplicate ACK with SACK blocks (each can trigger a resend, RFC 6675 5).
    pub last_sack_dupack: Option<Instant>,
    /// Largest number of segments this sender ever had in flight before the gap, and whether
    /// it resent anything before (a loss may have shrunk the window, RFC 5681 3.1).
    pub max_flight_segs: usize,
    pub lost_before: bool,
    pub path_rtt: Option<Duration>,
    /// The path RTT was measured on the handshake (Karn-clean, RFC 6298 3).
    pub rtt_from_handshake: bool,
    /// The smallest round trip from the peer's data to the held side's ACK of it, as captured
    /// (a delayed ACK only makes a sample longer, so any sample bounds the path).
    pub peer_data_rtt_min: Option<Duration>,
    /// Path share between the held side's data and the peer's ACK, at this capture point.
    pub path_dir: Option<Duration>,
    pub capture_point: CapturePoint,
    pub super_packets: bool,
    pub timers: Timers,
    pub min_gap: Duration,
    /// The held side showed Nagle off before (see `Dir::nagle_off`).
    pub nagle_off: Option<(Instant, Evidence)>,
    /// The held side's own clock, judged at this send (pacing.rs).
    pub clock: Option<ClockFit>,
    /// The write that filled the released segment's first byte, when the trace reports writes.
    pub written: Option<WriteRec>,
    /// Kernel evidence of the held side: its latest resend, congestion state and window state.
    pub kernel_retx: Option<(Instant, Evidence, SeqNum, u32)>,
    pub kernel_cong: Option<(Instant, Evidence, u8)>,
    pub kernel_state: Option<(Instant, Evidence, KernelState)>,
    /// The latest ICMP fragmentation-needed about the held side's segments.
    pub icmp_frag: Option<(Instant, Evidence, u32)>,
    /// The capture holds the held side's packets only: the peer's are missing while the held
    /// side's ACK numbers advance (its peer sent data the capture never saw).
    pub one_direction: bool,
    /// The capture skipped this sender's data during the gap (see `Dir::unseen_at_gap_start`).
    pub capture_skipped: bool,
    /// The held side sent a sub-MSS segment with nothing in flight sooner than the probe timer
    /// after the connection's last packet: it does not hold its small writes (no forgotten
    /// TCP_CORK, no MSG_MORE left pending).
    pub shown_uncorked: bool,
    /// The capture holds data segments only (no SYN, no pure ACK): missing ACKs prove nothing.
    pub data_only: bool,
    /// The capture's timestamps come in this tick (10 ms or 1 ms), when coarse.
    pub ts_tick: Option<Duration>,
}

/// The peer's first packet after the segment that ended a gap, as far as it tells what
/// happened to that segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAnswer {
    pub t: Instant,
    pub frame: Evidence,
    /// A D-SACK of the segment (RFC 2883 4): the receiver got it twice, the resend was spurious.
    pub dsack: bool,
    /// A SACK block covers the segment while the ACK stays below it: it arrived, earlier data
    /// did not (RFC 2018): what a loss probe elicits (RFC 8985 7.3).
    pub sacked_above_hole: bool,
}

impl GapContext {
    /// The capture was taken at the held side (or on one host): its sends are seen as they
    /// leave and the ACKs that reach it as they arrive.
    pub(crate) fn captured_at_held_side(&self) -> bool {
        matches!(
            (self.capture_point, self.held),
            (CapturePoint::SameHost, _) | (CapturePoint::AtA, Endpoint::A) | (CapturePoint::AtB, Endpoint::B)
        )
    }

    /// The classification waits for the peer's first answer: a resend (spurious or not), or
    /// data sent with data unacknowledged and no ACK during the gap (a loss probe or not).
    /// A resend's D-SACK is still looked for until two round trips and 50 ms after it (the
    /// receiver D-SACKs a duplicate at once, RFC 2883 4, Linux `tcp_dsack_set`; its ACK of the
    /// first transmission may come first).
    pub(crate) fn awaits_answer(&self, now: Instant) -> bool {
        let eifel = self.eifel.is_some() && self.spurious.is_none();
        let probe = self.resend != Resend::No || (self.snap.out_count > 0 && self.ack.is_none());
        let rtt = self.path_rtt.unwrap_or(Duration::ZERO);
        let dsack_window = Duration(2 * rtt.0) + Duration::from_millis(50);
        let dsack_pending = self.resend != Resend::No
            && self.answer.is_some_and(|a| !a.dsack)
            && self.already_acked.is_none()
            && self.acked_before_answer.is_none()
            && now.since(self.end) <= dsack_window;
        (self.answer.is_none() && (eifel || probe)) || dsack_pending
    }
}

/// One rule's verdict.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub cause: Cause,
    pub confidence: f64,
    pub kind: RecordKind,
    pub detail: String,
    pub alternatives: Vec<Cause>,
    pub ack_delay: Option<Duration>,
    /// The wait began here rather than at the gap's start (a tick of the writer's clock).
    pub from: Option<Instant>,
}

impl Verdict {
    pub(crate) fn new(cause: Cause, confidence: f64, kind: RecordKind, detail: String) -> Verdict {
        Verdict { cause, confidence, kind, detail, alternatives: Vec::new(), ack_delay: None, from: None }
    }
    pub(crate) fn stall(cause: Cause, confidence: f64, detail: String) -> Verdict {
        Verdict::new(cause, confidence, RecordKind::Stall, detail)
    }
    pub(crate) fn gap(confidence: f64, detail: String) -> Verdict {
        Verdict::new(Cause::Application, confidence, RecordKind::Gap, detail)
    }
    pub(crate) fn wait(confidence: f64, detail: String) -> Verdict {
        Verdict::new(Cause::Unknown, confidence, RecordKind::Wait, detail)
    }
    pub(crate) fn ambiguous(cause: Cause, alternatives: &[Cause], confidence: f64, detail: String) -> Verdict {
        Verdict {
            alternatives: alternatives.to_vec(),
            ..Verdict::new(cause, confidence, RecordKind::Ambiguous, detail)
        }
    }
}

/// The evidence list of one record: one item per packet (what a packet shows twice is said in
/// one line), in time order at the end.
#[derive(Debug, Default)]
pub(crate) struct Ev(Vec<EvidenceItem>);

impl Ev {
    pub(crate) fn add(&mut self, t: Instant, source: Evidence, what: String) {
        match self.0.iter_mut().find(|e| e.source == source) {
            Some(e) if !e.what.contains(&what) => e.what = format!("{}; {what}", e.what),
            Some(_) => {}
            None => self.0.push(EvidenceItem { t, source, what }),
        }
    }
}

/// What every rule family derives from the context the same way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Derived {
    /// The gap, or the wait when the writes show the bytes existed only later.
    pub length: Duration,
    /// The writes show the bytes existed from here (None: not known).
    pub held_from: Option<Instant>,
    pub path_rtt: Duration,
    /// The round trip between the capture point and the held side: how long after seeing an
    /// ACK the capture can first see what it released.
    pub back: Duration,
    pub released_small: bool,
    pub h: &'static str,
    pub p: &'static str,
}

/// The ACK during the gap and what it could have done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckInfo {
    pub ack: AckSeen,
    /// Its lateness beyond the path (the peer's ACK delay), when measurable.
    pub delay: Option<Duration>,
    /// The data left within the release window after it: the ACK released it.
    pub released: bool,
    /// The data left sooner after it than the round trip to the sender allows: the ACK could
    /// not have released it (physics).
    pub too_soon: bool,
}

/// The endpoint's letter in evidence and details ([`Endpoint::letter`]).
pub(crate) fn side(e: Endpoint) -> &'static str {
    e.letter()
}

/// The initial TTL a sender most likely used, from the largest TTL seen (each router on the
/// way took one, RFC 791 3.2): the next of the common defaults, 64 (Linux, the BSDs, macOS),
/// 128 (Windows: DefaultTTL) or 255 (Solaris, network gear), as p0f reads it.
pub(crate) fn initial_ttl(seen: u8) -> u8 {
    match seen {
        0..=32 => 32,
        33..=64 => 64,
        65..=128 => 128,
        _ => 255,
    }
}

/// The command that settles what packets cannot: the write times.
pub(crate) const SETTLE: &str =
    "tcpstall watch --kernel (the kernel's write and resend times), or reproduce the exchange in tcpstall lab";

/// How the ACK during the gap relates to the release. The data leaves as soon as the sender
/// processes the ACK (`tcp_data_snd_check` from the ACK's softirq: no timer), so the capture
/// sees it one capture-to-sender round trip after the ACK, plus scheduling (2 ms). Much sooner
/// than that round trip is impossible (the ACK had not reached the sender). The round trip is
/// measured on the handshake or on data ACKs, and both include the far host's processing: an
/// embedded stack can take most of a 1 ms "round trip" to answer a SYN, and a path's delay
/// varies. So the bound is the smallest round trip seen less a twentieth of it (at least 2
/// ms): it rejects a release 71 ms after the ACK on an 88 ms path (zeek's ftp/cwd-navigation)
/// and 63 ms after it where every round trip was 67-76 ms (nDPI's tor), and never one on a path
/// of a few milliseconds.
fn ack_info(c: &GapContext, back: Duration) -> Option<AckInfo> {
    let a = c.ack?;
    let raw = a.earliest_sent.map(|s| a.t.since(s));
    let delay = match (raw, c.path_dir) {
        (Some(r), Some(pd)) => Some(Duration(r.0.saturating_sub(pd.0))),
        _ => None,
    };
    let after = c.end.since(a.t);
    // The round trip as the capture saw it on the held side's ACKs of the peer's data (the
    // smallest sample): a path whose delay varies can be quicker than on the handshake.
    let seen = c.peer_data_rtt_min.map_or(back, |m| m.min(back));
    let floor = Duration(seen.0.saturating_sub((seen.0 / 20).max(2_000_000)));
    let too_soon = !c.ack_after_release && after < floor && a.t <= c.end;
    // Captured away from the sender, the ACK still has a hop to make, which a kernel tick can
    // defer (ACK_TRIP_TICK).
    let slack = RELEASE_SLACK + if c.captured_at_held_side() { Duration::ZERO } else { ACK_TRIP_TICK };
    let released = !too_soon && after <= slack + back;
    Some(AckInfo { ack: a, delay, released, too_soon })
}

/// The writer's own clock (a rhythm) and an ACK release (a specific signature) can both
/// explain a send; each is weighed, not the first that answers taken:
/// - a release by an ACK at a delayed-ACK timer's interval is a mechanism's own signature; a
///   rhythm can be made by that very stall (a writer that sleeps between requests, its period
///   the sleep plus the stall, its intervals alternating between the two), so the signature
///   wins over a loose rhythm, and the rhythm is said; a writer's timer keeps its period
///   tightly (`ClockFit::tight`), and an ACK that lands just before its tick released nothing;
/// - a release by an ACK off any timer's interval is only consistent with a release: a send
///   that keeps the writer's clock is the writer's;
/// - both weak: ambiguous, both listed.
fn weigh_clock_and_release(c: &GapContext, d: &Derived, ack: Option<AckInfo>, ev: &mut Ev) -> Option<Verdict> {
    let mut ev_clock = Ev(ev.0.clone());
    let clock = quiet::own_clock(c, d, ack, &mut ev_clock);
    let mut ev_release = Ev(ev.0.clone());
    let release = release::rule(c, d, ack, &mut ev_release);
    let timer_ack = |v: &Verdict| v.ack_delay.is_some_and(|dl| c.timers.at_timer_interval(dl));
    let tight = c.clock.is_some_and(|f| f.tight());
    let (v, chosen) = match (clock, release) {
        (None, None) => return None,
        (Some(cv), None) => (cv, ev_clock),
        (None, Some(rv)) => (rv, ev_release),
        (Some(cv), Some(_)) if cv.kind == RecordKind::Stall => (cv, ev_clock),
        (Some(cv), Some(mut rv)) if rv.kind == RecordKind::Stall && timer_ack(&rv) && !tight => {
            rv.detail.push_str(&format!(
                " [{}'s sends also keep a rhythm, but a release right after an ACK at a delayed-ACK timer's interval is \
                 the mechanism's signature, and the rhythm includes the waits it makes: {}]",
                d.h, cv.detail
            ));
            (rv, ev_release)
        }
        (Some(cv), Some(rv)) if rv.kind == RecordKind::Stall => {
            let mut v = Verdict::ambiguous(
                rv.cause,
                &[Cause::Application],
                confidence::AMBIGUOUS + 0.1,
                format!("two explanations fit: {}; or: {}", rv.detail, cv.detail),
            );
            v.ack_delay = rv.ack_delay;
            (v, ev_release)
        }
        (Some(cv), Some(_)) => (cv, ev_clock),
    };
    *ev = chosen;
    Some(v)
}

pub(crate) fn classify(c: &GapContext) -> Stall {
    let path_rtt = c.path_rtt.unwrap_or(Duration::ZERO);
    let back = Duration(path_rtt.0.saturating_sub(c.path_dir.unwrap_or(Duration::ZERO).0));
    let held_from = c.written.map(|w| w.t.max(c.start));
    let d = Derived {
        length: c.end.since(held_from.unwrap_or(c.start)),
        held_from,
        path_rtt,
        back,
        released_small: c.seg.len < c.mss,
        h: side(c.held),
        p: side(c.held.peer()),
    };
    let mut ev = Ev::default();
    ev.add(c.start, c.start_frame, "last data before the gap".to_string());
    let ack = ack_info(c, back);

    let v = writes::written_as_sent(c, &d, &mut ev)
        .or_else(|| quiet::capture_skipped(c, &d))
        .or_else(|| window::released_by_update(c, &d, &mut ev))
        .or_else(|| resend::rule(c, &d, &mut ev))
        .or_else(|| resend::new_data_probe(c, &d, &mut ev))
        .or_else(|| window::rule(c, &d, &mut ev))
        .or_else(|| weigh_clock_and_release(c, &d, ack, &mut ev))
        .unwrap_or_else(|| quiet::rule(c, &d, ack, &mut ev));
    let mut v = writes::proven(c, &d, v);
    ev.add(
        c.end,
        c.end_frame,
        format!(
            "{} data {} B{}",
            d.h,
            c.seg.len,
            if matches!(c.resend, Resend::No) { ", released" } else { ", resent" }
        ),
    );
    caveats::apply(c, &d, &mut v);
    let settle = (v.kind == RecordKind::Ambiguous && c.written.is_none()).then(|| SETTLE.to_string());
    let mut evidence = ev.0;
    evidence.sort_by_key(|e| e.t);
    let start = v.from.or(d.held_from).unwrap_or(c.start);
    Stall {
        start,
        length: c.end.since(start),
        waited: c.held.peer(),
        held: c.held,
        bytes_held: c.seg.len,
        cause: v.cause,
        confidence: (v.confidence * 100.0).round() / 100.0,
        evidence,
        ack_delay: v.ack_delay,
        detail: v.detail,
        kind: v.kind,
        alternatives: v.alternatives,
        settle,
    }
}

/// A SYN record's evidence: the previous SYN and the one sent again.
fn syn_evidence(from: Endpoint, prev: (Instant, Evidence), now: (Instant, Evidence), what: &str) -> Vec<EvidenceItem> {
    vec![
        EvidenceItem { t: prev.0, source: prev.1, what: format!("{} {what}", side(from)) },
        EvidenceItem { t: now.0, source: now.1, what: format!("{} {what} resent", side(from)) },
    ]
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What else bears on a SYN sent again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SynContext {
    /// The interval before the previous resend of the same SYN, if there was one.
    pub prev_interval: Option<Duration>,
    /// Resends in a row, this one included, that did not back off.
    pub flat_run: u32,
    /// None of the peer's packets are in the capture.
    pub peer_silent: bool,
    /// The peer answered (a SYN-ACK for a SYN, the handshake's ACK for a SYN-ACK) between the
    /// previous transmission and this resend.
    pub answered: bool,
}

/// A SYN (or SYN-ACK) sent again: the connection waited for the SYN retransmission timer
/// (TCP_TIMEOUT_INIT 1 s, doubling: RFC 6298 5.5 and 5.7, Linux `tcp_retransmit_timer` on a
/// SYN_SENT socket, `inet_csk_reqsk_queue_drop_and_put`/`reqsk_timer_handler` for the
/// SYN-ACK). The resent SYN is the signature. A resend that does not back off (an interval
/// under 1.5 times the one before) is not that timer: a generator, or a SYN-ACK answering
/// SYNs sent again that the capture does not hold; a SYN-ACK whose peer never appears in the
/// capture cannot show whether anybody waited.
// long: one record literal whose confidence and detail say each case of the timer.
pub(crate) fn syn_stall(
    from: Endpoint,
    prev: (Instant, Evidence),
    now: (Instant, Evidence),
    what: &str,
    timers: &Timers,
    ctx: SynContext,
) -> Stall {
    let length = now.0.since(prev.0);
    // More resends in a row without backing off than any stack's SYN timer makes (FreeBSD's
    // table, `tcp_syn_backoff`, has five equal steps before it doubles; Linux doubles at once,
    // `tcp_retransmit_timer`): not the timer.
    let no_backoff = ctx.flat_run > 5;
    if no_backoff {
        return syn_not_the_timer(from, prev, now, what, length, ctx);
    }
    let at_timer = length + timers.jiffy >= Duration(timers.syn_rto.0 / 2) && length <= timers.rto_max;
    // The first resend at TCP_TIMEOUT_INIT (1 s, RFC 6298 5.7) or the older 3 s (RFC 1122
    // 4.2.3.1), or a later one that doubled: the timer's own interval. Otherwise a timer of
    // another stack or a scanner's: named, at a lower confidence.
    let own_interval = match ctx.prev_interval {
        None => {
            let near = |s: u64| length.0.abs_diff(s * 1_000_000_000) <= 2 * timers.jiffy.0;
            near(1) || near(3)
        }
        Some(p) => length.0 >= p.0 + p.0 / 2,
    };
    // A SYN-ACK whose peer never appears in the capture answers SYNs the capture does not
    // hold (a one-direction capture, or spoofed SYNs): the timer shows, the wait less surely.
    let unseen_peer = ctx.peer_silent && what == "SYN-ACK";
    Stall {
        start: prev.0,
        length,
        waited: Endpoint::A,
        held: from,
        bytes_held: 0,
        cause: if at_timer { Cause::RetransmissionTimeout } else { Cause::Unknown },
        confidence: match (at_timer, unseen_peer || !own_interval || ctx.answered) {
            (true, false) => confidence::SIGNATURE,
            (true, true) => confidence::SIGNATURE_PARTIAL,
            _ => confidence::NO_SIGNATURE,
        },
        evidence: syn_evidence(from, prev, now, what),
        ack_delay: None,
        detail: if at_timer {
            format!(
                "{} resent its {what} {length} later{}: the connection waited for the SYN retransmission timer \
                 (1 s at first, RFC 6298 5.7; doubling, 5.5){}{}",
                side(from),
                if ctx.answered { "" } else { " with no answer" },
                if own_interval {
                    String::new()
                } else {
                    " [not at Linux's 1 s first interval nor a doubling: another stack's timer, or a scanner's]"
                        .to_string()
                },
                if ctx.answered {
                    format!(
                        " [{} had answered the first one before this resend (its SYN-ACK is in the capture): the \
                         answer was late or lost on its way, which the capture cannot tell apart]",
                        side(from.peer())
                    )
                } else if unseen_peer {
                    format!(
                        " [none of {}'s packets are in the capture: the SYN this answers is not in it, so whether \
                         a client waited (or the SYN was spoofed) cannot be seen]",
                        side(from.peer())
                    )
                } else {
                    String::new()
                }
            )
        } else {
            format!("{} resent its {what} {length} later, not at a SYN retransmission timer's interval", side(from))
        },
        kind: if at_timer { RecordKind::Stall } else { RecordKind::Wait },
        alternatives: Vec::new(),
        settle: None,
    }
}

/// More SYN resends in a row that did not back off than any stack's timer makes (see
/// [`syn_stall`]): a generator, or a SYN-ACK answering SYNs the capture does not hold.
fn syn_not_the_timer(
    from: Endpoint,
    prev: (Instant, Evidence),
    now: (Instant, Evidence),
    what: &str,
    length: Duration,
    ctx: SynContext,
) -> Stall {
    let why = format!(
        "{} resent its {what} {length} after the previous one, which came {} after the one before, the {} \
         resend in a row that did not back off: a SYN timer doubles (RFC 6298 5.5; FreeBSD after five equal \
         steps), so this resend is not it: a generator, or answers to SYNs sent again that the capture does not \
         hold",
        side(from),
        ctx.prev_interval.unwrap_or(Duration::ZERO),
        ordinal(ctx.flat_run)
    );
    Stall {
        start: prev.0,
        length,
        waited: Endpoint::A,
        held: from,
        bytes_held: 0,
        cause: Cause::Unknown,
        confidence: confidence::AMBIGUOUS - 0.05,
        evidence: syn_evidence(from, prev, now, what),
        ack_delay: None,
        detail: why,
        kind: RecordKind::Ambiguous,
        alternatives: vec![Cause::RetransmissionTimeout],
        settle: None,
    }
}

/// A window the peer closed and had not opened again when the capture ended: the held side
/// cannot send (RFC 9293 3.8.6.2.1, Linux `tcp_snd_wnd_test`) and can only probe the window
/// (RFC 9293 3.8.6.1; Linux `tcp_send_probe0`). `zero` is the peer's zero-window
/// advertisement, `start` when the wait began, `last` the last packet of the flow, `probes`
/// the held side's window probes since, `last_probe` the latest of them.
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
    // Probes answered with a zero window show the sender wanted to send; without them the
    // sender may have had nothing to send: a wait the packets do not prove.
    let proven = probes > 0;
    Stall {
        start,
        length,
        waited: held.peer(),
        held,
        bytes_held: 0,
        cause: Cause::RwndLimited,
        confidence: if proven { confidence::SIGNATURE } else { confidence::AMBIGUOUS },
        evidence,
        ack_delay: None,
        detail: format!(
            "{p} advertised a zero window and had not opened it when the capture ended {length} later: {h} could \
             not send; {} (the bytes waiting are not on the wire; the wait is longer than the capture shows)",
            if proven {
                format!("{h} probed the window {probes} time(s) and was answered with zero each time")
            } else {
                format!("{h} sent no window probe, so it may have had nothing to send")
            }
        ),
        kind: if proven { RecordKind::Stall } else { RecordKind::Ambiguous },
        alternatives: if proven { Vec::new() } else { vec![Cause::Application] },
        settle: (!proven).then(|| SETTLE.to_string()),
    }
}
