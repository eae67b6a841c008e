//! Encapsulations, link types, FCS flags, malformed headers and backward timestamps: each
//! frame is built here byte by byte from the spec cited beside it. The same frames for ERSPAN
//! II/III, GTP-U with an extension header, Geneve with options, PPTP, MPLS with a control word,
//! E-tag, PBB, PPP, PPP_HDLC, C_HDLC and the FCS link-type bits were written to pcaps and read
//! by tshark 4 (Wireshark dissectors), which found the same inner TCP packet in each.

mod support;

use support::*;
use tcpstall_wire::{decode, linktype, pcap_linktype, CaptureReader, Decoder, FlowFilter, Skip};

/// The IPv4/TCP packet 10.0.0.1:5000 -> 10.0.0.2:80 carrying `b"hello"`, without link header.
fn ip4() -> Vec<u8> {
    eth_tcp4(false, 1, 1, false, b"hello", &[])[14..].to_vec()
}

/// The IPv6/TCP packet [2001:db8::1]:5000 -> [2001:db8::2]:443 carrying `b"hello"`.
fn ip6() -> Vec<u8> {
    eth_tcp6(b"hello")[14..].to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Ethernet II (IEEE 802.3 3.1.1): dst, src, EtherType.
fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[&[2; 6], &[1; 6], &et.to_be_bytes(), payload])
}

/// A 20-byte IPv4 header (RFC 791 3.1) with protocol `proto` around `payload`.
fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let t = total.to_be_bytes();
    let h = [0x45, 0, t[0], t[1], 0, 1, 0, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    cat(&[&h, payload])
}

/// A 40-byte IPv6 header (RFC 8200 3) with next header `proto` around `payload`.
fn ipv6(proto: u8, payload: &[u8]) -> Vec<u8> {
    let l = (payload.len() as u16).to_be_bytes();
    let mut h = vec![0x60, 0, 0, 0, l[0], l[1], proto, 64];
    h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10]);
    cat(&[&h, payload])
}

/// UDP (RFC 768) from port 40000 to `dport`, in an outer IPv4 packet and Ethernet frame.
fn eth_udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let l = ((8 + payload.len()) as u16).to_be_bytes();
    let u = cat(&[&40000u16.to_be_bytes(), &dport.to_be_bytes(), &l, &[0, 0], payload]);
    eth(0x0800, &ipv4(17, &u))
}

/// Decodes and checks it is the inner TCP packet (v4 or v6) with its 5 payload bytes.
fn inner(lt: u32, frame: &[u8]) -> tcpstall_wire::TcpPacket {
    let p = decode(lt, frame, frame.len() as u32).unwrap_or_else(|e| panic!("{e:?} for {frame:02x?}"));
    assert!(p.src.port() == 5000 && p.segment.len == 5, "{p:?}");
    p
}

