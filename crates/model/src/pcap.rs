//! The model's trace as a capture file, so Wireshark, tcpdump and `tcpstall explain` can read a
//! simulated connection like a captured one. Pure: returns the file's bytes, written by
//! crates/wire's pcapng writer (the one owner of capture files; one Ethernet interface,
//! nanosecond timestamps); here the segments only become frames.
//!
//! Addresses are invented: A (client) is 10.0.0.1, B (server) 10.0.0.2:5001, over Ethernet;
//! each connection (one per result row) gets its own client port, 40000 + its index, and starts
//! one second after the previous one ends. Payload bytes are zeros. Packets larger than the
//! 65535-byte snap length (loopback MTU) are truncated in the file, with their original length
//! kept.

use trace::{Endpoint, Event, EventKind, Segment};
use wire::encode::{EncodeError, TcpPacket};
use wire::write::{Interface, PcapNgWriter};

/// The model's invented endpoints.
pub const CLIENT_IP: [u8; 4] = [10, 0, 0, 1];
pub const CLIENT_PORT0: u16 = 40000;
pub const SERVER: ([u8; 4], u16) = ([10, 0, 0, 2], 5001);
const GAP_NS: u64 = 1_000_000_000;
const SNAPLEN: usize = 65535;

#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot encode segment {index}: {msg}")]
    Encode { index: usize, msg: String },
    #[error("cannot write the capture: {0}")]
    Write(#[from] std::io::Error),
}

/// Write the Segment events of each connection's trace as one capture (pcapng, Ethernet).
pub fn to_pcap(conns: &[&[Event]]) -> Result<Vec<u8>, PcapError> {
    let iface = Interface {
        name: "model".into(),
        description: "tcpstall simulate: the model's connections (invented addresses)".into(),
        linktype: wire::linktype::ETHERNET,
        snaplen: SNAPLEN as u32,
    };
    let mut w = PcapNgWriter::new(Vec::new(), &[iface])?;
    let mut payload = Vec::new();
    let mut buf = Vec::with_capacity(2048);
    let mut offset = 0u64;
    let mut index = 0;
    for (k, events) in conns.iter().enumerate() {
        let client = (CLIENT_IP, CLIENT_PORT0.wrapping_add(k as u16));
        let mut last = 0;
        for e in events.iter() {
            index += 1;
            last = e.t.as_nanos();
            let EventKind::Segment(s) = &e.kind else { continue };
            payload.resize(s.len as usize, 0);
            buf.clear();
            frame(e.from, client, s, &payload, &mut buf).map_err(|e| PcapError::Encode { index, msg: e.0 })?;
            w.packet(0, offset + e.t.as_nanos(), &buf[..buf.len().min(SNAPLEN)], buf.len() as u32)?;
        }
        offset += last + GAP_NS;
    }
    Ok(w.into_inner())
}

/// One segment as an Ethernet/IPv4/TCP frame (wire's encoder) into `out`, sent by `from` on the
/// connection of `client`.
fn frame(
    from: Endpoint,
    client: ([u8; 4], u16),
    s: &Segment,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let (src, dst, smac, dmac) = match from {
        Endpoint::A => (client, SERVER, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]),
        Endpoint::B => (SERVER, client, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]),
    };
    let p = TcpPacket {
        seq: s.seq.0,
        ack: s.ack.0,
        flags: s.flags,
        window: s.window,
        mss: s.mss,
        wscale: s.wscale,
        ts: s.ts,
        payload,
        ..TcpPacket::new(src, dst)
    };
    p.ethernet(smac, dmac, out)
}
