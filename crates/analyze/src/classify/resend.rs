//! Rule family 2: a resent range is loss; which recovery resent it follows from what came
//! between its previous transmission and the resend.
//!
//! - an ICMP fragmentation-needed for the sender's segments since the range was last sent:
//!   **path-mtu** (RFC 1191, RFC 8201; Linux `tcp_v4_mtu_reduced` -> `tcp_simple_retransmit`
//!   resends at the new MSS at once);
//! - three duplicate ACKs (or one with SACK blocks) since the range was last sent, and the
//!   resend promptly after the third (one capture-to-sender round trip, a RACK reordering
//!   window of a quarter RTT, RFC 8985 6.2, and a jiffy): **fast-retransmit** (RFC 5681 3.2,
//!   RFC 6675; Linux `tcp_fastretrans_alert`); duplicate ACKs long before the resend did not
//!   trigger it;
//! - the last outstanding segment resent before the RTO, earlier data still unacknowledged:
//!   **tail-loss-probe** (RFC 8985 7.3; Linux `tcp_send_loss_probe`);
//! - the range resent at least TCP_RTO_MIN after its previous transmission with no ACK for it:
//!   **retransmission-timeout** (RFC 6298 5.4-5.6; Linux `tcp_retransmit_timer`), with backoff
//!   when the previous transmission was itself a resend (RFC 6298 5.5);
//! - sooner, with no duplicate ACKs: **retransmission-timeout** at a consistent level (a
//!   lowered `rto_min` route metric or a RACK reordering timer, RFC 8985 6.2);
//! - the first ACK after the resend echoes the original's timestamp (Eifel, RFC 3522): the
//!   ACK was late, not the data lost: a **wait** with no signature;
//! - longer than TCP_RTO_MAX (120 s with backoff): no timer is that long: a **wait**.
//!
//! Kernel evidence (`tcp:tcp_retransmit_skb`, `tcp:tcp_cong_state_set`) makes a resend the
//! capture never saw first a loss, and tells recovery (state 3) from loss (state 4).

use super::confidence::{CONSISTENT, GAP_SHOWN, NO_SIGNATURE, SIGNATURE, SIGNATURE_PARTIAL, WRITES_AND_SIGNATURE};
use super::{Derived, Ev, GapContext, Verdict};
use crate::dir::Resend;
use crate::timers::RELEASE_SLACK;
use trace::{Cause, Duration, Instant};

/// `enum tcp_ca_state` (include/net/tcp.h): TCP_CA_Recovery, TCP_CA_Loss.
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;

/// The congestion state as the kernel names it (`enum tcp_ca_state`, include/net/tcp.h).
pub(super) fn ca_state_name(s: u8) -> &'static str {
    match s {
        0 => "Open",
        1 => "Disorder",
        2 => "CWR",
        CA_RECOVERY => "Recovery",
        CA_LOSS => "Loss",
        _ => "unknown",
    }
}

/// What every resend rule reads.
struct Resent<'a> {
    c: &'a GapContext,
    d: &'a Derived,
    prev_t: Instant,
    since_prev: Duration,
    /// The kernel's congestion state at the resend (`tcp:tcp_cong_state_set`).
    kernel_state: Option<u8>,
    enough_dups: bool,
}

/// When the resent range was last sent before (the gap's start when not seen).
fn r_prev(c: &GapContext) -> Instant {
    c.resent_prev_tx.map_or(c.start, |(t, _)| t)
}