#[test]
fn pcap_link_type_field_with_fcs_bits() {
    // libpcap pcap-common.h: LT_LINKTYPE(x) = x & 0x03FFFFFF, LT_FCS_LENGTH_PRESENT(x) = x &
    // 0x04000000, LT_FCS_LENGTH(x) = (x & 0xF0000000) >> 28 in 16-bit words.
    assert_eq!(pcap_linktype(1), (1, 0));
    assert_eq!(pcap_linktype(0x2400_0001), (1, 4));
    assert_eq!(pcap_linktype(0x1400_0001), (1, 2));
    // draft-ietf-opsawg-pcap 4: FCS(3 bits) then the f bit 0x10000000.
    assert_eq!(pcap_linktype(0x5000_0001), (1, 4));
    // A file whose link-type field says "Ethernet with a 4-byte FCS": decoded, FCS stripped.
    let frame = eth_tcp4(false, 1, 1, false, b"hello", &[]);
    let with_fcs = cat(&[&frame, &[0xde, 0xad, 0xbe, 0xef]]);
    let file = pcap(false, 0x2400_0001, &[(1, 0, with_fcs.clone())]);
    let mut r = CaptureReader::new(&file[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!((p.linktype, p.data, p.orig_len), (1, &frame[..], frame.len() as u32));
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    assert!(dec.next_event().unwrap().is_some());
    assert_eq!((dec.stats().tcp_packets, dec.stats().unknown_linktype), (1, 0));
    // A GSO packet (IPv4 total length 0 takes the captured length): the FCS must not become
    // TCP payload.
    let mut gso = frame.clone();
    gso[16] = 0;
    gso[17] = 0;
    let file = pcap(false, 0x2400_0001, &[(1, 0, cat(&[&gso, &[0; 4]]))]);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let ev = dec.next_event().unwrap().unwrap();
    let trace::EventKind::Segment(seg) = ev.event.kind else { panic!("{ev:?}") };
    assert_eq!(seg.len, 5);
}

#[test]
fn pcapng_if_fcslen_is_stripped() {
    // pcapng 4.2: if_fcslen (option 13, one byte) is the FCS length in bits.
    let mut body = Vec::new();
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    body.extend_from_slice(&13u16.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&[32, 0, 0, 0, 0, 0, 0, 0]);
    let frame = eth_tcp4(false, 1, 1, false, b"hello", &[]);
    let file = cat(&[&pcapng_shb(), &block(1, &body), &pcapng_epb(0, 1, &cat(&[&frame, &[9; 4]]))]);
    let mut r = CaptureReader::new(&file[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!(p.data, &frame[..]);
}

#[test]
fn pcapng_epb_flags_fcs_length() {
    // pcapng 4.3.1: epb_flags (option 2) bits 5-8 = FCS length in bytes, per packet.
    let frame = eth_tcp4(false, 1, 1, false, b"hello", &[]);
    let data = cat(&[&frame, &[9; 4]]);
    let mut body = Vec::new();
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&data);
    body.resize(body.len().div_ceil(4) * 4, 0);
    body.extend_from_slice(&2u16.to_le_bytes());
    body.extend_from_slice(&4u16.to_le_bytes());
    body.extend_from_slice(&(4u32 << 5 | 1).to_le_bytes());
    body.extend_from_slice(&[0; 4]);
    let file = cat(&[&pcapng_shb(), &pcapng_idb(1, None), &block(6, &body)]);
    let mut r = CaptureReader::new(&file[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    assert_eq!((p.data, p.orig_len), (&frame[..], frame.len() as u32));
}

#[test]
fn vlan_qinq_etag_and_pbb() {
    // IEEE 802.1Q 9.6 (0x8100), 802.1ad (0x88a8), pre-standard QinQ (0x9100): TCI + EtherType.
    for tpid in [0x8100u16, 0x88a8, 0x9100] {
        let f = eth(tpid, &cat(&[&[0, 5], &0x8100u16.to_be_bytes(), &[0, 7], &[8, 0], &ip4()]));
        inner(linktype::ETHERNET, &f);
    }
    // IEEE 802.1BR E-TAG: 6-byte E-TCI then EtherType.
    inner(linktype::ETHERNET, &eth(0x893f, &cat(&[&[0; 6], &[0x86, 0xdd], &ip6()])));
    // IEEE 802.1ah I-TAG: 4-byte I-TCI then the customer's Ethernet frame.
    inner(linktype::ETHERNET, &eth(0x88e7, &cat(&[&[0; 4], &eth(0x0800, &ip4())])));
    // RFC 1042 LLC/SNAP in an 802.3 length-field frame.
    let snap = cat(&[&[0xaa, 0xaa, 3, 0, 0, 0, 8, 0], &ip4()]);
    inner(linktype::ETHERNET, &eth(snap.len() as u16, &snap));
    // Linux cooked v2 carrying a VLAN tag.
    let sll2 = cat(&[&[0x81, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6], &[1; 8], &[0, 9, 8, 0], &ip4()]);
    inner(linktype::LINUX_SLL2, &sll2);
}

#[test]
fn mpls_label_stacks() {
    // RFC 3032 2.1: Label(20) TC(3) S(1) TTL(8); S = 1 on the last entry.
    let stack = [0, 0x10, 0x00, 64, 0, 0x20, 0x01, 64];
    inner(linktype::ETHERNET, &eth(0x8847, &cat(&[&stack, &ip4()])));
    inner(linktype::ETHERNET, &eth(0x8848, &cat(&[&stack, &ip6()])));
    // RFC 4385 3 control word (first nibble 0) then an Ethernet pseudowire (RFC 4448).
    inner(linktype::ETHERNET, &eth(0x8847, &cat(&[&stack, &[0; 4], &eth(0x0800, &ip4())])));
    // A payload that is neither IP nor control word: named, not guessed.
    let f = eth(0x8847, &cat(&[&stack, &[0x52; 40]]));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Inside("MPLS pseudowires without a control word")));
    // A stack with no bottom: malformed, not an endless walk.
    let f = eth(0x8847, &[0, 0x10, 0x00, 64, 0, 0x20, 0x00, 64]);
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Malformed));
}

#[test]
fn pppoe_ppp_and_cisco_hdlc() {
    // RFC 2516 4: ver/type 0x11, code 0, session id, length; then PPP protocol (RFC 1332 0x0021,
    // RFC 5072 0x0057).
    let pppoe = |proto: u16, ip: &[u8]| {
        cat(&[&[0x11, 0, 0, 1], &((ip.len() + 2) as u16).to_be_bytes(), &proto.to_be_bytes(), ip])
    };
    inner(linktype::ETHERNET, &eth(0x8864, &pppoe(0x0021, &ip4())));
    inner(linktype::ETHERNET, &eth(0x8864, &pppoe(0x0057, &ip6())));
    inner(linktype::PPP_ETHER, &pppoe(0x0021, &ip4()));
    // LINKTYPE_PPP: with RFC 1662 address/control, without, and with a compressed protocol
    // field (RFC 1661 6.5).
    inner(linktype::PPP, &cat(&[&[0xff, 0x03, 0x00, 0x21], &ip4()]));
    inner(linktype::PPP, &cat(&[&[0x00, 0x57], &ip6()]));
    inner(linktype::PPP, &cat(&[&[0x21], &ip4()]));
    // LINKTYPE_PPP_HDLC: RFC 1662 framing, or Cisco framing (RFC 1547 4.3.1).
    inner(linktype::PPP_HDLC, &cat(&[&[0xff, 0x03, 0x00, 0x21], &ip4()]));
    inner(linktype::PPP_HDLC, &cat(&[&[0x0f, 0x00, 0x08, 0x00], &ip4()]));
    // LINKTYPE_C_HDLC: address 0x0f/0x8f, control 0, EtherType.
    inner(linktype::C_HDLC, &cat(&[&[0x8f, 0x00, 0x86, 0xdd], &ip6()]));
    // LCP (0xc021) is not TCP; VJ-compressed TCP (RFC 1144, 0x002d) is named.
    assert_eq!(decode(linktype::PPP, &[0xc0, 0x21, 1, 1, 0, 4], 6), Err(Skip::NotTcp));
    let vj = cat(&[&[0x00, 0x2d], &[0; 20]]);
    assert_eq!(decode(linktype::PPP, &vj, 22), Err(Skip::Inside("Van Jacobson compressed TCP/IP (RFC 1144)")));
    // Both link types are listed as supported.
    assert!(linktype::supported_list().contains("104 Cisco HDLC"));
}

#[test]
fn gre_and_erspan() {
    // RFC 2784 2.1: flags/version 0, protocol type.
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &cat(&[&[0, 0, 8, 0], &ip4()]))));
    // RFC 2784 checksum (C) + RFC 2890 key (K) and sequence (S): 4 + 4 + 4 + 4 bytes.
    let gre = cat(&[&[0xb0, 0, 0x86, 0xdd], &[0; 4], &[0, 0, 0, 42], &[0, 0, 0, 1], &ip6()]);
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &gre)));
    // RFC 1701 transparent Ethernet bridging (0x6558), GRE over IPv6.
    let teb = cat(&[&[0x20, 0, 0x65, 0x58], &[0, 0, 0, 7], &eth(0x0800, &ip4())]);
    inner(linktype::ETHERNET, &eth(0x86dd, &ipv6(47, &teb)));
    // ERSPAN type II (0x88be, S set, 8-byte header with version 1), type I (no S, no header),
    // type III (0x22eb, 12 bytes, O bit = 8-byte platform subheader).
    let e2 = cat(&[&[0x10, 0, 0x88, 0xbe], &[0, 0, 0, 1], &[0x10, 0x01, 0, 5, 0, 0, 0, 0], &eth(0x0800, &ip4())]);
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &e2)));
    let e1 = cat(&[&[0, 0, 0x88, 0xbe], &eth(0x0800, &ip4())]);
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &e1)));
    let hdr3 = [0x20, 0x01, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0x01];
    let e3 = cat(&[&[0x10, 0, 0x22, 0xeb], &[0, 0, 0, 1], &hdr3, &[0; 8], &eth(0x0800, &ip4())]);
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &e3)));
    // PPTP enhanced GRE (RFC 2637 4.1): version 1, K set, protocol 0x880b, PPP inside.
    let pptp = cat(&[&[0x30, 0x01, 0x88, 0x0b, 0, 29, 0, 1, 0, 0, 0, 1, 0xff, 0x03, 0x00, 0x21], &ip4()]);
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &pptp)));
}

