//! Packet-script tests of the classifier: each builds the segments of one mechanism by hand
//! (times in ms, as a loopback capture would show them) and checks the cause named.

use crate::{analyze_events, Config, RecordKind};
use trace::{Cause, Endpoint, Event, EventKind, Evidence, Instant, Segment, SeqNum, TcpFlags};

pub(crate) struct Script {
    pub(crate) ev: Vec<Event>,
    pub(crate) seq: [u32; 2],
}

pub(crate) const MS: u64 = 1_000_000;

impl Script {
    /// A handshake at t = 0 with MSS 1460 and window scale 7 each way, no timestamps.
    pub(crate) fn new() -> Self {
        let mut s = Script { ev: Vec::new(), seq: [1000, 5000] };
        s.raw(0, Endpoint::A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
        s.raw(10_000, Endpoint::B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
        s.raw(20_000, Endpoint::A, 1000, 5000, TcpFlags::ACK, 0, 512, None);
        s
    }
    /// A handshake captured at A over a path of `rtt_ms` (the SYN-ACK seen `rtt_ms` after the SYN).
    pub(crate) fn with_rtt(rtt_ms: u64) -> Self {
        let mut s = Script { ev: Vec::new(), seq: [1000, 5000] };
        s.raw(0, Endpoint::A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
        s.raw(rtt_ms * MS, Endpoint::B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
        s.raw(rtt_ms * MS + 50_000, Endpoint::A, 1000, 5000, TcpFlags::ACK, 0, 512, None);
        s
    }
    /// No handshake: the capture starts mid-connection.
    pub(crate) fn mid_connection() -> Self {
        Script { ev: Vec::new(), seq: [1000, 5000] }
    }
    /// A handshake at t = 0 whose SYNs carry no window-scale option (RFC 7323 2.2: unscaled).
    pub(crate) fn unscaled() -> Self {
        let mut s = Script::mid_connection();
        s.raw(0, Endpoint::A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
        s.raw(10_000, Endpoint::B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
        s.raw(20_000, Endpoint::A, 1000, 5000, TcpFlags::ACK, 0, 65535, None);
        for e in &mut s.ev {
            if let EventKind::Segment(seg) = &mut e.kind {
                seg.wscale = None;
            }
        }
        s
    }
    /// After the handshake: four full segments from A from 1.0 s, then three duplicate ACKs
    /// from B for the first at 25-45 ms later (RFC 5681 3.2's trigger). Returns (the first
    /// segment's sequence number, the ACK A's resend carries).
    pub(crate) fn flight_and_three_dupacks(&mut self) -> (u32, u32) {
        self.data(1.0, Endpoint::A, 1460);
        let head = self.seq[0] - 1460;
        self.data(1.01, Endpoint::A, 1460).data(1.02, Endpoint::A, 1460).data(1.03, Endpoint::A, 1460);
        for i in 0..3 {
            self.raw(25 * MS + i * 10_000, Endpoint::B, 5000, head, TcpFlags::ACK, 0, 512, None);
        }
        (head, self.seq[1])
    }
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn raw(
        &mut self,
        t: u64,
        from: Endpoint,
        seq: u32,
        ack: u32,
        flags: u8,
        len: u32,
        window: u16,
        mss: Option<u16>,
    ) {
        let n = self.ev.len() as u64 + 1;
        self.ev.push(Event {
            t: Instant(t),
            from,
            kind: EventKind::Segment(Segment {
                window,
                wscale: Some(7),
                mss,
                wire_len: 54 + len,
                ..trace::testing::segment(seq, ack, flags, len)
            }),
            evidence: Evidence::Frame(n),
        });
    }
    /// `from` sends `len` new bytes at `t_ms`, acknowledging everything the peer sent.
    pub(crate) fn data(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i], self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK | TcpFlags::PSH, len, 512, None);
        self.seq[i] += len;
        self
    }
    /// `from` sends a pure ACK of everything the peer sent, advertising `window` (scaled by 128).
    pub(crate) fn ack(&mut self, t_ms: f64, from: Endpoint, window: u16) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i], self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK, 0, window, None);
        self
    }
    /// `from` resends its last `len` bytes.
    pub(crate) fn resend(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i] - len, self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK, len, 512, None);
        self
    }
    /// `from` probes a zero window as Linux does (`tcp_xmit_probe_skb`: no data, seq snd_una - 1).
    pub(crate) fn window_probe(&mut self, t_ms: f64, from: Endpoint) -> &mut Self {
        let (i, p) = (from.index(), from.peer().index());
        let (seq, ack) = (self.seq[i] - 1, self.seq[p]);
        self.raw((t_ms * MS as f64) as u64, from, seq, ack, TcpFlags::ACK, 0, 512, None);
        self
    }
    /// The application at `from` writes `len` bytes at `t_ms` (`EventKind::Write`, as the lab
    /// and the model report their writes).
    pub(crate) fn write(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
        self.ev.push(Event {
            t: Instant((t_ms * MS as f64) as u64),
            from,
            kind: EventKind::Write { bytes: len, more: false },
            evidence: Evidence::Lab,
        });
        self
    }
    pub(crate) fn records(&self) -> Vec<crate::Stall> {
        analyze_events(self.ev.clone(), Config::default()).stalls().cloned().collect()
    }
    pub(crate) fn causes(&self) -> Vec<(Cause, u64)> {
        let a = analyze_events(self.ev.clone(), Config::default());
        a.stalls().map(|s| (s.cause, s.length.as_nanos() / MS)).collect()
    }
}

