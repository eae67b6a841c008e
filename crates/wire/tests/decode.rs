//! Decoder tests: every link type, both containers, TCP options, and malformed input.

mod support;

use etherparse::TcpOptionElement as O;
use support::*;
use tcpstall_wire::{linktype, CaptureReader, Decoder, FlowFilter};
use trace::{Endpoint, EventKind, Evidence};

fn one(linktype: u32, frame: &[u8]) -> tcpstall_wire::TcpPacket {
    tcpstall_wire::decode(linktype, frame, frame.len() as u32).expect("decodes")
}

#[test]
fn ethernet_ipv4_tcp_with_options() {
    // Options: MSS and window scale (RFC 9293 3.7.1, RFC 7323 2), SACK-permitted, timestamps.
    let opts =
        [O::MaximumSegmentSize(1460), O::WindowScale(7), O::SelectiveAcknowledgementPermitted, O::Timestamp(11, 0)];
    let f = eth_tcp4(false, 100, 0, true, &[], &opts);
    let p = one(linktype::ETHERNET, &f);
    assert_eq!(p.src.to_string(), "10.0.0.1:5000");
    assert_eq!(p.dst.to_string(), "10.0.0.2:80");
    assert!(p.segment.flags.syn());
    assert_eq!(p.segment.mss, Some(1460));
    assert_eq!(p.segment.wscale, Some(7));
    assert_eq!(p.segment.ts, Some((11, 0)));
    assert_eq!(p.segment.len, 0);
    assert_eq!(p.segment.wire_len, f.len() as u32);
    let sack = [O::SelectiveAcknowledgement((1, 2), [Some((3, 4)), None, None])];
    let p = one(linktype::ETHERNET, &eth_tcp4(true, 5, 6, false, b"hello", &sack));
    assert_eq!(p.segment.sack_blocks, 2);
    assert_eq!(p.segment.len, 5);
}

#[test]
fn payload_length_comes_from_the_ip_header_when_the_snaplen_cut_it() {
    let f = eth_tcp4(false, 1, 1, false, &[7u8; 1000], &[]);
    let cut = &f[..54 + 10];
    let p = tcpstall_wire::decode(linktype::ETHERNET, cut, f.len() as u32).expect("decodes");
    assert_eq!(p.segment.len, 1000);
    assert_eq!(p.segment.wire_len, f.len() as u32);
}

#[test]
fn every_link_type() {
    let eth = eth_tcp4(false, 1, 1, false, b"abc", &[]);
    let ip = &eth[14..];
    // Linux cooked v1: 16-byte header, protocol at 14.
    let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(ip);
    // Linux cooked v2: protocol first, 20 bytes.
    let mut sll2 = vec![0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0];
    sll2.extend_from_slice(ip);
    // BSD loopback: AF_INET (2) in host order; OpenBSD LOOP in network order.
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(ip);
    let mut lp = 2u32.to_be_bytes().to_vec();
    lp.extend_from_slice(ip);
    // 802.1Q-tagged Ethernet.
    let mut vlan = eth[..12].to_vec();
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    vlan.extend_from_slice(&eth[12..]);
    for (lt, frame) in [
        (linktype::ETHERNET, eth.clone()),
        (linktype::ETHERNET, vlan),
        (linktype::LINUX_SLL, sll),
        (linktype::LINUX_SLL2, sll2),
        (linktype::NULL, null),
        (linktype::LOOP, lp),
        (linktype::RAW, ip.to_vec()),
        (linktype::IPV4, ip.to_vec()),
    ] {
        let p = one(lt, &frame);
        assert_eq!((p.src.port(), p.dst.port(), p.segment.len), (5000, 80, 3), "link type {lt}");
    }
    assert_eq!(tcpstall_wire::decode(147, &eth, 60), Err(tcpstall_wire::Skip::LinkType(147)));
}

#[test]
fn ipv6() {
    let f = eth_tcp6(b"0123456789");
    let p = one(linktype::ETHERNET, &f);
    assert_eq!(p.dst.to_string(), "[2001:db8::2]:443");
    assert_eq!(p.segment.len, 10);
    let mut null6 = 30u32.to_le_bytes().to_vec(); // macOS AF_INET6
    null6.extend_from_slice(&f[14..]);
    assert_eq!(one(linktype::NULL, &null6).segment.len, 10);
}

