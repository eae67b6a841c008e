//! ICMP errors as flow evidence: an ICMPv4 (RFC 792) or ICMPv6 (RFC 4443) error quoting a TCP
//! segment of a flow becomes an `EventKind::Icmp` event of that flow, from the endpoint that
//! sent the quoted segment; an error about no flow of the capture is counted and ignored.

use etherparse::{icmpv4, icmpv6, Icmpv4Type, Icmpv6Type, PacketBuilder};
use tcpstall_wire::synth::{self, pkt, Pkt};
use tcpstall_wire::{decode, decode_any, linktype, Decoded, Decoder, FlowEvent, FlowFilter, Skip};
use trace::{Endpoint, EventKind, Evidence, IcmpError, IcmpKind};

fn all(file: &[u8]) -> (Vec<FlowEvent>, tcpstall_wire::DecodeStats, u32) {
    let mut d = Decoder::new(file, FlowFilter::default()).unwrap();
    let mut evs = Vec::new();
    while let Some(e) = d.next_event().unwrap() {
        evs.push(e);
    }
    (evs, d.stats(), d.flows().seen())
}

/// An ICMPv4 error of `ty` from router 10.0.0.254 quoting `quoted` (IP header + 8 TCP bytes).
fn icmp4(ty: Icmpv4Type, quoted: &Pkt) -> Vec<u8> {
    let q = quoted.ip().unwrap();
    let dst = if quoted.c2s { quoted.client } else { quoted.server };
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2; 6], [1; 6])
        .ipv4([10, 0, 0, 254], dst, 64)
        .icmpv4(ty)
        .write(&mut out, &q[..28])
        .unwrap();
    out
}

/// Path MTU discovery as a capture shows it (RFC 1191 4): handshake, a full-sized data segment,
/// the router's "fragmentation needed" (type 3 code 4) quoting it with the next-hop MTU in bytes
/// 6..8, then the sender's resend in smaller segments. The ICMP frame is an event of the flow,
/// from A (the quoted segment's sender), with the quoted sequence number, its own frame number
/// and time; the resends follow as segments.
#[test]
fn frag_needed_is_an_event_of_the_flow_it_quotes() {
    let data = pkt(300, true, 1001, 5001, "PA", 1460);
    let frames = vec![
        (0, pkt(0, true, 1000, 0, "S", 0).frame().unwrap()),
        (100, pkt(100, false, 5000, 1001, "SA", 0).frame().unwrap()),
        (200, pkt(200, true, 1001, 5001, "A", 0).frame().unwrap()),
        (300, data.frame().unwrap()),
        (450, synth::frag_needed(&data, 1400).unwrap()),
        (500, pkt(500, true, 1001, 5001, "A", 1348).frame().unwrap()),
        (510, pkt(510, true, 2349, 5001, "PA", 112).frame().unwrap()),
        (600, pkt(600, false, 5001, 2461, "A", 0).frame().unwrap()),
    ];
    let (evs, st, flows) = all(&synth::pcap_frames(&frames));
    assert_eq!(evs.len(), 8);
    assert_eq!(flows, 1, "the ICMP error opened no flow");
    assert!(evs.iter().all(|e| e.flow == evs[0].flow));
    let e = &evs[4];
    assert_eq!(e.event.kind, EventKind::Icmp(IcmpError { kind: IcmpKind::FragNeeded { mtu: 1400 }, seq: 1001 }));
    assert_eq!(e.event.from, Endpoint::A);
    assert_eq!(e.event.evidence, Evidence::Frame(5));
    assert_eq!(e.event.t.as_nanos(), 450_000);
    assert!(matches!(evs[5].event.kind, EventKind::Segment(s) if s.len == 1348));
    assert_eq!((st.tcp_packets, st.icmp_errors, st.icmp_no_flow, st.not_tcp), (7, 1, 0, 0));
    assert!(st.icmp_note().unwrap().contains("1 ICMP error quotes the flows' segments (evidence)"));
    // The one-packet API stays TCP-only: an ICMP error is not a TCP packet there.
    assert_eq!(decode(linktype::ETHERNET, &frames[4].1, frames[4].1.len() as u32), Err(Skip::NotTcp));
}

