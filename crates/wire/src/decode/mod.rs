//! Link layer, IPv4/IPv6 and TCP header decoding of one captured frame.
//!
//! Link headers are a few fixed offsets and are read here; IP headers are read here too because
//! captures routinely cut packets at the snaplen (`tcpdump -s 96`) and carry GSO/TSO
//! super-packets whose IPv4 total length is 0: the payload length must come from the IP header,
//! not from the bytes captured, and a strict slicer rejects both. The TCP header and its options
//! are parsed with etherparse's `TcpHeaderSlice`, which needs only the header bytes.

use etherparse::{TcpHeaderSlice, TcpOptionElement};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use trace::{Segment, TcpFlags};

/// LINKTYPE_* values (tcpdump.org/linktypes.html) this decoder understands.
pub mod linktype {
    /// BSD loopback: 4-byte address family in the writer's byte order.
    pub const NULL: u32 = 0;
    pub const ETHERNET: u32 = 1;
    /// Raw IP (DLT_RAW is 12 on most systems, 14 on OpenBSD; LINKTYPE_RAW is 101).
    pub const RAW: u32 = 101;
    pub const DLT_RAW_12: u32 = 12;
    pub const DLT_RAW_14: u32 = 14;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u32 = 108;
    /// Linux cooked capture v1 (`tcpdump -i any` before libpcap 1.10).
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    /// Linux cooked capture v2 (`tcpdump -i any`, libpcap 1.10+).
    pub const LINUX_SLL2: u32 = 276;
    /// PPP (RFC 1661), optionally with HDLC-like framing (RFC 1662).
    pub const PPP: u32 = 9;
    /// PPP in HDLC-like framing (RFC 1662).
    pub const PPP_HDLC: u32 = 50;
    /// PPPoE: Ethernet frames of the PPPoE session stage (RFC 2516), as DLT_PPP_ETHER.
    pub const PPP_ETHER: u32 = 51;
    /// Cisco HDLC: address(1) control(1) protocol(2, an ethertype).
    pub const C_HDLC: u32 = 104;

    /// Every link type above with its name, for messages.
    pub const SUPPORTED: &[(u32, &str)] = &[
        (NULL, "BSD loopback"),
        (ETHERNET, "Ethernet"),
        (DLT_RAW_12, "raw IP"),
        (DLT_RAW_14, "raw IP"),
        (RAW, "raw IP"),
        (LOOP, "OpenBSD loopback"),
        (LINUX_SLL, "Linux cooked v1"),
        (IPV4, "IPv4"),
        (IPV6, "IPv6"),
        (LINUX_SLL2, "Linux cooked v2"),
        (PPP, "PPP"),
        (PPP_HDLC, "PPP in HDLC framing"),
        (PPP_ETHER, "PPPoE"),
        (C_HDLC, "Cisco HDLC"),
    ];

    /// "0 BSD loopback, 1 Ethernet, ...": the supported link types, for messages.
    pub fn supported_list() -> String {
        SUPPORTED.iter().map(|(n, name)| format!("{n} {name}")).collect::<Vec<_>>().join(", ")
    }
}

/// A decoded TCP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub segment: Segment,
    /// IPv4 identification (RFC 791 3.1); None for IPv6. Linux numbers a connected socket's
    /// packets consecutively (`ip_select_ident_segs`), so a jump reveals a packet lost before
    /// the capture point.
    pub ip_id: Option<u16>,
}

/// Why a frame is not a TCP packet we can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A link type this decoder does not know.
    LinkType(u32),
    /// Not IP, or IP but not TCP, or a non-first fragment.
    NotTcp,
    /// Headers cut by the snaplen, inconsistent lengths or a wrong IP version.
    Malformed,
    /// Carried inside an encapsulation this decoder does not open (named for the user).
    Inside(&'static str),
}

mod tunnel;
use tunnel::Inner;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
/// Encapsulations nested deeper than this are not opened (a crafted capture cannot recurse).
const MAX_DEPTH: u8 = 8;