pub(super) fn rule(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    if c.resend == Resend::No {
        return None;
    }
    let (prev_t, prev_f) = c.resent_prev_tx.unwrap_or((c.start, c.start_frame));
    if c.resend == Resend::KernelOnly {
        if let Some((kt, kf, _, _)) = c.kernel_retx {
            ev.add(kt, kf, format!("kernel: retransmit {} bytes", c.seg.len));
        }
    } else {
        ev.add(prev_t, prev_f, format!("{} sent this range before", d.h));
    }
    // The kernel's congestion state when it resent: the latest `tcp:tcp_cong_state_set` before
    // the resend; a resend the kernel reported with no state change reported before it was
    // sent in the state every connection starts in, Open.
    let kernel_resent = c.kernel_retx.is_some_and(|(kt, _, _, _)| kt <= c.end && kt >= r_prev(c));
    let kernel_state = match c.kernel_cong.filter(|(kt, _, _)| *kt <= c.end) {
        Some((kt, kf, s)) => {
            ev.add(kt, kf, format!("kernel: congestion state {}", ca_state_name(s)));
            Some(s)
        }
        None if kernel_resent => Some(0),
        None => None,
    };
    let r = Resent {
        c,
        d,
        prev_t,
        since_prev: c.end.since(prev_t),
        kernel_state,
        enough_dups: c.dupacks >= 3 || (c.sack_seen && c.dupacks >= 1),
    };
    let mut v = not_lost(&r, ev)
        .or_else(|| path_mtu(&r, ev))
        .or_else(|| fast_retransmit(&r))
        .or_else(|| tail_loss_probe(&r))
        .unwrap_or_else(|| timeout(&r));
    if c.resend == Resend::KernelOnly && v.kind == crate::RecordKind::Stall {
        v.confidence = v.confidence.max(SIGNATURE);
    }
    if c.one_direction && c.kernel_retx.is_none() && v.kind == crate::RecordKind::Stall {
        // Without the peer's packets nothing shows whether it had the bytes before the resend
        // (a spurious resend, RFC 3708: not a wait) or what triggered it (duplicate ACKs).
        v.kind = crate::RecordKind::Ambiguous;
        v.confidence = v.confidence.min(super::confidence::AMBIGUOUS + 0.1);
        v.alternatives.push(Cause::Unknown);
        v.detail.push_str(&format!(
            " [the capture holds {}'s packets only: whether {} had these bytes before the resend (a spurious \
             resend, no wait) cannot be seen]",
            d.h, d.p
        ));
    }
    Some(v)
}

/// A spurious resend: the receiver had the bytes. Shown by an ACK (cumulative or SACK) of the
/// range before the resend (RFC 3708 2), a D-SACK of it in the receiver's answer (RFC 2883 4),
/// or the answer echoing the original's timestamp (Eifel, RFC 3522 2). Nobody waited for
/// these bytes: not a wait (a late ACK, typically a delayed ACK racing the sender's RTO).
/// A resend later than any timer (TCP_RTO_MAX) is a wait with no signature.
fn not_lost(r: &Resent, ev: &mut Ev) -> Option<Verdict> {
    let (c, len, t) = (r.c, r.c.seg.len, &r.c.timers);
    let how = if let Some(how) = c.already_acked {
        Some(format!("{} had {how} them before the resend", r.d.p))
    } else if let Some((t, f)) = c.acked_before_answer {
        ev.add(t, f, format!("{} ACK of the range, sooner than the resend could reach it", r.d.p));
        Some(format!(
            "{}'s ACK of them came {} after the resend, sooner than the round trip to {} allows: it acknowledged \
             the first transmission",
            r.d.p,
            t.since(c.end),
            r.d.p
        ))
    } else if let Some(a) = c.answer.filter(|a| a.dsack) {
        ev.add(a.t, a.frame, format!("{} D-SACK of the resent range", r.d.p));
        Some(format!("{}'s answer is a D-SACK of them (RFC 2883): it received them twice", r.d.p))
    } else if c.spurious == Some(true) {
        Some("the first ACK after the resend echoes the original's timestamp (Eifel, RFC 3522)".to_string())
    } else {
        None
    };
    if let Some(how) = how {
        return Some(Verdict::gap(
            GAP_SHOWN - 0.1,
            format!(
                "{len} bytes resent {} after their previous transmission, but the receiver already had them: {how}. \
                 The resend was spurious (the ACK came late or was lost, not the data): nobody waited for these \
                 bytes, not a stall",
                r.since_prev
            ),
        ));
    }
    (r.d.length > t.rto_max + r.d.path_rtt).then(|| {
        Verdict::wait(
            NO_SIGNATURE,
            format!(
                "{len} bytes resent after {}, longer than any retransmission timer (TCP_RTO_MAX 120 s with backoff): \
                 the capture was paused, spliced or its clock jumped",
                r.d.length
            ),
        )
    })
}

