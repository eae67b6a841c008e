//! Turning decoded packets into per-flow trace events.
//!
//! A flow is one TCP connection: a pair of socket addresses, and a new flow when a fresh SYN
//! reuses the pair after the previous connection ended. Endpoint A is the SYN sender (or the
//! sender of the first packet seen when the handshake was not captured).

use crate::decode::TcpPacket;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use trace::{Endpoint, Event, EventKind, Evidence, Instant};

/// Index of a flow in the order flows were first seen (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct FlowId(pub u32);

/// The addresses of a flow's two endpoints, and the capture interface it was seen on.
///
/// The same connection seen on two interfaces of one pcapng (the link emulator records both
/// ends of its link; a router captures in and out) is two flows: each interface is its own
/// capture point, with its own timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FlowKey {
    pub a: SocketAddr,
    pub b: SocketAddr,
    /// Interface index in the pcapng section (0 for pcap).
    pub interface: u32,
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} <-> {}", self.a, self.b)
    }
}

/// Which packets to keep: `--flow ADDR:PORT-ADDR:PORT` and/or `--port N`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// Keep a flow whose endpoints are exactly these two (either order).
    pub pair: Option<(SocketAddr, SocketAddr)>,
    /// Keep a flow with this port at either end.
    pub port: Option<u16>,
}

impl FlowFilter {
    pub fn matches(&self, x: SocketAddr, y: SocketAddr) -> bool {
        let pair_ok = self.pair.is_none_or(|(p, q)| (x == p && y == q) || (x == q && y == p));
        let port_ok = self.port.is_none_or(|n| x.port() == n || y.port() == n);
        pair_ok && port_ok
    }
}

/// One event of one flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEvent {
    pub flow: FlowId,
    pub event: Event,
    /// Packets from the same sender missing just before this one, by its IPv4 identification
    /// (0 when none are missing or the sender's IDs are not sequential). Lost between the sender
    /// and the capture point, or not captured.
    pub unseen_before: u16,
}

/// Per-direction IPv4 ID tracking: is the sender numbering its packets consecutively, and did
/// this packet skip some?
#[derive(Debug, Default, Clone, Copy)]
struct IpIdTrack {
    last: Option<u16>,
    /// IDs the last packet used: one per segment of a TSO/GSO super-packet (Linux
    /// `ip_select_ident_segs` advances by gso_segs).
    last_segs: u16,
    /// Consecutive packets whose ID was exactly the expected one.
    sequential: u8,
}

impl IpIdTrack {
    /// Returns the number of IDs skipped before `id`, once the sender has shown 3 sequential IDs.
    fn next(&mut self, id: u16, segs: u16) -> u16 {
        let mut unseen = 0;
        if let Some(last) = self.last {
            let diff = id.wrapping_sub(last.wrapping_add(self.last_segs));
            if diff == 0 {
                self.sequential = self.sequential.saturating_add(1);
            } else if self.sequential >= 3 && diff <= 32 {
                unseen = diff;
            } else {
                self.sequential = 0;
            }
        }
        self.last = Some(id);
        self.last_segs = segs.max(1);
        unseen
    }
}

#[derive(Debug)]
struct FlowState {
    id: FlowId,
    key: FlowKey,
    /// Window scale from each endpoint's SYN (RFC 7323 2.2); applied only when both sent one.
    wscale: [Option<u8>; 2],
    isn_a: Option<u32>,
    ended: bool,
    ipid: [IpIdTrack; 2],
    /// MSS option from each endpoint's SYN (the other endpoint's segment size limit).
    mss_opt: [Option<u16>; 2],
}

/// FxHash (rustc's hasher): the flow lookup runs once per packet and SipHash's DoS resistance
/// buys nothing for a local file.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type PairKey = (u32, SocketAddr, SocketAddr);

/// Assigns packets to flows and endpoints. Memory: one entry per flow.
#[derive(Debug, Default)]
pub struct FlowTable {
    by_pair: HashMap<PairKey, usize, BuildHasherDefault<FxHasher>>,
    /// The last lookup: consecutive packets usually belong to the same flow.
    last: Option<(PairKey, usize)>,
    flows: Vec<FlowState>,
    origin_ns: Option<u64>,
}