/// Decodes one frame. `orig_len` is the length on the wire (for `Segment::wire_len`).
pub fn decode(linktype: u32, data: &[u8], orig_len: u32) -> Result<TcpPacket, Skip> {
    let mut next = link_payload(linktype, data)?;
    for _ in 0..MAX_DEPTH {
        next = match next {
            Next::Ether(et, rest) => by_ethertype(et, rest)?,
            Next::Ethernet(frame) => ethernet(frame)?,
            Next::Ip(ip, version) => match ip_layer(ip, version)? {
                Layer::Tcp(mut p) => {
                    p.segment.wire_len = orig_len.max(data.len() as u32);
                    return Ok(p);
                }
                Layer::Next(n) => n,
            },
        };
    }
    Err(Skip::Inside("too many nested encapsulations"))
}

/// What follows a header.
#[derive(Debug, Clone, Copy)]
enum Next<'a> {
    /// A payload typed by an ethertype.
    Ether(u16, &'a [u8]),
    /// An Ethernet frame (destination MAC first).
    Ethernet(&'a [u8]),
    /// An IP packet, and the version its carrier announced (None: by its first nibble).
    Ip(&'a [u8], Option<u8>),
}

impl<'a> From<Inner<'a>> for Next<'a> {
    fn from(i: Inner<'a>) -> Self {
        match i {
            Inner::Ethernet(f) => Next::Ethernet(f),
            Inner::Ip(p) => Next::Ip(p, None),
        }
    }
}

/// IEEE 802.3: dst(6) src(6), then the ethertype (after any VLAN tags, in `by_ethertype`).
fn ethernet(d: &[u8]) -> Result<Next<'_>, Skip> {
    let et = be16(d, 12).ok_or(Skip::Malformed)?;
    Ok(Next::Ether(et, d.get(14..).ok_or(Skip::Malformed)?))
}

/// The payload an ethertype announces (IEEE Std 802 registry).
fn by_ethertype(et: u16, rest: &[u8]) -> Result<Next<'_>, Skip> {
    match et {
        ETH_IPV4 => Ok(Next::Ip(rest, Some(4))),
        ETH_IPV6 => Ok(Next::Ip(rest, Some(6))),
        // 802.1Q / 802.1ad / pre-standard QinQ: TCI(2) then the next ethertype.
        0x8100 | 0x88a8 | 0x9100 => {
            Ok(Next::Ether(be16(rest, 2).ok_or(Skip::Malformed)?, rest.get(4..).ok_or(Skip::Malformed)?))
        }
        // 802.1BR E-tag: 6 bytes after its TPID, then the next ethertype.
        0x893f => Ok(Next::Ether(be16(rest, 6).ok_or(Skip::Malformed)?, rest.get(8..).ok_or(Skip::Malformed)?)),
        // 802.1ah I-tag (4 bytes) then a whole customer Ethernet frame.
        0x88e7 => Ok(Next::Ethernet(rest.get(4..).ok_or(Skip::Malformed)?)),
        0x8847 | 0x8848 => tunnel::mpls(rest).map(Next::from),
        0x8864 => tunnel::pppoe(rest).map(Next::from),
        // ARP, LLDP, PPPoE discovery, ...: not IP.
        _ => Err(Skip::NotTcp),
    }
}

