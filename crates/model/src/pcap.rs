//! The model's trace as a pcap file, so Wireshark, tcpdump and `tcpstall explain` can read a
//! simulated connection like a captured one. Pure: returns the file's bytes.
//!
//! Addresses are invented: A (client) is 10.0.0.1, B (server) 10.0.0.2:5001, over Ethernet;
//! each connection (one per result row) gets its own client port, 40000 + its index, and starts
//! one second after the previous one ends. Payload bytes are zeros. Packets larger than the 65535-byte snap length (loopback
//! MTU) are truncated in the file, with their original length kept.

use std::borrow::Cow;

use etherparse::{PacketBuilder, TcpOptionElement};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use trace::{Endpoint, Event, EventKind};

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
}

/// Write the Segment events of each connection's trace as one nanosecond pcap (Ethernet).
pub fn to_pcap(conns: &[&[Event]]) -> Result<Vec<u8>, PcapError> {
    let header = PcapHeader {
        snaplen: SNAPLEN as u32,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..Default::default()
    };
    let err = |index, e: &dyn std::fmt::Display| PcapError::Encode { index, msg: e.to_string() };
    let mut w = PcapWriter::with_header(Vec::new(), header).map_err(|e| err(0, &e))?;
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
            let (src, dst, smac, dmac) = match e.from {
                Endpoint::A => (client, SERVER, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]),
                Endpoint::B => (SERVER, client, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]),
            };
            let mut opts = Vec::new();
            if let Some(m) = s.mss {
                opts.push(TcpOptionElement::MaximumSegmentSize(m));
            }
            if let Some(ws) = s.wscale {
                opts.push(TcpOptionElement::WindowScale(ws));
            }
            if let Some((val, ecr)) = s.ts {
                opts.push(TcpOptionElement::Timestamp(val, ecr));
            }
            let mut b = PacketBuilder::ethernet2(smac, dmac).ipv4(src.0, dst.0, 64).tcp(src.1, dst.1, s.seq, s.window);
            if s.flags.syn() {
                b = b.syn();
            }
            if s.flags.ack() {
                b = b.ack(s.ack);
            }
            if s.flags.psh() {
                b = b.psh();
            }
            if s.flags.fin() {
                b = b.fin();
            }
            if !opts.is_empty() {
                b = b.options(&opts).map_err(|x| err(index, &x))?;
            }
            payload.resize(s.len as usize, 0);
            buf.clear();
            b.write(&mut buf, &payload).map_err(|x| err(index, &x))?;
            let orig = buf.len() as u32;
            buf.truncate(SNAPLEN);
            let ts = std::time::Duration::from_nanos(offset + e.t.as_nanos());
            w.write_packet(&PcapPacket { timestamp: ts, orig_len: orig, data: Cow::Borrowed(&buf) })
                .map_err(|x| err(index, &x))?;
        }
        offset += last + GAP_NS;
    }
    Ok(w.into_writer())
}