/// RFC 1191 / RFC 8201: an ICMP fragmentation-needed about the sender's segments since the
/// range was last sent; Linux `tcp_v4_mtu_reduced` resends at the new MSS at once
/// (`tcp_simple_retransmit`), and the rest of the too-big flight follows as the ACKs open the
/// window: a resend right after an ACK (within the capture-to-sender round trip and 2 ms), with
/// the ICMP earlier in the flow, is that recovery too, not a timeout.
fn path_mtu(r: &Resent, ev: &mut Ev) -> Option<Verdict> {
    let (c, d, h) = (r.c, r.d, r.d.h);
    let (it, iframe, mtu) = &c.icmp_frag.filter(|(it, _, _)| *it <= c.end)?;
    let since_icmp = *it >= r.prev_t.min(c.start);
    let released = c.ack.filter(|a| a.t >= c.start && c.end.since(a.t) <= RELEASE_SLACK + d.back);
    if !since_icmp && released.is_none() {
        return None;
    }
    ev.add(*it, *iframe, format!("ICMP fragmentation needed for {h}'s segment, next-hop MTU {mtu}"));
    let how = match released {
        Some(a) if !since_icmp => {
            ev.add(a.t, a.frame, format!("{} ACK", d.p));
            format!(
                "right after {}'s ACK ({} before), as the window let the re-cut flight go, after an ICMP \
                 fragmentation-needed (next-hop MTU {mtu}) {} earlier",
                d.p,
                c.end.since(a.t),
                c.end.since(*it)
            )
        }
        _ => {
            format!("{} after an ICMP fragmentation-needed (next-hop MTU {mtu}) about {h}'s segments", c.end.since(*it))
        }
    };
    Some(Verdict::stall(
        Cause::PathMtu,
        SIGNATURE,
        format!(
            "{} bytes resent {how}: the path's MTU was smaller than {h}'s segments, the router dropped them, and \
             {h} resent at the smaller size (path MTU discovery, RFC 1191 / RFC 8201; Linux tcp_v4_mtu_reduced)",
            c.seg.len
        ),
    ))
}

/// RFC 5681 3.2, RFC 6675: three duplicate ACKs (or a SACK dupack) since the range was last
/// sent, and the resend promptly after the third: the ACK's way to the sender and back to the
/// capture point, a RACK reordering window (RFC 8985 6.2: min_rtt/4), 2 ms and a jiffy.
fn fast_retransmit(r: &Resent) -> Option<Verdict> {
    let (c, d) = (r.c, r.d);
    let prompt = d.back + Duration(d.path_rtt.0 / 4) + RELEASE_SLACK + c.timers.jiffy;
    let trigger = c
        .third_dupack
        .filter(|t3| *t3 >= r.prev_t && c.end.since(*t3) <= prompt)
        .or(c.last_sack_dupack.filter(|ts| c.sack_seen && *ts >= r.prev_t && c.end.since(*ts) <= prompt));
    if !r.enough_dups || (trigger.is_none() && r.kernel_state != Some(CA_RECOVERY)) {
        return None;
    }
    Some(Verdict::stall(
        Cause::FastRetransmit,
        if r.kernel_state == Some(CA_RECOVERY) { WRITES_AND_SIGNATURE } else { SIGNATURE },
        format!(
            "{} bytes resent after {} duplicate ACKs{} from {} since their previous transmission, {} after the third: \
             fast retransmit (RFC 5681 3.2), {} after the last data",
            c.seg.len,
            c.dupacks,
            if c.sack_seen { " with SACK blocks" } else { "" },
            d.p,
            trigger.map_or_else(|| "?".to_string(), |t3| c.end.since(t3).to_string()),
            d.length
        ),
    ))
}

