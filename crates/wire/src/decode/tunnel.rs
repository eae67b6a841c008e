//! Encapsulations that carry TCP inside another header: MPLS, PPPoE and PPP, GRE (with
//! transparent Ethernet bridging and ERSPAN), VXLAN, Geneve, GTP-U, and IP in IP. Each parser
//! returns what the inner header starts with, so the caller goes on decoding.

use super::{be16, Skip};

/// What an encapsulation header is followed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inner<'a> {
    /// An Ethernet frame (destination MAC first).
    Ethernet(&'a [u8]),
    /// An IP packet, version from its first nibble.
    Ip(&'a [u8]),
}

/// MPLS label stack (RFC 3032 2.1): 4-byte entries until the bottom-of-stack bit; the payload
/// carries no type, so it is IPv4 or IPv6 by its first nibble (RFC 4928's first-nibble
/// convention), and a 0 nibble is a pseudowire control word (RFC 4385) before an Ethernet frame.
pub(super) fn mpls(d: &[u8]) -> Result<Inner<'_>, Skip> {
    let mut at = 0;
    loop {
        let entry = d.get(at..at + 4).ok_or(Skip::Malformed)?;
        at += 4;
        if entry[2] & 0x01 != 0 {
            break;
        }
        if at > 4 * 16 {
            return Err(Skip::Malformed);
        }
    }
    let rest = d.get(at..).ok_or(Skip::Malformed)?;
    match rest.first().map(|b| b >> 4) {
        Some(4 | 6) => Ok(Inner::Ip(rest)),
        Some(0) => Ok(Inner::Ethernet(rest.get(4..).ok_or(Skip::Malformed)?)),
        _ => Err(Skip::Inside("MPLS")),
    }
}

/// PPPoE session stage (RFC 2516 4, ethertype 0x8864): ver/type(1) code(1) session(2) len(2),
/// then a PPP protocol field.
pub(super) fn pppoe(d: &[u8]) -> Result<Inner<'_>, Skip> {
    if d.first() != Some(&0x11) {
        return Err(Skip::Malformed);
    }
    ppp_protocol(d.get(6..).ok_or(Skip::Malformed)?, "PPPoE")
}

/// A PPP protocol field (RFC 1661 2; 1 byte when compressed, RFC 1661 6.5) and its payload:
/// 0x0021 IPv4, 0x0057 IPv6 (RFC 5072), 0x0281 MPLS.
pub(super) fn ppp_protocol<'a>(d: &'a [u8], kind: &'static str) -> Result<Inner<'a>, Skip> {
    let (proto, at) = match d.first() {
        Some(b) if b & 1 == 1 => (u16::from(*b), 1),
        Some(_) => (be16(d, 0).ok_or(Skip::Malformed)?, 2),
        None => return Err(Skip::Malformed),
    };
    let rest = d.get(at..).ok_or(Skip::Malformed)?;
    match proto {
        0x21 | 0x57 => Ok(Inner::Ip(rest)),
        0x281 => mpls(rest),
        // LCP, IPCP, CHAP... are control traffic, not IP.
        p if p >= 0x8000 || (0x4000..0x8000).contains(&p) => Err(Skip::NotTcp),
        _ => Err(Skip::Inside(kind)),
    }
}

/// GRE (RFC 2784 2, RFC 2890 2: checksum, key and sequence-number flags add 4 bytes each) and
/// what it carries: IP, transparent Ethernet bridging (0x6558), ERSPAN type II (0x88be: an
/// 8-byte header) and type III (0x22eb: 12 bytes, plus an 8-byte platform subheader when its
/// O flag is set; draft-foschiano-erspan-03), MPLS.
pub(super) fn gre(d: &[u8]) -> Result<Inner<'_>, Skip> {
    let flags = be16(d, 0).ok_or(Skip::Malformed)?;
    if flags & 0x7 != 0 {
        // Version 1 is PPTP's enhanced GRE (RFC 2637 4.1): PPP inside.
        if flags & 0x7 == 1 {
            let mut at = 8 + 4 * usize::from(flags & 0x1000 != 0) + 4 * usize::from(flags & 0x0080 != 0);
            at = at.min(d.len());
            return ppp_over_hdlc(d.get(at..).ok_or(Skip::Malformed)?, "PPTP GRE");
        }
        return Err(Skip::Inside("GRE (unknown version)"));
    }
    let proto = be16(d, 2).ok_or(Skip::Malformed)?;
    let at = 4 + 4 * [0x8000u16, 0x2000, 0x1000].iter().filter(|&&f| flags & f != 0).count();
    let rest = d.get(at..).ok_or(Skip::Malformed)?;
    match proto {
        0x0800 | 0x86dd => Ok(Inner::Ip(rest)),
        0x6558 => Ok(Inner::Ethernet(rest)),
        0x88be => Ok(Inner::Ethernet(rest.get(8..).ok_or(Skip::Malformed)?)),
        0x22eb => {
            let o = rest.get(11).ok_or(Skip::Malformed)? & 0x01 != 0;
            Ok(Inner::Ethernet(rest.get(12 + 8 * usize::from(o)..).ok_or(Skip::Malformed)?))
        }
        0x8847 | 0x8848 => mpls(rest),
        _ => Err(Skip::Inside("GRE")),
    }
}

