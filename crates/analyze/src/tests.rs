//! Packet-script tests of the classifier: each builds the segments of one mechanism by hand
//! (times in ms, as a loopback capture would show them) and checks the cause named.

use crate::{analyze_events, Config};
use trace::{Cause, Endpoint, Event, EventKind, Evidence, Instant, Segment, TcpFlags};

struct Script {
    ev: Vec<Event>,
    seq: [u32; 2],
}

const MS: u64 = 1_000_000;

impl Script {
    /// A handshake at t = 0 with MSS 1460 and window scale 7 each way, no timestamps.
    fn new() -> Self {
        let mut s = Script { ev: Vec::new(), seq: [1000, 5000] };
        s.raw(0, Endpoint::A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
        s.raw(10_000, Endpoint::B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
        s.raw(20_000, Endpoint::A, 1000, 5000, TcpFlags::ACK, 0, 512, None);
        s
    }
    #[allow(clippy::too_many_arguments)]
    fn raw(&mut self, t: u64, from: Endpoint, seq: u32, ack: u32, flags: u8, len: u32, window: u16, mss: Option<u16>) {
        let n = self.ev.len() as u64 + 1;
        self.ev.push(Event {
            t: Instant(t),
            from,
            kind: EventKind::Segment(Segment {
                seq,
                ack,
                flags: TcpFlags(flags),
                len,
                window,
                wscale: Some(7),
                mss,
                ts: None,
                sack_blocks: 0,
                wire_len: 54 + len,
            }),
            evidence: Evidence::Frame(n),
        });
    }
    /// `from` sends `len` new bytes at `t_ms`, acknowledging everything the peer sent.
    fn data(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i], self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK | TcpFlags::PSH, len, 512, None);
        self.seq[i] += len;
        self
    }
    /// `from` sends a pure ACK of everything the peer sent, advertising `window` (scaled by 128).
    fn ack(&mut self, t_ms: f64, from: Endpoint, window: u16) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i], self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK, 0, window, None);
        self
    }
    /// `from` resends its last `len` bytes.
    fn resend(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i] - len, self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK, len, 512, None);
        self
    }
    fn causes(&self) -> Vec<(Cause, u64)> {
        let a = analyze_events(self.ev.clone(), Config::default());
        a.stalls().map(|s| (s.cause, s.length.as_nanos() / MS)).collect()
    }
}

use Endpoint::{A, B};

#[test]
fn nagle_released_by_a_delayed_ack() {
    // RFC 9293 3.7.4 / tcp_nagle_check + tcp_minshall_check: 10 B unacknowledged, the rest of
    // the write waits; the peer's delayed ACK (RFC 9293 3.8.6.3, tcp_delack_timer) fires at 40 ms.
    let mut s = Script::new();
    s.data(1.0, A, 10).ack(41.0, B, 512).data(41.05, A, 990).data(41.2, B, 100);
    let a = analyze_events(s.ev.clone(), Config::default());
    let st: Vec<_> = a.stalls().collect();
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].cause, Cause::NagleDelayedAck);
    assert!(st[0].length.as_millis_f64() >= 30.0);
    assert!(st[0].confidence >= 0.9);
    assert!(st[0].ack_delay.unwrap().as_millis_f64() >= 30.0);
    assert_eq!(st[0].evidence, vec![Evidence::Frame(4), Evidence::Frame(5), Evidence::Frame(6)]);
}

#[test]
fn two_small_segments_in_flight_mean_nagle_was_off_so_cwnd() {
    // With Nagle on, at most one sub-MSS segment is unacknowledged (tcp_minshall_check); two
    // means TCP_NODELAY, and waiting for the ACK is the congestion window (RFC 5681 3.1).
    let mut s = Script::new();
    s.data(1.0, A, 132).data(1.01, A, 132).ack(41.0, B, 512).data(41.05, A, 132);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::CwndLimited]);
}

#[test]
fn zero_window_is_rwnd_limited() {
    // RFC 9293 3.8.6.2.1: a zero window stops the sender until a window update.
    let mut s = Script::new();
    s.data(1.0, A, 1460).ack(1.1, B, 0).ack(80.0, B, 512).data(80.1, A, 1460);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::RwndLimited]);
}

#[test]
fn resend_after_silence_is_a_retransmission_timeout() {
    // RFC 6298 5: no ACK, the timer fires (Linux minimum 200 ms), the segment is resent.
    let mut s = Script::new();
    s.data(1.0, A, 100).resend(205.0, A, 100);
    let c = s.causes();
    assert_eq!(c.iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::RetransmissionTimeout]);
}

#[test]
fn small_segment_after_200ms_with_nothing_in_flight_is_the_probe_timer() {
    // TCP_CORK's 200 ms ceiling / tcp_probe_timer: everything acknowledged, then a small
    // segment leaves ~200 ms after the last data with no ACK to release it.
    let mut s = Script::new();
    s.data(1.0, B, 100).ack(1.05, A, 512).data(201.5, A, 100);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::ProbeTimer]);
}

#[test]
fn everything_acknowledged_and_nobody_sending_is_the_application() {
    let mut s = Script::new();
    s.data(1.0, A, 100).ack(41.0, B, 512).data(120.0, B, 100);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::Application]);
}

#[test]
fn short_gaps_are_not_stalls() {
    let mut s = Script::new();
    s.data(1.0, A, 10).ack(4.0, B, 512).data(4.05, A, 990).data(8.0, B, 100);
    assert!(s.causes().is_empty());
}

#[test]
fn wire_cost_counts_pure_acks_per_side() {
    let mut s = Script::new();
    s.data(1.0, A, 10).ack(41.0, B, 512).data(41.05, A, 990);
    let a = analyze_events(s.ev.clone(), Config::default());
    let [wa, wb] = a.wire_cost();
    assert_eq!((wa.data_segments, wa.payload_bytes), (2, 1000));
    assert_eq!(wb.pure_acks, 1);
    assert_eq!(wa.packets, 4); // SYN, ACK, two data
}

#[test]
fn sequence_numbers_wrap() {
    // RFC 9293 3.4: comparisons are modulo 2^32.
    use crate::flow::{seq_le, seq_lt};
    assert!(seq_lt(u32::MAX - 5, 3));
    assert!(!seq_lt(3, u32::MAX - 5));
    assert!(seq_le(7, 7));
}

#[test]
fn a_keepalive_after_a_long_idle_is_not_a_retransmission_timeout() {
    // RFC 1122 4.2.3.6: a BSD/Windows-style probe carries seq snd_una - 1 and one garbage byte.
    let mut s = Script::new();
    s.data(1.0, A, 100).ack(1.1, B, 512);
    let (seq, ack) = (s.seq[0] - 1, s.seq[1]);
    s.raw(5_000 * MS, A, seq, ack, TcpFlags::ACK, 1, 512, None);
    s.ack(5_000.1, B, 512);
    let a = analyze_events(s.ev.clone(), Config::default());
    assert!(a.stalls().next().is_none(), "{:?}", a.flows[0].stalls);
    assert_eq!(a.flows[0].dirs[0].keepalives, 1);
    assert_eq!(a.flows[0].dirs[0].retransmissions, 0);
}