use Endpoint::{A, B};

mod issue32;
mod nagle_off;
mod traffic;

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
    // The whole packet signature (the top band needs the write times).
    assert!(st[0].confidence >= 0.8);
    assert!(st[0].ack_delay.unwrap().as_millis_f64() >= 30.0);
    let frames: Vec<Evidence> = st[0].evidence.iter().map(|e| e.source).collect();
    assert_eq!(frames, vec![Evidence::Frame(4), Evidence::Frame(5), Evidence::Frame(6)]);
    assert_eq!((st[0].held, st[0].waited, st[0].bytes_held), (A, B, 990));
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
fn window_still_zero_when_the_capture_ends_is_an_open_rwnd_stall() {
    // RFC 9293 3.8.6.1 / 3.8.6.2.1: the receiver closed its window and answered every probe
    // with zero until the capture ended; no data segment ends this gap, the flow's end does.
    let mut s = Script::new();
    s.data(1.0, A, 1460).ack(1.1, B, 0);
    s.window_probe(300.0, A).ack(300.1, B, 0).window_probe(900.0, A).ack(900.1, B, 0);
    let a = analyze_events(s.ev.clone(), Config::default());
    let st: Vec<_> = a.stalls().collect();
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!((st[0].cause, st[0].held), (Cause::RwndLimited, A));
    assert!(st[0].detail.contains("probed the window 2 time(s)"), "{}", st[0].detail);
    assert_eq!(st[0].length.as_nanos() / MS, 899);
    // The window opened and data flowed: no open stall at the end (the gap is classified
    // when the data leaves).
    let mut s = Script::new();
    s.data(1.0, A, 1460).ack(1.1, B, 0).window_probe(300.0, A).ack(300.1, B, 512).data(300.2, A, 1460);
    let c = s.causes();
    assert_eq!(c.iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::RwndLimited], "{c:?}");
}

#[test]
fn resend_after_silence_is_a_retransmission_timeout() {
    // RFC 6298 5: no ACK, the timer fires (Linux minimum 200 ms), the head is resent, with
    // more than one segment out (the loss probe would have fired 2 x SRTT + 2 jiffies after
    // the last send, and resent the tail).
    let mut s = Script::new();
    s.data(1.0, A, 100).data(1.1, A, 100);
    let seq = s.seq[0];
    s.raw(205 * MS, A, seq.wrapping_sub(200), s.seq[1], TcpFlags::ACK | TcpFlags::PSH, 100, 512, None);
    let c = s.causes();
    assert_eq!(c.iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::RetransmissionTimeout], "{c:?}");
}

