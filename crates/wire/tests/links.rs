//! Link types beyond Ethernet and cooked captures: FDDI, NFLOG, IEEE 802.11 bare and with
//! radiotap. Every frame is built here, byte by byte, from the format's reference (cited at each
//! builder); each decodes to the TCP segment inside, and every prefix of it decodes without a
//! panic and is counted.

mod support;

use support::eth_tcp4;
use tcpstall_wire::{decode, decode_any, linktype, Decoder, FlowFilter, Skip};

/// The IPv4/TCP packet 10.0.0.1:5000 -> 10.0.0.2:80 with 3 bytes of payload.
fn ip4() -> Vec<u8> {
    eth_tcp4(false, 1, 1, false, b"abc", &[])[14..].to_vec()
}

/// LLC/SNAP (RFC 1042: AA AA 03, OUI 00-00-00, EtherType) then `ip`.
fn snap(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut v = vec![0xaa, 0xaa, 0x03, 0, 0, 0];
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(ip);
    v
}

/// An FDDI frame (tcpdump fddi.h `struct fddi_header`: frame control, destination, source)
/// carrying `payload` (LLC). Frame control 0x50: asynchronous LLC frame, priority 0.
fn fddi(fc: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![fc];
    v.extend_from_slice(&[0x00, 0x04, 0x00, 0x82, 0xa7, 0xaa]);
    v.extend_from_slice(&[0x00, 0x04, 0x00, 0x83, 0xa7, 0xaa]);
    v.extend_from_slice(payload);
    v
}