impl FlowTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The key of a flow seen so far.
    pub fn key(&self, id: FlowId) -> Option<FlowKey> {
        self.flows.get(id.0 as usize).map(|f| f.key)
    }

    /// All flows seen so far, in order.
    pub fn keys(&self) -> impl Iterator<Item = (FlowId, FlowKey)> + '_ {
        self.flows.iter().map(|f| (f.id, f.key))
    }

    /// Timestamp origin (first packet, ns since epoch), once a packet was seen.
    pub fn origin_ns(&self) -> Option<u64> {
        self.origin_ns
    }

    /// Sets the time origin (the capture's first packet, TCP or not).
    pub fn set_origin(&mut self, ts_ns: u64) {
        self.origin_ns.get_or_insert(ts_ns);
    }

    /// The trace event for one packet captured at `ts_ns` as frame `frame` on `interface`.
    pub fn event(&mut self, p: &TcpPacket, ts_ns: u64, frame: u64, interface: u32) -> FlowEvent {
        let origin = *self.origin_ns.get_or_insert(ts_ns);
        let canon = if p.src <= p.dst { (interface, p.src, p.dst) } else { (interface, p.dst, p.src) };
        let seg = p.segment;
        let is_syn = seg.flags.syn() && !seg.flags.ack();
        let found = match self.last {
            Some((k, i)) if k == canon => Some(i),
            _ => self.by_pair.get(&canon).copied(),
        };
        let idx = match found {
            // A new SYN on a pair whose connection ended, or with another ISN: a new connection.
            Some(i) if is_syn && (self.flows[i].ended || self.flows[i].isn_a.is_some_and(|isn| isn != seg.seq)) => {
                self.new_flow(canon, p)
            }
            Some(i) => i,
            None => self.new_flow(canon, p),
        };
        self.last = Some((canon, idx));
        let f = &mut self.flows[idx];
        let from = if p.src == f.key.a { Endpoint::A } else { Endpoint::B };
        let mut seg = seg;
        if seg.flags.syn() {
            f.wscale[from.index()] = seg.wscale;
            if from == Endpoint::A {
                f.isn_a = Some(seg.seq);
            }
        }
        if seg.flags.rst() || seg.flags.fin() {
            f.ended = true;
        }
        if seg.flags.syn() {
            f.mss_opt[from.index()] = seg.mss;
        }
        let unseen_before = match p.ip_id {
            Some(id) => {
                // Segments this packet stands for: payload / the MSS the peer allows (1 if unknown).
                let opt = u32::from(f.mss_opt[from.peer().index()].unwrap_or(u16::MAX));
                let mss = opt.saturating_sub(if seg.ts.is_some() { 12 } else { 0 }).max(1);
                let segs = u16::try_from(seg.len.div_ceil(mss)).unwrap_or(u16::MAX);
                f.ipid[from.index()].next(id, segs)
            }
            None => 0,
        };
        // Window scaling is in effect only when both SYNs carried the option (RFC 7323 2.2).
        // A SYN keeps its own option as decoded (the analyser decides what is in effect).
        seg.wscale = if seg.flags.syn() {
            seg.wscale
        } else {
            match f.wscale {
                [Some(a), Some(b)] => Some(if from == Endpoint::A { a } else { b }),
                _ => None,
            }
        };
        FlowEvent {
            flow: f.id,
            event: Event {
                t: Instant(ts_ns.saturating_sub(origin)),
                from,
                kind: EventKind::Segment(seg),
                evidence: Evidence::Frame(frame),
            },
            unseen_before,
        }
    }

    fn new_flow(&mut self, canon: (u32, SocketAddr, SocketAddr), p: &TcpPacket) -> usize {
        // A = SYN sender; for a SYN-ACK seen first, its destination; else the first sender.
        let synack = p.segment.flags.syn() && p.segment.flags.ack();
        let (a, b) = if synack { (p.dst, p.src) } else { (p.src, p.dst) };
        let id = FlowId(self.flows.len() as u32);
        self.flows.push(FlowState {
            id,
            key: FlowKey { a, b, interface: canon.0 },
            wscale: [None, None],
            isn_a: None,
            ended: false,
            ipid: Default::default(),
            mss_opt: [None, None],
        });
        let idx = self.flows.len() - 1;
        self.by_pair.insert(canon, idx);
        idx
    }
}