/// RFC 8985 7.3, Linux `tcp_schedule_loss_probe`: with ONE segment out the loss probe fires at
/// 2 x SRTT + TCP_RTO_MIN capped by the RTO, about 200 ms, and resends it: the first resend
/// of a lone segment at that interval is the probe (the RTO beside it: the packets cannot
/// tell them apart); the next resend, after the probe, is the timeout.
#[test]
fn the_first_resend_of_a_lone_segment_is_the_loss_probe() {
    let mut s = Script::new();
    s.data(1.0, A, 100).resend(205.0, A, 100).resend(620.0, A, 100);
    let st = stalls(&s);
    let causes: Vec<_> = st.iter().map(|s| s.cause).collect();
    assert_eq!(causes, vec![Cause::TailLossProbe, Cause::RetransmissionTimeout], "{st:#?}");
    assert_eq!(st[0].alternatives, vec![Cause::RetransmissionTimeout]);
    assert!(st[0].detail.contains("tcp_schedule_loss_probe"), "{}", st[0].detail);
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
fn probe_interval_pause_of_a_windows_sender_is_its_application() {
    // The probe timer that releases corked or MSG_MORE data is Linux's (tcp_probe_timer); a
    // sender whose packets start at TTL 128 (Windows' DefaultTTL; 127 after one router) has no
    // TCP_CORK or MSG_MORE, and Nagle holds nothing with nothing in flight (RFC 896).
    for (ttl, want) in [(128u8, Cause::Application), (127, Cause::Application), (64, Cause::ProbeTimer)] {
        let mut s = Script::new();
        s.data(1.0, B, 100).ack(1.05, A, 512).data(201.5, A, 100);
        for e in &mut s.ev {
            if let (Endpoint::A, EventKind::Segment(seg)) = (e.from, &mut e.kind) {
                seg.ttl = Some(ttl);
            }
        }
        assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![want], "TTL {ttl}");
    }
    assert_eq!(crate::classify::initial_ttl(57), 64);
    assert_eq!(crate::classify::initial_ttl(250), 255);
}

/// A pause at the probe timer's interval with nothing in flight: corked or MSG_MORE data
/// released by the probe timer (Linux `tcp_probe0_base`), an application pausing that long, or
/// a segment lost before the capture point look the same on the wire (issue 21). Packets alone:
/// ambiguous, below 0.5, with the command that settles it, whether the pauses repeat or not.
#[test]
fn probe_interval_pause_is_ambiguous_from_packets_alone() {
    for pauses in [[201.0, 201.0, 201.0, 201.0], [350.0, 600.0, 900.0, 201.0]] {
        let mut s = Script::new();
        let mut t = 1.0;
        for pause in pauses {
            s.data(t, B, 100).ack(t + 0.05, A, 512);
            t += pause;
            s.data(t, A, 48).ack(t + 0.05, B, 512);
            t += 0.1;
        }
        let recs = s.records();
        let last = recs.last().unwrap();
        assert_eq!((last.cause, last.kind), (Cause::ProbeTimer, RecordKind::Ambiguous), "{recs:?}");
        assert!(last.confidence < 0.5, "{last:?}");
        assert_eq!(last.alternatives, vec![Cause::Application, Cause::RetransmissionTimeout]);
        assert!(last.settle.as_deref().unwrap().contains("watch --kernel"), "{last:?}");
        assert!(
            last.detail.contains("probe timer's interval")
                && last.detail.contains("an application pause of that length")
                && last.detail.contains("the capture cannot tell"),
            "{}",
            last.detail
        );
        assert!(recs.iter().all(|r| r.kind != RecordKind::Stall), "{recs:?}");
    }
}

/// With the writer's writes in the trace (kernel `sendmsg`, the lab's or the model's record),
/// the same pause is decided: bytes written before the gap waited for the probe timer (top
/// band); bytes written just before they left were the application's gap.
#[test]
fn writes_decide_the_probe_interval_pause() {
    let mut held = Script::new();
    held.data(1.0, B, 100).ack(1.05, A, 512).write(1.1, A, 48).data(202.0, A, 48).ack(202.05, B, 512);
    let r = held.records();
    let last = r.last().unwrap();
    assert_eq!((last.cause, last.kind), (Cause::ProbeTimer, RecordKind::Stall), "{r:?}");
    assert!(last.confidence >= 0.9, "{last:?}");
    assert!(last.evidence.iter().any(|e| e.what.contains("application write 48 bytes")), "{last:?}");
    assert!(last.detail.contains("wrote them") && last.detail.contains("so they waited"), "{}", last.detail);

    let mut late = Script::new();
    late.data(1.0, B, 100).ack(1.05, A, 512).write(201.9, A, 48).data(202.0, A, 48).ack(202.05, B, 512);
    let r = late.records();
    let last = r.last().unwrap();
    assert_eq!((last.cause, last.kind), (Cause::Application, RecordKind::Gap), "{r:?}");
    assert!(last.confidence >= 0.9, "{last:?}");
    assert!(
        last.detail.contains("wrote these 48 bytes") && last.detail.contains("nothing held them"),
        "{}",
        last.detail
    );
}