/// Strips the link header.
fn link_payload(linktype: u32, d: &[u8]) -> Result<Next<'_>, Skip> {
    use linktype::*;
    match linktype {
        ETHERNET => ethernet(d),
        // packet type(2) arphrd(2) addr len(2) addr(8) protocol(2) (pcap-linktype(7)).
        LINUX_SLL => Ok(Next::Ether(be16(d, 14).ok_or(Skip::Malformed)?, d.get(16..).ok_or(Skip::Malformed)?)),
        // protocol(2) reserved(2) ifindex(4) arphrd(2) packet type(1) addr len(1) addr(8).
        LINUX_SLL2 => Ok(Next::Ether(be16(d, 0).ok_or(Skip::Malformed)?, d.get(20..).ok_or(Skip::Malformed)?)),
        NULL | LOOP => {
            // Address family: 2 = AF_INET; AF_INET6 is 10 (Linux), 24 (NetBSD/OpenBSD), 28
            // (FreeBSD), 30 (macOS). NULL is in the writer's byte order: accept either.
            let af = d.get(..4).ok_or(Skip::Malformed)?;
            let le = u32::from_le_bytes([af[0], af[1], af[2], af[3]]);
            let be = u32::from_be_bytes([af[0], af[1], af[2], af[3]]);
            let fam = if linktype == LOOP { be } else { le.min(be) };
            match fam {
                2 => Ok(Next::Ip(&d[4..], Some(4))),
                10 | 24 | 28 | 30 => Ok(Next::Ip(&d[4..], Some(6))),
                _ => Err(Skip::NotTcp),
            }
        }
        RAW | DLT_RAW_12 | DLT_RAW_14 => Ok(Next::Ip(d, None)),
        IPV4 => Ok(Next::Ip(d, Some(4))),
        IPV6 => Ok(Next::Ip(d, Some(6))),
        PPP | PPP_HDLC => tunnel::ppp_over_hdlc(d, "PPP").map(Next::from),
        PPP_ETHER => tunnel::pppoe(d).map(Next::from),
        // Cisco HDLC: address(1) control(1) protocol(2), an ethertype.
        C_HDLC => Ok(Next::Ether(be16(d, 2).ok_or(Skip::Malformed)?, d.get(4..).ok_or(Skip::Malformed)?)),
        other => Err(Skip::LinkType(other)),
    }
}

pub(crate) fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// What an IP header leads to: the TCP packet, or an encapsulated payload.
enum Layer<'a> {
    Tcp(TcpPacket),
    Next(Next<'a>),
}

/// The protocols an IP header can announce that tcpstall opens (IANA protocol numbers):
/// 4 IPv4-in-IP (RFC 2003), 41 IPv6-in-IP (RFC 4213), 47 GRE, 17 UDP tunnels.
fn carried(proto: u8, payload: &[u8]) -> Result<Layer<'_>, Skip> {
    match proto {
        4 => Ok(Layer::Next(Next::Ip(payload, Some(4)))),
        41 => Ok(Layer::Next(Next::Ip(payload, Some(6)))),
        47 => tunnel::gre(payload).map(|i| Layer::Next(i.into())),
        17 => tunnel::udp(payload).map(|i| Layer::Next(i.into())),
        50 => Err(Skip::Inside("IPsec ESP (encrypted)")),
        _ => Err(Skip::NotTcp),
    }
}

