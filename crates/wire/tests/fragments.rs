//! Fragmented IP datagrams (issue 32): TCP carried in IPv4 fragments (RFC 791 3.2) or IPv6
//! fragments (RFC 8200 4.5) is reassembled by the decoder; fragments that cannot be are counted
//! with the reason, never dropped silently. Every capture is built here, fragment by fragment,
//! and written with the crate's own pcapng writer.

mod support;

use support::*;
use tcpstall_wire::write::{Interface, PcapNgWriter};
use tcpstall_wire::{decode, linktype, DecodeStats, Decoder, FlowEvent, FlowFilter, Skip};
use trace::{EventKind, Evidence};

const NEVER_COMPLETED: &str = "datagram never completed (RFC 791 3.2, RFC 8200 4.5)";
const OVERLAP: &str = "overlapping or inconsistent fragments, discarded as Linux does";

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Ethernet II (IEEE 802.3 3.1.1) carrying `payload` of EtherType `et`.
fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[&[2; 6], &[0x12; 6], &et.to_be_bytes(), payload])
}

/// The IPv4 header checksum (RFC 791 3.1, computed as RFC 1071 describes).
fn checksum(h: &mut [u8]) {
    h[10..12].copy_from_slice(&[0, 0]);
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// An IPv4 packet with a 20-byte header cut into fragments at the payload offsets `at`
/// (multiples of 8, RFC 791 3.2): each a copy of the header with its total length, MF set on all
/// but the last, and the fragment offset in 8-octet units (RFC 791 3.1).
fn fragment4(ip: &[u8], at: &[usize]) -> Vec<Vec<u8>> {
    let payload = &ip[20..];
    let mut bounds = vec![0];
    bounds.extend_from_slice(at);
    bounds.push(payload.len());
    bounds
        .windows(2)
        .map(|w| {
            let mut h = ip[..20].to_vec();
            h[2..4].copy_from_slice(&((20 + w[1] - w[0]) as u16).to_be_bytes());
            let more = if w[1] < payload.len() { 0x2000 } else { 0 };
            h[6..8].copy_from_slice(&(more | (w[0] / 8) as u16).to_be_bytes());
            checksum(&mut h);
            cat(&[&h, &payload[w[0]..w[1]]])
        })
        .collect()
}

/// An IPv6 packet (next header in its fixed header, no extension headers) cut into fragments at
/// the payload offsets `at`: each the fixed header with next header 44, then a Fragment header
/// (RFC 8200 4.5: next header, reserved, offset in 8-octet units << 3 | M, identification).
fn fragment6(ip: &[u8], id: u32, at: &[usize]) -> Vec<Vec<u8>> {
    let payload = &ip[40..];
    let mut bounds = vec![0];
    bounds.extend_from_slice(at);
    bounds.push(payload.len());
    bounds
        .windows(2)
        .map(|w| {
            let mut h = ip[..40].to_vec();
            h[4..6].copy_from_slice(&((8 + w[1] - w[0]) as u16).to_be_bytes());
            h[6] = 44;
            let more = u16::from(w[1] < payload.len());
            let frag = cat(&[&[ip[6], 0], &((w[0] as u16) | more).to_be_bytes(), &id.to_be_bytes()]);
            cat(&[&h, &frag, &payload[w[0]..w[1]]])
        })
        .collect()
}

/// (capture time in microseconds, frame, bytes on the wire) written with the crate's pcapng
/// writer on an Ethernet interface, then decoded to the end.
fn decode_timed(frames: &[(u64, Vec<u8>, u32)]) -> (Vec<FlowEvent>, DecodeStats) {
    let iface = Interface { name: "eth0".into(), description: String::new(), linktype: linktype::ETHERNET, snaplen: 0 };
    let mut w = PcapNgWriter::new(Vec::new(), &[iface]).unwrap();
    for (t_us, f, orig) in frames {
        w.packet(0, t_us * 1000, f, *orig).unwrap();
    }
    let file = w.into_inner();
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut evs = Vec::new();
    while let Some(ev) = dec.next_event().unwrap() {
        evs.push(ev);
    }
    (evs, dec.stats())
}

/// The segments' payload lengths, in event order.
fn lens(evs: &[FlowEvent]) -> Vec<u32> {
    evs.iter()
        .filter_map(|e| match e.event.kind {
            EventKind::Segment(s) => Some(s.len),
            _ => None,
        })
        .collect()
}

#[test]
fn tcp_in_ipv4_fragments_is_reassembled() {
    // The request (20 + 75 bytes of TCP) in 2 fragments; the answer (20 + 300) in 3, the
    // first of them last (reassembly does not depend on order, RFC 791 3.2).
    let conv = conversation();
    let req = fragment4(&conv[3], &[48]);
    let ans = fragment4(&conv[4], &[128, 256]);
    let mut frames: Vec<Vec<u8>> = conv[..3].iter().map(|ip| eth(0x0800, ip)).collect();
    frames.extend(req.iter().map(|f| eth(0x0800, f)));
    frames.extend([&ans[1], &ans[2], &ans[0]].map(|f| eth(0x0800, f)));
    let (evs, s) = decode_pcapng(linktype::ETHERNET, &frames);
    assert_eq!((s.frames, s.tcp_packets, s.ip_fragments, s.reassembled), (8, 5, 5, 2), "{s:?}");
    assert_eq!((s.not_tcp, s.malformed, s.not_decoded()), (0, 0, 0));
    assert!(evs.iter().all(|e| e.flow == evs[0].flow));
    assert_eq!(lens(&evs), [0, 0, 0, 75, 300]);
    // A reassembled packet is evidence at the frame that completed it, and costs the bytes of
    // all its fragments' frames on the wire.
    assert_eq!(evs[4].event.evidence, Evidence::Frame(8));
    let EventKind::Segment(seg) = evs[4].event.kind else { panic!() };
    assert_eq!(seg.wire_len as usize, ans.iter().map(|f| 14 + f.len()).sum::<usize>());
    assert_eq!(s.fragments_note().as_deref(), Some("5 IP fragments reassembled into 2 packets"));
    // One fragment alone is not a packet: `decode` (one frame, no state) says so.
    let f = eth(0x0800, &ans[0]);
    assert_eq!(decode(linktype::ETHERNET, &f, f.len() as u32), Err(Skip::Fragment));
    let f = eth(0x0800, &ans[2]);
    assert_eq!(decode(linktype::ETHERNET, &f, f.len() as u32), Err(Skip::Fragment));
}

#[test]
fn tcp_in_ipv6_fragments_is_reassembled() {
    // RFC 8200 4.5: the fixed header's next header is 44; the Fragment header carries the
    // upper layer's (6, TCP). The datagram is the fixed header and the fragments' data.
    let ip = support::eth_tcp6(&[7u8; 300])[14..].to_vec();
    let frames: Vec<Vec<u8>> = fragment6(&ip, 0xdead_beef, &[160]).iter().map(|f| eth(0x86dd, f)).collect();
    let (evs, s) = decode_pcapng(linktype::ETHERNET, &frames);
    assert_eq!((s.tcp_packets, s.ip_fragments, s.reassembled, s.not_decoded()), (1, 2, 1, 0), "{s:?}");
    assert_eq!(lens(&evs), [300]);
    // An atomic fragment (offset 0, M clear) is a whole packet (RFC 6946 4).
    let atomic = fragment6(&ip, 9, &[]);
    let f = eth(0x86dd, &atomic[0]);
    assert_eq!(decode(linktype::ETHERNET, &f, f.len() as u32).map(|p| p.segment.len), Ok(300));
}

#[test]
fn tcp_in_a_fragmented_tunnel_is_reassembled() {
    // IPv4-in-IPv4 (RFC 2003): the outer datagram is fragmented, the TCP packet is inside it.
    let inner = conversation()[4].clone();
    let t = ((20 + inner.len()) as u16).to_be_bytes();
    let mut outer = vec![0x45, 0, t[0], t[1], 0, 9, 0, 0, 64, 4, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    checksum(&mut outer);
    outer.extend_from_slice(&inner);
    let frames: Vec<Vec<u8>> = fragment4(&outer, &[200]).iter().map(|f| eth(0x0800, f)).collect();
    let (evs, s) = decode_pcapng(linktype::ETHERNET, &frames);
    assert_eq!((s.tcp_packets, s.reassembled), (1, 1));
    assert_eq!(lens(&evs), [300]);
}

#[test]
fn fragments_that_cannot_be_reassembled_are_counted_with_the_reason() {
    let conv = conversation();
    let mut frames: Vec<Vec<u8>> = conv[..4].iter().map(|ip| eth(0x0800, ip)).collect();
    // The answer's middle fragment was not captured: its datagram never completes.
    let ans = fragment4(&conv[4], &[128, 256]);
    frames.extend([&ans[0], &ans[2]].map(|f| eth(0x0800, f)));
    // A UDP datagram (RFC 768, to port 53) missing its last fragment: its first fragment shows
    // it carried no TCP, so it is "not TCP", not a TCP packet lost.
    let l = 8u16 + 400;
    let udp = cat(&[&[0x9c, 0x40, 0, 53], &l.to_be_bytes(), &[0, 0], &[1; 400]]);
    let t = (20 + l).to_be_bytes();
    let mut ip = vec![0x45, 0, t[0], t[1], 0, 5, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 9];
    checksum(&mut ip);
    ip.extend_from_slice(&udp);
    frames.push(eth(0x0800, &fragment4(&ip, &[200])[0]));
    // Two fragments of another TCP datagram that overlap (offsets 0..128 and 64..): discarded
    // whole, as Linux does since 4.19.
    let mut other = conv[4].clone();
    other[5] = 0x77; // another identification
    checksum(&mut other[..20]);
    let a = fragment4(&other, &[128]);
    let b = fragment4(&other, &[64]);
    frames.extend([&a[0], &b[1]].map(|f| eth(0x0800, f)));
    let (evs, s) = decode_pcapng(linktype::ETHERNET, &frames);
    assert_eq!((s.frames, s.tcp_packets, evs.len()), (9, 4, 4));
    assert_eq!((s.ip_fragments, s.reassembled, s.not_tcp), (5, 0, 1), "{s:?}");
    assert_eq!(s.not_reassembled.get(NEVER_COMPLETED), Some(&2));
    assert_eq!(s.not_reassembled.get(OVERLAP), Some(&2));
    assert_eq!(s.not_decoded(), 4);
    let note = s.not_decoded_note().unwrap();
    assert!(note.contains(&format!("2 IP fragments not reassembled: {NEVER_COMPLETED}")), "{note}");
    assert!(note.contains(&format!("2 IP fragments not reassembled: {OVERLAP}")), "{note}");
}

#[test]
fn a_datagram_waits_30_seconds_for_its_fragments() {
    // Linux's net.ipv4.ipfrag_time (30 s) from the first fragment: the second fragment 31 s
    // later finds no datagram and starts one that the capture never completes.
    let ans = fragment4(&conversation()[4], &[128]);
    let f = |i: usize| eth(0x0800, &ans[i]);
    let frames = [(0, f(0), 0), (31_000_000, f(1), 0)].map(|(t, x, _): (u64, Vec<u8>, u32)| {
        let n = x.len() as u32;
        (t, x, n)
    });
    let (evs, s) = decode_timed(&frames);
    assert_eq!((evs.len(), s.reassembled), (0, 0));
    assert_eq!(s.not_reassembled.get(NEVER_COMPLETED), Some(&2));
    // 29 s apart: within the timer, reassembled.
    let (evs, s) = decode_timed(&[(0, f(0), f(0).len() as u32), (29_000_000, f(1), f(1).len() as u32)]);
    assert_eq!((evs.len(), s.reassembled, s.not_decoded()), (1, 1, 0));
}

#[test]
fn fragments_cut_by_the_snaplen_still_give_the_segment() {
    // Captured with tcpdump -s 96: the first fragment's frame keeps the headers (14 + 20 + 20)
    // and some data, the last keeps part of its data. Lengths come from the IP headers, so the
    // segment has its full length.
    let ans = fragment4(&conversation()[4], &[160]);
    let frames: Vec<(u64, Vec<u8>, u32)> = ans
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let whole = eth(0x0800, f);
            (i as u64, whole[..96].to_vec(), whole.len() as u32)
        })
        .collect();
    let (evs, s) = decode_timed(&frames);
    assert_eq!((s.tcp_packets, s.reassembled, s.malformed), (1, 1, 0), "{s:?}");
    assert_eq!(lens(&evs), [300]);
}
