//! Link layer, encapsulations, IPv4/IPv6 and TCP header decoding of one captured frame.
//!
//! Link headers and EtherTypes are in [`link`], tunnels and label stacks in [`tunnel`]; each
//! strips one header and names the next [`Layer`], and [`decode`] follows them with a bounded
//! depth ([`MAX_DEPTH`]) to an IP header and TCP. IP headers are read here too because
//! captures routinely cut packets at the snaplen (`tcpdump -s 96`) and carry GSO/TSO
//! super-packets whose IPv4 total length is 0: the payload length must come from the IP header,
//! not from the bytes captured, and a strict slicer rejects both. The TCP header and its options
//! are parsed with etherparse's `TcpHeaderSlice`, which needs only the header bytes.

use etherparse::{TcpHeaderSlice, TcpOptionElement};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use trace::{Segment, SeqNum, TcpFlags};

use crate::defrag::Fragment;

#[cfg(test)]
mod fast_tests;
mod icmp;
mod link;
mod tunnel;
mod wlan;

pub use icmp::IcmpPacket;
pub use wlan::{mpdu as wlan_mpdu, MpduId};

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
    /// PPP (RFC 1661), with or without RFC 1662 HDLC-like framing.
    pub const PPP: u32 = 9;
    /// PPP in HDLC-like framing (RFC 1662) or Cisco PPP with HDLC framing (RFC 1547 4.3.1).
    pub const PPP_HDLC: u32 = 50;
    /// PPPoE (RFC 2516): the frame begins with the PPPoE header.
    pub const PPP_ETHER: u32 = 51;
    /// Cisco HDLC: address, control, EtherType.
    pub const C_HDLC: u32 = 104;
    /// FDDI (ANSI INCITS 239-1994): frame control, destination, source, then 802.2 LLC.
    pub const FDDI: u32 = 10;
    /// IEEE 802.11 frames without a radio header.
    pub const IEEE802_11: u32 = 105;
    /// IEEE 802.11 frames after a radiotap header (radiotap.org).
    pub const IEEE802_11_RADIOTAP: u32 = 127;
    /// Linux netfilter NFLOG (`tcpdump -i nflog:N`): a 4-byte header, then TLVs.
    pub const NFLOG: u32 = 239;

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
        (FDDI, "FDDI"),
        (IEEE802_11, "IEEE 802.11"),
        (IEEE802_11_RADIOTAP, "IEEE 802.11 with radiotap"),
        (NFLOG, "Linux NFLOG"),
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
    /// The segment; its `ip_id` is the IPv4 identification (RFC 791 3.1), None for IPv6.
    pub segment: Segment,
    /// The frame's link header says it was captured on a loopback interface: BSD loopback
    /// encapsulation (link types NULL and LOOP), a Linux cooked header whose ARPHRD type is
    /// ARPHRD_LOOPBACK, or an Ethernet header with both MAC addresses zero (Linux `lo`, whose
    /// device address is all zeros, captured as Ethernet). See [`frame_on_loopback`].
    pub loopback: bool,
}

/// What a frame carries that the flow table uses: a TCP segment, or an ICMP error quoting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    Tcp(TcpPacket),
    Icmp(IcmpPacket),
}

/// Why a frame is not a TCP packet we can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A link type this decoder does not know.
    LinkType(u32),
    /// Not IP, or IP but not TCP, or a non-first fragment.
    NotTcp,
    /// Headers cut by the snaplen or inconsistent: an IP version other than the link layer
    /// announced, IHL < 5, lengths shorter than the header or (in a frame the snaplen did not
    /// cut) longer than the bytes, TCP data offset < 5 or beyond the IP payload.
    Malformed,
    /// Inside an encapsulation this decoder recognises but does not open (the name says which:
    /// "IPsec ESP (RFC 4303)", "CAPWAP (RFC 5415)", ...).
    Inside(&'static str),
    /// An IP fragment (RFC 791 3.2, RFC 8200 4.5): its datagram is whole only with the other
    /// fragments, which [`crate::Decoder`] reassembles; one frame alone is not decoded.
    Fragment,
}