#[test]
fn non_tcp_and_garbage_are_skipped_not_fatal() {
    let mut arp = vec![0u8; 42];
    arp[12] = 0x08;
    arp[13] = 0x06;
    assert_eq!(tcpstall_wire::decode(linktype::ETHERNET, &arp, 42), Err(tcpstall_wire::Skip::NotTcp));
    for n in 0..54 {
        let f = eth_tcp4(false, 1, 1, false, b"x", &[]);
        // Any prefix shorter than the headers: skipped, never a panic.
        let _ = tcpstall_wire::decode(linktype::ETHERNET, &f[..n], 100);
    }
}

#[test]
fn pcap_micro_and_nanosecond_timestamps() {
    let f = eth_tcp4(false, 1, 1, false, b"a", &[]);
    // The next segment (a copy of the same one 250 us later would be collapsed as a duplicate).
    let g = eth_tcp4(false, 2, 1, false, b"a", &[]);
    for (nanos, frac, want) in [(false, 250_000u32, 250_000_000u64), (true, 250_000, 250_000)] {
        let file = pcap(nanos, 1, &[(100, 0, f.clone()), (100, frac, g.clone())]);
        let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
        let a = d.next_event().unwrap().unwrap();
        let b = d.next_event().unwrap().unwrap();
        assert_eq!(a.event.t.as_nanos(), 0);
        assert_eq!(b.event.t.as_nanos(), want, "nanos={nanos}");
        assert_eq!(b.event.evidence, Evidence::Frame(2));
        assert!(d.next_event().unwrap().is_none());
    }
}