#[test]
fn answer_on_a_long_path_is_timed_from_the_request_arrival_and_the_rto_floor() {
    // Captured at A over a 300 ms path. tcp_probe0_base = max(RTO, TCP_RTO_MIN), and Linux's
    // RTO >= srtt + TCP_RTO_MIN (tcp_rtt_estimator keeps rttvar >= tcp_rto_min), so B's probe
    // timer needs >= 500 ms from its write; B can write only after A's request arrived, and its
    // answer needs the path back: 580 ms at A is 280 ms at B, the application's think time.
    let mut s = Script::with_rtt(300);
    s.data(350.0, A, 300).ack(650.0, B, 512).data(930.0, B, 100);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::Application]);
    // 820 ms at A is 520 ms at B: inside the timer's band on this path, but the band (500 to
    // 812 ms) is wider than half the timer: not named.
    let mut s = Script::with_rtt(300);
    s.data(350.0, A, 300).ack(650.0, B, 512).data(1170.0, B, 100);
    assert_eq!(s.causes().iter().map(|c| c.0).collect::<Vec<_>>(), vec![Cause::Unknown]);
    // On a 20 ms path the band is 216-272 ms (TCP_RTO_MIN + srtt, less a jiffy, to TCP_RTO_MIN +
    // 3 jiffies + 2 RTT): narrow enough, and 230 ms at B (250 at A) is the timer.
    let mut s = Script::with_rtt(20);
    s.data(45.0, A, 300).ack(65.0, B, 512).data(295.0, B, 100);
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

fn stalls(s: &Script) -> Vec<crate::Stall> {
    analyze_events(s.ev.clone(), Config::default()).stalls().cloned().collect()
}

#[test]
fn without_a_handshake_small_segments_are_judged_against_536_not_the_largest_seen() {
    // RFC 9293 3.7.1: 536 is the default MSS; a 60-byte segment is sub-MSS on any path, so a
    // 4-byte segment unacknowledged, then 60 bytes released by a 39 ms ACK, is Nagle
    // (tcp_nagle_check), not "delayed-ack" because the largest segment seen was 60 bytes.
    let mut s = Script::mid_connection();
    s.data(0.0, B, 100).ack(0.1, A, 512).data(1.0, A, 4).ack(40.0, B, 512).data(40.1, A, 60);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::NagleDelayedAck], "{st:?}");
    // No handshake: lower confidence, and the text says the MSS and RTT were estimated.
    assert!(st[0].confidence < 0.9, "{st:?}");
    assert!(st[0].detail.contains("MSS estimated"), "{}", st[0].detail);
}

#[test]
fn a_periodic_sender_with_nagle_off_is_not_cwnd_limited() {
    // 54 bytes every 20 ms, TCP_NODELAY (several sub-MSS in flight), the peer ACKs every other
    // segment after a delay: the flight never exceeds what it has been, so the congestion
    // window (RFC 5681 3.1) held nothing; each write is the application's.
    let mut s = Script::new();
    let mut t = 1.0;
    for i in 0..40 {
        s.data(t, A, 54);
        if i % 2 == 1 {
            // The ACK of the previous two arrives 33 ms later, between later writes.
            let seq = s.seq[0];
            let ack_t = ((t + 13.0) * MS as f64) as u64;
            s.raw(ack_t, B, 5000, seq - 54, TcpFlags::ACK, 0, 512, None);
        }
        t += 20.0;
    }
    s.ev.sort_by_key(|e| e.t);
    let st = stalls(&s);
    let cwnd = st.iter().filter(|s| s.cause == Cause::CwndLimited).count();
    assert!(cwnd <= 1, "{cwnd} cwnd-limited claims: {st:#?}");
    assert!(st.iter().all(|s| s.cause != Cause::NagleDelayedAck), "{st:#?}");
}

