//! Tunnels and label stacks: what an IP, UDP or MPLS payload carries when it is not TCP.
//!
//! Each function strips one encapsulation header and returns the next [`Layer`]; a header that
//! fails its own sanity checks (a port match that is not really the tunnel) is `NotTcp`, not
//! malformed. Encapsulations this decoder recognises but does not open are `Skip::Inside(kind)`
//! so the user learns why a capture of tunnelled traffic has no TCP in it.

use super::ETH_MPLS;
use super::{Layer, Skip};

/// The payload of an IP packet whose protocol (IANA "Assigned Internet Protocol Numbers") is
/// not TCP.
pub(super) fn ip_payload(proto: u8, d: &[u8]) -> Result<Layer<'_>, Skip> {
    match proto {
        // IPv4-in-IP (RFC 2003 3, RFC 2473 for 4in6) and IPv6-in-IP (RFC 4213 3.5 6in4, RFC
        // 2473 6in6): the inner header must be the version the outer protocol number says.
        4 => Ok(Layer::Ip(Some(4), d)),
        41 => Ok(Layer::Ip(Some(6), d)),
        47 => gre(d),
        17 => udp(d),
        // RFC 4023 3: MPLS-in-IP.
        137 => Ok(Layer::Type(ETH_MPLS, d)),
        // RFC 3378 3: EtherIP: version 3 in the top nibble of a 16-bit header, then Ethernet.
        97 => match d.first() {
            Some(b) if b >> 4 == 3 => Ok(Layer::Ether(d.get(2..).ok_or(Skip::Malformed)?)),
            Some(_) => Err(Skip::NotTcp),
            None => Err(Skip::Malformed),
        },
        50 => Err(Skip::Inside("IPsec ESP (RFC 4303)")),
        // RFC 3173 2.2: IPComp: next header(1) flags(1) CPI(2), then the payload compressed
        // (DEFLATE, RFC 2394; LZS, RFC 2395; ...): its headers cannot be read without
        // decompressing it.
        108 => Err(Skip::Inside("IPComp (RFC 3173)")),
        115 => Err(Skip::Inside("L2TPv3 (RFC 3931)")),
        _ => Err(Skip::NotTcp),
    }
}

/// UDP (RFC 768) tunnels, recognised by their IANA destination port (then source port).
fn udp(d: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = d.get(..8).ok_or(Skip::Malformed)?;
    let (sport, dport) = (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]));
    let ulen = usize::from(u16::from_be_bytes([h[4], h[5]]));
    // The UDP length bounds the payload (0 is a GSO/jumbo datagram: trust the capture).
    let p = if ulen >= 8 { &d[8..ulen.min(d.len())] } else { &d[8..] };
    match udp_port(dport, p) {
        Err(Skip::NotTcp) => udp_port(sport, p),
        r => r,
    }
}

fn udp_port(port: u16, p: &[u8]) -> Result<Layer<'_>, Skip> {
    match port {
        // RFC 7348 5: VXLAN on 4789 (Linux's legacy default 8472, drivers/net/vxlan):
        // flags(1) with I = 0x08, reserved(3), VNI(3), reserved(1), then Ethernet.
        4789 | 8472 => match p.get(..8) {
            Some(h) if h[0] & 0x08 != 0 => Ok(Layer::Ether(&p[8..])),
            _ => Err(Skip::NotTcp),
        },
        // draft-ietf-nvo3-vxlan-gpe 3.2: VXLAN-GPE on 4790: next protocol at byte 3
        // (1 IPv4, 2 IPv6, 3 Ethernet, 5 MPLS).
        4790 => match p.get(..8) {
            Some(h) if h[0] & 0x04 != 0 => match h[3] {
                1 => Ok(Layer::Ip(Some(4), &p[8..])),
                2 => Ok(Layer::Ip(Some(6), &p[8..])),
                3 => Ok(Layer::Ether(&p[8..])),
                5 => Ok(Layer::Type(ETH_MPLS, &p[8..])),
                _ => Err(Skip::Inside("VXLAN-GPE")),
            },
            _ => Err(Skip::NotTcp),
        },
        6081 => geneve(p),
        2152 => gtpu(p),
        // RFC 7510 3: MPLS-in-UDP.
        6635 => Ok(Layer::Type(ETH_MPLS, p)),
        // RFC 8086 3: GRE-in-UDP.
        4754 => gre(p),
        // RFC 9300 5.1: LISP data plane: an 8-byte LISP header, then IP.
        4341 => Ok(Layer::Ip(None, p.get(8..).ok_or(Skip::Malformed)?)),
        5246 | 5247 => Err(Skip::Inside("CAPWAP (RFC 5415)")),
        1701 => Err(Skip::Inside("L2TP (RFC 2661)")),
        4500 => Err(Skip::Inside("IPsec NAT traversal (RFC 3948)")),
        51820 => Err(Skip::Inside("WireGuard")),
        1194 => Err(Skip::Inside("OpenVPN")),
        _ => Err(Skip::NotTcp),
    }
}

