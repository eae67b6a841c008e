//! ICMP errors that quote a TCP segment: evidence about a flow carried by another protocol.
//!
//! An ICMP error quotes the start of the packet that caused it: ICMPv4 "the internet header
//! plus the first 64 bits of the original datagram's data" (RFC 792, "Destination Unreachable
//! Message"; RFC 1812 4.3.2.3 lets routers quote more), ICMPv6 "as much of invoking packet as
//! possible without the ICMPv6 packet exceeding the minimum IPv6 MTU" (RFC 4443 3.1-3.3). The
//! first 8 bytes of a TCP header are the ports and the sequence number (RFC 9293 3.1), so a
//! quote names the flow, the endpoint that sent the segment (the quoted source) and the segment.
//!
//! The ICMP header (type, code, the 4-byte rest of header) is read with etherparse's
//! `Icmpv4Slice` / `Icmpv6Slice`; the quoted IP header with this crate's [`super::ip_header`]
//! (the quote is cut by design, so lengths beyond it are expected); the quoted TCP bytes by
//! hand, since etherparse's TCP slicer needs a whole 20-byte header and a quote may hold 8.

use super::{ip_header, IpHeader, Skip};
use etherparse::{icmpv4, Icmpv4Slice, Icmpv4Type, Icmpv6Slice, Icmpv6Type};
use std::net::SocketAddr;
use trace::{IcmpError, IcmpKind};

/// An ICMP error about a TCP segment: the quoted segment's addresses (`src` sent it) and what
/// the error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpPacket {
    /// The quoted segment's source: the endpoint that sent it.
    pub src: SocketAddr,
    /// The quoted segment's destination.
    pub dst: SocketAddr,
    pub error: IcmpError,
}

/// The error an ICMP packet `ip` carries, when it is one of those below and its quote is a TCP
/// segment with at least 8 bytes of TCP header; anything else is `NotTcp` (as every ICMP
/// packet was before: echo, other error types, quotes of UDP, short quotes).
///
/// - ICMPv4 type 3 Destination Unreachable (RFC 792); code 4 "fragmentation needed and DF
///   set" carries the next-hop MTU in bytes 6..8 (RFC 1191 4), 0 from routers that predate it;
/// - ICMPv4 type 11 Time Exceeded (RFC 792);
/// - ICMPv6 type 1 Destination Unreachable (RFC 4443 3.1), type 2 Packet Too Big with the MTU
///   in bytes 4..8 (RFC 4443 3.2, used by RFC 8201 path MTU discovery), type 3 Time Exceeded
///   (RFC 4443 3.3).
pub(super) fn error(ip: &IpHeader<'_>) -> Result<IcmpPacket, Skip> {
    let (kind, quote, version) = if ip.src.is_ipv4() && ip.proto == 1 {
        let s = Icmpv4Slice::from_slice(ip.payload).map_err(|_| Skip::NotTcp)?;
        let kind = match (s.type_u8(), s.icmp_type()) {
            (
                _,
                Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu }),
            ) => IcmpKind::FragNeeded { mtu: u32::from(next_hop_mtu) },
            (icmpv4::TYPE_DEST_UNREACH, _) => IcmpKind::Unreachable { code: s.code_u8() },
            (icmpv4::TYPE_TIME_EXCEEDED, _) => IcmpKind::TimeExceeded,
            _ => return Err(Skip::NotTcp),
        };
        (kind, s.payload(), 4)
    } else if ip.src.is_ipv6() && ip.proto == 58 {
        let s = Icmpv6Slice::from_slice(ip.payload).map_err(|_| Skip::NotTcp)?;
        let kind = match (s.type_u8(), s.icmp_type()) {
            (_, Icmpv6Type::PacketTooBig { mtu }) => IcmpKind::FragNeeded { mtu },
            // A Packet Too Big with a code other than 0 (etherparse leaves it unparsed): the
            // receiver ignores the code (RFC 4443 3.2), so the MTU still counts.
            (2, _) => IcmpKind::FragNeeded { mtu: u32::from_be_bytes(s.bytes5to8()) },
            (1, _) => IcmpKind::Unreachable { code: s.code_u8() },
            (3, _) => IcmpKind::TimeExceeded,
            _ => return Err(Skip::NotTcp),
        };
        (kind, s.payload(), 6)
    } else {
        return Err(Skip::NotTcp);
    };
    // The quote is cut on purpose: its IP lengths describe the original packet. A quote that is
    // not a whole IP header, not TCP, or a non-first fragment says nothing about a flow.
    let q = ip_header(Some(version), quote, true).map_err(|_| Skip::NotTcp)?;
    if q.proto != 6 || q.fragment.is_some_and(|f| f.offset != 0) {
        return Err(Skip::NotTcp);
    }
    let t = q.payload.get(..8).ok_or(Skip::NotTcp)?;
    let sport = u16::from_be_bytes([t[0], t[1]]);
    let dport = u16::from_be_bytes([t[2], t[3]]);
    let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
    Ok(IcmpPacket {
        src: SocketAddr::new(q.src, sport),
        dst: SocketAddr::new(q.dst, dport),
        error: IcmpError { kind, seq },
    })
}
