//! Rule family 3: the peer's receive window held the data (RFC 9293 3.8.6.2.1: the usable
//! window is snd_una + snd_wnd - snd_nxt; Linux `tcp_snd_wnd_test`; zero-window probes,
//! `tcp_send_probe0`). A window claim needs the flight at the window (or a zero window) AND
//! the release right after the window opened: data that left long after the window opened
//! was not held by it.

use super::confidence::{SIGNATURE, SIGNATURE_PARTIAL, WRITES_AND_SIGNATURE};
use super::{Derived, Ev, GapContext, Verdict};
use crate::dir::Resend;
use crate::timers::RELEASE_SLACK;
use trace::Cause;

/// A zero window whose update released the segment within one capture-to-sender round trip:
/// the window held it, even when the segment resends a range (the resend waited for the
/// window: RFC 9293 3.8.6.2.1 holds retransmissions too; Linux `tcp_retransmit_skb` checks
/// `tcp_wnd_end`).
pub(super) fn released_by_update(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    let (wt, _) = c.window_opened?;
    if !c.zero_window || c.resend == Resend::No || c.end.since(wt) > RELEASE_SLACK + d.back {
        return None;
    }
    rule(c, d, ev)
}

pub(super) fn rule(c: &GapContext, d: &Derived, ev: &mut Ev) -> Option<Verdict> {
    if c.one_direction {
        return None;
    }
    let (h, p) = (d.h, d.p);
    let upper = RELEASE_SLACK + d.back;
    // The kernel's own window state at the last ACK before the release, when reported
    // (`tcp:tcp_probe`: snd_wnd, snd_nxt - snd_una).
    let kernel = c.kernel_state.filter(|(kt, _, _)| *kt <= c.end && *kt >= c.start);
    if c.zero_window {
        return zero_window(c, d, kernel.is_some(), ev);
    }
    if c.snap.out_count == 0 || !window_closed(c) {
        return None;
    }
    // The flight by sequence numbers must be the flight the capture saw: a capture that skipped
    // data (sequence numbers far beyond the bytes captured in flight) shows no window at its limit.
    let seq_flight = u64::from(c.snap.snd_nxt - c.snap.snd_una);
    if seq_flight > c.snap.out_bytes + 2 * u64::from(c.mss) {
        return None;
    }
    let (wnd, _) = c.snap.peer_wnd.unwrap_or((0, true));
    let in_flight = u64::from(c.snap.snd_nxt - c.snap.snd_una);
    // The release must follow the ACK that opened the window.
    let a = c.ack?;
    if c.end.since(a.t) > upper {
        return None;
    }
    if let Some((kt, kf, s)) = kernel {
        let usable = u64::from(s.snd_wnd).saturating_sub(u64::from(s.in_flight()));
        if usable >= u64::from(c.seg.len.min(c.mss)) {
            // The kernel saw room in the window: not what held it.
            return None;
        }
        ev.add(kt, kf, format!("kernel: peer window {} bytes, {} in flight", s.snd_wnd, s.in_flight()));
    }
    ev.add(a.t, a.frame, format!("{p} ACK opening the window"));
    Some(Verdict::stall(
        Cause::RwndLimited,
        if kernel.is_some() { WRITES_AND_SIGNATURE } else { SIGNATURE_PARTIAL + 0.05 },
        format!(
            "{p} advertised a {wnd}-byte window with {in_flight} bytes in flight, so {h} could not send the next \
             {} bytes until the ACK opened it; they left {} after it",
            c.seg.len,
            c.end.since(a.t)
        ),
    ))
}

/// A zero window (RFC 9293 3.8.6.2.1): the data left right after the update (or the update is
/// not in the capture); data that left long after the window opened was not held by it.
fn zero_window(c: &GapContext, d: &Derived, kernel: bool, ev: &mut Ev) -> Option<Verdict> {
    let (h, p) = (d.h, d.p);
    let upper = RELEASE_SLACK + d.back;
    let opened = c.window_opened.filter(|(wt, _)| *wt <= c.end);
    if let Some((wt, _)) = opened {
        if c.end.since(wt) > upper {
            // The window was open for longer than a release takes: something else held
            // the data, or nothing did.
            return None;
        }
    }
    if let Some((wt, wf)) = opened {
        ev.add(wt, wf, format!("{p} window update"));
    }
    let conf = if kernel {
        WRITES_AND_SIGNATURE
    } else if opened.is_some() {
        SIGNATURE
    } else {
        SIGNATURE_PARTIAL
    };
    Some(Verdict::stall(
        Cause::RwndLimited,
        conf,
        format!(
            "{p} advertised a zero window with {} bytes in flight, so {h} could not send until the window opened{}",
            c.snap.out_bytes,
            match opened {
                Some((wt, _)) => format!("; the data left {} after the update", c.end.since(wt)),
                None => " (the update itself is not in the capture)".to_string(),
            }
        ),
    ))
}

/// RFC 9293 3.8.6.2.1: the sender cannot send `len` bytes when the usable window (snd_una +
/// snd_wnd - snd_nxt) is smaller (Linux `tcp_snd_wnd_test`). Only with a known window scale:
/// an unscaled window is known exactly when the handshake showed no scale option.
pub(super) fn window_closed(c: &GapContext) -> bool {
    let Some((wnd, known)) = c.snap.peer_wnd else { return false };
    if wnd == 0 {
        return true;
    }
    if !known {
        return false;
    }
    let in_flight = u64::from(c.snap.snd_nxt - c.snap.snd_una);
    let usable = wnd.saturating_sub(in_flight);
    usable < u64::from(c.seg.len.min(c.mss))
}