/// RFC 8926 3.4 Geneve: Ver(2) OptLen(6) | O C Rsvd(6) | Protocol Type(16) | VNI(24) Rsvd(8),
/// then OptLen * 4 bytes of options, then the payload named by the EtherType-valued Protocol
/// Type. Version must be 0 (RFC 8926 3.4).
fn geneve(p: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = p.get(..8).ok_or(Skip::Malformed)?;
    if h[0] >> 6 != 0 {
        return Err(Skip::NotTcp);
    }
    let hlen = 8 + usize::from(h[0] & 0x3f) * 4;
    let proto = u16::from_be_bytes([h[2], h[3]]);
    Ok(Layer::Type(proto, p.get(hlen..).ok_or(Skip::Malformed)?))
}

/// 3GPP TS 29.281 5.1 GTP-U: flags (version 1 in the top 3 bits, PT = 1, E = 0x04, S = 0x02,
/// PN = 0x01), message type (255 = G-PDU carries a user packet), length(2), TEID(4); when any of
/// E/S/PN is set, sequence(2), N-PDU(1) and next extension header type(1) follow. Extension
/// headers (5.2): length in 4-octet units (including itself), contents, next type in the last
/// octet; type 0 ends the chain. The user packet is IPv4 or IPv6 (by version nibble).
fn gtpu(p: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = p.get(..8).ok_or(Skip::Malformed)?;
    if h[0] >> 5 != 1 || h[0] & 0x10 == 0 {
        return Err(Skip::NotTcp); // not GTPv1 (GTP' or GTPv2 use other ports)
    }
    if h[1] != 255 {
        return Err(Skip::NotTcp); // echo, error indication, end marker: signalling
    }
    let mut at = 8;
    if h[0] & 0x07 != 0 {
        let mut next = *p.get(11).ok_or(Skip::Malformed)?;
        at = 12;
        if h[0] & 0x04 != 0 {
            while next != 0 {
                let units = usize::from(*p.get(at).ok_or(Skip::Malformed)?);
                if units == 0 {
                    return Err(Skip::Malformed);
                }
                at += units * 4;
                next = *p.get(at - 1).ok_or(Skip::Malformed)?;
            }
        }
    }
    Ok(Layer::Ip(None, p.get(at..).ok_or(Skip::Malformed)?))
}

/// GRE: RFC 2784 2.1 (C = checksum present, then version 0) with RFC 2890 2 (K = key, S =
/// sequence number): flags(2) protocol(2) [checksum(2) reserved(2)] [key(4)] [sequence(4)].
/// The RFC 1701 routing bit (R) adds a variable list of source routes: named, not decoded.
/// Version 1 is PPTP's enhanced GRE (RFC 2637 4.1): flags(2) protocol 0x880b, payload
/// length(2), call id(2), [sequence(4)] [acknowledgment(4), A = 0x80 of byte 1].
pub(super) fn gre(d: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = d.get(..4).ok_or(Skip::Malformed)?;
    let (f, proto) = (h[0], u16::from_be_bytes([h[2], h[3]]));
    let (c, r, k, s) = (f & 0x80 != 0, f & 0x40 != 0, f & 0x20 != 0, f & 0x10 != 0);
    match h[1] & 0x07 {
        0 => {
            if r {
                return Err(Skip::Inside("GRE with source routing (RFC 1701)"));
            }
            let hlen = 4 + 4 * (usize::from(c) + usize::from(k) + usize::from(s));
            let rest = d.get(hlen..).ok_or(Skip::Malformed)?;
            // ERSPAN type I (Cisco): GRE without a sequence number and no ERSPAN header.
            if proto == 0x88be && !s {
                return Ok(Layer::Ether(rest));
            }
            if proto == GRE_WCCP {
                return wccp(rest);
            }
            Ok(Layer::Type(proto, rest))
        }
        1 => {
            let hlen = 8 + 4 * (usize::from(s) + usize::from(h[1] & 0x80 != 0));
            let rest = d.get(hlen..).ok_or(Skip::Malformed)?;
            if rest.is_empty() {
                return Err(Skip::NotTcp); // an acknowledgment only
            }
            Ok(Layer::Type(proto, rest))
        }
        _ => Err(Skip::Inside("GRE of an unknown version")),
    }
}