#[test]
fn udp_tunnels() {
    // RFC 7348 5: VXLAN, flags I = 0x08, VNI, then Ethernet.
    inner(linktype::ETHERNET, &eth_udp(4789, &cat(&[&[8, 0, 0, 0, 0, 0, 42, 0], &eth(0x0800, &ip4())])));
    // A UDP datagram to 4789 without the I flag is not VXLAN.
    let f = eth_udp(4789, &[0; 30]);
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::NotTcp));
    // RFC 8926 3.4: Geneve with 8 bytes of options (OptLen 2), protocol 0x6558.
    let gen = cat(&[&[0x02, 0, 0x65, 0x58, 0, 0, 42, 0], &[0x01, 0x02, 0x03, 0x01, 1, 2, 3, 4], &eth(0x86dd, &ip6())]);
    inner(linktype::ETHERNET, &eth_udp(6081, &gen));
    // Geneve carrying IPv4 directly (protocol 0x0800), no options.
    inner(linktype::ETHERNET, &eth_udp(6081, &cat(&[&[0, 0, 8, 0, 0, 0, 1, 0], &ip4()])));
    // 3GPP TS 29.281 5.1/5.2: GTP-U G-PDU (type 255) with E set, one PDU session container
    // extension header (type 0x85, 1 unit = 4 bytes, next type 0).
    let body = cat(&[&[0, 1, 0, 0x85], &[1, 0x10, 5, 0], &ip4()]);
    let gtp = cat(&[&[0x34, 255], &(body.len() as u16).to_be_bytes(), &[0, 0, 0, 9], &body]);
    inner(linktype::ETHERNET, &eth_udp(2152, &gtp));
    // GTP-U without optional fields, IPv6 user packet.
    let gtp = cat(&[&[0x30, 255], &(40u16 + 25).to_be_bytes(), &[0, 0, 0, 9], &ip6()]);
    inner(linktype::ETHERNET, &eth_udp(2152, &gtp));
    // GTP-U echo request (type 1): signalling, not TCP.
    let f = eth_udp(2152, &[0x32, 1, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::NotTcp));
}