#[test]
fn a_syn_resent_after_3_s_is_a_connect_stall_and_gives_no_handshake_rtt() {
    // RFC 6298 5.7 / Linux TCP_TIMEOUT_INIT: the SYN's RTO; Karn's rule (RFC 6298 3): the
    // handshake of a resent SYN is no RTT sample, so the path RTT comes from the data (0.1 ms).
    let mut s = Script::mid_connection();
    s.raw(0, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(3_000 * MS, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(3_000 * MS + 100_000, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    s.raw(3_000 * MS + 200_000, A, 1000, 5000, TcpFlags::ACK, 0, 512, None);
    s.data(3_001.0, A, 100).ack(3_001.1, B, 512).data(3_001.2, B, 100).ack(3_001.3, A, 512);
    let a = analyze_events(s.ev.clone(), Config::default());
    let st: Vec<_> = a.stalls().collect();
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].cause, Cause::RetransmissionTimeout);
    assert!((2_900.0..3_100.0).contains(&st[0].length.as_millis_f64()));
    assert_eq!(a.flows[0].dirs[0].syn_retransmissions, 1);
    assert!(!a.flows[0].path_rtt_from_handshake);
    assert!(a.flows[0].path_rtt.unwrap().as_millis_f64() < 1.0, "{:?}", a.flows[0].path_rtt);
}

#[test]
fn an_unscaled_window_is_known_exactly_and_a_full_one_is_rwnd_limited() {
    // RFC 7323 2.2: no window-scale option on the SYNs means scale 0, so a 2920-byte window is
    // 2920 bytes, full with two segments in flight (RFC 9293 3.8.6.2.1, tcp_snd_wnd_test).
    let mut s = Script::unscaled();
    s.raw(500_000, B, 5000, 1000, TcpFlags::ACK, 0, 2920, None);
    s.data(1.0, A, 1460).data(1.01, A, 1460);
    // The peer's ACK covers the first segment only after 60 ms, with the window still 2920.
    let seq = s.seq[0] - 1460;
    s.raw(61 * MS, B, 5000, seq, TcpFlags::ACK, 0, 2920, None);
    s.data(61.05, A, 1460);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::RwndLimited], "{st:?}");
}

#[test]
fn server_think_time_of_265_ms_is_the_application_not_the_probe_timer() {
    // The probe timer fires at max(RTO, TCP_RTO_MIN) (tcp_probe0_base): ~200 ms on a LAN.
    // 265 ms is not its interval: an application pause.
    let mut s = Script::new();
    s.data(1.0, A, 100).ack(1.1, B, 512).data(266.0, B, 100);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::Application], "{st:?}");
    assert!(!st[0].detail.contains("unacknowledged"), "{}", st[0].detail);
}

#[test]
fn a_resend_after_years_is_no_retransmission_timer() {
    // TCP_RTO_MAX is 120 s (include/net/tcp.h): a 14-year gap is a spliced capture.
    let mut s = Script::new();
    s.data(1.0, A, 100).resend(14.0 * 365.0 * 86_400_000.0, A, 100);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::Unknown], "{st:?}");
    assert!(st[0].confidence <= 0.3);
}

#[test]
fn the_tail_resent_before_the_rto_is_a_tail_loss_probe() {
    // RFC 8985 7.3 / tcp_send_loss_probe: the last segment is resent ~2 RTT after it was sent
    // while earlier data is unacknowledged; an RTO would resend the head (tcp_retransmit_timer).
    let mut s = Script::new();
    s.data(1.0, A, 1460).data(1.01, A, 1460).data(1.02, A, 500).resend(31.0, A, 500);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::TailLossProbe], "{st:?}");
}

#[test]
fn a_resend_after_three_duplicate_acks_is_fast_retransmit() {
    // RFC 5681 3.2: the third duplicate ACK triggers the retransmission of snd_una's segment.
    let mut s = Script::new();
    let (seq, ack) = s.flight_and_three_dupacks();
    s.raw(25 * MS + 40_000, A, seq, ack, TcpFlags::ACK, 1460, 512, None);
    let st = stalls(&s);
    assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), vec![Cause::FastRetransmit], "{st:?}");
}

#[test]
fn bytes_acknowledged_but_never_captured_are_capture_loss_not_network_loss() {
    // A capture filtered to data segments, or one that dropped packets itself: the peer ACKs
    // bytes the capture never saw. No resent range, so no retransmission is claimed.
    let mut s = Script::new();
    s.data(1.0, A, 100);
    s.seq[0] += 1000; // 1000 bytes the capture missed
    s.data(1.5, A, 100).ack(1.6, B, 512).data(300.0, B, 100).ack(300.1, A, 512);
    let a = analyze_events(s.ev.clone(), Config::default());
    assert_eq!(a.flows[0].dirs[0].acked_unseen_bytes, 1000, "{:?}", a.flows[0].dirs[0]);
    assert!(a.stalls().all(|s| !matches!(s.cause, Cause::RetransmissionTimeout | Cause::FastRetransmit)));
}

