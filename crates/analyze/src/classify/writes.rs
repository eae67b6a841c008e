//! Rule family 1: the writer's writes (kernel `sendmsg` from `tcp:tcp_sendmsg_locked`, or
//! the lab's and the model's record of their own writes) decide whether the bytes existed
//! before the gap. Without them (a capture), the other families infer it from the packets.

use super::confidence::{CONSISTENT, SIGNATURE, SIGNATURE_PARTIAL, WRITES_AND_SIGNATURE};
use super::{Derived, Ev, GapContext, Verdict};
use crate::dir::Resend;
use crate::write_log::WriteRec;
use crate::RecordKind;
use trace::{Cause, Evidence};

/// "kernel: sendmsg 54 bytes", "model: write 54 bytes".
pub(super) fn describe(w: &WriteRec) -> String {
    match w.source {
        Evidence::Kernel(_) => format!("kernel: sendmsg {} bytes", w.bytes),
        Evidence::Model(_) => format!("model: write {} bytes", w.bytes),
        _ => format!("application write {} bytes", w.bytes),
    }
}

/// The bytes were written during the gap and left less than `min_gap` after their write:
/// nothing held them, the gap before was the writer's (RFC 9293 3.7.4's Nagle and every other
/// hold keep bytes that exist; bytes not yet written are no stall).
pub(super) fn written_as_sent(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    let w = c.written?;
    if c.resend != Resend::No {
        return None;
    }
    ev.add(w.t, w.source, describe(&w));
    if w.t <= c.start || d.length >= c.min_gap {
        return None;
    }
    Some(Verdict::gap(
        WRITES_AND_SIGNATURE,
        format!(
            "{h}'s application wrote these {} bytes {} before they left ({}): nothing held them, the {} before \
             was the writer's own (think time or idle), not a TCP stall",
            c.seg.len,
            c.end.since(w.t),
            describe(&w),
            c.end.since(c.start),
            h = d.h
        ),
    ))
}

/// The writes showed the bytes existed from `held_from`, `d.length` before they left: the
/// wait is proven. A verdict that found no hold becomes a wait with no signature; a mechanism
/// whose signature shows reaches the top band.
pub(super) fn proven(c: &GapContext, d: &Derived, mut v: Verdict) -> Verdict {
    let Some(w) = c.written else { return v };
    if c.resend != Resend::No || v.kind == RecordKind::Gap && v.confidence >= WRITES_AND_SIGNATURE {
        return v;
    }
    let note = format!("; {} wrote them {} before they left ({}), so they waited", d.h, c.end.since(w.t), describe(&w));
    match v.kind {
        RecordKind::Gap | RecordKind::Wait => {
            v = Verdict::wait(
                CONSISTENT,
                format!(
                    "{} bytes written before the gap waited {} and left with nothing in the packets that held or \
                     released them (no resend, no window at its limit, no ACK just before){note}",
                    c.seg.len, d.length
                ),
            );
        }
        RecordKind::Ambiguous => {
            if v.cause.names_a_mechanism() {
                v.kind = RecordKind::Stall;
                v.alternatives.clear();
                v.confidence = if v.cause == Cause::ProbeTimer { WRITES_AND_SIGNATURE } else { SIGNATURE_PARTIAL };
                v.detail = format!("{}{note}", v.detail);
            } else {
                v = Verdict {
                    kind: RecordKind::Wait,
                    alternatives: Vec::new(),
                    detail: format!("{}{note}", v.detail),
                    ..v
                };
            }
        }
        RecordKind::Stall => {
            v.confidence = if v.confidence >= SIGNATURE {
                WRITES_AND_SIGNATURE
            } else if v.confidence >= SIGNATURE_PARTIAL {
                SIGNATURE
            } else {
                SIGNATURE_PARTIAL.max(v.confidence)
            };
            v.detail = format!("{}{note}", v.detail);
        }
    }
    v
}