#[test]
fn ip_in_ip() {
    // RFC 2003 (4in4), RFC 4213 3.5 (6in4), RFC 2473 (4in6, 6in6).
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(4, &ip4())));
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(41, &ip6())));
    inner(linktype::ETHERNET, &eth(0x86dd, &ipv6(4, &ip4())));
    inner(linktype::ETHERNET, &eth(0x86dd, &ipv6(41, &ip6())));
    // 6in4 whose inner packet is IPv4: the outer protocol number says IPv6, so malformed.
    let f = eth(0x0800, &ipv4(41, &ip4()));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Malformed));
}

#[test]
fn other_encapsulations_are_named_and_counted() {
    let esp = eth(0x0800, &ipv4(50, &[0; 40]));
    assert_eq!(decode(1, &esp, esp.len() as u32), Err(Skip::Inside("IPsec ESP (RFC 4303)")));
    let capwap = eth_udp(5247, &[0; 40]);
    let macsec = eth(0x88e5, &[0; 40]);
    let tcp = eth_tcp4(false, 1, 1, false, b"x", &[]);
    let pkts = [esp.clone(), esp, capwap, macsec, tcp].map(|f| (1u32, 0u32, f));
    let file = pcap(false, 1, &pkts);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    while dec.next_event().unwrap().is_some() {}
    let s = dec.stats();
    assert_eq!(s.tcp_packets, 1);
    assert_eq!(s.not_decoded_inside.get("IPsec ESP (RFC 4303)"), Some(&2));
    assert_eq!(s.not_decoded_inside.values().sum::<u64>(), 4);
    let note = s.not_decoded_note().unwrap();
    assert!(note.contains("2 packets inside IPsec ESP (RFC 4303), not decoded"), "{note}");
    assert!(note.contains("1 packet inside CAPWAP (RFC 5415), not decoded"), "{note}");
}

