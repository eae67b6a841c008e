//! TCP inside other headers, each wrapped around the same IPv4/TCP packet by hand from its
//! specification, and the link-type field's FCS bits (libpcap pcap-common.h).

mod support;

use support::*;
use tcpstall_wire::{decode, linktype, Decoder, FlowFilter, Skip};

/// The inner packet: 10.0.0.1:5000 -> 10.0.0.2:80, seq 1, 3 bytes of payload.
fn inner_ip() -> Vec<u8> {
    eth_tcp4(false, 1, 1, false, b"abc", &[])[14..].to_vec()
}
fn inner_eth() -> Vec<u8> {
    eth_tcp4(false, 1, 1, false, b"abc", &[])
}

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An outer IPv4 header (RFC 791) carrying `proto`.
fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// An outer IPv6 header (RFC 8200) carrying `next`.
fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(payload);
    h
}

fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0x30, 0x39];
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b].concat()
}

fn is_inner(lt: u32, frame: &[u8]) {
    let p = decode(lt, frame, frame.len() as u32).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!((p.src.to_string().as_str(), p.dst.to_string().as_str()), ("10.0.0.1:5000", "10.0.0.2:80"));
    assert_eq!((p.segment.seq, p.segment.len), (1, 3));
}

#[test]
fn vlan_qinq_and_etag() {
    // IEEE 802.1Q (0x8100), 802.1ad (0x88a8) outer tag, 802.1BR E-tag (0x893f, 6 bytes).
    let q = cat(&[0, 10, 0x08, 0x00], &inner_ip());
    is_inner(linktype::ETHERNET, &eth(0x8100, &q));
    is_inner(linktype::ETHERNET, &eth(0x88a8, &cat(&[0, 20, 0x81, 0x00], &q)));
    is_inner(linktype::ETHERNET, &eth(0x893f, &cat(&[0, 0, 0, 0, 0, 0, 0x08, 0x00], &inner_ip())));
}

