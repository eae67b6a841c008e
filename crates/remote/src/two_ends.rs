//! `explain A.pcapng B.pcapng`: two captures of the same connections, one taken at each end,
//! merged into one verdict per connection. Connections are matched by their 4-tuple, packets by
//! sequence and acknowledgment numbers, length and flags; the stalls are the one classifier's
//! (`analyze`) from the client end's packets, and each stall's time is split by host
//! (attribute.rs). NAT between the two capture points (a rewritten 4-tuple) is not matched.
//!
//! The clock offset between the two files comes from the packets themselves, as RFC 5905
//! section 8 does with ping-pongs: a packet from the client seen at both ends gives
//! t_server - t_client = offset + d1 (d1 >= 0, its one-way delay), a packet from the server
//! gives t_client - t_server = -offset + d2. With m1, m2 the smallest of each,
//! offset = (m1 - m2) / 2 and the true offset lies within +- (m1 + m2) / 2.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;

use trace::{Endpoint, Event, EventKind, Evidence, Instant, TcpFlags};

use crate::attribute::{self, Split};

/// One capture's TCP packets: (time ns, source, destination, segment, frame number).
pub type Packets = Vec<(u64, SocketAddr, SocketAddr, trace::Segment, u64)>;

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wire(#[from] wire::WireError),
}

/// Read every TCP packet of a capture (pcap or pcapng, gzip or not).
pub fn read(input: impl Read + Send) -> Result<Packets, ReadError> {
    let input = wire::decompressed(std::io::BufReader::new(input))?;
    let mut r = wire::CaptureReader::new(input)?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet()? {
        if let Ok(t) = wire::decode(p.linktype, p.data, p.orig_len) {
            out.push((p.ts_ns, t.src, t.dst, t.segment, p.frame));
        }
    }
    Ok(out)
}

/// A connection's key: its two ends, in order.
fn key(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// One connection seen in both files.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The client (sent the SYN; else the end with the higher port) and the server.
    pub client: SocketAddr,
    pub server: SocketAddr,
    /// Which file (0 or 1) was captured at the client's end, and how that was decided.
    pub client_file: usize,
    pub how: &'static str,
    /// Server file's clock minus client file's clock (ns), and its error bound.
    pub offset_ns: i64,
    pub error_ns: u64,
    /// Packets matched in both files.
    pub matched: usize,
    /// The classifier's stalls from the client end, each with its split by host (None when its
    /// packets are not in both files).
    pub stalls: Vec<(analyze::Stall, Option<Split>)>,
}

fn events(p: &[&(u64, SocketAddr, SocketAddr, trace::Segment, u64)], client: SocketAddr, origin: i128) -> Vec<Event> {
    p.iter()
        .map(|(t, src, _, seg, frame)| Event {
            t: Instant((*t as i128 - origin).max(0) as u64),
            from: if *src == client { Endpoint::A } else { Endpoint::B },
            kind: EventKind::Segment(*seg),
            evidence: Evidence::Frame(*frame),
        })
        .collect()
}

/// A segment's identity: seq, ack, length, flags, as raw header values (a `BTreeMap` key:
/// `SeqNum`'s order is not a total order over a whole capture).
type SegKey = (u32, u32, u32, u8);

fn seg_key(s: &trace::Segment) -> SegKey {
    (s.seq.0, s.ack.0, s.len, s.flags.0)
}

/// The first SYN -> SYN-ACK gap in a capture of one connection (ns), if it holds a handshake.
fn handshake_gap(p: &[&(u64, SocketAddr, SocketAddr, trace::Segment, u64)]) -> Option<u64> {
    let syn = p.iter().find(|x| x.3.flags.0 & TcpFlags::SYN != 0 && x.3.flags.0 & TcpFlags::ACK == 0)?;
    let ack = p.iter().find(|x| x.3.flags.0 & TcpFlags::SYN != 0 && x.3.flags.0 & TcpFlags::ACK != 0)?;
    ack.0.checked_sub(syn.0)
}