#[test]
fn nesting_depth_is_bounded() {
    // 40 stacked VLAN tags: more layers than MAX_DEPTH, named rather than followed forever.
    let mut tags = Vec::new();
    for _ in 0..40 {
        tags.extend_from_slice(&[0, 1, 0x81, 0x00]);
    }
    let f = eth(0x8100, &cat(&[&tags, &[0, 1, 8, 0], &ip4()]));
    assert!(matches!(decode(1, &f, f.len() as u32), Err(Skip::Inside(k)) if k.contains("deeper")));
    // Within the bound: decoded.
    let f = eth(0x8100, &cat(&[&tags[..16], &[0, 1, 8, 0], &ip4()]));
    inner(linktype::ETHERNET, &f);
}

#[test]
fn malformed_ip_and_tcp_headers_are_counted_not_parsed() {
    let good = eth(0x0800, &ip4());
    let check = |f: &[u8], orig: usize| decode(1, f, orig as u32);
    assert!(check(&good, good.len()).is_ok());
    // RFC 791 3.1: the EtherType says IPv4, the version nibble says 6.
    let mut v = good.clone();
    v[14] = 0x65;
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // The EtherType says IPv6 and the packet is IPv4.
    let f = eth(0x86dd, &ip4());
    assert_eq!(check(&f, f.len()), Err(Skip::Malformed));
    // IHL 4 (< 5 words).
    let mut v = good.clone();
    v[14] = 0x44;
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // Total length 10, shorter than the header.
    let mut v = good.clone();
    v[16..18].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // Total length beyond the bytes of a whole frame: malformed; of a snaplen-cut frame: fine.
    let mut v = good.clone();
    v[16..18].copy_from_slice(&1400u16.to_be_bytes());
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    assert_eq!(check(&v, 1414).map(|p| p.segment.len), Ok(1400 - 40));
    // TCP data offset 4 (< 5, RFC 9293 3.1).
    let mut v = good.clone();
    v[14 + 20 + 12] = 0x40;
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // TCP data offset 15 (60 bytes) beyond the IP payload.
    let mut v = good.clone();
    v[14 + 20 + 12] = 0xf0;
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // RFC 8200 3: IPv6 payload length beyond a whole frame.
    let mut v = eth(0x86dd, &ip6());
    v[18..20].copy_from_slice(&900u16.to_be_bytes());
    assert_eq!(check(&v, v.len()), Err(Skip::Malformed));
    // Counted as malformed by the decoder.
    let file = pcap(false, 1, &[(1, 0, v.clone()), (1, 1, good.clone())]);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    while dec.next_event().unwrap().is_some() {}
    assert_eq!((dec.stats().malformed, dec.stats().tcp_packets), (1, 1));
}

