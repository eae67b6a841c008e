//! Building capture files in memory for the decoder tests.
#![allow(dead_code)]

use etherparse::{PacketBuilder, TcpOptionElement};

/// An Ethernet/IPv4/TCP frame from 10.0.0.1:5000 to 10.0.0.2:80 (or the reverse when `back`).
pub(crate) fn eth_tcp4(
    back: bool,
    seq: u32,
    ack: u32,
    syn: bool,
    payload: &[u8],
    opts: &[TcpOptionElement],
) -> Vec<u8> {
    let (s, d, sp, dp) =
        if back { ([10, 0, 0, 2], [10, 0, 0, 1], 80, 5000) } else { ([10, 0, 0, 1], [10, 0, 0, 2], 5000, 80) };
    let mut b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4(s, d, 64).tcp(sp, dp, seq, 1000);
    if syn {
        b = b.syn();
    }
    if ack != 0 || !syn {
        b = b.ack(ack);
    }
    if !opts.is_empty() {
        b = b.options(opts).expect("options fit");
    }
    let mut out = Vec::new();
    b.write(&mut out, payload).expect("write");
    out
}

pub(crate) fn eth_tcp6(payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .tcp(5000, 443, 7, 1000)
        .ack(9);
    let mut out = Vec::new();
    b.write(&mut out, payload).expect("write");
    out
}

/// A classic pcap file: the one builder, in the library (not every test file builds one).
#[allow(unused_imports)]
pub(crate) use tcpstall_wire::synth::classic_pcap as pcap;

pub(crate) fn block(btype: u32, body: &[u8]) -> Vec<u8> {
    let pad = (4 - body.len() % 4) % 4;
    let len = (12 + body.len() + pad) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(&btype.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&vec![0; pad]);
    b.extend_from_slice(&len.to_le_bytes());
    b
}

pub(crate) fn pcapng_shb() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x1a2b3c4du32.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    block(0x0a0d0d0a, &body)
}

/// Interface Description Block; `tsresol` None = default microseconds.
pub(crate) fn pcapng_idb(linktype: u16, tsresol: Option<u8>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&linktype.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    if let Some(r) = tsresol {
        body.extend_from_slice(&9u16.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&[r, 0, 0, 0]);
        body.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    }
    block(1, &body)
}

pub(crate) fn pcapng_epb(iface: u32, ts: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&iface.to_le_bytes());
    body.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
    body.extend_from_slice(&(ts as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(data);
    block(6, &body)
}

/// The frames, on link type `linktype`, written to a pcapng by the crate's own writer
/// ([`tcpstall_wire::write::PcapNgWriter`], one frame per millisecond), then decoded to the
/// end: the events and the decoder's counts.
pub(crate) fn decode_pcapng(
    linktype: u32,
    frames: &[Vec<u8>],
) -> (Vec<tcpstall_wire::FlowEvent>, tcpstall_wire::DecodeStats) {
    let timed: Vec<(u64, Vec<u8>)> = frames.iter().enumerate().map(|(i, f)| (i as u64 * 1000, f.clone())).collect();
    let file = tcpstall_wire::synth::pcapng("eth0", linktype, &timed).expect("written");
    let mut dec = tcpstall_wire::Decoder::new(&file[..], tcpstall_wire::FlowFilter::default()).expect("read");
    let mut evs = Vec::new();
    while let Some(ev) = dec.next_event().expect("decoded") {
        evs.push(ev);
    }
    (evs, dec.stats())
}

/// One TCP connection's packets as IPv4 packets without a link header (RFC 791, RFC 9293):
/// 10.0.0.1:5000 opens to 10.0.0.2:80 (SYN, SYN-ACK, ACK), sends a 75-byte request, gets a
/// 300-byte answer.
pub(crate) fn conversation() -> Vec<Vec<u8>> {
    use tcpstall_wire::synth::pkt;
    [
        pkt(0, true, 100, 0, "S", 0),
        pkt(1000, false, 900, 101, "SA", 0),
        pkt(2000, true, 101, 901, "A", 0),
        pkt(3000, true, 101, 901, "PA", 75),
        pkt(4000, false, 901, 176, "PA", 300),
    ]
    .iter()
    .map(|p| p.ip().expect("valid packet"))
    .collect()
}