/// Merge the connections the two files have in common.
pub fn merge(files: [&Packets; 2], cfg: analyze::Config) -> Vec<Merged> {
    let mut conns: BTreeMap<(SocketAddr, SocketAddr), [Vec<_>; 2]> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        for p in f.iter() {
            conns.entry(key(p.1, p.2)).or_default()[i].push(p);
        }
    }
    let mut out = Vec::new();
    for ((x, y), [p0, p1]) in conns {
        if p0.is_empty() || p1.is_empty() {
            continue;
        }
        // The client: the SYN's sender, else the higher (ephemeral) port.
        let syn = p0.iter().chain(&p1).find(|p| p.3.flags.0 & TcpFlags::SYN != 0 && p.3.flags.0 & TcpFlags::ACK == 0);
        let client = syn.map_or(if x.port() > y.port() { x } else { y }, |p| p.1);
        let server = if client == x { y } else { x };
        // Which file is the client's end: there SYN -> SYN-ACK is a whole round trip, at the
        // server's end only the server's turnaround. Without a handshake: the order given.
        let (client_file, how) = match (handshake_gap(&p0), handshake_gap(&p1)) {
            (Some(a), Some(b)) if a != b => (usize::from(b > a), "from the handshake (SYN to SYN-ACK)"),
            _ => (0, "as given (no handshake in both files): the first file is the client's end"),
        };
        let (pc, ps) = if client_file == 0 { (&p0, &p1) } else { (&p1, &p0) };
        // Packet pairs: the same segment at both ends.
        let mut at_server: BTreeMap<(bool, SegKey), u64> = BTreeMap::new();
        for p in ps.iter() {
            at_server.entry((p.1 == client, seg_key(&p.3))).or_insert(p.0);
        }
        let (mut m1, mut m2, mut matched) = (i128::MAX, i128::MAX, 0usize);
        for p in pc.iter() {
            if let Some(&ts) = at_server.get(&(p.1 == client, seg_key(&p.3))) {
                matched += 1;
                if p.1 == client {
                    m1 = m1.min(ts as i128 - p.0 as i128);
                } else {
                    m2 = m2.min(p.0 as i128 - ts as i128);
                }
            }
        }
        if m1 == i128::MAX || m2 == i128::MAX {
            continue;
        }
        let offset = (m1 - m2) / 2;
        let error = ((m1 + m2) / 2).max(0) as u64;
        let origin = pc[0].0 as i128;
        let ce = events(pc, client, origin);
        let se = events(ps, client, origin + offset);
        let analysis = analyze::analyze_events(ce.iter().cloned(), cfg);
        let stalls = analysis
            .stalls()
            .map(|st| {
                let x = attribute::split(&ce, &se, st.start.0, st.start.0 + st.length.0);
                (st.clone(), x)
            })
            .collect();
        out.push(Merged {
            client,
            server,
            client_file,
            how,
            offset_ns: offset as i64,
            error_ns: error,
            matched,
            stalls,
        });
    }
    out
}

/// The merged connections as the report's document (`tcpstall explain A B`); `files` are the
/// two captures as named on the command line, in the order [`merge()`] was given them.
pub fn document(merged: &[Merged], files: [String; 2]) -> report::ExplainPairDoc {
    use report::explain_pair::{MergedConnection, PairStall, TimeByHost};
    report::ExplainPairDoc {
        merged: merged
            .iter()
            .map(|m| MergedConnection {
                client: m.client.to_string(),
                server: m.server.to_string(),
                client_file: files[m.client_file].clone(),
                ends_decided: m.how.to_string(),
                offset_ns: m.offset_ns,
                offset_error_ns: m.error_ns,
                packets_matched: m.matched as u64,
                stalls: m
                    .stalls
                    .iter()
                    .map(|(st, x)| PairStall {
                        stall: st.clone(),
                        time_by_host_ns: x.map(|x| TimeByHost {
                            client_host: x.client_host,
                            network: x.network,
                            server_host: x.server_host,
                        }),
                    })
                    .collect(),
            })
            .collect(),
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, ack: u32, len: u32, flags: u8) -> trace::Segment {
        trace::testing::segment(seq, ack, flags, len)
    }

    /// A handshake 2 ms each way, the server's clock 5 s ahead: the offset is found within the
    /// bound and the client's file is told from the handshake, whatever the order given.
    #[test]
    fn offset_and_ends_from_the_packets() {
        let (c, s): (SocketAddr, SocketAddr) = ("10.0.0.2:40000".parse().unwrap(), "10.0.0.1:80".parse().unwrap());
        let ms = 1_000_000u64;
        let off = 5_000 * ms;
        let at_client: Packets = vec![
            (0, c, s, seg(0, 0, 0, TcpFlags::SYN), 1),
            (4 * ms, s, c, seg(0, 1, 0, TcpFlags::SYN | TcpFlags::ACK), 2),
            (4 * ms, c, s, seg(1, 1, 0, TcpFlags::ACK), 3),
        ];
        let at_server: Packets = vec![
            (off + 2 * ms, c, s, seg(0, 0, 0, TcpFlags::SYN), 1),
            (off + 2 * ms, s, c, seg(0, 1, 0, TcpFlags::SYN | TcpFlags::ACK), 2),
            (off + 6 * ms, c, s, seg(1, 1, 0, TcpFlags::ACK), 3),
        ];
        let m = merge([&at_server, &at_client], analyze::Config::default());
        assert_eq!(m.len(), 1);
        let m = &m[0];
        assert_eq!((m.client, m.server, m.client_file, m.matched), (c, s, 1, 3));
        assert!((m.offset_ns - off as i64).unsigned_abs() <= m.error_ns, "{} +- {}", m.offset_ns, m.error_ns);
        assert_eq!(m.error_ns, 2 * ms);
    }
}