#[test]
fn pcap_big_endian() {
    let f = eth_tcp4(false, 1, 1, false, b"a", &[]);
    let mut file = Vec::new();
    file.extend_from_slice(&0xa1b2c3d4u32.to_be_bytes());
    file.extend_from_slice(&[0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1]);
    for w in [1u32, 5, f.len() as u32, f.len() as u32] {
        file.extend_from_slice(&w.to_be_bytes());
    }
    file.extend_from_slice(&f);
    let mut r = CaptureReader::new(&file[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!(p.ts_ns, 1_000_005_000);
    assert_eq!(p.linktype, 1);
}

#[test]
fn pcapng_several_interfaces_with_their_own_resolution() {
    let f = eth_tcp4(false, 1, 1, false, b"a", &[]);
    let g = eth_tcp4(true, 1, 2, false, b"", &[]);
    let mut sll2 = vec![0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0];
    sll2.extend_from_slice(&g[14..]);
    let mut file = pcapng_shb();
    file.extend(pcapng_idb(1, None)); // microseconds
    file.extend(pcapng_idb(276, Some(9))); // nanoseconds, Linux cooked v2
    file.extend(pcapng_epb(0, 1_000_000, &f)); // 1 s in microseconds
    file.extend(pcapng_epb(1, 1_000_000_500, &sll2)); // 1 s + 500 ns in nanoseconds
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let a = d.next_event().unwrap().unwrap();
    let b = d.next_event().unwrap().unwrap();
    assert_eq!(b.event.t.as_nanos(), 500);
    // Each interface is its own capture point: the same connection is a flow per interface.
    assert_ne!(a.flow, b.flow);
    assert_eq!(d.flows().key(b.flow).unwrap().interface, 1);
    assert!(d.several_interfaces());
    assert_eq!(a.event.from, Endpoint::A);
    let EventKind::Segment(s) = b.event.kind else { panic!() };
    assert!(s.is_pure_ack());
}

#[test]
fn flow_endpoints_and_filters() {
    // A SYN-ACK seen first: A is its destination (the SYN sender).
    let synack = eth_tcp4(true, 9, 1, true, &[], &[]);
    let file = pcap(false, 1, &[(0, 0, synack)]);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let e = d.next_event().unwrap().unwrap();
    assert_eq!(e.event.from, Endpoint::B);
    assert_eq!(d.flows().key(e.flow).unwrap().a.port(), 5000);
    let f = eth_tcp4(false, 1, 1, false, b"a", &[]);
    let file = pcap(false, 1, &[(0, 0, f.clone()), (0, 1, f)]);
    let port = FlowFilter { port: Some(81), ..Default::default() };
    let mut d = Decoder::new(&file[..], port).unwrap();
    assert!(d.next_event().unwrap().is_none());
    assert_eq!(d.stats().filtered_out, 2);
    let pair =
        FlowFilter { pair: Some(("10.0.0.2:80".parse().unwrap(), "10.0.0.1:5000".parse().unwrap())), port: None };
    let mut d = Decoder::new(&file[..], pair).unwrap();
    assert!(d.next_event().unwrap().is_some());
}

// ---- malformed input: a clear error naming the offset, what came before kept, no panic ----

fn err_of(file: &[u8]) -> (usize, tcpstall_wire::WireError) {
    let mut d = match Decoder::new(file, FlowFilter::default()) {
        Ok(d) => d,
        Err(e) => return (0, e),
    };
    let mut n = 0;
    loop {
        match d.next_event() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("expected an error after {n} events"),
            Err(e) => return (n, e),
        }
    }
}

#[test]
fn empty_file() {
    let (_, e) = err_of(&[]);
    assert_eq!(e.offset, 0);
    assert!(e.to_string().contains("empty file"), "{e}");
}

#[test]
fn truncated_file_header() {
    let file = pcap(false, 1, &[]);
    let (_, e) = err_of(&file[..10]);
    assert!(e.to_string().contains("truncated pcap file header"), "{e}");
}

#[test]
fn wrong_magic() {
    let (_, e) = err_of(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(e.to_string().contains("not a pcap or pcapng"), "{e}");
    assert_eq!(e.offset, 0);
}

#[test]
fn truncated_packet_keeps_what_came_before() {
    let f = eth_tcp4(false, 1, 1, false, b"abc", &[]);
    let file = pcap(false, 1, &[(0, 0, f.clone()), (0, 1, f.clone())]);
    let cut = &file[..file.len() - 5];
    let (n, e) = err_of(cut);
    assert_eq!(n, 1, "the first packet is still delivered");
    let second = 24 + 16 + f.len();
    assert_eq!(e.offset, second as u64, "{e}");
    assert!(e.to_string().contains("truncated packet record"), "{e}");
}

#[test]
fn huge_claimed_packet_length_is_an_error_not_an_allocation() {
    // A record claiming ~4 GB (the field's maximum; "10 GB" cannot even be expressed).
    let mut file = pcap(false, 1, &[]);
    for w in [0u32, 0, 0xffff_fff0, 0xffff_fff0] {
        file.extend_from_slice(&w.to_le_bytes());
    }
    file.extend_from_slice(&[0; 64]);
    let (_, e) = err_of(&file);
    assert_eq!(e.offset, 24);
    assert!(e.to_string().contains("claims 4294967280"), "{e}");
    // Same in pcapng: a block length of ~4 GB.
    let mut file = pcapng_shb();
    file.extend(pcapng_idb(1, None));
    let at = file.len() as u64;
    file.extend_from_slice(&6u32.to_le_bytes());
    file.extend_from_slice(&0xffff_fff0u32.to_le_bytes());
    file.extend_from_slice(&[0; 64]);
    let (_, e) = err_of(&file);
    assert_eq!(e.offset, at);
    assert!(e.to_string().contains("claims"), "{e}");
}

#[test]
fn pcapng_block_with_a_bad_length() {
    let f = eth_tcp4(false, 1, 1, false, b"abc", &[]);
    let mut file = pcapng_shb();
    file.extend(pcapng_idb(1, None));
    file.extend(pcapng_epb(0, 5, &f));
    let at = file.len() as u64;
    let mut bad = pcapng_epb(0, 6, &f);
    bad[4] = 13; // not a multiple of 4
    bad[5] = 0;
    file.extend(bad);
    let (n, e) = err_of(&file);
    assert_eq!(n, 1);
    assert_eq!(e.offset, at);
    assert!(e.to_string().contains("bad length 13"), "{e}");
    // Leading and trailing lengths that disagree.
    let mut file = pcapng_shb();
    file.extend(pcapng_idb(1, None));
    let mut bad = pcapng_epb(0, 6, &f);
    let l = bad.len();
    bad[l - 4] ^= 4;
    file.extend(bad);
    let (_, e) = err_of(&file);
    assert!(e.to_string().contains("disagree"), "{e}");
}

#[test]
fn packet_on_an_undescribed_interface() {
    let f = eth_tcp4(false, 1, 1, false, b"abc", &[]);
    let mut file = pcapng_shb();
    file.extend(pcapng_epb(3, 5, &f));
    let (_, e) = err_of(&file);
    assert!(e.to_string().contains("interface 3"), "{e}");
}

#[test]
fn every_prefix_of_a_valid_file_errors_or_ends_cleanly() {
    let f = eth_tcp4(false, 1, 1, false, b"abc", &[]);
    let mut file = pcapng_shb();
    file.extend(pcapng_idb(1, Some(9)));
    file.extend(pcapng_epb(0, 5, &f));
    for cut in 0..file.len() {
        if let Ok(mut d) = Decoder::new(&file[..cut], FlowFilter::default()) {
            while let Ok(Some(_)) = d.next_event() {}
        }
    }
}

#[test]
fn randomly_damaged_real_captures_never_panic() {
    // A cheap, deterministic stand-in for the fuzz target (fuzz/): flip bytes of a real
    // capture and decode it to the end or to the first error.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures/seed001-default.pcap");
    let good = std::fs::read(path).expect("kept capture");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..300 {
        let mut f = good.clone();
        for _ in 0..1 + next() % 8 {
            let i = (next() % f.len() as u64) as usize;
            f[i] = next() as u8;
        }
        let cut = (next() % f.len() as u64) as usize;
        let f = if next() % 4 == 0 { &f[..cut] } else { &f[..] };
        if let Ok(mut d) = Decoder::new(f, FlowFilter::default()) {
            while let Ok(Some(_)) = d.next_event() {}
        }
    }
}

/// A capture whose link type this decoder does not know yields no TCP packet: the statistics
/// say which link type, and the one-line reason lists the supported ones (tcpdump.org
/// linktypes.html numbers); a capture with some TCP gets no such line.
#[test]
fn unsupported_link_type_is_named_with_the_supported_ones() {
    let f = eth_tcp4(false, 1, 0, false, b"x", &[]);
    let file = pcap(false, 9999, &[(0, 0, f.clone()), (0, 10, f.clone())]);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    assert!(dec.next_event().unwrap().is_none());
    let st = dec.stats();
    assert_eq!((st.frames, st.tcp_packets, st.unknown_linktype, st.first_unknown_linktype), (2, 0, 2, Some(9999)));
    let why = st.unsupported_linktype().expect("a reason");
    assert!(
        why.starts_with(
            "no TCP packets decoded: link type 9999 is not supported (supported: 0 BSD loopback, 1 Ethernet"
        ),
        "{why}"
    );
    assert!(why.contains("276 Linux cooked v2") && why.ends_with("all 2 frames are on it"), "{why}");
    assert_eq!(why.lines().count(), 1);
    let file = pcap(false, linktype::ETHERNET, &[(0, 0, f)]);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    while dec.next_event().unwrap().is_some() {}
    assert_eq!(dec.stats().unsupported_linktype(), None);
}

/// An OS error is in the message once: not chained again as the error's source (anyhow's
/// `{:#}` would print it twice, "Is a directory ... : Is a directory").
#[test]
fn io_errors_are_printed_once() {
    struct Fails;
    impl std::io::Read for Fails {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(21))
        }
    }
    let Err(e) = Decoder::new(Fails, FlowFilter::default()) else { panic!("a reader that fails is an error") };
    assert!(std::error::Error::source(&e).is_none());
    let text = e.to_string();
    assert_eq!(text.matches("os error 21").count(), 1, "{text}");
    assert!(e.io.is_some());
}