#[test]
fn timestamps_going_back_are_counted_and_kept_in_order() {
    let f = |seq| eth_tcp4(false, seq, 1, false, b"x", &[]);
    // 10 s, 12 s, 10.5 s (1.5 s back), 11 s (still behind 12 s: 1 s back), 13 s.
    let pkts = [(10, 0, f(1)), (12, 0, f(2)), (10, 500_000, f(3)), (11, 0, f(4)), (13, 0, f(5))];
    let file = pcap(false, 1, &pkts);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut ts = Vec::new();
    while let Some(ev) = dec.next_event().unwrap() {
        ts.push(ev.event.t.0);
    }
    assert_eq!(ts.len(), 5);
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "event time never goes back: {ts:?}");
    // The frames behind get the time of the latest frame before them (12 s - 10 s = 2 s).
    assert_eq!(ts[2], 2_000_000_000);
    let s = dec.stats();
    assert_eq!(s.ts_backwards, 2);
    assert_eq!(s.ts_largest_step_back_ns, 1_500_000_000);
    assert!(s.ts_backwards_note().unwrap().contains("went back 2 times (largest step 1.500000 s)"));
}

#[test]
fn kernel_written_vxlan_capture() {
    // testdata/captures/vxlan-kernel.pcap: tcpdump on the underlay veth of two namespaces joined
    // by Linux VXLAN devices (VNI 42, UDP 4789, RFC 7348), one TCP exchange over the overlay
    // (10.1.0.1 -> 10.1.0.2:7000, "hello tunnel" and its upper-case echo), filtered to the
    // tunnelled TCP with tshark -Y tcp. tshark shows 10 TCP frames with a full handshake.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/captures/vxlan-kernel.pcap");
    let file = std::fs::read(path).unwrap();
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut payload = 0;
    let mut syn_from = None;
    while let Some(ev) = dec.next_event().unwrap() {
        if let trace::EventKind::Segment(s) = ev.event.kind {
            payload += s.len;
            if s.flags.syn() && !s.flags.ack() {
                syn_from = Some(ev.event.from);
            }
        }
    }
    let s = dec.stats();
    assert_eq!((s.frames, s.tcp_packets, s.not_tcp, s.malformed), (10, 10, 0, 0));
    assert_eq!(payload, 24);
    assert!(syn_from.is_some());
    // The inner addresses, not the underlay's 192.0.2.x.
    let mut r = CaptureReader::new(&file[..]).unwrap();
    let p = r.next_packet().unwrap().unwrap();
    let syn = decode(p.linktype, p.data, p.orig_len).unwrap();
    assert_eq!((syn.src.ip().to_string(), syn.dst.to_string()), ("10.1.0.1".into(), "10.1.0.2:7000".into()));
}

/// Issue 32: [`conversation`] in `frames` on link type `lt` decodes whole: one flow, all 5
/// packets, with its own addresses (not those of a tunnel around it).
fn whole_conversation(lt: u32, frames: &[Vec<u8>]) {
    let (evs, s) = decode_pcapng(lt, frames);
    assert_eq!((s.frames, s.tcp_packets, s.not_tcp, s.malformed, s.not_decoded()), (5, 5, 0, 0, 0), "{s:?}");
    assert_eq!(evs.len(), 5);
    assert!(evs.iter().all(|e| e.flow == evs[0].flow));
    let syn = decode(lt, &frames[0], frames[0].len() as u32).unwrap();
    assert_eq!((syn.src.to_string(), syn.dst.to_string()), ("10.0.0.1:5000".into(), "10.0.0.2:80".into()));
    assert!(syn.segment.flags.syn());
}