/// RFC 8985 7.3 (Linux `tcp_send_loss_probe`): the last outstanding segment resent, the
/// first time, with no duplicate ACKs to trigger a fast retransmit: the loss-probe timer (PTO
/// = 2 x SRTT, plus TCP_RTO_MIN with one segment out, `tcp_schedule_loss_probe`) fires before
/// the RTO. With one segment out the two timers fall together (about 200 ms), so the packets
/// name the probe at a lower confidence, the RTO beside it; the kernel's congestion state at
/// the resend decides (a probe is sent in Open, `tcp_schedule_loss_probe`; an RTO enters
/// Loss first, `tcp_enter_loss`).
fn tail_loss_probe(r: &Resent) -> Option<Verdict> {
    let (c, t) = (r.c, &r.c.timers);
    let rto_floor = Duration(t.rto_min.0.saturating_sub(t.jiffy.0));
    match r.kernel_state {
        Some(CA_LOSS | CA_RECOVERY) => return None,
        Some(s) => {
            return Some(Verdict::stall(
                Cause::TailLossProbe,
                WRITES_AND_SIGNATURE,
                format!(
                    "{} bytes resent {} after their previous transmission while the kernel's congestion state was {} \
                     (not Loss: no retransmission timeout): Linux's tail-loss probe (RFC 8985 7.3, \
                     tcp_send_loss_probe)",
                    c.seg.len,
                    r.since_prev,
                    ca_state_name(s)
                ),
            ))
        }
        None => {}
    }
    if c.resend == Resend::Tail && r.since_prev < rto_floor {
        return Some(Verdict::stall(
            Cause::TailLossProbe,
            SIGNATURE_PARTIAL + 0.05,
            format!(
                "the last outstanding segment ({} bytes) was resent {} after it was sent, before the RTO, with \
                 earlier data still unacknowledged: a tail-loss probe (RFC 8985 7.3)",
                c.seg.len, r.since_prev
            ),
        ));
    }
    // The first resend of the only outstanding segment, at the probe's interval.
    let lone = c.resend == Resend::Head && c.snap.out_count == 1 && !c.prev_was_resend && !r.enough_dups;
    let pto = t.pto_floor(r.d.path_rtt, true);
    let rto_hi = Duration(t.rto_min.0 + 2 * r.d.path_rtt.0 + 3 * t.jiffy.0);
    (lone && r.since_prev >= pto && r.since_prev <= rto_hi).then(|| {
        let mut v = Verdict::stall(
            Cause::TailLossProbe,
            SIGNATURE_PARTIAL,
            format!(
                "the only outstanding segment ({} bytes) was resent {} after it was sent, its first resend: with one \
                 segment out Linux's loss probe fires at 2 x SRTT + 200 ms capped by the RTO \
                 (tcp_schedule_loss_probe), before the retransmission timer; the packets cannot tell the two apart, \
                 the kernel's congestion state can (Open for a probe, Loss for a timeout)",
                c.seg.len, r.since_prev
            ),
        );
        v.alternatives = vec![Cause::RetransmissionTimeout];
        v
    })
}

