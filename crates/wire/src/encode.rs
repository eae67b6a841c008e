//! Packets as bytes: the one encoder of TCP over IPv4 (and Ethernet), with etherparse. The
//! model's capture files (crates/model/src/pcap.rs) and the tests' synthetic captures
//! ([`crate::synth`]) both build their frames here, so the two cannot drift apart.
//!
//! ```
//! use tcpstall_wire::encode::TcpPacket;
//! use trace::TcpFlags;
//! let p = TcpPacket { flags: TcpFlags(TcpFlags::SYN), ..TcpPacket::new(([10, 0, 0, 1], 5000), ([10, 0, 0, 2], 80)) };
//! let mut ip = Vec::new();
//! p.ipv4(&mut ip).unwrap();
//! assert_eq!((ip[0], ip.len()), (0x45, 40)); // IPv4, 20-byte header, 20-byte TCP header
//! ```

use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder, TcpOptionElement};
use trace::TcpFlags;

/// Why a packet could not be encoded (etherparse's reason: a value out of range, options too
/// long for the header).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EncodeError(pub String);

/// One TCP segment over IPv4, as it goes on the wire (RFC 9293 3.1, RFC 791 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<'a> {
    /// Sender's address and port.
    pub src: ([u8; 4], u16),
    /// Receiver's address and port.
    pub dst: ([u8; 4], u16),
    pub seq: u32,
    /// Written (with the ACK flag) only when `flags` has ACK.
    pub ack: u32,
    /// SYN, ACK, PSH, FIN and RST are encoded; the others are not.
    pub flags: TcpFlags,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Options, written in this order when present: MSS, window scale, timestamps.
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub ts: Option<(u32, u32)>,
    /// IPv4 identification and time to live.
    pub ip_id: u16,
    pub ttl: u8,
    pub payload: &'a [u8],
}

impl<'a> TcpPacket<'a> {
    /// A segment from `src` to `dst` with no flags, sequence and ACK 0, window 65535, no
    /// options, IP ID 0, TTL 64 and no payload.
    pub fn new(src: ([u8; 4], u16), dst: ([u8; 4], u16)) -> TcpPacket<'a> {
        TcpPacket {
            src,
            dst,
            seq: 0,
            ack: 0,
            flags: TcpFlags(0),
            window: 65535,
            mss: None,
            wscale: None,
            ts: None,
            ip_id: 0,
            ttl: 64,
            payload: &[],
        }
    }

    /// The IPv4 packet, appended to `out`.
    pub fn ipv4(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let err = |e: &dyn std::fmt::Display| EncodeError(e.to_string());
        let mut ip = Ipv4Header::new(0, self.ttl, IpNumber::TCP, self.src.0, self.dst.0).map_err(|e| err(&e))?;
        ip.identification = self.ip_id;
        let mut b = PacketBuilder::ip(IpHeaders::Ipv4(ip, Default::default())).tcp(
            self.src.1,
            self.dst.1,
            self.seq,
            self.window,
        );
        let f = self.flags;
        if f.syn() {
            b = b.syn();
        }
        if f.ack() {
            b = b.ack(self.ack);
        }
        if f.psh() {
            b = b.psh();
        }
        if f.fin() {
            b = b.fin();
        }
        if f.rst() {
            b = b.rst();
        }
        // In Linux's layout (tcp_options_write): MSS, then NOP NOP timestamps (RFC 7323
        // Appendix A), then NOP window scale, so synthetic captures read as the kernel's do.
        let mut opts = Vec::new();
        if let Some(m) = self.mss {
            opts.push(TcpOptionElement::MaximumSegmentSize(m));
        }
        if let Some((val, ecr)) = self.ts {
            opts.extend([TcpOptionElement::Noop, TcpOptionElement::Noop, TcpOptionElement::Timestamp(val, ecr)]);
        }
        if let Some(ws) = self.wscale {
            opts.extend([TcpOptionElement::Noop, TcpOptionElement::WindowScale(ws)]);
        }
        if !opts.is_empty() {
            b = b.options(&opts).map_err(|e| err(&e))?;
        }
        b.write(out, self.payload).map_err(|e| err(&e))
    }

    /// The Ethernet II frame (EtherType IPv4) carrying [`TcpPacket::ipv4`], appended to `out`.
    pub fn ethernet(&self, src_mac: [u8; 6], dst_mac: [u8; 6], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        out.extend_from_slice(&dst_mac);
        out.extend_from_slice(&src_mac);
        out.extend_from_slice(&0x0800u16.to_be_bytes());
        self.ipv4(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9293 3.1: the fields written come back from the decoder, options included.
    #[test]
    fn a_segment_decodes_back_to_its_fields() {
        let payload = [7u8; 12];
        let p = TcpPacket {
            seq: 77,
            ack: 5,
            flags: TcpFlags(TcpFlags::ACK | TcpFlags::PSH),
            window: 1000,
            ts: Some((9, 8)),
            payload: &payload,
            ..TcpPacket::new(([10, 0, 0, 1], 5000), ([10, 0, 0, 2], 80))
        };
        let mut frame = Vec::new();
        p.ethernet([1; 6], [2; 6], &mut frame).unwrap();
        assert_eq!(&frame[..6], &[2; 6], "destination MAC first");
        let file = crate::synth::pcap_frames(&[(0, frame)]);
        let mut dec = crate::Decoder::new(&file[..], Default::default()).unwrap();
        let ev = dec.next_event().unwrap().expect("one event");
        let trace::EventKind::Segment(s) = ev.event.kind else { panic!("{:?}", ev.event.kind) };
        assert_eq!((s.seq.0, s.ack.0, s.len, s.window, s.ts), (77, 5, 12, 1000, Some((9, 8))));
        assert!(s.flags.psh() && s.flags.ack() && !s.flags.syn());
    }

    /// Without the ACK flag the acknowledgment field is zero (RFC 9293 3.1: it is only
    /// meaningful with ACK set).
    #[test]
    fn no_ack_flag_no_ack_number() {
        let p = TcpPacket {
            ack: 99,
            flags: TcpFlags(TcpFlags::SYN),
            mss: Some(1460),
            ..TcpPacket::new(([1; 4], 1), ([2; 4], 2))
        };
        let mut ip = Vec::new();
        p.ipv4(&mut ip).unwrap();
        assert_eq!(&ip[28..32], &[0; 4]);
        assert_eq!(ip.len(), 20 + 24, "MSS option: 4 bytes");
    }
}