/// Encapsulations followed before giving up (a VLAN tag, an MPLS stack, a tunnel header each
/// count one): a bound on work per frame whatever the bytes say.
pub const MAX_DEPTH: usize = 16;

/// One header peeled off; what the bytes that follow are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Layer<'a> {
    /// An Ethernet II frame (destination MAC first).
    Ether(&'a [u8]),
    /// The payload of an EtherType.
    Type(u16, &'a [u8]),
    /// The payload of a PPP protocol number.
    Ppp(u16, &'a [u8]),
    /// An IP packet: the version the outer header announced, or None to read it from the
    /// first nibble (raw IP link types, MPLS, GTP-U).
    Ip(Option<u8>, &'a [u8]),
}

/// Decodes one frame to a TCP packet. `orig_len` is the length on the wire (for
/// `Segment::wire_len`); a frame with fewer bytes captured than `orig_len` was cut by the
/// snaplen, so IP lengths beyond the captured bytes are expected; in a whole frame they are
/// malformed. An ICMP error quoting a TCP segment is `Skip::NotTcp` here (see [`decode_any`]).
pub fn decode(linktype: u32, data: &[u8], orig_len: u32) -> Result<TcpPacket, Skip> {
    match decode_any(linktype, data, orig_len)? {
        Decoded::Tcp(p) => Ok(p),
        Decoded::Icmp(_) => Err(Skip::NotTcp),
    }
}

/// Decodes one frame to a TCP packet or an ICMP error about a TCP segment (see
/// [`IcmpPacket`]); everything else is a [`Skip`]. An IP fragment is [`Skip::Fragment`]:
/// [`crate::Decoder`] reassembles fragmented datagrams, one frame alone cannot.
pub fn decode_any(linktype: u32, data: &[u8], orig_len: u32) -> Result<Decoded, Skip> {
    match decode_frame(linktype, data, orig_len)? {
        Frame::Packet(p) => Ok(p),
        Frame::Fragment(_) => Err(Skip::Fragment),
    }
}

/// What one frame (or one reassembled datagram) holds: a packet, or a fragment of one.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    Packet(Decoded),
    Fragment(Fragment<'a>),
}

/// [`decode_any`], with the fragments the decoder reassembles.
pub(crate) fn decode_frame(linktype: u32, data: &[u8], orig_len: u32) -> Result<Frame<'_>, Skip> {
    let cut = (data.len() as u64) < u64::from(orig_len);
    let (layer, done) = match fast_ip(linktype, data) {
        Some(ip) => ip,
        None => (link::first(linktype, data, cut)?, 0),
    };
    let wire_len = orig_len.max(data.len() as u32);
    walk(layer, done, cut, wire_len, || frame_on_loopback(linktype, data))
}

/// The frames nearly every capture is made of, IPv4 or IPv6 in Ethernet II or in a Linux
/// cooked header (`tcpdump -i any`), start at their IP layer: the layer, and the count of
/// [`walk`]'s steps to it, that the general way gives (`link::first`, then `link::ethernet`
/// for Ethernet II, then `link::ethertype`: two steps, one for SLL and SLL2, whose first layer
/// is the EtherType's), without their calls and indirect jumps (a sixth of `tcpstall
/// explain`'s time on small packets, issue 35). None: anything else, read the general way.
#[inline(always)]
fn fast_ip(linktype: u32, data: &[u8]) -> Option<(Layer<'_>, usize)> {
    let (et, at) = link::ethertype_field(linktype)?;
    // walk's steps to the IP layer: Ether then Type for Ethernet II, Type for SLL and SLL2.
    let steps = if linktype == linktype::ETHERNET { 2 } else { 1 };
    let payload = data.get(at..)?;
    match be16(data, et)? {
        ETH_IPV4 => Some((Layer::Ip(Some(4), payload), steps)),
        ETH_IPV6 => Some((Layer::Ip(Some(6), payload), steps)),
        _ => None,
    }
}

/// An IP datagram reassembled from fragments (see [`crate::defrag`]), carried in frames of
/// `wire_len` bytes in all, the last of them on a loopback interface when `loopback`. `cut`:
/// some of its bytes were not captured.
pub(crate) fn decode_datagram(datagram: &[u8], cut: bool, wire_len: u32, loopback: bool) -> Result<Frame<'_>, Skip> {
    walk(Layer::Ip(None, datagram), 0, cut, wire_len, || loopback)
}

/// Follows the layers from `layer` to TCP, an ICMP error, or a fragment; `done`: the steps
/// [`MAX_DEPTH`] already counts (those [`fast_ip`] took).
fn walk<'a>(
    mut layer: Layer<'a>,
    done: usize,
    cut: bool,
    wire_len: u32,
    loopback: impl Fn() -> bool,
) -> Result<Frame<'a>, Skip> {
    for _ in done..MAX_DEPTH {
        layer = match layer {
            Layer::Ether(d) => link::ethernet(d)?,
            Layer::Type(et, d) => link::ethertype(et, d)?,
            Layer::Ppp(proto, d) => link::ppp(proto, d)?,
            Layer::Ip(version, d) => {
                let ip = ip_header(version, d, cut)?;
                if let Some(f) = ip.fragment {
                    return Ok(Frame::Fragment(f));
                }
                match ip.proto {
                    6 => {
                        let mut p = tcp(&ip)?;
                        p.segment.wire_len = wire_len;
                        p.loopback = loopback();
                        return Ok(Frame::Packet(Decoded::Tcp(p)));
                    }
                    // ICMP (RFC 792) in IPv4, ICMPv6 (RFC 4443) in IPv6.
                    1 | 58 => return icmp::error(&ip).map(|e| Frame::Packet(Decoded::Icmp(e))),
                    _ => tunnel::ip_payload(ip.proto, ip.payload)?,
                }
            }
        };
    }
    Err(Skip::Inside("encapsulations nested deeper than 16"))
}

