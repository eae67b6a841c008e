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
use trace::{Cause, Duration};

/// `enum tcp_ca_state` (include/net/tcp.h): TCP_CA_Recovery, TCP_CA_Loss.
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;

pub(super) fn rule(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    if c.resend == Resend::No {
        return None;
    }
    let t = &c.timers;
    let (h, p) = (d.h, d.p);
    let len = c.seg.len;
    let (prev_t, prev_f) = c.resent_prev_tx.unwrap_or((c.start, c.start_frame));
    let since_prev = c.end.since(prev_t);
    if c.resend == Resend::KernelOnly {
        if let Some((kt, kf, _, _)) = c.kernel_retx {
            ev.add(kt, kf, format!("kernel: retransmit {len} bytes"));
        }
    } else {
        ev.add(prev_t, prev_f, format!("{h} sent this range before"));
    }
    let rto_floor = Duration(t.rto_min.0.saturating_sub(t.jiffy.0));
    let kernel_state = c.kernel_cong.filter(|(kt, _, _)| *kt <= c.end).map(|(kt, kf, s)| {
        ev.add(kt, kf, format!("kernel: congestion state {}", if s == CA_LOSS { "loss" } else { "recovery" }));
        s
    });
    let icmp = c.icmp_frag.filter(|(it, _, _)| *it >= prev_t.min(c.start) && *it <= c.end);
    // Promptly after the third duplicate ACK: the ACK's way to the sender and back to the
    // capture point, a RACK reordering window (RFC 8985 6.2: min_rtt/4), and a jiffy.
    let prompt = d.back + Duration(d.path_rtt.0 / 4) + Duration::from_millis(2) + t.jiffy;
    let dup_trigger = c.third_dupack.filter(|t3| *t3 >= prev_t && c.end.since(*t3) <= prompt);
    let enough_dups = c.dupacks >= 3 || (c.sack_seen && c.dupacks >= 1);
    let mut v = if c.spurious == Some(true) {
        Verdict::wait(
            AMBIGUOUS + 0.05,
            format!(
                "{len} bytes resent {since_prev} after their previous transmission, but the range had arrived: \
                 the first ACK after the resend echoes the original's timestamp (Eifel, RFC 3522), so the ACK \
                 came late, not the data lost (a slow or starved receiver)"
            ),
        )
    } else if d.length > t.rto_max + d.path_rtt {
        Verdict::wait(
            NO_SIGNATURE,
            format!(
                "{len} bytes resent after {}, longer than any retransmission timer (TCP_RTO_MAX 120 s with \
                 backoff): the capture was paused, spliced or its clock jumped",
                d.length
            ),
        )
    } else if let Some((it, iframe, mtu)) = icmp {
        ev.add(it, iframe, format!("ICMP fragmentation needed for {h}'s segment, next-hop MTU {mtu}"));
        Verdict::stall(
            Cause::PathMtu,
            SIGNATURE,
            format!(
                "{len} bytes resent {} after an ICMP fragmentation-needed (next-hop MTU {mtu}) about {h}'s segments: \
                 the path's MTU was smaller than {h}'s segments, the router dropped them, and {h} resent at the \
                 smaller size (path MTU discovery, RFC 1191 / RFC 8201; Linux tcp_v4_mtu_reduced)",
                c.end.since(it)
            ),
        )
    } else if enough_dups && (dup_trigger.is_some() || kernel_state == Some(CA_RECOVERY)) {
        Verdict::stall(
            Cause::FastRetransmit,
            if kernel_state == Some(CA_RECOVERY) { WRITES_AND_SIGNATURE } else { SIGNATURE },
            format!(
                "{len} bytes resent after {} duplicate ACKs{} from {p} since their previous transmission, {} after \
                 the third: fast retransmit (RFC 5681 3.2), {} after the last data",
                c.dupacks,
                if c.sack_seen { " with SACK blocks" } else { "" },
                dup_trigger.map_or_else(|| "?".to_string(), |t3| c.end.since(t3).to_string()),
                d.length
            ),
        )
    } else if c.resend == Resend::Tail && since_prev < rto_floor {
        Verdict::stall(
            Cause::TailLossProbe,
            SIGNATURE_PARTIAL + 0.05,
            format!(
                "the last outstanding segment ({len} bytes) was resent {since_prev} after it was sent, before the \
                 RTO, with earlier data still unacknowledged: a tail-loss probe (RFC 8985 7.3)"
            ),
        )
    } else if since_prev + t.jiffy >= t.rto_min || kernel_state == Some(CA_LOSS) {
        let how = match c.resend {
            Resend::FillsHole => "filled a sequence hole (lost between the sender and the capture point)",
            Resend::KernelOnly => {
                "were resent (the kernel reported it; the first transmission never reached the capture)"
            }
            _ => "were resent",
        };
        let backoff = if c.prev_was_resend {
            " after an earlier resend of the same range: the timer backed off (doubled, RFC 6298 5.5)"
        } else {
            ""
        };
        let dup_note = if enough_dups {
            format!("; the {} duplicate ACKs came long before, so they did not trigger it", c.dupacks)
        } else {
            String::new()
        };
        Verdict::stall(
            Cause::RetransmissionTimeout,
            if kernel_state == Some(CA_LOSS) {
                WRITES_AND_SIGNATURE
            } else if matches!(c.resend, Resend::FillsHole | Resend::KernelOnly) {
                SIGNATURE_PARTIAL + 0.1
            } else {
                SIGNATURE
            },
            format!(
                "{len} bytes {how} {since_prev} after their previous transmission{backoff}, with no ACK for them: \
                 the retransmission timer fired (at least TCP_RTO_MIN 200 ms, RFC 6298 5.5){dup_note}{}",
                if c.snap.out_count <= 1 {
                    "; with one segment in flight a tail-loss probe fires at the same time"
                } else {
                    ""
                }
            ),
        )
    } else {
        Verdict::stall(
            Cause::RetransmissionTimeout,
            CONSISTENT,
            format!(
                "{len} bytes resent {since_prev} after their previous transmission with no duplicate ACKs just \
                 before: shorter than Linux's 200 ms minimum RTO, so a lowered rto_min route metric or a RACK \
                 reordering timer (RFC 8985 6.2) sent it"
            ),
        )
    };
    if c.resend == Resend::KernelOnly && v.kind == crate::RecordKind::Stall {
        v.confidence = v.confidence.max(SIGNATURE);
    }
    Some(v)
}