#[test]
fn pppoe_session_with_protocol_field_compression() {
    // Issue 32 (suricata-verify's bug-4810 capture): a PPPoE session header (RFC 2516 4:
    // ver/type 0x11, code 0, session id, length), then a PPP protocol field of one byte:
    // Protocol-Field-Compression (RFC 1661 6.5), 0x21 = IPv4 (RFC 1332), 0x57 = IPv6 (RFC
    // 5072). RFC 2516 7 makes PFC NOT RECOMMENDED on PPPoE, not forbidden. Before the fix the
    // protocol was read as 0x2145 and every frame counted "not TCP".
    let pppoe_pfc =
        |proto: u8, ip: &[u8]| cat(&[&[0x11, 0, 0x12, 0x34], &((ip.len() + 1) as u16).to_be_bytes(), &[proto], ip]);
    let frames: Vec<_> = conversation().iter().map(|ip| eth(0x8864, &pppoe_pfc(0x21, ip))).collect();
    whole_conversation(linktype::ETHERNET, &frames);
    inner(linktype::ETHERNET, &eth(0x8864, &pppoe_pfc(0x57, &ip6())));
    inner(linktype::PPP_ETHER, &pppoe_pfc(0x21, &ip4()));
    // A two-byte field whose low octet is even is no PPP protocol number (RFC 1661 2: "the
    // least significant bit of the least significant octet MUST equal 1"): malformed.
    let bad = cat(&[&[0x11, 0, 0, 1, 0, 47], &[0x00, 0x20], &ip4()]);
    assert_eq!(decode(linktype::PPP_ETHER, &bad, bad.len() as u32), Err(Skip::Malformed));
    assert_eq!(decode(linktype::PPP, &[0x00, 0x20, 0x45], 3), Err(Skip::Malformed));
}

#[test]
fn gre_with_a_wccp_redirect_header() {
    // Issue 32 (tcpdump's wccp_redirect_gre.pcap): a router redirecting traffic to a web cache
    // with WCCP v2 (draft-wilson-wrec-wccp-v2-01 4.12): GRE (RFC 2784) with protocol type
    // 0x883E, a 4-byte redirect header (flags 0x05 = dynamic service, header valid; service id
    // 89; alternate bucket 0; primary bucket 72, as in that capture), then the IPv4 packet.
    let wccp2 = |ip: &[u8]| eth(0x0800, &ipv4(47, &cat(&[&[0, 0, 0x88, 0x3e], &[0x05, 89, 0, 72], ip])));
    let frames: Vec<_> = conversation().iter().map(|ip| wccp2(ip)).collect();
    whole_conversation(linktype::ETHERNET, &frames);
    // WCCP v1 (draft-forster-wrec-wccp-v1-00): the IPv4 packet right after GRE; told apart by
    // its first nibble, 4, as tcpdump's print-gre.c and Wireshark's packet-gre.c do.
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(47, &cat(&[&[0, 0, 0x88, 0x3e], &ip4()]))));
    // A redirect header with nothing after it: malformed, not a panic.
    let f = eth(0x0800, &ipv4(47, &[0, 0, 0x88, 0x3e, 0x05, 89]));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Malformed));
}

/// An IP Authentication Header (RFC 4302 2): next header, payload length (AH's length in
/// 4-byte words minus 2: 4 for these 24 bytes), reserved, SPI, sequence number, and a 12-byte
/// ICV (HMAC-SHA1-96, RFC 2404), then `inner`.
fn ah(next: u8, inner: &[u8]) -> Vec<u8> {
    cat(&[&[next, 4, 0, 0], &[0, 0, 0x10, 0x01], &[0, 0, 0, 1], &[0xaa; 12], inner])
}

/// An IPv4 packet with a 20-byte header as AH in transport mode protects it (RFC 4302 3.1.1):
/// the header's protocol becomes 51, AH follows it naming the old protocol.
fn ah_transport4(ip: &[u8]) -> Vec<u8> {
    let mut h = ip[..20].to_vec();
    h[9] = 51;
    let total = u16::from_be_bytes([h[2], h[3]]) + 24;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    cat(&[&h, &ah(ip[9], &ip[20..])])
}