/// IP header, then TCP (or an encapsulation). The TCP payload length comes from the IP
/// header's length fields. `expect` is the version the carrier announced: a header of another
/// version is malformed, not parsed (RFC 791 3.1, RFC 8200 3).
fn ip_layer(ip: &[u8], expect: Option<u8>) -> Result<Layer<'_>, Skip> {
    let version = ip.first().ok_or(Skip::Malformed)? >> 4;
    if expect.is_some_and(|v| v != version) {
        return Err(Skip::Malformed);
    }
    let (src, dst, tcp, ip_payload_len, ip_id) = match version {
        4 => {
            // RFC 791 3.1: IHL >= 5 words, total length >= IHL.
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ihl < 20 || ip.len() < ihl {
                return Err(Skip::Malformed);
            }
            let frag_off = be16(ip, 6).ok_or(Skip::Malformed)? & 0x1fff;
            if frag_off != 0 {
                return Err(Skip::NotTcp);
            }
            let total = usize::from(be16(ip, 2).ok_or(Skip::Malformed)?);
            // Total length 0: a TSO/GSO super-packet captured before segmentation; the capture
            // length is the only length there is.
            let total = if total == 0 { ip.len() } else { total };
            if total < ihl {
                return Err(Skip::Malformed);
            }
            if ip[9] != 6 {
                let end = total.min(ip.len());
                return carried(ip[9], &ip[ihl..end]);
            }
            let s = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let d = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            let id = be16(ip, 4).ok_or(Skip::Malformed)?;
            (IpAddr::V4(s), IpAddr::V4(d), &ip[ihl..], total - ihl, Some(id))
        }
        6 => {
            // RFC 8200 3 and 4: walk extension headers to TCP.
            if ip.len() < 40 {
                return Err(Skip::Malformed);
            }
            let mut payload_len = usize::from(be16(ip, 4).ok_or(Skip::Malformed)?);
            if payload_len == 0 {
                payload_len = ip.len() - 40; // jumbogram or GSO: trust what was captured
            }
            let mut next = ip[6];
            let mut at = 40;
            loop {
                match next {
                    6 => break,
                    // Hop-by-hop, routing, destination options: (len + 1) * 8 bytes.
                    0 | 43 | 60 => {
                        let n = usize::from(*ip.get(at + 1).ok_or(Skip::Malformed)?) * 8 + 8;
                        next = ip[at];
                        at += n;
                        payload_len = payload_len.checked_sub(n).ok_or(Skip::Malformed)?;
                    }
                    // Fragment header: only the first fragment carries the TCP header.
                    44 => {
                        let off = be16(ip, at + 2).ok_or(Skip::Malformed)? & 0xfff8;
                        if off != 0 {
                            return Err(Skip::NotTcp);
                        }
                        next = ip[at];
                        at += 8;
                        payload_len = payload_len.checked_sub(8).ok_or(Skip::Malformed)?;
                    }
                    other => {
                        let end = (at + payload_len).min(ip.len());
                        return carried(other, ip.get(at..end).ok_or(Skip::Malformed)?);
                    }
                }
            }
            let s: [u8; 16] = ip[8..24].try_into().map_err(|_| Skip::Malformed)?;
            let d: [u8; 16] = ip[24..40].try_into().map_err(|_| Skip::Malformed)?;
            let tcp = ip.get(at..).ok_or(Skip::Malformed)?;
            (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), tcp, payload_len, None)
        }
        _ => return Err(Skip::Malformed),
    };
    let h = TcpHeaderSlice::from_slice(tcp).map_err(|_| Skip::Malformed)?;
    let hlen = usize::from(h.data_offset()) * 4;
    let len = ip_payload_len.checked_sub(hlen).ok_or(Skip::Malformed)?;
    let mut seg = Segment {
        seq: h.sequence_number(),
        ack: h.acknowledgment_number(),
        flags: TcpFlags(tcp[13]),
        len: u32::try_from(len).map_err(|_| Skip::Malformed)?,
        window: h.window_size(),
        wscale: None,
        mss: None,
        ts: None,
        sack_blocks: 0,
        wire_len: 0,
    };
    // Options (RFC 9293 3.2; MSS RFC 9293 3.7.1, window scale and timestamps RFC 7323, SACK
    // RFC 2018). A malformed option ends option parsing; the segment is still usable.
    for opt in h.options_iterator() {
        match opt {
            Ok(TcpOptionElement::MaximumSegmentSize(m)) => seg.mss = Some(m),
            Ok(TcpOptionElement::WindowScale(w)) => seg.wscale = Some(w),
            Ok(TcpOptionElement::Timestamp(v, e)) => seg.ts = Some((v, e)),
            Ok(TcpOptionElement::SelectiveAcknowledgement(_, rest)) => {
                seg.sack_blocks = 1 + rest.iter().filter(|b| b.is_some()).count() as u8
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(Layer::Tcp(TcpPacket {
        src: SocketAddr::new(src, h.source_port()),
        dst: SocketAddr::new(dst, h.destination_port()),
        segment: seg,
        ip_id,
    }))
}
