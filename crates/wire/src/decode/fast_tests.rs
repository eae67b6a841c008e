//! `fast_ip` against the general path it shortcuts: the same result, frame by frame.

use super::*;
use etherparse::PacketBuilder;

/// `decode_frame` as it was before `fast_ip`: every frame from `link::first`.
fn general(linktype: u32, data: &[u8], orig_len: u32) -> Result<Frame<'_>, Skip> {
    let cut = (data.len() as u64) < u64::from(orig_len);
    let layer = link::first(linktype, data, cut)?;
    walk(layer, 0, cut, orig_len.max(data.len() as u32), || frame_on_loopback(linktype, data))
}

fn ip_packets() -> Vec<(u16, Vec<u8>)> {
    let payload = [7u8; 33];
    let mut v4 = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 80, 1000, 65535)
        .ack(5)
        .psh()
        .write(&mut v4, &payload)
        .unwrap();
    let mut v6 = Vec::new();
    PacketBuilder::ipv6([1; 16], [2; 16], 64).tcp(40000, 80, 1000, 65535).syn().write(&mut v6, &payload).unwrap();
    let mut out = vec![(ETH_IPV4, v4.clone()), (ETH_IPV6, v6), (0x0806, vec![0; 28])];
    // IPv4 in IPv4 (protocol 4, RFC 2003), nested around the segment up to past MAX_DEPTH:
    // where the limit falls must not move with the link header's way in.
    let mut ip = v4;
    for depth in 1..=MAX_DEPTH {
        let total = (20 + ip.len()) as u16;
        let [t0, t1] = total.to_be_bytes();
        ip = [&[0x45, 0, t0, t1, 0, 0, 0, 0, 64, 4, 0, 0, 10, 0, 0, 9, 10, 0, 0, 8][..], &ip].concat();
        if depth >= MAX_DEPTH - 3 {
            out.push((ETH_IPV4, ip.clone()));
        }
    }
    out
}

/// Every link header `fast_ip` reads, around each IP packet (and an ARP body), and a VLAN tag
/// it must leave to the general path.
fn frames() -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (et, ip) in ip_packets() {
        let [hi, lo] = et.to_be_bytes();
        for mac in [[0u8; 12], [1u8; 12]] {
            out.push((linktype::ETHERNET, [&mac[..], &[hi, lo], &ip].concat()));
        }
        out.push((linktype::ETHERNET, [&[1u8; 12][..], &[0x81, 0, 0, 5, hi, lo], &ip].concat()));
        // SLL: packet type(2) ARPHRD(2: 772 is loopback) address length(2) address(8) protocol(2).
        for arphrd in [1u16, 772] {
            let [a0, a1] = arphrd.to_be_bytes();
            out.push((linktype::LINUX_SLL, [&[0, 0, a0, a1, 0, 6][..], &[0; 8], &[hi, lo], &ip].concat()));
            // SLL2: protocol(2) reserved(2) ifindex(4) ARPHRD(2) packet type(1) length(1) address(8).
            out.push((linktype::LINUX_SLL2, [&[hi, lo, 0, 0, 0, 0, 0, 2, a0, a1, 0, 6][..], &[0; 8], &ip].concat()));
        }
    }
    out
}

#[test]
fn fast_ip_decodes_as_the_general_path_does() {
    let (mut fast, mut expected) = (0, 0);
    for (lt, frame) in frames() {
        let orig = frame.len() as u32;
        // The shortcut's share: every cut that reaches the IP header of an IP EtherType.
        let (et, at) = match lt {
            linktype::ETHERNET => (12, 14),
            linktype::LINUX_SLL => (14, 16),
            _ => (0, 20),
        };
        if matches!(be16(&frame, et), Some(ETH_IPV4 | ETH_IPV6)) {
            expected += frame.len() + 1 - at;
        }
        // Every cut of the frame (a snaplen), and the frame whole.
        for n in 0..=frame.len() {
            let d = &frame[..n];
            fast += usize::from(fast_ip(lt, d).is_some());
            let (a, b) = (format!("{:?}", decode_frame(lt, d, orig)), format!("{:?}", general(lt, d, orig)));
            assert_eq!(a, b, "link type {lt}, {n} of {orig} bytes");
        }
    }
    assert_eq!(fast, expected, "the shortcut took other frames than those of IP EtherTypes");
}

#[test]
fn the_depth_limit_falls_where_it_did() {
    // Ethernet II: link::ethernet and link::ethertype are walk's first two steps, then one per
    // IP header; so 14 IPv4 headers reach TCP, 15 do not (MAX_DEPTH = 16). n: those around
    // the innermost one.
    let nested = |n: usize| ip_packets().into_iter().find(|(_, ip)| ip.len() == 73 + 20 * n).expect("nested").1;
    for (n, reaches) in [(MAX_DEPTH - 3, true), (MAX_DEPTH - 2, false)] {
        let frame = [&[0u8; 12][..], &[0x08, 0], &nested(n)].concat();
        let got = decode_frame(linktype::ETHERNET, &frame, frame.len() as u32);
        assert_eq!(matches!(got, Ok(Frame::Packet(_))), reaches, "{} IPv4 headers: {got:?}", n + 1);
    }
}