/// Whether a frame's link header says it was captured on a loopback interface:
/// - link types NULL (0) and LOOP (108), the BSD loopback encapsulation (pcap-linktype(7):
///   "BSD loopback encapsulation"; lo0 on the BSDs and macOS);
/// - Linux cooked captures (SLL, SLL2) whose ARPHRD type is ARPHRD_LOOPBACK, 772
///   (include/uapi/linux/if_arp.h; the field is bytes 2..4 of SLL and 8..10 of SLL2, both
///   big-endian, libpcap's sll.h);
/// - Ethernet frames whose destination and source MAC are both zero: Linux's `lo` has an
///   all-zero device address (drivers/net/loopback.c sets none; `ip link show lo` prints
///   00:00:00:00:00:00) and is captured as DLT_EN10MB with that header.
///
/// A pcapng interface name refines this (see [`crate::Decoder::interface_loopback`]).
pub fn frame_on_loopback(linktype: u32, data: &[u8]) -> bool {
    const ARPHRD_LOOPBACK: u16 = 772;
    match linktype {
        linktype::NULL | linktype::LOOP => true,
        linktype::LINUX_SLL => be16(data, 2) == Some(ARPHRD_LOOPBACK),
        linktype::LINUX_SLL2 => be16(data, 8) == Some(ARPHRD_LOOPBACK),
        linktype::ETHERNET => data.get(..12).is_some_and(|m| m.iter().all(|&b| b == 0)),
        _ => false,
    }
}

pub(crate) const ETH_IPV4: u16 = 0x0800;
pub(crate) const ETH_IPV6: u16 = 0x86dd;
pub(crate) const ETH_MPLS: u16 = 0x8847;
pub(crate) const ETH_PPPOE_SESSION: u16 = 0x8864;

