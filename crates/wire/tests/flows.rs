//! Flow table tests: 4-tuple reuse (RFC 9293 3.4 / 3.6 / 3.10.7.4), duplicate frames
//! (RFC 791 3.2 / RFC 6864 4.1 IPv4 ID), and forgetting ended flows (bounded memory).
//! Every capture is built with `wire::synth` (etherparse frames in a classic pcap).

mod support;

use tcpstall_wire::synth::{self, Pkt as P};
use tcpstall_wire::{Decoder, EndReason, FlowEvent, FlowFilter, FlowId, FlowLimits};
use trace::EventKind;

/// A packet of the flow 10.0.0.1:5000 <-> 10.0.0.2:80 (window 1000), from the client when `c2s`.
fn p(t_us: u64, c2s: bool, seq: u32, ack: u32, flags: &'static str, len: usize) -> P {
    P { window: 1000, ..synth::pkt(t_us, c2s, seq, ack, flags, len) }
}

fn file(pkts: &[P]) -> Vec<u8> {
    synth::pcap(pkts).expect("valid packets")
}

/// All events, and the flows reported ended (with the event count seen before each end).
fn run(f: &[u8], limits: FlowLimits) -> (Vec<FlowEvent>, Vec<(FlowId, EndReason)>, tcpstall_wire::DecodeStats) {
    let mut d = Decoder::with_limits(f, FlowFilter::default(), limits).unwrap();
    let (mut evs, mut ends) = (Vec::new(), Vec::new());
    while let Some(e) = d.next_event().unwrap() {
        while let Some(end) = d.pop_ended() {
            // No event of an ended flow ever comes again.
            ends.push((end.flow, end.reason));
        }
        assert!(!ends.iter().any(|(f, _)| *f == e.flow), "event of an ended flow");
        evs.push(e);
    }
    while let Some(end) = d.pop_ended() {
        ends.push((end.flow, end.reason));
    }
    let st = d.stats();
    (evs, ends, st)
}

/// A whole connection starting at `t0` (us) with client ISN `isn`: handshake, a request and its
/// answer, FIN from both sides, last ACK.
fn session(t0: u64, isn: u32) -> Vec<P> {
    let s = 9000;
    vec![
        p(t0, true, isn, 0, "S", 0),
        p(t0 + 100, false, s, isn + 1, "SA", 0),
        p(t0 + 200, true, isn + 1, s + 1, "A", 0),
        p(t0 + 300, true, isn + 1, s + 1, "PA", 10),
        p(t0 + 400, false, s + 1, isn + 11, "PA", 20),
        p(t0 + 500, true, isn + 11, s + 21, "FA", 0),
        p(t0 + 600, false, s + 21, isn + 12, "FA", 0),
        p(t0 + 700, true, isn + 12, s + 22, "A", 0),
    ]
}

fn flows_of(evs: &[FlowEvent]) -> Vec<u32> {
    let mut v: Vec<u32> = evs.iter().map(|e| e.flow.0).collect();
    v.dedup();
    v
}

/// A second session on the same ports 57 minutes later is a second flow (issue 9: it was merged
/// into the first). RFC 9293 3.6: after FIN both ways the connection is closed; a new SYN on the
/// pair is a new incarnation (RFC 9293 3.4, new ISN).
#[test]
fn a_reused_four_tuple_after_close_is_a_new_flow() {
    let mut pk = session(0, 100);
    pk.extend(session(57 * 60 * 1_000_000, 777_000));
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
    assert_eq!(evs.iter().filter(|e| e.flow.0 == 1).count(), 8);
    // Both ended when their close completed (RFC 9293 3.6: both FINs acknowledged).
    assert_eq!(ends, vec![(FlowId(0), EndReason::Closed), (FlowId(1), EndReason::Closed)]);
    // Right after the close, within the linger, a new SYN still opens a new flow.
    let mut pk = session(0, 100);
    pk.extend(session(10_000, 777_000));
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
    // Its close completed (both FINs acknowledged) before: it ended then, not at the reuse.
    assert_eq!(ends[0], (FlowId(0), EndReason::Closed));
}

