//! Captures built in memory: the TCP packets of client/server pairs as Ethernet/IPv4 frames
//! (etherparse) in a classic pcap file. One builder for the tests of every crate that reads
//! captures (wire, analyze, the CLI), so that their synthetic captures agree.
//!
//! ```
//! use tcpstall_wire::synth::{pcap, pkt};
//! let file = pcap(&[pkt(0, true, 1, 0, "S", 0), pkt(100, false, 9, 2, "SA", 0)]).unwrap();
//! assert_eq!(&file[..4], &0xa1b2c3d4u32.to_le_bytes());
//! ```

use etherparse::{icmpv4, PacketBuilder};
use trace::TcpFlags;

use crate::encode::TcpPacket;

/// One TCP packet of the flow `client`:`port` <-> `server`:80 (10.0.0.1 and 10.0.0.2 by
/// default), from the client when `c2s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pkt {
    pub c2s: bool,
    /// The client's port.
    pub port: u16,
    pub seq: u32,
    pub ack: u32,
    /// TCP flags, one letter each: S(YN) A(CK) P(SH) F(IN) R(ST).
    pub flags: &'static str,
    /// Payload length (bytes of 'x').
    pub len: usize,
    /// IPv4 identification.
    pub id: u16,
    pub ttl: u8,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Capture time in microseconds.
    pub t_us: u64,
    /// The client's and the server's IPv4 addresses.
    pub client: [u8; 4],
    pub server: [u8; 4],
}

/// A packet with the defaults: client 10.0.0.1 port 5000, server 10.0.0.2, IP ID 0, TTL 64,
/// window 60000.
pub fn pkt(t_us: u64, c2s: bool, seq: u32, ack: u32, flags: &'static str, len: usize) -> Pkt {
    Pkt {
        c2s,
        port: 5000,
        seq,
        ack,
        flags,
        len,
        id: 0,
        ttl: 64,
        window: 60000,
        t_us,
        client: [10, 0, 0, 1],
        server: [10, 0, 0, 2],
    }
}

impl Pkt {
    /// The Ethernet frame (MACs 01:01:01:01:01:01 and 02:02:02:02:02:02); an unknown flag
    /// letter is an error.
    pub fn frame(&self) -> Result<Vec<u8>, String> {
        let mut f = vec![2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0x08, 0x00];
        f.extend_from_slice(&self.ip()?);
        Ok(f)
    }

    /// The IPv4 packet alone (for other link types), encoded by [`crate::encode`].
    pub fn ip(&self) -> Result<Vec<u8>, String> {
        let (src, dst) = if self.c2s {
            ((self.client, self.port), (self.server, 80))
        } else {
            ((self.server, 80), (self.client, self.port))
        };
        let mut flags = 0;
        for c in self.flags.chars() {
            flags |= match c {
                'S' => TcpFlags::SYN,
                'F' => TcpFlags::FIN,
                'R' => TcpFlags::RST,
                'P' => TcpFlags::PSH,
                'A' => TcpFlags::ACK,
                _ => return Err(format!("unknown TCP flag letter {c:?} (S, A, P, F, R)")),
            };
        }
        let payload = vec![b'x'; self.len];
        let p = TcpPacket {
            seq: self.seq,
            ack: self.ack,
            flags: TcpFlags(flags),
            window: self.window,
            ip_id: self.id,
            ttl: self.ttl,
            payload: &payload,
            ..TcpPacket::new(src, dst)
        };
        let mut out = Vec::new();
        p.ipv4(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// An Ethernet frame carrying an ICMPv4 "fragmentation needed" (type 3 code 4, RFC 1191 4)
/// from router 10.0.0.254 to the sender of `quoted`, naming `mtu` and quoting `quoted`'s IP
/// header and first 8 TCP bytes (RFC 792).
pub fn frag_needed(quoted: &Pkt, mtu: u16) -> Result<Vec<u8>, String> {
    let q = quoted.ip()?;
    let ihl = usize::from(q[0] & 0x0f) * 4;
    let dst = if quoted.c2s { quoted.client } else { quoted.server };
    let b = PacketBuilder::ethernet2([2; 6], [1; 6]).ipv4([10, 0, 0, 254], dst, 64).icmpv4(
        etherparse::Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: mtu,
        }),
    );
    let mut out = Vec::new();
    b.write(&mut out, &q[..ihl + 8]).map_err(|e| e.to_string())?;
    Ok(out)
}

/// A classic pcap file of Ethernet frames (time in microseconds, frame).
pub fn pcap_frames(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let recs: Vec<_> =
        frames.iter().map(|(t, f)| ((t / 1_000_000) as u32, (t % 1_000_000) as u32, f.clone())).collect();
    classic_pcap(false, 1, &recs)
}

/// A pcapng file with one interface named `if_name` of link type `linktype` (time in
/// microseconds, frame), written by [`crate::write::PcapNgWriter`].
pub fn pcapng(if_name: &str, linktype: u32, frames: &[(u64, Vec<u8>)]) -> Result<Vec<u8>, String> {
    let iface = crate::write::Interface { name: if_name.into(), description: String::new(), linktype, snaplen: 0 };
    let mut w = crate::write::PcapNgWriter::new(Vec::new(), &[iface]).map_err(|e| e.to_string())?;
    for (t, f) in frames {
        w.packet(0, t * 1000, f, f.len() as u32).map_err(|e| e.to_string())?;
    }
    Ok(w.into_inner())
}

/// A classic pcap file (little-endian, snaplen 65535) of the given link type and records
/// (ts_sec, ts_frac, frame); `nanos` selects the nanosecond magic (frac in ns, else us).
pub fn classic_pcap(nanos: bool, linktype: u32, records: &[(u32, u32, Vec<u8>)]) -> Vec<u8> {
    // Writing to a Vec cannot fail.
    let mut w = crate::write::PcapWriter::new(Vec::new(), linktype, nanos).expect("in memory");
    for (s, frac, d) in records {
        w.record(*s, *frac, d, d.len() as u32).expect("in memory");
    }
    w.into_inner()
}

/// The packets as an Ethernet pcap with microsecond timestamps.
pub fn pcap(pkts: &[Pkt]) -> Result<Vec<u8>, String> {
    let recs = pkts
        .iter()
        .map(|x| Ok(((x.t_us / 1_000_000) as u32, (x.t_us % 1_000_000) as u32, x.frame()?)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(classic_pcap(false, 1, &recs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_flag_is_an_error_not_a_panic() {
        assert!(pkt(0, true, 1, 0, "SX", 0).frame().unwrap_err().contains("'X'"));
    }

    #[test]
    fn frames_decode_back_to_what_was_built() {
        // RFC 9293 3.1: the header fields as written come back from the decoder.
        let p = Pkt { window: 1000, ..pkt(1_500_000, false, 77, 5, "PA", 12) };
        let file = pcap(&[p]).unwrap();
        let mut dec = crate::Decoder::new(&file[..], Default::default()).unwrap();
        let ev = dec.next_event().unwrap().expect("one event");
        match ev.event.kind {
            trace::EventKind::Segment(s) => {
                assert_eq!((s.seq.0, s.ack.0, s.len, s.window), (77, 5, 12, 1000));
            }
            k => panic!("{k:?}"),
        }
    }
}