/// IEEE 802.2 LLC with a SNAP header (RFC 1042 "Header format"; IEEE 802-2014 10.3): DSAP 0xAA,
/// SSAP 0xAA, control 0x03 (UI), a 3-byte OUI, then a 2-byte protocol id that is an EtherType.
/// Other LLC frames (spanning tree, NetBIOS, ...) are not IP. The OUI is not checked: 00-00-00
/// (RFC 1042) and 00-00-F8 (IEEE 802.1H bridge tunnel) both carry EtherTypes, and a vendor
/// OUI's protocol id that is not IP's EtherType ends as `NotTcp` anyway.
pub(crate) fn llc_snap(d: &[u8]) -> Result<Layer<'_>, Skip> {
    match d.get(..3) {
        Some([0xaa, 0xaa, 0x03]) => Ok(Layer::Type(be16(d, 6).ok_or(Skip::Malformed)?, &d[8..])),
        Some(_) => Err(Skip::NotTcp),
        None => Err(Skip::Malformed),
    }
}

pub(crate) fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// An IP header read and checked.
struct IpHeader<'a> {
    src: IpAddr,
    dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    proto: u8,
    /// The payload bytes captured, bounded by the header's length.
    payload: &'a [u8],
    /// The payload length the header gives (may exceed `payload` when the snaplen cut it).
    payload_len: usize,
    id: Option<u16>,
    /// Set when the packet is a fragment (RFC 791 3.2, RFC 8200 4.5): `proto` and `payload`
    /// are then the fragment's, to be reassembled before they mean anything.
    fragment: Option<Fragment<'a>>,
    /// IPv4 TTL (RFC 791 3.1) or IPv6 hop limit (RFC 8200 3).
    ttl: u8,
}

/// Reads an IPv4 (RFC 791 3.1) or IPv6 (RFC 8200 3, 4) header. `want` is the version the outer
/// layer announced: a different version nibble is malformed (not parsed as the other one).
/// A fragment comes back with [`IpHeader::fragment`] set.
fn ip_header(want: Option<u8>, ip: &[u8], cut: bool) -> Result<IpHeader<'_>, Skip> {
    let version = ip.first().ok_or(Skip::Malformed)? >> 4;
    match want {
        Some(w) if w != version => return Err(Skip::Malformed),
        _ => {}
    }
    match version {
        4 => ipv4_header(ip, cut),
        6 => ipv6_header(ip, cut),
        _ => Err(Skip::NotTcp),
    }
}

/// An IPv4 header (RFC 791 3.1); `cut`: the snaplen cut the frame. Authentication headers
/// (RFC 4302) after it are skipped: `proto` and `payload` are what the last one protects.
fn ipv4_header(ip: &[u8], cut: bool) -> Result<IpHeader<'_>, Skip> {
    // RFC 791 3.1: IHL counts 32-bit words, minimum 5.
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < 20 || ip.len() < ihl {
        return Err(Skip::Malformed);
    }
    let total = usize::from(be16(ip, 2).ok_or(Skip::Malformed)?);
    // Total length 0: a TSO/GSO super-packet captured before segmentation; the capture
    // length is the only length there is.
    let total = if total == 0 { ip.len() } else { total };
    // RFC 791 3.1: total length includes the header. More than was captured is only
    // possible when the snaplen cut the frame.
    if total < ihl || (total > ip.len() && !cut) {
        return Err(Skip::Malformed);
    }
    let (src, dst) = (Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]), Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    let mut h = IpHeader {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        proto: ip[9],
        payload: &ip[ihl..total.min(ip.len())],
        payload_len: total - ihl,
        id: be16(ip, 4),
        fragment: None,
        ttl: ip[8],
    };
    // RFC 791 3.1: flags (reserved, DF, MF) and the fragment offset in 8-octet units.
    let frag = be16(ip, 6).ok_or(Skip::Malformed)?;
    if frag & 0x3fff != 0 {
        h.fragment = Some(Fragment {
            src: h.src,
            dst: h.dst,
            id: u32::from(be16(ip, 4).ok_or(Skip::Malformed)?),
            proto: h.proto,
            offset: usize::from(frag & 0x1fff) * 8,
            more: frag & 0x2000 != 0,
            len: h.payload_len,
            data: h.payload,
            head: &ip[..ihl],
            next: h.proto,
        });
        return Ok(h);
    }
    // RFC 4302 2: AH's next header names what it protects: TCP in transport mode, IPv4 (4)
    // or IPv6 (41) in tunnel mode, IPComp (108), ... (RFC 4302 3.1).
    while h.proto == 51 {
        let n = ah_len(h.payload)?;
        h.proto = h.payload[0];
        h.payload = h.payload.get(n..).ok_or(Skip::Malformed)?;
        h.payload_len = h.payload_len.checked_sub(n).ok_or(Skip::Malformed)?;
    }
    Ok(h)
}

