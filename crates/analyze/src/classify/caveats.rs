//! Rule family 7: what the capture hides lowers the confidence, and the text says so. A stall
//! whose confidence falls below [`STALL_MIN`] is no longer counted: it becomes ambiguous.

use super::confidence::{factor, STALL_MIN};
use super::{Derived, GapContext, Verdict};
use crate::RecordKind;
use trace::{CapturePoint, Cause};

pub(super) fn apply(c: &GapContext, d: &Derived, v: &mut Verdict) {
    let t = &c.timers;
    let h = d.h;
    let mut caveats = String::new();
    // A segment lost between its sender and the capture point, then resent by the RTO, looks
    // like new data here: only a capture at the sender (or on the same host) rules that out.
    let at_sender = c.captured_at_held_side();
    if v.cause == Cause::Application
        && c.written.is_none()
        && c.kernel_retx.is_none()
        && !at_sender
        && d.length + t.jiffy >= t.rto_min
        && d.length <= t.rto_max
        && !v.alternatives.contains(&Cause::RetransmissionTimeout)
    {
        v.confidence = v.confidence.min(0.45);
        caveats.push_str(&format!(
            " [or a retransmission after a timeout: a segment {h} sent may have been lost before the capture \
             point, which this capture cannot show]"
        ));
    }
    let timing_based = matches!(
        v.cause,
        Cause::NagleDelayedAck | Cause::CwndLimited | Cause::DelayedAck | Cause::ProbeTimer | Cause::TailLossProbe
    );
    if !c.rtt_from_handshake && timing_based && c.written.is_none() {
        v.confidence *= factor::NO_HANDSHAKE;
        caveats.push_str(if c.path_rtt.is_some() {
            " [no handshake: the path RTT is estimated from ACK timing]"
        } else {
            " [no handshake and no RTT sample: ACK delays unmeasured]"
        });
    }
    if c.ack_after_release && timing_based {
        v.confidence *= factor::ACK_AFTER_RELEASE;
        caveats.push_str(" [the capture stamped the releasing ACK just after the data it released]");
    }
    if c.super_packets && c.written.is_none() {
        v.confidence *= factor::SUPER_PACKETS;
        caveats.push_str(" [GRO/TSO super-packets: segment boundaries hidden]");
    }
    if c.capture_point == CapturePoint::Unknown && !timing_based && v.cause != Cause::Application {
        v.confidence *= factor::UNKNOWN_CAPTURE_POINT;
    }
    if c.data_only && v.cause != Cause::Application && v.kind != RecordKind::Gap {
        v.confidence *= factor::NO_HANDSHAKE;
        caveats.push_str(" [the capture holds data segments only: pure ACKs were filtered out, so what released these bytes is not in it]");
    } else if c.data_only && v.kind == RecordKind::Gap && c.snap.out_count > 0 {
        // "No ACK released them" rests on ACKs the filter removed: not shown.
        v.kind = RecordKind::Ambiguous;
        v.confidence = v.confidence.min(super::confidence::AMBIGUOUS);
        v.alternatives = vec![Cause::Unknown];
        caveats.push_str(
            " [the capture holds data segments only: an ACK that released these bytes may have been filtered out]",
        );
    }
    if let Some(tick) = c.ts_tick.filter(|_| timing_based && c.written.is_none()) {
        v.confidence *= factor::NO_HANDSHAKE;
        caveats
            .push_str(&format!(" [the capture's timestamps come in {tick} ticks: shorter intervals cannot be read]"));
    }
    if c.unseen_before {
        caveats.push_str(" [the capture never saw these bytes before: their first transmission was not captured]");
    }
    if v.kind == RecordKind::Stall && v.confidence < STALL_MIN {
        v.kind = RecordKind::Ambiguous;
        if !v.alternatives.contains(&Cause::Application) {
            v.alternatives.push(Cause::Application);
        }
    }
    v.detail.push_str(&caveats);
}