#[test]
fn mpls_label_stack() {
    // RFC 3032 2.1: two labels, the second with the bottom-of-stack bit; IPv4 by its nibble.
    let labels = [0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
    is_inner(linktype::ETHERNET, &eth(0x8847, &cat(&labels, &inner_ip())));
    // Ethernet pseudowire with a control word (RFC 4385).
    let pw = cat(&[0x00, 0x03, 0x01, 0x40, 0, 0, 0, 0], &inner_eth());
    is_inner(linktype::ETHERNET, &eth(0x8847, &pw));
}

#[test]
fn pppoe_ppp_and_cisco_hdlc() {
    // RFC 2516 4: ver/type 0x11, code 0, session, length; PPP protocol 0x0021 (RFC 1661 2).
    let pppoe = cat(&[0x11, 0, 0x12, 0x34, 0, 0, 0x00, 0x21], &inner_ip());
    is_inner(linktype::ETHERNET, &eth(0x8864, &pppoe));
    is_inner(linktype::PPP_ETHER, &pppoe);
    // PPP with HDLC-like framing (RFC 1662 3.1) and without (address/control compressed).
    is_inner(linktype::PPP, &cat(&[0xff, 0x03, 0x00, 0x21], &inner_ip()));
    is_inner(linktype::PPP_HDLC, &cat(&[0xff, 0x03, 0x00, 0x21], &inner_ip()));
    is_inner(linktype::PPP, &cat(&[0x21], &inner_ip()));
    // Cisco HDLC: address, control, ethertype.
    is_inner(linktype::C_HDLC, &cat(&[0x0f, 0x00, 0x08, 0x00], &inner_ip()));
    // LCP is control traffic: not TCP, not an error.
    assert_eq!(decode(linktype::PPP, &[0xff, 0x03, 0xc0, 0x21, 1, 1, 0, 4], 8).unwrap_err(), Skip::NotTcp);
}

#[test]
fn gre_erspan_and_ip_in_ip() {
    // RFC 2784: plain GRE carrying IPv4; RFC 2890: key and sequence add 8 bytes.
    is_inner(linktype::RAW, &ipv4(47, &cat(&[0, 0, 0x08, 0x00], &inner_ip())));
    is_inner(linktype::RAW, &ipv4(47, &cat(&[0x30, 0, 0x08, 0x00, 0, 0, 0, 1, 0, 0, 0, 2], &inner_ip())));
    // Transparent Ethernet bridging (0x6558), ERSPAN II (0x88be, 8 bytes after a GRE sequence
    // number) and ERSPAN III (0x22eb, 12 bytes).
    is_inner(linktype::RAW, &ipv4(47, &cat(&[0, 0, 0x65, 0x58], &inner_eth())));
    let erspan2 = cat(&[0x10, 0, 0x88, 0xbe, 0, 0, 0, 1, 0x10, 0, 0, 1, 0, 0, 0, 0], &inner_eth());
    is_inner(linktype::RAW, &ipv4(47, &erspan2));
    let erspan3 = cat(&cat(&[0x10, 0, 0x22, 0xeb, 0, 0, 0, 1], &[0x20, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]), &inner_eth());
    is_inner(linktype::RAW, &ipv4(47, &erspan3));
    // IP in IP: 4in4 (RFC 2003), 6in4 (RFC 4213), 4in6 and 6in6 (RFC 2473).
    is_inner(linktype::RAW, &ipv4(4, &inner_ip()));
    is_inner(linktype::RAW, &ipv6(4, &inner_ip()));
    let v6 = &eth_tcp6(b"xyz")[14..];
    for outer in [ipv4(41, v6), ipv6(41, v6)] {
        let p = decode(linktype::RAW, &outer, outer.len() as u32).unwrap();
        assert_eq!((p.segment.len, p.src.port()), (3, 5000));
    }
}

#[test]
fn udp_tunnels_vxlan_geneve_gtpu() {
    // VXLAN (RFC 7348 5): flags 0x08, VNI; then an Ethernet frame.
    let vx = cat(&[0x08, 0, 0, 0, 0, 0, 0x2a, 0], &inner_eth());
    is_inner(linktype::ETHERNET, &eth(0x0800, &ipv4(17, &udp(4789, &vx))));
    // Geneve (RFC 8926 3.4): 8 bytes, one 8-byte option (opt len 2), protocol 0x6558.
    let gv = cat(&[0x02, 0, 0x65, 0x58, 0, 0, 0x2a, 0, 0, 1, 0x80, 1, 0, 0, 0, 0], &inner_eth());
    is_inner(linktype::ETHERNET, &eth(0x0800, &ipv4(17, &udp(6081, &gv))));
    // GTP-U G-PDU (3GPP TS 29.281 5.1), with the S flag and one PDU-session extension header.
    let gtp = cat(&[0x32, 0xff, 0, 0, 0, 0, 0, 1, 0, 7, 0, 0x85, 1, 0x10, 0x05, 0x00], &inner_ip());
    is_inner(linktype::ETHERNET, &eth(0x0800, &ipv4(17, &udp(2152, &gtp))));
    is_inner(linktype::RAW, &ipv6(17, &udp(2152, &cat(&[0x30, 0xff, 0, 0, 0, 0, 0, 1], &inner_ip()))));
}

#[test]
fn undecoded_encapsulations_are_named_and_bad_headers_are_malformed() {
    // CAPWAP data (RFC 5415, UDP 5247) and L2TP are named, not silently "not TCP".
    let capwap = eth(0x0800, &ipv4(17, &udp(5247, &[0u8; 32])));
    assert_eq!(decode(linktype::ETHERNET, &capwap, 100).unwrap_err(), Skip::Inside("CAPWAP"));
    let esp = ipv4(50, &[0u8; 40]);
    assert_eq!(decode(linktype::RAW, &esp, 60).unwrap_err(), Skip::Inside("IPsec ESP (encrypted)"));
    // An ethertype of IPv4 over an IPv6 header, and an IHL under 5: malformed, not parsed.
    let v6_as_v4 = eth(0x0800, &eth_tcp6(b"x")[14..]);
    assert_eq!(decode(linktype::ETHERNET, &v6_as_v4, 100).unwrap_err(), Skip::Malformed);
    let mut short_ihl = inner_ip();
    short_ihl[0] = 0x44;
    assert_eq!(decode(linktype::RAW, &short_ihl, 100).unwrap_err(), Skip::Malformed);
    // A version nibble that is no IP at all.
    let mut v7 = inner_ip();
    v7[0] = 0x75;
    assert_eq!(decode(linktype::RAW, &v7, 100).unwrap_err(), Skip::Malformed);
    // Nesting is bounded: 4in4 twenty deep is refused by name, not by a stack overflow.
    let mut deep = inner_ip();
    for _ in 0..20 {
        deep = ipv4(4, &deep);
    }
    assert_eq!(decode(linktype::RAW, &deep, 1000).unwrap_err(), Skip::Inside("too many nested encapsulations"));
}

#[test]
fn decoder_counts_what_it_did_not_open_by_name() {
    let capwap = eth(0x0800, &ipv4(17, &udp(5247, &[0u8; 32])));
    let file = pcap(false, linktype::ETHERNET, &[(1, 0, capwap.clone()), (1, 10, capwap)]);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    assert!(d.next_event().unwrap().is_none());
    assert_eq!(d.stats().inside_undecoded.get("CAPWAP"), Some(&2));
}

#[test]
fn the_fcs_flag_in_the_link_type_field_is_decoded_and_the_fcs_stripped() {
    // pcap-savefile(5) / libpcap pcap-common.h: LT_FCS_LENGTH_PRESENT = 0x04000000, the FCS
    // length in 16-bit words in bits 28-31: 0x24000001 is Ethernet with a 4-byte FCS.
    let mut f = inner_eth();
    let data_len = f.len() as u32;
    f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let mut file = pcap(false, linktype::ETHERNET, &[(1, 0, f)]);
    file[20..24].copy_from_slice(&0x2400_0001u32.to_le_bytes());
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let ev = d.next_event().unwrap().expect("decoded despite the FCS flag");
    let trace::EventKind::Segment(seg) = ev.event.kind else { panic!() };
    assert_eq!((seg.len, seg.wire_len), (3, data_len));
    assert_eq!(d.stats().unknown_linktype, 0);
}

#[test]
fn timestamps_that_go_backwards_are_counted_and_kept_in_order() {
    let f = inner_eth();
    let file = pcap(false, linktype::ETHERNET, &[(10, 0, f.clone()), (9, 500_000, f.clone()), (10, 1, f)]);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut ts = Vec::new();
    while let Some(e) = d.next_event().unwrap() {
        ts.push(e.event.t.0);
    }
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
    let s = d.stats();
    assert_eq!(s.timestamps_backwards, 1);
    assert_eq!(s.largest_step_back_ns, 500_000_000);
}
