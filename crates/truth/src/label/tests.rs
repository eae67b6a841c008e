//! The labeler on hand-made timelines (ms), one per rule; each test names the rule's source.

use super::*;
use trace::{Segment, TcpFlags};

const MS: u64 = 1_000_000;
const ISN_A: u32 = 1000;
const ISN_B: u32 = 5000;

fn seg(seq: u32, ack: u32, flags: u8, len: u32) -> Segment {
    Segment { ts: Some((1, 1)), ttl: Some(64), ..trace::testing::segment(seq, ack, flags, len) }
}

/// A's data at offset `off`, `len` bytes, at `t` ms.
fn a_data(t: u64, off: u32, len: u32) -> Pkt {
    Pkt { t_ns: t * MS, from: Endpoint::A, seg: seg(ISN_A + 1 + off, ISN_B + 1, TcpFlags::ACK | TcpFlags::PSH, len) }
}

/// B's pure ACK of A's bytes up to offset `upto`, at `t` ms (window 1000 << 7).
fn b_ack(t: u64, upto: u32) -> Pkt {
    let mut s = seg(ISN_B + 1, ISN_A + 1 + upto, TcpFlags::ACK, 0);
    s.window = 1000;
    Pkt { t_ns: t * MS, from: Endpoint::B, seg: s }
}

fn handshake() -> Vec<Pkt> {
    let mut syn = seg(ISN_A, 0, TcpFlags::SYN, 0);
    syn.mss = Some(1460);
    syn.wscale = Some(7);
    let mut synack = seg(ISN_B, ISN_A + 1, TcpFlags::SYN | TcpFlags::ACK, 0);
    synack.mss = Some(1460);
    synack.wscale = Some(7);
    vec![
        Pkt { t_ns: 0, from: Endpoint::A, seg: syn },
        Pkt { t_ns: MS / 10, from: Endpoint::B, seg: synack },
        Pkt { t_ns: MS / 5, from: Endpoint::A, seg: seg(ISN_A + 1, ISN_B + 1, TcpFlags::ACK, 0) },
    ]
}

fn w(t: u64, offset: u64, len: u32) -> Write {
    Write { t_ns: t * MS, offset, len, more: false, nodelay: false, cork: false }
}

fn run(d: &Direction) -> Vec<Label> {
    label(Side::Client, d, &Params::new(0))
}

#[test]
fn nagle_hold_released_by_a_delayed_ack_is_nagle_delayed_ack() {
    // RFC 9293 3.7.4 / tcp_nagle_check: 275 bytes unacknowledged, the 24 + 292 written after
    // it wait; the peer's ACK comes 40 ms later (TCP_DELACK_MIN) and they leave at once.
    let mut pkts = handshake();
    pkts.extend([a_data(100, 0, 275), b_ack(140, 275), a_data(140, 275, 316)]);
    let d = Direction {
        writes: vec![w(100, 0, 275), w(100, 275, 24), w(100, 299, 292)],
        at_sender: pkts,
        ..Default::default()
    };
    let l = run(&d);
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!((l[0].kind, l[0].cause), (Kind::Negative, None), "the first write left as written");
    assert_eq!((l[1].kind, l[1].cause), (Kind::Wait, Some(Cause::NagleDelayedAck)), "{l:?}");
    assert_eq!((l[1].start, l[1].end, l[1].written_at, l[1].left_at), (275, 591, Some(100 * MS), 140 * MS));
}

#[test]
fn think_time_then_immediate_send_is_a_negative() {
    let mut pkts = handshake();
    pkts.extend([a_data(300, 0, 100), b_ack(301, 100), a_data(700, 100, 100)]);
    let d = Direction { writes: vec![w(300, 0, 100), w(700, 100, 100)], at_sender: pkts, ..Default::default() };
    let l = run(&d);
    assert!(l.iter().all(|l| l.kind == Kind::Negative), "{l:?}");
    assert_eq!(l.len(), 2);
}

#[test]
fn resend_in_state_loss_is_a_timeout_and_in_state_open_a_loss_probe() {
    // tcp_retransmit_skb after tcp_enter_loss (RFC 6298 5.5) vs tcp_send_loss_probe (RFC 8985 7.3).
    for (state, cause) in [(4u8, Cause::RetransmissionTimeout), (0, Cause::TailLossProbe), (3, Cause::FastRetransmit)] {
        let mut pkts = handshake();
        pkts.extend([a_data(100, 0, 100), a_data(320, 0, 100), b_ack(321, 100)]);
        let d = Direction {
            writes: vec![w(100, 0, 100)],
            at_sender: pkts,
            resends: vec![Resend { t_ns: 320 * MS - 10_000, seq: ISN_A + 1, len: 100, ca_state: state }],
            ..Default::default()
        };
        let l = run(&d);
        let r = l.iter().find(|l| l.left_at == 320 * MS).expect("the resend is labelled");
        assert_eq!((r.kind, r.cause, r.first_left), (Kind::Wait, Some(cause), 100 * MS));
    }
}