/// The NOP NOP timestamps layout (RFC 7323 Appendix A; Linux tcp_options_write) is read at
/// once; every other layout by the general walk: both give the same segment, and a layout
/// that only starts like it (NOP NOP timestamps, then SACK) still has its SACK read.
#[test]
fn the_linux_timestamp_layout_reads_as_the_general_walk_does() {
    let ts = || O::Timestamp(0x0102_0304, 0xa0b0_c0d0);
    let fast = one(linktype::ETHERNET, &eth_tcp4(true, 5, 6, false, b"x", &[O::Noop, O::Noop, ts()]));
    // Timestamps first, then padding: the walk.
    let walked = one(linktype::ETHERNET, &eth_tcp4(true, 5, 6, false, b"x", &[ts(), O::Noop, O::Noop]));
    assert_eq!(fast.segment.ts, Some((0x0102_0304, 0xa0b0_c0d0)));
    assert_eq!(fast.segment, walked.segment);
    let sack = O::SelectiveAcknowledgement((10, 20), [None, None, None]);
    let longer =
        one(linktype::ETHERNET, &eth_tcp4(true, 5, 6, false, b"x", &[O::Noop, O::Noop, ts(), O::Noop, O::Noop, sack]));
    assert_eq!(longer.segment.ts, Some((0x0102_0304, 0xa0b0_c0d0)));
    assert_eq!(longer.segment.sack_ranges().len(), 1);
}