/// RST closes the connection (RFC 9293 3.10.7): the next SYN is a new flow.
#[test]
fn a_syn_after_a_reset_is_a_new_flow() {
    let mut pk = session(0, 100)[..4].to_vec();
    pk.push(p(400, false, 9001, 111, "R", 0));
    pk.extend(session(2_000_000, 100)); // even the same ISN: the old connection is gone
    let (evs, _, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
}

/// A retransmitted SYN keeps its ISN (RFC 9293 3.8.1, RFC 6298 5.7 backoff: 1 s, 3 s): same flow.
/// A SYN with another ISN while the old connection never closed is a new one; so is a SYN on
/// a pair whose connection was seen only mid-way (no SYN, then a SYN: RFC 9293 3.10.7.4, a
/// synchronized connection never takes a SYN).
#[test]
fn syn_retransmissions_stay_new_isns_split() {
    let pk = vec![p(0, true, 100, 0, "S", 0), p(1_000_000, true, 100, 0, "S", 0), p(3_000_000, true, 100, 0, "S", 0)];
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!((flows_of(&evs), ends.len()), (vec![0], 0));
    let mut pk = session(0, 100)[..5].to_vec(); // no FIN
    pk.extend(session(30_000_000, 555_000));
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
    // The second completes its close with the last packet: reported at the end of input.
    assert_eq!(ends, vec![(FlowId(0), EndReason::Reused), (FlowId(1), EndReason::Closed)]);
    // Mid-connection start: data only, then 60 s later (under the idle timeout) a new SYN.
    let mut pk = vec![p(0, true, 50, 70, "PA", 10), p(100, false, 70, 60, "A", 0)];
    pk.extend(session(60_000_000, 4242));
    let (evs, _, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
}

/// An idle flow is forgotten after the idle timeout (capture time): the next packet on the
/// pair starts a new flow, and the old one is reported as idle.
#[test]
fn idle_flows_are_forgotten() {
    let pk = vec![p(0, true, 50, 70, "PA", 10), p(301_000_000, true, 60, 70, "PA", 10)];
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
    assert_eq!(ends, vec![(FlowId(0), EndReason::Idle)]);
    let pk = vec![p(0, true, 50, 70, "PA", 10), p(299_000_000, true, 60, 70, "PA", 10)];
    let (evs, ends, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!((flows_of(&evs), ends), (vec![0], vec![]));
}

/// Every frame captured 4 times (before and after a router: same IPv4 ID, TTL one lower each
/// hop, microseconds apart) is one packet; a real retransmission (new IPv4 ID, 200+ ms later,
/// RFC 6298 2.4 / Linux TCP_RTO_MIN) is kept.
#[test]
fn duplicate_frames_are_collapsed_and_counted() {
    let mut orig = session(0, 100);
    for (i, x) in orig.iter_mut().enumerate() {
        x.id = 1000 + i as u16;
        x.t_us *= 10; // 1 ms between packets
    }
    let mut pk = Vec::new();
    for x in &orig {
        for k in 0..4u8 {
            pk.push(P { ttl: 64 - k, t_us: x.t_us + 20 * u64::from(k), ..*x });
        }
    }
    let (evs, ends, st) = run(&file(&pk), FlowLimits::default());
    assert_eq!((flows_of(&evs), evs.len(), st.tcp_packets, st.duplicates), (vec![0], 8, 8, 24));
    // One connection, ended once when its close completed: the copies did not split it.
    assert_eq!(ends, vec![(FlowId(0), EndReason::Closed)]);
    // The same, interleaved: two capture points merged with 300 us of skew.
    let mut pk: Vec<P> = orig.iter().flat_map(|x| [*x, P { ttl: 63, t_us: x.t_us + 300, ..*x }]).collect();
    pk.sort_by_key(|x| x.t_us);
    let (evs, _, st) = run(&file(&pk), FlowLimits::default());
    assert_eq!((evs.len(), st.duplicates), (8, 8));
    // A retransmission of the request 300 ms later with a new ID, and one 2 ms later with a
    // new ID (fast retransmit after SACKs): both kept.
    let mut pk = orig[..4].to_vec();
    pk.push(P { id: 2000, t_us: orig[3].t_us + 2_000, ..orig[3] });
    pk.push(P { id: 2001, t_us: orig[3].t_us + 300_000, ..orig[3] });
    let (evs, _, st) = run(&file(&pk), FlowLimits::default());
    assert_eq!((evs.len(), st.duplicates), (6, 0));
    // Outside the 5 ms window even the same ID is a packet of its own.
    let pk = vec![orig[3], P { t_us: orig[3].t_us + 6_000, ..orig[3] }];
    let (evs, _, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(evs.len(), 2);
}

/// Without a usable IPv4 ID (0, allowed for DF datagrams by RFC 6864 4.1; or IPv6) an exact
/// copy is a duplicate only when the peer sent nothing in between: a fast retransmission follows
/// the peer's duplicate ACKs (RFC 5681 3.2), so it is kept.
#[test]
fn without_ip_ids_copies_need_a_silent_peer() {
    let d = p(1000, true, 101, 9001, "PA", 10);
    let pk = vec![d, P { t_us: 1020, ..d }];
    let (evs, _, st) = run(&file(&pk), FlowLimits::default());
    assert_eq!((evs.len(), st.duplicates), (1, 1));
    let dupack = p(1500, false, 9001, 101, "A", 0);
    let pk = vec![d, dupack, P { t_us: 1600, ..dupack }, P { t_us: 1700, ..dupack }, P { t_us: 2000, ..d }];
    let (evs, _, st) = run(&file(&pk), FlowLimits::default());
    // The repeated dupacks have no peer packet between them: collapsed (the cost of having no
    // ID); the data segment resent after them is kept as the retransmission it is.
    assert_eq!(evs.len(), 3);
    assert_eq!(st.duplicates, 2);
    assert!(matches!(evs[2].event.kind, EventKind::Segment(s) if s.len == 10));
}

/// Memory: 20,000 short connections one after another on different ports: the table holds only
/// those within the linger, every ended flow is reported once, and the rest are alive at the end.
#[test]
fn ended_flows_are_forgotten() {
    let mut pk = Vec::new();
    for i in 0..20_000u64 {
        for mut x in session(i * 1_000, 100) {
            x.port = 1024 + (i % 60_000) as u16;
            pk.push(x);
        }
    }
    pk.sort_by_key(|x| x.t_us);
    let f = file(&pk);
    let mut d = Decoder::new(&f[..], FlowFilter::default()).unwrap();
    let (mut ended, mut max_live) = (std::collections::HashSet::new(), 0);
    let mut pop = |d: &mut Decoder<&[u8]>| {
        while let Some(end) = d.pop_ended() {
            assert_eq!(end.reason, EndReason::Closed);
            assert!(ended.insert(end.flow));
        }
    };
    while let Some(_e) = d.next_event().unwrap() {
        pop(&mut d);
        max_live = max_live.max(d.flows().live());
    }
    pop(&mut d);
    // Tombstones through the 5 s linger at 1,000 new flows per second of capture time: ~5,000
    // remembered, never 20,000; every flow reported ended when its close completed.
    assert!(max_live <= 5_100, "{max_live}");
    assert_eq!(d.flows().seen(), 20_000);
    assert_eq!(ended.len(), 20_000);
}

/// After the close completed (RFC 9293 3.6: both FINs acknowledged) the flow has ended; a FIN
/// retransmitted within the linger is counted apart, not a flow of its own; after the linger
/// it would start a (mid-connection) flow.
#[test]
fn packets_after_the_close_are_counted_apart() {
    let mut pk = session(0, 100);
    let fin = pk[6];
    pk.push(P { t_us: 200_700, ..fin });
    let (evs, ends, st) = run(&file(&pk), FlowLimits::default());
    assert_eq!((evs.len(), st.after_close, ends.len()), (8, 1, 1));
    pk.push(P { t_us: 6_000_000, ..fin });
    let (evs, _, _) = run(&file(&pk), FlowLimits::default());
    assert_eq!(flows_of(&evs), vec![0, 1]);
}

/// RFC 1952: a capture saved gzip-compressed (`tcpdump -z gzip`, `.pcap.gz`), even as two
/// concatenated members, decodes to the same events as the plain file; a plain file passes
/// through `decompressed` untouched.
#[test]
fn gzip_compressed_captures_read_as_they_are() {
    use std::io::Write;
    let plain = file(&session(1_000, 100));
    let gz = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let (half, rest) = plain.split_at(plain.len() / 2);
    for compressed in [gz(&plain), [gz(half), gz(rest)].concat()] {
        let input = tcpstall_wire::decompressed(&compressed[..]).unwrap();
        let mut d = Decoder::new(input, FlowFilter::default()).unwrap();
        let mut n = 0;
        while d.next_event().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, run(&plain, FlowLimits::default()).0.len());
    }
    let mut d = Decoder::new(tcpstall_wire::decompressed(&plain[..]).unwrap(), FlowFilter::default()).unwrap();
    assert!(d.next_event().unwrap().is_some());
}

/// A frame written twice into a file (merged or replayed capture files: packetbeat's
/// wsgi_drum.pcap holds 687 such copies): a stepped-back frame identical byte for byte to a
/// recent one, with the same timestamp, is that frame again, dropped and counted; a stepped-
/// back frame with other bytes (a real packet stamped out of order) is kept.
#[test]
fn a_frame_written_twice_out_of_time_order_is_dropped_and_counted() {
    use support::eth_tcp4;
    use tcpstall_wire::write::{Interface, PcapNgWriter};
    let iface = Interface {
        name: "eth0".into(),
        description: String::new(),
        linktype: tcpstall_wire::linktype::ETHERNET,
        snaplen: 0,
    };
    let a = eth_tcp4(false, 1, 1, false, b"hello", &[]);
    let b = eth_tcp4(true, 1, 6, false, b"", &[]);
    let c = eth_tcp4(false, 6, 1, false, b"again", &[]);
    let mut w = PcapNgWriter::new(Vec::new(), &[iface]).unwrap();
    for (t_ms, f) in [(10u64, &a), (20, &b), (30, &c), (10, &a), (25, &c)] {
        w.packet(0, t_ms * 1_000_000, f, f.len() as u32).unwrap();
    }
    let file = w.into_inner();
    let mut dec = tcpstall_wire::Decoder::new(&file[..], tcpstall_wire::FlowFilter::default()).unwrap();
    let mut n = 0;
    while dec.next_event().unwrap().is_some() {
        n += 1;
    }
    let stats = dec.stats();
    assert_eq!(stats.stepped_back_copies, 1, "{stats:?}");
    assert_eq!(stats.ts_backwards, 1, "the changed copy is kept, stamped back: {stats:?}");
    assert!(stats.stepped_back_copies_note().unwrap().contains("written twice"));
    assert!(n >= 3, "{n} events");
}