/// One NFLOG TLV (tcpdump print-nflog.c): length (header included, padding not) and type in
/// the capturing host's byte order, the value padded to 4 bytes.
fn tlv(little: bool, ty: u16, value: &[u8]) -> Vec<u8> {
    let len = (4 + value.len()) as u16;
    let mut v = Vec::new();
    if little {
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
    } else {
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(&ty.to_be_bytes());
    }
    v.extend_from_slice(value);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

/// An NFLOG frame as the Linux kernel's nfnetlink_log sends it to libpcap: header (family,
/// version 0, resource id 42 big-endian), NFULA_PACKET_HDR (1), NFULA_PREFIX (10, a string with
/// its NUL, 5 bytes: padding follows), NFULA_PAYLOAD (9) last.
fn nflog(little: bool, family: u8, ip: &[u8]) -> Vec<u8> {
    let mut v = vec![family, 0, 0, 42];
    v.extend(tlv(little, 1, &[0x08, 0x00, 0x01, 0x00]));
    v.extend(tlv(little, 10, b"http\0"));
    v.extend(tlv(little, 9, ip));
    v
}

/// An 802.11 data frame (IEEE 802.11-2020 9.3.2.1): frame control (type 2 data, `subtype`,
/// `flags`), duration, three addresses, sequence control (`frag` = fragment number), a fourth
/// address when To DS and From DS are both set, QoS control for QoS subtypes (`qos_ctl`), HT
/// control when a QoS frame has the Order flag, then `body`.
fn wifi(subtype: u8, flags: u8, frag: u8, qos_ctl: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![(subtype << 4) | (2 << 2), flags, 0x2c, 0x00];
    for a in 1..=3u8 {
        v.extend_from_slice(&[a; 6]);
    }
    v.extend_from_slice(&[0x10 | frag, 0x00]);
    if flags & 0x03 == 0x03 {
        v.extend_from_slice(&[4; 6]);
    }
    if subtype & 0x08 != 0 {
        v.extend_from_slice(&[qos_ctl, 0]);
        if flags & 0x80 != 0 {
            v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        }
    }
    v.extend_from_slice(body);
    v
}

/// A radiotap header (radiotap.org): version 0, pad, length (LE), present = TSFT | Flags | Rate
/// (bits 0-2), with `extra_bitmap` a second presence word (bit 31 of the first set); TSFT
/// 8-aligned, then the Flags byte `flags`, then the rate byte; then `frame` and, when the FCS
/// flag (0x10) is set, a 4-byte FCS.
fn radiotap(flags: u8, extra_bitmap: bool, frame: &[u8]) -> Vec<u8> {
    let present: u32 = 0b111 | if extra_bitmap { 0x8000_0000 } else { 0 };
    let mut v = vec![0, 0, 0, 0];
    v.extend_from_slice(&present.to_le_bytes());
    if extra_bitmap {
        v.extend_from_slice(&0u32.to_le_bytes());
    }
    v.resize(v.len().div_ceil(8) * 8, 0); // TSFT is 8-aligned
    v.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
    v.push(flags);
    v.push(0x0c); // rate 6 Mb/s
    let len = v.len() as u16;
    v[2..4].copy_from_slice(&len.to_le_bytes());
    v.extend_from_slice(frame);
    if flags & 0x10 != 0 {
        v.extend_from_slice(&[0x11, 0x22, 0x33, 0x44]);
    }
    v
}

fn ports_len(lt: u32, f: &[u8]) -> (u16, u16, u32) {
    let p = decode(lt, f, f.len() as u32).unwrap_or_else(|e| panic!("link type {lt}: {e:?}"));
    (p.src.port(), p.dst.port(), p.segment.len)
}

/// Every prefix of `f` decodes without a panic, and a capture of all of them counts each frame
/// once: as TCP or under one of the skip counters (`DecodeStats`).
fn prefixes_are_counted(lt: u32, f: &[u8]) {
    let mut recs = Vec::new();
    for n in 0..=f.len() {
        let _ = decode_any(lt, &f[..n], f.len() as u32); // cut by a snaplen
        let _ = decode_any(lt, &f[..n], n as u32); // whole but short
        recs.push((n as u32, 0, f[..n].to_vec()));
    }
    let file = support::pcap(false, lt, &recs);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    while d.next_event().unwrap().is_some() {}
    let s = d.stats();
    let inside: u64 = s.not_decoded_inside.values().sum();
    let counted = s.tcp_packets
        + s.not_tcp
        + s.malformed
        + inside
        + s.duplicates
        + s.after_close
        + s.icmp_errors
        + s.wlan_retries;
    assert_eq!(counted + s.icmp_no_flow, s.frames, "link type {lt}: {s:?}");
    assert_eq!(s.unknown_linktype, 0);
}

/// FDDI (LINKTYPE_FDDI 10): tcpdump fddi.h and Wireshark packet-fddi.c, 13-byte header then
/// 802.2 LLC with SNAP (RFC 1042). Frame control 0x50 (async LLC) and 0xD4 (sync LLC) carry
/// IP; 0x41 (SMT) does not, nor does LLC without SNAP.
#[test]
fn fddi_llc_snap_carries_ip() {
    let ip = ip4();
    for fc in [0x50, 0x54, 0xd4] {
        assert_eq!(ports_len(linktype::FDDI, &fddi(fc, &snap(0x0800, &ip))), (5000, 80, 3), "fc {fc:#x}");
    }
    assert_eq!(decode(linktype::FDDI, &fddi(0x41, &snap(0x0800, &ip)), 200), Err(Skip::NotTcp));
    let mut stp = vec![0x42, 0x42, 0x03];
    stp.extend_from_slice(&ip);
    let f = fddi(0x50, &stp);
    assert_eq!(decode(linktype::FDDI, &f, f.len() as u32), Err(Skip::NotTcp));
    prefixes_are_counted(linktype::FDDI, &fddi(0x50, &snap(0x0800, &ip)));
}

/// NFLOG (LINKTYPE_NFLOG 239): tcpdump print-nflog.c and libpcap `swap_nflog_header`: the TLV
/// length and type are in the capturing host's byte order; both orders decode, IPv4 (AF_INET 2)
/// and IPv6 (AF_INET6 10). A log entry without NFULA_PAYLOAD is not TCP; version 1 is named.
#[test]
fn nflog_payload_in_either_byte_order() {
    let ip = ip4();
    let ip6 = support::eth_tcp6(b"0123456789")[14..].to_vec();
    for little in [true, false] {
        assert_eq!(ports_len(linktype::NFLOG, &nflog(little, 2, &ip)), (5000, 80, 3), "little={little}");
        assert_eq!(ports_len(linktype::NFLOG, &nflog(little, 10, &ip6)), (5000, 443, 10), "little={little}");
        let mut no_payload = vec![2, 0, 0, 42];
        no_payload.extend(tlv(little, 1, &[0x08, 0x00, 0x01, 0x00]));
        let n = no_payload.len() as u32;
        assert_eq!(decode(linktype::NFLOG, &no_payload, n), Err(Skip::NotTcp));
        prefixes_are_counted(linktype::NFLOG, &nflog(little, 2, &ip));
    }
    let mut v1 = nflog(true, 2, &ip);
    v1[1] = 1;
    assert_eq!(decode(linktype::NFLOG, &v1, v1.len() as u32), Err(Skip::Inside("NFLOG of an unknown version")));
    // A TLV length below its own header (4) chains nowhere in either order: malformed.
    let bad = [2, 0, 0, 42, 2, 0, 0, 2];
    assert_eq!(decode(linktype::NFLOG, &bad, 8), Err(Skip::Malformed));
    // The family says IPv4 but the payload is IPv6: malformed, as for any link layer.
    let f = nflog(true, 2, &ip6);
    assert_eq!(decode(linktype::NFLOG, &f, f.len() as u32), Err(Skip::Malformed));
}

/// IEEE 802.11 data frames (IEEE 802.11-2020 9.3.2.1): 24-byte header; +6 with To DS and From
/// DS (4 addresses); +2 QoS control for QoS subtypes (0x08); +4 HT control with the Order flag
/// on QoS data; then LLC/SNAP. Bare (LINKTYPE_IEEE802_11 105) and after radiotap
/// (LINKTYPE_IEEE802_11_RADIOTAP 127, radiotap.org), whose Flags field announces an FCS (0x10,
/// stripped), header padding to 4 bytes (0x20) and a failed FCS (0x40, malformed).
#[test]
fn ieee802_11_data_frames_bare_and_after_radiotap() {
    let body = snap(0x0800, &ip4());
    let frames = [
        ("data, to DS", wifi(0, 0x01, 0, 0, &body)),
        ("data, from DS", wifi(0, 0x02, 0, 0, &body)),
        ("data, 4 addresses", wifi(0, 0x03, 0, 0, &body)),
        ("QoS data", wifi(8, 0x01, 0, 0x05, &body)),
        ("QoS data, 4 addresses, HT control", wifi(8, 0x83, 0, 0, &body)),
    ];
    for (what, f) in &frames {
        assert_eq!(ports_len(linktype::IEEE802_11, f), (5000, 80, 3), "{what}");
        for (flags, extra) in [(0x00, false), (0x10, false), (0x10, true), (0x02, true)] {
            let r = radiotap(flags, extra, f);
            assert_eq!(ports_len(linktype::IEEE802_11_RADIOTAP, &r), (5000, 80, 3), "{what}, flags {flags:#x}");
        }
        prefixes_are_counted(linktype::IEEE802_11_RADIOTAP, &radiotap(0x10, true, f));
        prefixes_are_counted(linktype::IEEE802_11, f);
    }
    // The FCS flag strips the last 4 bytes: a frame that claims an FCS it does not have loses
    // 4 bytes of its IP packet, which is then shorter than its total length: malformed.
    let mut no_fcs = radiotap(0x10, false, &frames[0].1);
    no_fcs.truncate(no_fcs.len() - 4);
    assert_eq!(decode(linktype::IEEE802_11_RADIOTAP, &no_fcs, no_fcs.len() as u32), Err(Skip::Malformed));
    // ... unless the snaplen cut the frame: the FCS was never captured, nothing is stripped.
    let p = decode(linktype::IEEE802_11_RADIOTAP, &no_fcs, no_fcs.len() as u32 + 4).expect("cut frame decodes");
    assert_eq!(p.segment.len, 3);
    // Data padding (radiotap flag 0x20): a QoS header of 26 bytes is padded to 28.
    let mut padded = wifi(8, 0x01, 0, 0, &[]);
    padded.extend_from_slice(&[0, 0]);
    padded.extend_from_slice(&body);
    let r = radiotap(0x20, false, &padded);
    assert_eq!(ports_len(linktype::IEEE802_11_RADIOTAP, &r), (5000, 80, 3));
    // Failed FCS check: malformed.
    let r = radiotap(0x40, false, &frames[0].1);
    assert_eq!(decode(linktype::IEEE802_11_RADIOTAP, &r, r.len() as u32), Err(Skip::Malformed));
}

/// What an 802.11 capture holds besides MSDUs (IEEE 802.11-2020 9.2.4.1.3 Table 9-1): beacons
/// (management) and null data are not IP; protected frames (flag 0x40), A-MSDUs (QoS control
/// bit 7) and fragments are counted by name, not decoded.
#[test]
fn ieee802_11_frames_without_a_plain_msdu_are_skipped_and_counted() {
    let body = snap(0x0800, &ip4());
    let mut beacon = wifi(0, 0, 0, 0, &[0; 40]);
    beacon[0] = 0x80; // type 0 management, subtype 8 beacon
    let cases = [
        (beacon, Skip::NotTcp),
        (wifi(4, 0x01, 0, 0, &[]), Skip::NotTcp),  // null data
        (wifi(12, 0x01, 0, 0, &[]), Skip::NotTcp), // QoS null
        (wifi(8, 0x41, 0, 0, &body), Skip::Inside("protected (encrypted) IEEE 802.11 frames")),
        (wifi(8, 0x01, 0, 0x80, &body), Skip::Inside("IEEE 802.11 A-MSDU aggregates")),
        (wifi(0, 0x05, 0, 0, &body), Skip::Inside("fragmented IEEE 802.11 frames")),
        (wifi(0, 0x01, 1, 0, &body), Skip::Inside("fragmented IEEE 802.11 frames")),
    ];
    let mut recs = Vec::new();
    for (i, (f, want)) in cases.iter().enumerate() {
        assert_eq!(decode(linktype::IEEE802_11, f, f.len() as u32), Err(*want), "case {i}");
        recs.push((i as u32, 0, radiotap(0, false, f)));
    }
    let file = support::pcap(false, linktype::IEEE802_11_RADIOTAP, &recs);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    assert!(d.next_event().unwrap().is_none());
    let s = d.stats();
    assert_eq!((s.frames, s.not_tcp), (7, 3));
    assert_eq!(s.not_decoded_inside.get("protected (encrypted) IEEE 802.11 frames"), Some(&1));
    assert_eq!(s.not_decoded_inside.get("fragmented IEEE 802.11 frames"), Some(&2));
    assert!(s.not_decoded_note().unwrap().contains("1 packet inside protected (encrypted) IEEE 802.11 frames"));
}

/// A sniffer sees an 802.11 frame again when its transmitter resends it at the MAC layer (the
/// Retry flag, IEEE 802.11-2020 9.2.4.1.5, with the same sequence number): the receiver drops
/// the copy (10.3.2.14 duplicate detection, by transmitter, TID and sequence control) and so
/// does the decoder, 64 ms later or not, counting it in `wlan_retries`. A retry whose original
/// was not captured is the only copy and is decoded; so is a frame with the next sequence
/// number, or the same one on another TID.
#[test]
fn ieee802_11_mac_retries_of_a_captured_frame_are_one_packet() {
    let body = snap(0x0800, &ip4());
    let with_seq = |seq: u16, retry: bool, tid: u8| {
        let mut f = wifi(8, 0x01 | if retry { 0x08 } else { 0 }, 0, tid, &body);
        f[22..24].copy_from_slice(&(seq << 4).to_le_bytes());
        radiotap(0x10, false, &f)
    };
    let recs = vec![
        (0, 0, with_seq(100, false, 0)),
        (0, 64_000, with_seq(100, true, 0)),  // MAC retry of the frame above: dropped
        (0, 70_000, with_seq(101, true, 0)),  // retry of a frame not captured: kept
        (0, 80_000, with_seq(100, true, 5)),  // same number on TID 5: another MPDU
        (0, 90_000, with_seq(102, false, 0)), // the next frame
    ];
    let file = support::pcap(false, linktype::IEEE802_11_RADIOTAP, &recs);
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut frames = Vec::new();
    while let Some(e) = d.next_event().unwrap() {
        frames.push(e.event.evidence);
    }
    let s = d.stats();
    assert_eq!(s.wlan_retries, 1);
    // Frames 3-5 carry the same TCP segment as frame 1 (the builder's), so the flow table's own
    // duplicate rule may collapse some of them: what matters is that frame 2 never reached it.
    assert_eq!(s.tcp_packets + s.duplicates, 4);
    assert_eq!(frames.first(), Some(&trace::Evidence::Frame(1)));
    assert!(!frames.contains(&trace::Evidence::Frame(2)));
    assert!(s.wlan_retries_note().unwrap().starts_with("1 IEEE 802.11 MAC-layer retransmission of"));
}

/// The new link types are listed where an unsupported one is named.
#[test]
fn new_link_types_are_listed_as_supported() {
    let list = linktype::supported_list();
    for name in ["10 FDDI", "105 IEEE 802.11", "127 IEEE 802.11 with radiotap", "239 Linux NFLOG"] {
        assert!(list.contains(name), "{list}");
    }
}
