//! `fast_ip` against the general path it shortcuts: the same result, frame by frame.

use super::*;
use etherparse::PacketBuilder;

/// `decode_frame` as it was before `fast_ip`: every frame from `link::first`.
fn general(linktype: u32, data: &[u8], orig_len: u32) -> Result<Frame<'_>, Skip> {
    let cut = (data.len() as u64) < u64::from(orig_len);
    let layer = link::first(linktype, data, cut)?;
    walk(layer, cut, orig_len.max(data.len() as u32), || frame_on_loopback(linktype, data))
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
    vec![(ETH_IPV4, v4), (ETH_IPV6, v6), (0x0806, vec![0; 28])]
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
    let mut fast = 0;
    for (lt, frame) in frames() {
        let orig = frame.len() as u32;
        // Every cut of the frame (a snaplen), and the frame whole.
        for n in 0..=frame.len() {
            let d = &frame[..n];
            fast += usize::from(fast_ip(lt, d).is_some());
            let (a, b) = (format!("{:?}", decode_frame(lt, d, orig)), format!("{:?}", general(lt, d, orig)));
            assert_eq!(a, b, "link type {lt}, {n} of {orig} bytes");
        }
    }
    assert!(fast > 1000, "the fast path ran {fast} times: the test does not test it");
}
