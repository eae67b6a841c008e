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

use super::confidence::{AMBIGUOUS, CONSISTENT, NO_SIGNATURE, SIGNATURE, SIGNATURE_PARTIAL, WRITES_AND_SIGNATURE};
use super::{Derived, Ev, GapContext, Resend, Verdict};
use trace::{Cause, Duration, Instant};

/// `enum tcp_ca_state` (include/net/tcp.h): TCP_CA_Recovery, TCP_CA_Loss.
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;

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
    let kernel_state = c.kernel_cong.filter(|(kt, _, _)| *kt <= c.end).map(|(kt, kf, s)| {
        ev.add(kt, kf, format!("kernel: congestion state {}", if s == CA_LOSS { "loss" } else { "recovery" }));
        s
    });
    let r = Resent {
        c,
        d,
        prev_t,
        since_prev: c.end.since(prev_t),
        kernel_state,
        enough_dups: c.dupacks >= 3 || (c.sack_seen && c.dupacks >= 1),
    };
    let mut v = not_lost(&r)
        .or_else(|| path_mtu(&r, ev))
        .or_else(|| fast_retransmit(&r))
        .or_else(|| tail_loss_probe(&r))
        .unwrap_or_else(|| timeout(&r));
    if c.resend == Resend::KernelOnly && v.kind == crate::RecordKind::Stall {
        v.confidence = v.confidence.max(SIGNATURE);
    }
    Some(v)
}

/// A resend whose first ACK echoes the original's timestamp (Eifel, RFC 3522: spurious, the
/// ACK was late), or later than any timer (TCP_RTO_MAX): a wait, not a loss.
fn not_lost(r: &Resent) -> Option<Verdict> {
    let (c, len, t) = (r.c, r.c.seg.len, &r.c.timers);
    if c.spurious == Some(true) {
        return Some(Verdict::wait(
            AMBIGUOUS + 0.05,
            format!(
                "{len} bytes resent {} after their previous transmission, but the range had arrived: the first ACK \
                 after the resend echoes the original's timestamp (Eifel, RFC 3522), so the ACK came late, not the \
                 data lost (a slow or starved receiver)",
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
    let released = c.ack.filter(|a| a.t >= c.start && c.end.since(a.t) <= Duration::from_millis(2) + d.back);
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
    let prompt = d.back + Duration(d.path_rtt.0 / 4) + Duration::from_millis(2) + c.timers.jiffy;
    let trigger = c.third_dupack.filter(|t3| *t3 >= r.prev_t && c.end.since(*t3) <= prompt);
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

/// RFC 8985 7.3 (Linux `tcp_send_loss_probe`): the last outstanding segment resent before the
/// RTO while earlier data is unacknowledged.
fn tail_loss_probe(r: &Resent) -> Option<Verdict> {
    let t = &r.c.timers;
    let rto_floor = Duration(t.rto_min.0.saturating_sub(t.jiffy.0));
    (r.c.resend == Resend::Tail && r.since_prev < rto_floor).then(|| {
        Verdict::stall(
            Cause::TailLossProbe,
            SIGNATURE_PARTIAL + 0.05,
            format!(
                "the last outstanding segment ({} bytes) was resent {} after it was sent, before the RTO, with \
                 earlier data still unacknowledged: a tail-loss probe (RFC 8985 7.3)",
                r.c.seg.len, r.since_prev
            ),
        )
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