/// RFC 792: destination unreachable (type 3, any code other than 4) and time exceeded (type 11)
/// quoting the server's segment are events from B; an error quoting a connection the capture
/// does not have is counted in `icmp_no_flow` and opens no flow; an echo request or an error
/// quoting UDP is not TCP, as before.
#[test]
fn unreachable_time_exceeded_and_unknown_flows() {
    let reply = pkt(300, false, 5001, 1001, "PA", 10);
    let stranger = synth::Pkt { port: 6000, ..pkt(0, true, 77, 0, "S", 0) };
    let port_unreach = Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Port);
    let ttl = Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::TtlExceededInTransit);
    let mut echo = Vec::new();
    PacketBuilder::ethernet2([2; 6], [1; 6])
        .ipv4([10, 0, 0, 254], [10, 0, 0, 1], 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut echo, b"ping")
        .unwrap();
    let mut udp_quote = Vec::new();
    PacketBuilder::ip(etherparse::IpHeaders::Ipv4(
        etherparse::Ipv4Header::new(8, 64, etherparse::IpNumber::UDP, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap(),
        Default::default(),
    ))
    .udp(5000, 53)
    .write(&mut udp_quote, &[])
    .unwrap();
    let mut udp_err = Vec::new();
    PacketBuilder::ethernet2([2; 6], [1; 6])
        .ipv4([10, 0, 0, 254], [10, 0, 0, 1], 64)
        .icmpv4(port_unreach.clone())
        .write(&mut udp_err, &udp_quote)
        .unwrap();
    let frames = vec![
        (0, pkt(0, true, 1000, 0, "S", 0).frame().unwrap()),
        (100, pkt(100, false, 5000, 1001, "SA", 0).frame().unwrap()),
        (200, pkt(200, true, 1001, 5001, "PA", 0).frame().unwrap()),
        (300, reply.frame().unwrap()),
        (310, icmp4(port_unreach, &reply)),
        (320, icmp4(ttl, &reply)),
        (330, icmp4(Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::TtlExceededInTransit), &stranger)),
        (340, echo),
        (350, udp_err),
    ];
    let (evs, st, flows) = all(&synth::pcap_frames(&frames));
    assert_eq!(flows, 1);
    let icmp: Vec<_> = evs.iter().filter(|e| matches!(e.event.kind, EventKind::Icmp(_))).collect();
    assert_eq!(icmp.len(), 2);
    assert_eq!(icmp[0].event.kind, EventKind::Icmp(IcmpError { kind: IcmpKind::Unreachable { code: 3 }, seq: 5001 }));
    assert_eq!(icmp[1].event.kind, EventKind::Icmp(IcmpError { kind: IcmpKind::TimeExceeded, seq: 5001 }));
    assert!(icmp.iter().all(|e| e.event.from == Endpoint::B));
    assert_eq!((st.icmp_errors, st.icmp_no_flow, st.not_tcp), (2, 1, 2));
    assert!(st.icmp_note().unwrap().contains("1 ICMP error quotes a connection not in the capture (ignored)"));
}

/// An IPv6 TCP packet 2001:db8::1:5000 -> 2001:db8::2:443 (or back) with `len` payload bytes.
fn tcp6(back: bool, seq: u32, ack: u32, syn: bool, len: usize) -> Vec<u8> {
    let (a, b) = (
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    let (s, d, sp, dp) = if back { (b, a, 443, 5000) } else { (a, b, 5000, 443) };
    let mut t = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv6(s, d, 64).tcp(sp, dp, seq, 1000);
    if syn {
        t = t.syn();
    }
    if ack != 0 {
        t = t.ack(ack);
    }
    let mut out = Vec::new();
    t.write(&mut out, &vec![b'y'; len]).unwrap();
    out
}

/// RFC 4443: Packet Too Big (type 2, MTU u32 in bytes 4..8; RFC 8201 path MTU discovery),
/// Destination Unreachable (type 1) and Time Exceeded (type 3), each quoting as much of the
/// invoking packet as fits: events of the IPv6 flow from the quoted sender.
#[test]
fn icmpv6_errors() {
    let data = tcp6(false, 101, 901, false, 1400);
    let quote = &data[14..14 + 40 + 20];
    let router = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
    let src: [u8; 16] = data[22..38].try_into().unwrap();
    let err = |ty: Icmpv6Type| {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [1; 6]).ipv6(router, src, 64).icmpv6(ty).write(&mut out, quote).unwrap();
        out
    };
    let frames = vec![
        (0, tcp6(false, 100, 0, true, 0)),
        (100, tcp6(true, 900, 101, true, 0)),
        (200, data.clone()),
        (300, err(Icmpv6Type::PacketTooBig { mtu: 1280 })),
        (310, err(Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Address))),
        (320, err(Icmpv6Type::TimeExceeded(icmpv6::TimeExceededCode::HopLimitExceeded))),
    ];
    let (evs, st, flows) = all(&synth::pcap_frames(&frames));
    assert_eq!((flows, st.icmp_errors), (1, 3));
    let kinds: Vec<_> = evs[3..].iter().map(|e| (e.event.from, e.event.kind.clone())).collect();
    let want = |kind| (Endpoint::A, EventKind::Icmp(IcmpError { kind, seq: 101 }));
    assert_eq!(
        kinds,
        vec![
            want(IcmpKind::FragNeeded { mtu: 1280 }),
            want(IcmpKind::Unreachable { code: 3 }),
            want(IcmpKind::TimeExceeded)
        ]
    );
}

/// A quote needs the quoted IP header and 8 bytes of TCP (RFC 792): shorter quotes, and every
/// prefix of an ICMP frame, decode without a panic; a quote with fewer than 8 TCP bytes is not
/// evidence (not TCP).
#[test]
fn short_quotes_and_truncated_icmp_frames() {
    let data = pkt(300, true, 1001, 5001, "PA", 1460);
    let f = synth::frag_needed(&data, 1400).unwrap();
    assert!(matches!(decode_any(linktype::ETHERNET, &f, f.len() as u32), Ok(Decoded::Icmp(_))));
    for n in 0..=f.len() {
        let _ = decode_any(linktype::ETHERNET, &f[..n], f.len() as u32);
        let _ = decode_any(linktype::ETHERNET, &f[..n], n as u32);
    }
    // The same error quoting only 4 TCP bytes (ports, no sequence number).
    let q = data.ip().unwrap();
    let mut short = Vec::new();
    PacketBuilder::ethernet2([2; 6], [1; 6])
        .ipv4([10, 0, 0, 254], [10, 0, 0, 1], 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1400,
        }))
        .write(&mut short, &q[..24])
        .unwrap();
    assert_eq!(decode_any(linktype::ETHERNET, &short, short.len() as u32), Err(Skip::NotTcp));
}