/// RFC 6298 5.4-5.6 (Linux `tcp_retransmit_timer`): the range resent at least TCP_RTO_MIN
/// after its previous transmission, backing off when that was itself a resend; sooner, with no
/// duplicate ACKs just before, a lowered rto_min or a RACK reordering timer (RFC 8985 6.2).
fn timeout(r: &Resent) -> Verdict {
    let (c, t, len, since_prev) = (r.c, &r.c.timers, r.c.seg.len, r.since_prev);
    if since_prev + t.jiffy < t.rto_min && r.kernel_state != Some(CA_LOSS) {
        return Verdict::stall(
            Cause::RetransmissionTimeout,
            CONSISTENT,
            format!(
                "{len} bytes resent {since_prev} after their previous transmission with no duplicate ACKs just \
                 before: shorter than Linux's 200 ms minimum RTO, so a lowered rto_min route metric or a RACK \
                 reordering timer (RFC 8985 6.2) sent it"
            ),
        );
    }
    let how = match c.resend {
        Resend::FillsHole => "filled a sequence hole (lost between the sender and the capture point)",
        Resend::KernelOnly => "were resent (the kernel reported it; the first transmission never reached the capture)",
        _ => "were resent",
    };
    let backoff = if c.prev_was_resend {
        " after an earlier resend of the same range: the timer backed off (doubled, RFC 6298 5.5)"
    } else {
        ""
    };
    let dup_note = if r.enough_dups {
        format!("; the {} duplicate ACKs came long before, so they did not trigger it", c.dupacks)
    } else {
        String::new()
    };
    Verdict::stall(
        Cause::RetransmissionTimeout,
        if r.kernel_state == Some(CA_LOSS) {
            WRITES_AND_SIGNATURE
        } else if matches!(c.resend, Resend::FillsHole | Resend::KernelOnly) {
            SIGNATURE_PARTIAL + 0.1
        } else {
            SIGNATURE
        },
        format!(
            "{len} bytes {how} {since_prev} after their previous transmission{backoff}, with no ACK for them: the \
             retransmission timer fired (at least TCP_RTO_MIN 200 ms, RFC 6298 5.5){dup_note}{}",
            if c.snap.out_count <= 1 {
                "; with one segment in flight a tail-loss probe fires at the same time"
            } else {
                ""
            }
        ),
    )
}

/// RFC 8985 7.3 (Linux `tcp_send_loss_probe`): when the loss-probe timer fires with new data
/// ready and the window open, the probe is that new data, not a resend. The signature: new
/// bytes sent with earlier data unacknowledged, no ACK since the last transmission for at
/// least the PTO (`tcp_schedule_loss_probe`), and the receiver's answer a SACK of the new
/// bytes with its ACK still below them: they arrived, the earlier data did not. The new bytes
/// had waited (held by Nagle or the window behind the lost data) until the timer.
pub(super) fn new_data_probe(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    if c.resend != Resend::No || c.snap.out_count == 0 || c.ack.is_some() {
        return None;
    }
    let a = c.answer.filter(|a| a.sacked_above_hole)?;
    let quiet = c.quiet_since?;
    let pto = c.timers.pto_floor(d.path_rtt, c.snap.out_count == 1);
    if quiet < pto {
        return None;
    }
    if let Some(s) = c.snap.first_sent {
        ev.add(s.t, s.frame, format!("{} data {} B, never acknowledged", d.h, s.len));
    }
    ev.add(a.t, a.frame, format!("{} SACK of the new bytes, ACK below them: earlier data lost", d.p));
    let (conf, state) = match c.kernel_cong.filter(|(kt, _, _)| *kt <= c.end) {
        Some((_, _, s)) if s >= CA_RECOVERY => (SIGNATURE_PARTIAL, format!("; the kernel was in {}", ca_state_name(s))),
        _ => (SIGNATURE, String::new()),
    };
    Some(Verdict::stall(
        Cause::TailLossProbe,
        conf,
        format!(
            "{} sent {} new bytes {quiet} after its last transmission or ACK, with {} bytes unacknowledged and no ACK \
             to release them; {}'s answer SACKs the new bytes with its ACK below them, so the earlier data was lost: \
             the new bytes left as Linux's tail-loss probe (RFC 8985 7.3, tcp_send_loss_probe sends new data when \
             it has some), at least the probe timeout ({pto}) after the last send{state}",
            d.h, c.seg.len, c.snap.out_bytes, d.p
        ),
    ))
}