/// The length of the IP authentication header at the start of `d` (RFC 4302 2.2: "Payload
/// Length: ... the length of AH in 32-bit words (4-byte units), minus 2"): at least the 12
/// bytes of its fixed fields (next header, payload length, reserved, SPI, sequence number;
/// 2.2 gives the length 1 for a null ICV), and within the bytes.
fn ah_len(d: &[u8]) -> Result<usize, Skip> {
    let n = (usize::from(*d.get(1).ok_or(Skip::Malformed)?) + 2) * 4;
    if n < 12 || n > d.len() {
        return Err(Skip::Malformed);
    }
    Ok(n)
}

/// An IPv6 header and its extension headers (RFC 8200 3, 4); `cut`: the snaplen cut the frame.
fn ipv6_header(ip: &[u8], cut: bool) -> Result<IpHeader<'_>, Skip> {
    if ip.len() < 40 {
        return Err(Skip::Malformed);
    }
    let mut payload_len = usize::from(be16(ip, 4).ok_or(Skip::Malformed)?);
    if payload_len == 0 {
        payload_len = ip.len() - 40; // jumbogram (RFC 2675) or GSO: trust the capture
    } else if 40 + payload_len > ip.len() && !cut {
        return Err(Skip::Malformed); // RFC 8200 3: payload length beyond the frame
    }
    let end = (40 + payload_len).min(ip.len());
    let mut next = ip[6];
    let mut at = 40;
    let s: [u8; 16] = ip[8..24].try_into().map_err(|_| Skip::Malformed)?;
    let d: [u8; 16] = ip[24..40].try_into().map_err(|_| Skip::Malformed)?;
    let (src, dst) = (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)));
    // RFC 8200 4: walk extension headers to the upper layer.
    loop {
        let n = match next {
            // Hop-by-hop, routing, destination options (RFC 8200 4.3-4.6): (len + 1) * 8.
            0 | 43 | 60 => usize::from(*ip.get(at + 1).ok_or(Skip::Malformed)?) * 8 + 8,
            // Authentication header (RFC 4302 2.2): (len + 2) * 4.
            51 => ah_len(ip.get(at..end).ok_or(Skip::Malformed)?)?,
            // Fragment header (RFC 8200 4.5): next header(1) reserved(1) offset(13 bits, in
            // 8-octet units) res(2) M(1), identification(4); the fragmentable part follows.
            // Offset 0 without M is an atomic fragment, a whole packet (RFC 6946 4).
            44 if be16(ip, at + 2).is_some_and(|off| off & 0xfff9 == 0) => 8,
            44 => {
                let off = be16(ip, at + 2).ok_or(Skip::Malformed)?;
                let id = ip.get(at + 4..at + 8).ok_or(Skip::Malformed)?;
                let len = payload_len.checked_sub(8).ok_or(Skip::Malformed)?;
                let data = ip.get(at + 8..end).ok_or(Skip::Malformed)?;
                let fragment = Fragment {
                    src,
                    dst,
                    id: u32::from_be_bytes([id[0], id[1], id[2], id[3]]),
                    proto: 0,
                    offset: usize::from(off & 0xfff8),
                    more: off & 1 != 0,
                    len,
                    data,
                    head: &ip[..40],
                    next: ip[at],
                };
                return Ok(IpHeader {
                    src,
                    dst,
                    proto: ip[at],
                    payload: data,
                    payload_len: len,
                    id: None,
                    fragment: Some(fragment),
                    ttl: ip[7],
                });
            }
            _ => break,
        };
        next = *ip.get(at).ok_or(Skip::Malformed)?;
        at += n;
        payload_len = payload_len.checked_sub(n).ok_or(Skip::Malformed)?;
    }
    Ok(IpHeader {
        src,
        dst,
        proto: next,
        payload: ip.get(at..end).ok_or(Skip::Malformed)?,
        payload_len,
        id: None,
        fragment: None,
        ttl: ip[7],
    })
}