#[test]
fn a_resend_the_receiver_had_acknowledged_is_spurious() {
    let mut pkts = handshake();
    pkts.extend([a_data(100, 0, 100), a_data(320, 0, 100), b_ack(321, 100)]);
    let at_receiver = vec![b_ack(101, 100)];
    let d = Direction {
        writes: vec![w(100, 0, 100)],
        at_sender: pkts,
        at_receiver,
        resends: vec![Resend { t_ns: 320 * MS, seq: ISN_A + 1, len: 100, ca_state: 4 }],
        ..Default::default()
    };
    let r = run(&d).into_iter().find(|l| l.left_at == 320 * MS).unwrap();
    assert_eq!(r.kind, Kind::Negative, "{r:?}");
}

#[test]
fn cork_with_nothing_in_flight_is_the_probe_timer() {
    // tcp(7) TCP_CORK: a partial frame goes after 200 ms (tcp_probe_timer).
    let mut pkts = handshake();
    pkts.extend([a_data(300, 0, 200)]);
    let mut ws = vec![w(100, 0, 120), w(100, 120, 80)];
    for x in &mut ws {
        x.cork = true;
    }
    let d = Direction { writes: ws, at_sender: pkts, ..Default::default() };
    let l = run(&d);
    assert_eq!((l[0].kind, l[0].cause), (Kind::Wait, Some(Cause::ProbeTimer)), "{l:?}");
}

#[test]
fn bytes_beyond_the_peer_window_are_rwnd_limited() {
    // RFC 9293 3.8.6.2.1 / tcp_snd_wnd_test: zero window, then an update opens it.
    let mut pkts = handshake();
    let mut zero = b_ack(101, 100);
    zero.seg.window = 0;
    let mut open = b_ack(150, 100);
    open.seg.window = 100;
    pkts.extend([a_data(100, 0, 100), zero, open, a_data(150, 100, 100)]);
    let d = Direction { writes: vec![w(100, 0, 100), w(102, 100, 100)], at_sender: pkts, ..Default::default() };
    let l = run(&d);
    let r = l.iter().find(|l| l.left_at == 150 * MS).unwrap();
    assert_eq!((r.kind, r.cause), (Kind::Wait, Some(Cause::RwndLimited)), "{l:?}");
}

#[test]
fn a_flight_at_the_kernels_cwnd_is_cwnd_limited() {
    // tcp_cwnd_test: in flight >= snd_cwnd (RFC 5681 3.1); the cwnd from tcp:tcp_probe.
    let mut pkts = handshake();
    pkts.extend([a_data(100, 0, 100), a_data(100, 100, 100), b_ack(150, 200), a_data(150, 200, 100)]);
    let d = Direction {
        writes: vec![w(100, 0, 100), w(100, 100, 100), w(100, 200, 100)],
        at_sender: pkts,
        cwnd: vec![Cwnd { t_ns: 99 * MS, cwnd: 2 }],
        ..Default::default()
    };
    let r = run(&d).into_iter().find(|l| l.left_at == 150 * MS).unwrap();
    assert_eq!((r.kind, r.cause), (Kind::Wait, Some(Cause::CwndLimited)), "{r:?}");
}

#[test]
fn a_hold_shorter_than_a_round_trip_and_the_margin_is_short() {
    let mut pkts = handshake();
    pkts.extend([a_data(100, 0, 100), b_ack(101, 100), a_data(225, 100, 50)]);
    let d = Direction { writes: vec![w(100, 0, 100), w(200, 100, 50)], at_sender: pkts, ..Default::default() };
    let l = label(Side::Client, &d, &Params::new(20 * MS));
    let r = l.iter().find(|l| l.left_at == 225 * MS).unwrap();
    assert_eq!(r.kind, Kind::Short, "{l:?}");
}

#[test]
fn a_window_that_had_opened_before_the_release_is_not_what_held_them() {
    // The window was full when they were written, an update opened it at 110 ms, and they left
    // at 150 ms after another ACK: not rwnd-limited (tcp_snd_wnd_test passed at 110 ms).
    let mut pkts = handshake();
    let mut zero = b_ack(101, 100);
    zero.seg.window = 0;
    pkts.extend([a_data(100, 0, 100), zero, b_ack(110, 100), b_ack(150, 100), a_data(150, 100, 100)]);
    let d = Direction { writes: vec![w(100, 0, 100), w(102, 100, 100)], at_sender: pkts, ..Default::default() };
    let r = run(&d).into_iter().find(|l| l.left_at == 150 * MS).unwrap();
    assert_ne!(r.cause, Some(Cause::RwndLimited), "{r:?}");
}