/// Any sequence of segments, however inconsistent (random seq/ack/flags/windows, times that
/// jump), is analysed without a panic, and every record is well-formed: a confidence in 0..1,
/// evidence in time order, a cause with a non-empty explanation.
#[test]
fn random_segments_never_panic_and_records_are_well_formed() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
    for round in 0..200 {
        let mut ev = Vec::new();
        let mut t = 0u64;
        let base: u32 = rng.gen();
        for n in 0..300u64 {
            t += match rng.gen_range(0..10) {
                0 => rng.gen_range(0..u64::MAX / 1024),
                1..=3 => rng.gen_range(0..300 * MS),
                _ => rng.gen_range(0..MS),
            };
            let flags = [TcpFlags::ACK, TcpFlags::SYN, TcpFlags::SYN | TcpFlags::ACK, TcpFlags::FIN | TcpFlags::ACK]
                [rng.gen_range(0..4) * usize::from(rng.gen_range(0..8) == 0)]
                | if rng.gen() { TcpFlags::PSH } else { 0 };
            ev.push(Event {
                t: Instant(t),
                from: if rng.gen() { A } else { B },
                kind: EventKind::Segment(Segment {
                    seq: SeqNum(base) + rng.gen_range(0..20_000),
                    ack: SeqNum(base) + rng.gen_range(0..20_000),
                    flags: TcpFlags(flags),
                    len: [0, 1, 10, 536, 1448, 65_000][rng.gen_range(0..6)],
                    window: rng.gen(),
                    wscale: if rng.gen() { Some(rng.gen_range(0..20)) } else { None },
                    mss: if rng.gen() { Some(rng.gen()) } else { None },
                    ts: if rng.gen() { Some((rng.gen(), rng.gen())) } else { None },
                    sack_blocks: rng.gen_range(0..4),
                    sack: Default::default(),
                    wire_len: 60,
                    ttl: None,
                    ip_id: None,
                }),
                evidence: Evidence::Frame(n + 1),
            });
        }
        let a = analyze_events(ev, Config::default());
        for s in a.stalls() {
            assert!((0.0..=1.0).contains(&s.confidence), "round {round}: {s:?}");
            assert!(s.evidence.windows(2).all(|w| w[0].t <= w[1].t), "round {round}: {s:?}");
            assert!(!s.cause.explain().is_empty() && !s.detail.is_empty());
        }
        serde_json::to_string(&a.flows[0]).expect("serialisable");
    }
}

/// Eifel (RFC 3522 2): a resend whose first ACK echoes the ORIGINAL's TSval was spurious (the
/// range had arrived; the ACK was late, e.g. a starved receiver): not loss. Echoing the
/// resend's own TSval, it was a real retransmission timeout (RFC 6298 5).
#[test]
fn a_resend_acknowledged_with_the_originals_timestamp_was_spurious() {
    for (echo_original, want) in [(true, None), (false, Some(Cause::TailLossProbe))] {
        let mut s = Script::new();
        s.data(1.0, A, 100);
        let seq = s.seq[0] - 100;
        s.resend(210.0, A, 100);
        // Timestamps: the original carries TSval 1000, the resend 1210.
        let n = s.ev.len();
        for (i, tsval) in [(n - 2, 1000u32), (n - 1, 1210)] {
            if let EventKind::Segment(seg) = &mut s.ev[i].kind {
                seg.ts = Some((tsval, 0));
            }
        }
        let ecr = if echo_original { 1000 } else { 1210 };
        s.raw(211 * MS, B, 5000, seq + 100, TcpFlags::ACK, 0, 512, None);
        if let EventKind::Segment(seg) = &mut s.ev.last_mut().unwrap().kind {
            seg.ts = Some((77, ecr));
        }
        let st: Vec<_> = stalls(&s).into_iter().filter(|s| s.kind == RecordKind::Stall).collect();
        assert_eq!(st.iter().map(|s| s.cause).collect::<Vec<_>>(), want.into_iter().collect::<Vec<_>>(), "{st:#?}");
        if echo_original {
            // A spurious resend is not a wait: listed apart as a gap, saying why.
            let r = s.records();
            assert_eq!(r.len(), 1, "{r:#?}");
            assert_eq!(r[0].kind, RecordKind::Gap);
            assert!(r[0].detail.contains("Eifel") && r[0].detail.contains("spurious"), "{}", r[0].detail);
        }
    }
}