/// GRE protocol type of WCCP redirection (draft-wilson-wrec-wccp-v2-01 4.12).
const GRE_WCCP: u16 = 0x883e;

/// A packet a router redirects to a web cache with WCCP (draft-wilson-wrec-wccp-v2-01 4.12
/// "Traffic Forwarding": GRE protocol type 0x883E, then a 4-byte redirect header: flags (D, A,
/// U bits), service id, alternate bucket, primary bucket; then the original IPv4 packet).
/// WCCP version 1 (draft-forster-wrec-wccp-v1-00) puts the IPv4 packet right after GRE with
/// the same protocol type; as tcpdump's print-gre.c and Wireshark's packet-gre.c do, a payload
/// whose first nibble is 4 is taken as that IPv4 packet, any other as a redirect header.
fn wccp(d: &[u8]) -> Result<Layer<'_>, Skip> {
    match d.first() {
        Some(b) if b >> 4 == 4 => Ok(Layer::Ip(Some(4), d)),
        Some(_) => Ok(Layer::Ip(Some(4), d.get(4..).ok_or(Skip::Malformed)?)),
        None => Err(Skip::Malformed),
    }
}

/// ERSPAN type II (draft-foschiano-erspan 4.1, GRE protocol 0x88be with a sequence number):
/// Ver(4) = 1, VLAN(12), COS(3) En(2) T(1) Session(10), Reserved(12) Index(20); then Ethernet.
pub(super) fn erspan2(d: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = d.get(..8).ok_or(Skip::Malformed)?;
    if h[0] >> 4 != 1 {
        return Err(Skip::Inside("ERSPAN of an unknown version"));
    }
    Ok(Layer::Ether(&d[8..]))
}

/// ERSPAN type III (draft-foschiano-erspan 4.2, GRE protocol 0x22eb): Ver(4) = 2, VLAN(12),
/// COS(3) BSO(2) T(1) Session(10), Timestamp(32), SGT(16) P(1) FT(5) HW ID(6) D(1) Gra(2)
/// O(1); O = an 8-byte platform-specific subheader follows. FT 0 = Ethernet, 2 = IP.
pub(super) fn erspan3(d: &[u8]) -> Result<Layer<'_>, Skip> {
    let h = d.get(..12).ok_or(Skip::Malformed)?;
    if h[0] >> 4 != 2 {
        return Err(Skip::Inside("ERSPAN of an unknown version"));
    }
    let hlen = if h[11] & 0x01 != 0 { 20 } else { 12 };
    let rest = d.get(hlen..).ok_or(Skip::Malformed)?;
    match (h[10] >> 2) & 0x1f {
        0 => Ok(Layer::Ether(rest)),
        2 => Ok(Layer::Ip(None, rest)),
        _ => Err(Skip::Inside("ERSPAN type III non-Ethernet frames")),
    }
}

/// RFC 3032 2.1: MPLS label stack entries Label(20) TC(3) S(1) TTL(8); S = bottom of stack.
/// The payload has no type field: first nibble 4 or 6 is IP (RFC 3032 3 leaves it to the
/// label; every dissector guesses so), 0 is the pseudowire control word of RFC 4385 3 followed
/// by an Ethernet frame (RFC 4448 4.4); 1 is the associated channel (RFC 5586), not traffic.
pub(super) fn mpls(d: &[u8]) -> Result<Layer<'_>, Skip> {
    let mut at = 0;
    loop {
        let e = d.get(at..at + 4).ok_or(Skip::Malformed)?;
        at += 4;
        if e[2] & 0x01 != 0 {
            break;
        }
    }
    let rest = &d[at..];
    match rest.first().map(|b| b >> 4) {
        Some(4) => Ok(Layer::Ip(Some(4), rest)),
        Some(6) => Ok(Layer::Ip(Some(6), rest)),
        Some(0) => Ok(Layer::Ether(rest.get(4..).ok_or(Skip::Malformed)?)),
        Some(1) => Err(Skip::NotTcp),
        Some(_) => Err(Skip::Inside("MPLS pseudowires without a control word")),
        None => Err(Skip::Malformed),
    }
}
