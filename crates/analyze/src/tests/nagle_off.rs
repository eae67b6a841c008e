//! The one rule for "this sender showed Nagle off" (`Dir::nagle_off_at`), behind the verdicts
//! and what a capture shows (`FlowAnalysis::shown`) alike: a sub-MSS segment sent while an
//! earlier sub-MSS segment was unacknowledged (RFC 9293 3.7.4; Linux `tcp_nagle_check` with
//! `tcp_minshall_check` would have held it), unless an ACK that may have released it was stamped
//! just after it (reordered stamps) or the capture missed a packet of the peer's around it (a
//! jump in the peer's IPv4 IDs, `ip_select_ident_segs`).

use super::*;
use crate::dir::IdCounter;
use trace::{Endpoint::A, Endpoint::B};

/// B: 80 bytes, then 30 more at +0.05 ms with the 80 unacknowledged; A's pure ACK of `acked`
/// bytes of them at +0.2 ms; later a Nagle-looking release of B's (A's ACK 40 ms after B's 80
/// bytes, B's 23 bytes right after it). The verdict on that release says whether the first
/// part showed Nagle off.
fn script(acked: u32) -> Script {
    let mut s = Script::new();
    // Three requests of A's first (its IDs need a run of single steps to count its packets).
    s.data(0.5, A, 20).ack(0.6, B, 512).data(0.7, A, 20).ack(0.8, B, 512);
    s.data(1.0, A, 20).data(2.0, B, 80).data(2.05, B, 30);
    let b_end = s.seq[1];
    let (a_seq, b_start) = (s.seq[0], b_end - 110);
    s.raw(2_200_000, A, a_seq, b_start + acked, TcpFlags::ACK, 0, 512, None);
    s.data(200.0, A, 20).data(201.0, B, 80).ack(241.0, A, 512).data(241.1, B, 23).ack(241.2, A, 512);
    s
}

fn last_b(s: &Script) -> Cause {
    let r = s.records();
    r.iter().rev().find(|x| x.held == B).map(|x| x.cause).unwrap_or_else(|| panic!("{r:#?}"))
}

/// Numbers A's packets with consecutive IPv4 IDs from 100, skipping `skip` IDs before A's
/// packet number `at` (0-based, A's packets only).
fn number_a(s: &mut Script, at: usize, skip: u16) {
    let mut id = 100u16;
    for (k, e) in s.ev.iter_mut().filter(|e| e.from == A).enumerate() {
        if k == at {
            id += skip;
        }
        if let EventKind::Segment(seg) = &mut e.kind {
            seg.ip_id = Some(id);
        }
        id += 1;
    }
}

/// RFC 9293 3.4: an ACK covering the 30-byte segment itself was sent after that segment
/// reached A: it cannot have released it, so Nagle was off and B's later release is its
/// application's.
#[test]
fn an_ack_that_covers_the_segment_itself_does_not_hide_nagle_off() {
    assert_eq!(last_b(&script(110)), Cause::Application);
}

/// An ACK of the earlier 80 bytes only, stamped 0.15 ms after the 30-byte segment, may have
/// reached B before it sent them (stamps reordered within the capture's reorder window): no
/// sign of Nagle off, and the later release is Nagle's.
#[test]
fn an_ack_of_the_earlier_segment_stamped_just_after_may_have_released_it() {
    assert_eq!(last_b(&script(80)), Cause::NagleDelayedAck);
}

/// `ip_select_ident_segs` (include/net/ip.h): Linux numbers a connected socket's packets one
/// by one. A's packets numbered consecutively: nothing missed, Nagle off stands. A's first
/// packet after B's 30 bytes one ID further than expected: the capture missed a packet of A's
/// (perhaps the ACK of the 80 bytes that released the 30), so no sign of Nagle off.
#[test]
fn a_gap_in_the_peers_ip_ids_around_the_sign_takes_it_back() {
    // A's packets: SYN, ACK, three requests, the ACK at 2.2 ms (index 5), ...
    let mut whole = script(110);
    number_a(&mut whole, 5, 0);
    assert_eq!(last_b(&whole), Cause::Application);
    let mut missed = script(110);
    number_a(&mut missed, 5, 1);
    assert_eq!(last_b(&missed), Cause::NagleDelayedAck);
}

#[test]
fn ip_ids_count_packets_only_after_a_run_of_single_steps() {
    let mut c = IdCounter::default();
    for id in 10..13 {
        c.on_packet(Some(id), true);
    }
    assert_eq!(c.next(), None, "two steps are not enough");
    c.on_packet(Some(13), true);
    c.on_packet(Some(14), true);
    assert_eq!(c.next(), Some(15));
    // A super-packet of 3 segments: the step after it is not counted, and nothing is expected
    // right after it.
    c.on_packet(Some(15), false);
    assert_eq!(c.next(), None);
    c.on_packet(Some(18), true);
    assert_eq!(c.next(), Some(19));
    // Random IDs, zero IDs and IPv6 never count.
    let (mut r, mut z, mut v6) = (IdCounter::default(), IdCounter::default(), IdCounter::default());
    for id in [4711u16, 93, 60_001, 2_222, 31_000, 7, 40_404, 12] {
        r.on_packet(Some(id), true);
        z.on_packet(Some(0), true);
        v6.on_packet(None, true);
    }
    assert_eq!((r.next(), z.next(), v6.next()), (None, None, None));
    // The counter wraps at 2^16.
    let mut w = IdCounter::default();
    for id in [65_533u16, 65_534, 65_535, 0, 1] {
        w.on_packet(Some(id), true);
    }
    assert_eq!(w.next(), Some(2));
}