#[test]
fn ipv4_authentication_header() {
    // Issue 32 (libpcap's AH-IPcomp-IPv4.pcap): IPv4 -> AH (next header 4, tunnel mode, RFC
    // 4302 3.1.2) -> IPv4 -> TCP. Before the fix IP protocol 51 was "not TCP".
    let frames: Vec<_> = conversation().iter().map(|ip| eth(0x0800, &ipv4(51, &ah(4, ip)))).collect();
    whole_conversation(linktype::ETHERNET, &frames);
    // Transport mode (RFC 4302 3.1.1): TCP right after AH, the outer addresses are TCP's.
    let p = inner(linktype::ETHERNET, &eth(0x0800, &ah_transport4(&ip4())));
    assert_eq!(p.dst.to_string(), "10.0.0.2:80");
    // Tunnel mode carrying IPv6 (next header 41), and two AHs in a row.
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(51, &ah(41, &ip6()))));
    inner(linktype::ETHERNET, &eth(0x0800, &ipv4(51, &ah(51, &ah(4, &ip4())))));
    // AH as an IPv6 extension header (RFC 8200 4, RFC 4302 2), transport and tunnel mode.
    let v6 = ip6();
    let mut h = v6[..40].to_vec();
    h[6] = 51;
    let plen = u16::from_be_bytes([h[4], h[5]]) + 24;
    h[4..6].copy_from_slice(&plen.to_be_bytes());
    inner(linktype::ETHERNET, &eth(0x86dd, &cat(&[&h, &ah(v6[6], &v6[40..])])));
    inner(linktype::ETHERNET, &eth(0x86dd, &ipv6(51, &ah(4, &ip4()))));
    // A payload length running past the packet, or below AH's 12 fixed bytes (RFC 4302 2.2):
    // malformed.
    let mut long = ah(4, &ip4());
    long[1] = 200;
    let f = eth(0x0800, &ipv4(51, &long));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Malformed));
    let mut short = ah(4, &ip4());
    short[1] = 0;
    let f = eth(0x0800, &ipv4(51, &short));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Malformed));
}

#[test]
fn ipcomp_behind_ah_is_counted_by_name() {
    // libpcap's AH-IPcomp-IPv4.pcap: 4 of its 10 frames carry IPComp (RFC 3173, IP protocol
    // 108: next header, flags, CPI 2 = DEFLATE, RFC 2394) behind AH: the TCP packet inside is
    // compressed. Counted as not decoded, with its name, beside the TCP packets decoded.
    let ipcomp = |ip: &[u8]| cat(&[&[4, 0, 0, 2], &ip[..ip.len() / 2]]);
    let conv = conversation();
    let frames: Vec<_> = conv
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            let carried = if i >= 3 { ah(108, &ipcomp(ip)) } else { ah(4, ip) };
            eth(0x0800, &ipv4(51, &carried))
        })
        .collect();
    let (evs, s) = decode_pcapng(linktype::ETHERNET, &frames);
    assert_eq!((evs.len(), s.tcp_packets, s.not_tcp, s.malformed), (3, 3, 0, 0));
    assert_eq!(s.not_decoded_inside.get("IPComp (RFC 3173)"), Some(&2));
    let note = s.not_decoded_note().unwrap();
    assert!(note.contains("2 packets inside IPComp (RFC 3173), not decoded"), "{note}");
    // IPComp straight in IPv4 and in IPv6 too.
    let f = eth(0x0800, &ipv4(108, &ipcomp(&ip4())));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Inside("IPComp (RFC 3173)")));
    let f = eth(0x86dd, &ipv6(108, &ipcomp(&ip6())));
    assert_eq!(decode(1, &f, f.len() as u32), Err(Skip::Inside("IPComp (RFC 3173)")));
}