/// The TCP header (RFC 9293 3.1) of an IP packet. The payload length comes from the IP
/// header's length fields, so a snaplen-cut segment keeps its true length.
/// Inlined into [`walk`]: called apart, its 144-byte result was copied twice more on the way
/// out (the segment is built where the frame's result lies); 7% of `tcpstall explain`'s CPU on
/// a 1M-packet capture (issue 35).
#[inline(always)]
fn tcp(ip: &IpHeader<'_>) -> Result<TcpPacket, Skip> {
    let tcp = ip.payload;
    let ip_payload_len = ip.payload_len;
    // etherparse refuses a data offset below 5 words (RFC 9293 3.1) and a header longer than
    // the bytes: both malformed.
    let h = TcpHeaderSlice::from_slice(tcp).map_err(|_| Skip::Malformed)?;
    let hlen = usize::from(h.data_offset()) * 4;
    let len = ip_payload_len.checked_sub(hlen).ok_or(Skip::Malformed)?;
    let mut seg = Segment {
        seq: SeqNum(h.sequence_number()),
        ack: SeqNum(h.acknowledgment_number()),
        flags: TcpFlags(tcp[13]),
        len: u32::try_from(len).map_err(|_| Skip::Malformed)?,
        window: h.window_size(),
        wscale: None,
        mss: None,
        ts: None,
        sack_blocks: 0,
        sack: [(SeqNum(0), SeqNum(0)); 4],
        wire_len: 0,
        ttl: Some(ip.ttl),
        ip_id: ip.id,
    };
    // Options (RFC 9293 3.2; MSS RFC 9293 3.7.1, window scale and timestamps RFC 7323, SACK
    // RFC 2018). A malformed option ends option parsing; the segment is still usable.
    // The layout nearly every segment of a timestamping connection carries, read at once: NOP,
    // NOP, timestamps (kind 8, length 10), as RFC 7323 Appendix A advises and Linux writes
    // (tcp_options_write). The general walk below gives the same result, at several times the
    // cost on small packets (etherparse's option iterator was 2-3% of `tcpstall explain`).
    let linux_ts = match tcp.get(20..hlen) {
        Some([1, 1, 8, 10, v0, v1, v2, v3, e0, e1, e2, e3]) => {
            Some((u32::from_be_bytes([*v0, *v1, *v2, *v3]), u32::from_be_bytes([*e0, *e1, *e2, *e3])))
        }
        _ => None,
    };
    seg.ts = linux_ts;
    let walk = linux_ts.is_none().then(|| h.options_iterator());
    for opt in walk.into_iter().flatten() {
        match opt {
            Ok(TcpOptionElement::MaximumSegmentSize(m)) => seg.mss = Some(m),
            Ok(TcpOptionElement::WindowScale(w)) => seg.wscale = Some(w),
            Ok(TcpOptionElement::Timestamp(v, e)) => seg.ts = Some((v, e)),
            Ok(TcpOptionElement::SelectiveAcknowledgement(first, rest)) => {
                // RFC 2018 3: each block is (left edge, right edge); the first may be a
                // D-SACK (RFC 2883 4), so order is kept.
                let block = |(l, r): (u32, u32)| (SeqNum(l), SeqNum(r));
                seg.sack[0] = block(first);
                let mut n = 1;
                for &b in rest.iter().flatten() {
                    seg.sack[n] = block(b);
                    n += 1;
                }
                seg.sack_blocks = n as u8;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(TcpPacket {
        src: SocketAddr::new(ip.src, h.source_port()),
        dst: SocketAddr::new(ip.dst, h.destination_port()),
        segment: seg,
        loopback: false,
    })
}