/// PPP in HDLC-like framing (RFC 1662 3.1): address 0xff, control 0x03 (either may be
/// compressed away), then the protocol field.
pub(super) fn ppp_over_hdlc<'a>(d: &'a [u8], kind: &'static str) -> Result<Inner<'a>, Skip> {
    let d = if d.starts_with(&[0xff, 0x03]) { &d[2..] } else { d };
    ppp_protocol(d, kind)
}

/// UDP-carried tunnels by their registered destination (or source) port.
pub(super) fn udp(d: &[u8]) -> Result<Inner<'_>, Skip> {
    let (sport, dport) = (be16(d, 0).ok_or(Skip::Malformed)?, be16(d, 2).ok_or(Skip::Malformed)?);
    let payload = d.get(8..).ok_or(Skip::Malformed)?;
    let port = |p: u16| dport == p || sport == p;
    if port(4789) || port(8472) {
        // VXLAN (RFC 7348 5; 8472 is Linux's historical default): 8-byte header, I flag set.
        if payload.first().is_some_and(|f| f & 0x08 != 0) && payload.len() >= 8 {
            return Ok(Inner::Ethernet(&payload[8..]));
        }
        return Err(Skip::Malformed);
    }
    if port(6081) {
        // Geneve (RFC 8926 3.4): ver(2b) opt len(6b, 4-byte units), flags, protocol type.
        let opt = usize::from(payload.first().ok_or(Skip::Malformed)? & 0x3f) * 4;
        let proto = be16(payload, 2).ok_or(Skip::Malformed)?;
        let inner = payload.get(8 + opt..).ok_or(Skip::Malformed)?;
        return match proto {
            0x6558 => Ok(Inner::Ethernet(inner)),
            0x0800 | 0x86dd => Ok(Inner::Ip(inner)),
            _ => Err(Skip::Inside("Geneve")),
        };
    }
    if port(2152) {
        return gtpu(payload);
    }
    if port(5247) || port(5246) {
        return Err(Skip::Inside("CAPWAP"));
    }
    if port(1701) {
        return Err(Skip::Inside("L2TP"));
    }
    if port(4500) {
        return Err(Skip::Inside("IPsec NAT-T"));
    }
    Err(Skip::NotTcp)
}

/// GTP-U (3GPP TS 29.281 5.1): flags(1) type(1) length(2) TEID(4); the E, S or PN flag adds
/// sequence(2) N-PDU(1) next-extension-type(1), then extension headers, each `len` x 4 bytes
/// with its next type in the last byte. Only G-PDUs (type 255) carry user IP packets.
fn gtpu(d: &[u8]) -> Result<Inner<'_>, Skip> {
    let flags = *d.first().ok_or(Skip::Malformed)?;
    if flags >> 5 != 1 {
        return Err(Skip::Inside("GTP (not version 1)"));
    }
    if d.get(1) != Some(&0xff) {
        return Err(Skip::NotTcp);
    }
    let mut at = 8;
    if flags & 0x07 != 0 {
        let mut next = *d.get(11).ok_or(Skip::Malformed)?;
        at = 12;
        let mut hops = 0;
        while next != 0 {
            let len = usize::from(*d.get(at).ok_or(Skip::Malformed)?) * 4;
            if len == 0 || hops > 16 {
                return Err(Skip::Malformed);
            }
            next = *d.get(at + len - 1).ok_or(Skip::Malformed)?;
            at += len;
            hops += 1;
        }
    }
    Ok(Inner::Ip(d.get(at..).ok_or(Skip::Malformed)?))
}
