//! Turning decoded packets into per-flow trace events.
//!
//! A flow is one TCP connection: a pair of socket addresses on one capture interface. The pair
//! starts a new flow when a fresh SYN reuses it after the previous connection closed, with
//! another initial sequence number, or after the old flow expired (see [`FlowLimits`]).
//! Endpoint A is the SYN sender (or the sender of the first packet seen when the handshake was
//! not captured).
//!
//! Memory is bounded by the flows alive at one time, not by the flows in the file: a flow is
//! forgotten [`FlowLimits::close_linger_ns`] after it closed (FIN both ways or RST) or
//! [`FlowLimits::idle_ns`] after its last packet, in capture time, and reported through
//! [`FlowTable::pop_ended`] so the analyser can finish it and free its state too. Through the
//! linger a closed flow is only a tombstone of 16 bytes plus its queue entry (a hash of its
//! addresses and its deadline), not its state: at 100,000 connections a second a 5 s linger
//! holds 500,000 of them.

use crate::decode::{IcmpPacket, TcpPacket};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::SocketAddr;
use trace::{Endpoint, Event, EventKind, Evidence, Instant, Segment, SeqNum};

/// Index of a flow in the order flows were first seen (0-based). Never reused within a capture.
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
    /// The flow was captured on a loopback interface, as its first packet showed: the pcapng
    /// interface's name, the BSD loopback link types, a Linux cooked header's ARPHRD_LOOPBACK,
    /// or an Ethernet header with both MACs zero (see [`crate::frame_on_loopback`] and
    /// [`crate::Decoder::interface_loopback`]). Both endpoints are then on the capturing host.
    pub loopback: bool,
}

/// Why a flow ended (see [`FlowTable::pop_ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// FIN from both sides, or a RST, and then [`FlowLimits::close_linger_ns`] of capture time.
    Closed,
    /// No packet for [`FlowLimits::idle_ns`] of capture time.
    Idle,
    /// A new connection (a SYN with another ISN, or after the close) took over the pair.
    Reused,
}

/// A flow the table forgot: no event of it comes any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEnd {
    pub flow: FlowId,
    pub key: FlowKey,
    pub reason: EndReason,
}

/// How long the table remembers a flow, and the duplicate-frame window. All in capture time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    /// Kept after the connection closed (FIN seen from both sides, or a RST) for the packets
    /// that still belong to it: the last ACK of the FIN (one RTT) and FIN retransmissions
    /// (RFC 9293 3.6: the closing side waits in TIME-WAIT for 2*MSL, 4 minutes with RFC 9293's
    /// MSL of 2 minutes, Linux `TCP_TIMEWAIT_LEN` 60 s; a capture does not need that long: it is
    /// meant to absorb old duplicates inside the network, while a retransmitted FIN comes within
    /// the RTO backoff, 0.2 + 0.4 + 0.8 + 1.6 s = 3 s for four retransmissions at Linux's
    /// `TCP_RTO_MIN` of 200 ms, RFC 6298 5.5 doubling). Default 5 s, Zeek's `tcp_close_delay`.
    /// A fresh SYN on the pair starts a new flow at once, linger or not.
    pub close_linger_ns: u64,
    /// Forgotten after this long without a packet (Zeek's `tcp_inactivity_timeout` and
    /// nf_conntrack's `tcp_timeout_unacknowledged`, both 300 s). Default 300 s. A later packet
    /// on the pair starts a flow whose handshake was not captured.
    pub idle_ns: u64,
    /// Two copies of one packet this close in time are one packet (see [`FlowTable::event`]).
    /// Default 5 ms: a router or a mirror port adds microseconds to a millisecond or two, while
    /// the sender cannot resend that fast without a trigger: its retransmission timer is at
    /// least 200 ms (Linux `TCP_RTO_MIN`; RFC 6298 2.4 says 1 s), a tail-loss probe at least
    /// 10 ms (Linux `tcp_schedule_loss_probe`; RFC 8985 7.2 PTO = 2*SRTT), and a fast
    /// retransmit (RFC 5681 3.2, RFC 8985 6.2) answers the peer's duplicate ACKs or SACKs,
    /// packets the capture sees in between, and goes out with a new IPv4 ID.
    pub dup_window_ns: u64,
}

impl Default for FlowLimits {
    fn default() -> Self {
        FlowLimits { close_linger_ns: 5_000_000_000, idle_ns: 300_000_000_000, dup_window_ns: 5_000_000 }
    }
}

/// What identifies a copy of one packet: every TCP header field the analysis reads, the IPv4
/// ID, and how many packets the peer had sent when it was seen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Sig {
    ts_ns: u64,
    seq: u32,
    ack: u32,
    len: u32,
    tsval: u32,
    tsecr: u32,
    /// Packets of the other direction seen before this one.
    peer_seen: u32,
    window: u16,
    ip_id: u16,
    flags: u8,
    sack_blocks: u8,
    from_a: bool,
    /// A remembered packet (false: empty slot).
    used: bool,
    /// An IPv4 ID other than 0.
    id_usable: bool,
    has_ts: bool,
}

impl Sig {
    /// The signature of `p`, sent by `from` at `now` after the peer sent `peer_seen` packets.
    fn of(p: &TcpPacket, now: u64, from: Endpoint, peer_seen: u32) -> Sig {
        let seg = &p.segment;
        let (tsval, tsecr) = seg.ts.unwrap_or((0, 0));
        Sig {
            ts_ns: now,
            seq: seg.seq.0,
            ack: seg.ack.0,
            len: seg.len,
            tsval,
            tsecr,
            peer_seen,
            window: seg.window,
            ip_id: p.segment.ip_id.unwrap_or(0),
            flags: seg.flags.0,
            sack_blocks: seg.sack_blocks,
            from_a: from == Endpoint::A,
            used: true,
            id_usable: p.segment.ip_id.is_some_and(|id| id != 0),
            has_ts: seg.ts.is_some(),
        }
    }
}

/// Remembered packets per flow for duplicate detection (editcap's `-d` looks back 5 frames).
const RECENT: usize = 8;

#[derive(Debug)]
struct FlowState {
    id: FlowId,
    key: FlowKey,
    /// Window scale from each endpoint's SYN (RFC 7323 2.2); applied only when both sent one.
    wscale: [Option<u8>; 2],
    /// Initial sequence number from each endpoint's SYN.
    isn: [Option<SeqNum>; 2],
    fin: [bool; 2],
    /// The sequence number after each side's FIN (what an ACK of the FIN carries), once seen,
    /// and whether the peer acknowledged it.
    fin_end: [Option<SeqNum>; 2],
    fin_acked: [bool; 2],
    /// Capture time the connection closed: FIN from both sides or a RST (RFC 9293 3.6, 3.10.7).
    closed_at: Option<u64>,
    /// The end was reported (the close completed): the state stays only as a tombstone until
    /// the linger ends, so that late packets are not taken for a new connection.
    reported: bool,
    last_ns: u64,
    /// Packets per direction (index 0 = A).
    seen: [u32; 2],
    /// A packet without SYN was seen: the connection is synchronized.
    established: bool,
    recent: [Sig; RECENT],
    /// `recent[i].seq`, kept apart so that the per-packet check is one vector compare.
    recent_seq: [u32; RECENT],
    next_recent: u8,
    /// The first packet was captured on a loopback interface (see [`FlowEvent::loopback`]).
    loopback: bool,
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

/// Assigns packets to flows and endpoints, drops duplicate frames, and forgets ended flows.
/// Memory: one entry per flow alive (see [`FlowLimits`]).
#[derive(Debug, Default)]
pub struct FlowTable {
    limits: FlowLimits,
    by_pair: HashMap<PairKey, u32, BuildHasherDefault<FxHasher>>,
    /// The last lookup: consecutive packets usually belong to the same flow.
    last: Option<(PairKey, u32)>,
    /// Flow states by slot; slots of forgotten flows are reused (`free`).
    slots: Vec<FlowState>,
    free: Vec<u32>,
    /// (deadline, slot, flow) to look at again; stale entries are skipped.
    timers: BinaryHeap<Reverse<(u64, u32, u32)>>,
    ended: VecDeque<FlowEnd>,
    /// Closed flows through their linger: [`tomb_hash`] of the pair -> linger deadline. A packet
    /// of the pair that is not a SYN is counted in `after_close`; a SYN opens a new flow.
    tombs: HashMap<u64, u64, BuildHasherDefault<FxHasher>>,
    /// (deadline, tomb hash) in deadline order: the linger is one constant, so tombstones are
    /// made in deadline order and expire from the front.
    tomb_queue: VecDeque<(u64, u64)>,
    next_id: u32,
    origin_ns: Option<u64>,
    /// A flow whose close completed with the packet just returned: reported ended before the
    /// next packet is looked at (its last event must reach the analyser first).
    closing: Option<FlowEnd>,
    after_close: u64,
    /// Latest timestamp seen: capture time for expiry never goes back.
    now_ns: u64,
    duplicates: u64,
}

impl FlowTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limits(limits: FlowLimits) -> Self {
        FlowTable { limits, ..Self::default() }
    }

    /// Timestamp origin (first packet, ns since epoch), once a packet was seen.
    pub fn origin_ns(&self) -> Option<u64> {
        self.origin_ns
    }

    /// Sets the time origin (the capture's first packet, TCP or not).
    pub fn set_origin(&mut self, ts_ns: u64) {
        self.origin_ns.get_or_insert(ts_ns);
    }

    /// The addresses of a flow still remembered: at once for the flow of the last event
    /// returned (what a driver asks on a flow's first event), else by a scan of the live flows.
    /// None for a flow forgotten (ended) or never seen.
    pub fn key(&self, id: FlowId) -> Option<FlowKey> {
        if let Some((_, slot)) = self.last {
            let f = &self.slots[slot as usize];
            if f.id == id {
                return Some(f.key);
            }
        }
        self.by_pair.values().map(|&s| &self.slots[s as usize]).find(|f| f.id == id).map(|f| f.key)
    }

    /// Flows remembered now, closed ones in their linger included.
    pub fn live(&self) -> usize {
        self.by_pair.len() + self.tombs.len()
    }

    /// Flows seen so far (the next [`FlowId`]).
    pub fn seen(&self) -> u32 {
        self.next_id
    }

    /// Duplicate frames dropped so far.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Packets that came after their connection's close completed, within the linger
    /// (retransmitted FINs, a stray RST, data in flight when a RST was sent): not analysed.
    pub fn after_close(&self) -> u64 {
        self.after_close
    }

    /// The next flow that ended, oldest first: every event of it was returned before, none
    /// comes after. A driver calls it after each event (an end found with one packet is
    /// reported once the next packet was looked at, or after [`FlowTable::end_of_input`]).
    /// Flows still alive at the end of the capture are never reported.
    pub fn pop_ended(&mut self) -> Option<FlowEnd> {
        self.ended.pop_front()
    }

    /// The input ended: a flow whose close completed with the last packet is reported too.
    pub fn end_of_input(&mut self) {
        if let Some(c) = self.closing.take() {
            self.ended.push_back(c);
        }
    }

    /// The trace event for one packet captured at `ts_ns` as frame `frame` on `interface`, or
    /// None when it is a copy of a packet just seen (counted in [`FlowTable::duplicates`]).
    ///
    /// A copy is a packet of the same flow and direction within `dup_window_ns` of the original
    /// with the same seq, ack, flags, length, window, timestamps option and SACK block count,
    /// and, for IPv4 with a nonzero ID, the same IPv4 ID (RFC 791 3.2 / RFC 6864 4.1: the ID
    /// identifies one datagram of a source; a copy taken behind a router keeps it, with the TTL
    /// one lower; a retransmission is a new datagram with the next ID of the socket's counter,
    /// Linux `ip_select_ident_segs`). Without an ID to compare (IPv6, or an ID of 0, which
    /// RFC 6864 4.1 allows for atomic datagrams) it must also be that the peer sent nothing
    /// in between: a fast retransmission answers the peer's duplicate ACKs (RFC 5681 3.2).
    // Inlined into its callers (see `FlowHalf::record`).
    #[inline(always)]
    pub fn event(&mut self, p: &TcpPacket, ts_ns: u64, frame: u64, interface: u32) -> Option<FlowEvent> {
        let (origin, now) = self.advance(ts_ns);
        let canon = if p.src <= p.dst { (interface, p.src, p.dst) } else { (interface, p.dst, p.src) };
        let slot = self.slot_for(canon, p, now)?;
        self.last = Some((canon, slot));
        let dup_window = self.limits.dup_window_ns;
        let f = &mut self.slots[slot as usize];
        let from = if p.src == f.key.a { Endpoint::A } else { Endpoint::B };
        let sig = Sig::of(p, now, from, f.seen[from.peer().index()]);
        // Most packets differ from all remembered ones in seq: test that first, all at once.
        let seq_match = f.recent_seq.iter().fold(0u32, |m, &q| m | u32::from(q == sig.seq));
        if seq_match != 0 && f.recent.iter().any(|r| is_copy(r, &sig, dup_window)) {
            self.duplicates += 1;
            return None;
        }
        if f.reported {
            // The flow ended for the analyser; what comes now is counted apart.
            self.after_close += 1;
            return None;
        }
        f.recent[usize::from(f.next_recent)] = sig;
        f.recent_seq[usize::from(f.next_recent)] = sig.seq;
        f.next_recent = (f.next_recent + 1) % RECENT as u8;
        f.seen[from.index()] = f.seen[from.index()].saturating_add(1);
        f.last_ns = now;
        let seg = p.segment;
        if seg.flags.syn() {
            f.wscale[from.index()] = seg.wscale;
            f.isn[from.index()] = Some(seg.seq);
        } else {
            f.established = true;
        }
        self.track_close(slot, from, &seg, now);
        let f = &self.slots[slot as usize];
        let mut seg = seg;
        // Window scaling is in effect only when both SYNs carried the option (RFC 7323 2.2).
        // A SYN keeps its own option as decoded (the analyser decides what is in effect).
        if !seg.flags.syn() {
            seg.wscale = match f.wscale {
                [Some(a), Some(b)] => Some(if from == Endpoint::A { a } else { b }),
                _ => None,
            };
        }
        Some(FlowEvent {
            flow: f.id,
            event: Event {
                t: Instant(ts_ns.saturating_sub(origin)),
                from,
                kind: EventKind::Segment(seg),
                evidence: Evidence::Frame(frame),
            },
            loopback: f.loopback,
        })
    }

    /// The slot of the flow `p` belongs to, made when `p` starts one; None when `p` belongs to
    /// a closed flow in its linger (a tombstone), counted in [`FlowTable::after_close`].
    fn slot_for(&mut self, canon: PairKey, p: &TcpPacket, now: u64) -> Option<u32> {
        let found = match self.last {
            Some((k, i)) if k == canon => Some(i),
            _ => self.by_pair.get(&canon).copied(),
        };
        Some(match found {
            Some(i) if starts_new(&self.slots[i as usize], p) => {
                let old = &self.slots[i as usize];
                if !old.reported {
                    self.ended.push_back(FlowEnd { flow: old.id, key: old.key, reason: EndReason::Reused });
                }
                self.new_flow(canon, p, now, Some(i))
            }
            Some(i) => i,
            None if self.tombs.is_empty() => self.new_flow(canon, p, now, None),
            None => {
                let h = tomb_hash(&canon);
                if self.tombs.contains_key(&h) {
                    // A closed connection's pair: a SYN starts the next one (see `starts_new`:
                    // any SYN after the close), anything else is late (a retransmitted FIN).
                    if !p.segment.flags.syn() || p.segment.flags.rst() {
                        self.after_close += 1;
                        return None;
                    }
                    self.tombs.remove(&h);
                }
                self.new_flow(canon, p, now, None)
            }
        })
    }

    /// FINs, their acknowledgements and RSTs: when the connection closed (the linger starts)
    /// and when the close completed (the flow ends for the analyser).
    fn track_close(&mut self, slot: u32, from: Endpoint, seg: &Segment, now: u64) {
        let (linger, dup_window) = (self.limits.close_linger_ns, self.limits.dup_window_ns);
        let f = &mut self.slots[slot as usize];
        if seg.flags.fin() {
            f.fin[from.index()] = true;
            // The FIN occupies the sequence number after the segment's data (RFC 9293 3.4).
            f.fin_end[from.index()] = Some(seg.seq + seg.len + 1);
        }
        let peer = from.peer().index();
        if let Some(fin_end) = f.fin_end[peer] {
            if seg.flags.ack() && seg.ack >= fin_end {
                f.fin_acked[peer] = true;
            }
        }
        // RFC 9293 3.6: the connection is closed once both sides sent their FIN; 3.10.7.x: a RST
        // (in window) closes it at once.
        if f.closed_at.is_none() && (seg.flags.rst() || f.fin == [true, true]) {
            f.closed_at = Some(now);
            self.timers.push(Reverse((now.saturating_add(linger), slot, f.id.0)));
        }
        // Both FINs acknowledged (RFC 9293 3.6: the close is complete, TIME-WAIT follows) or a
        // RST: no more data can follow, so the flow ends now for the analyser (its state is the
        // big part). The state stays for the duplicate window (a copy of the last packets is
        // still a copy), then a tombstone through the linger so that a retransmitted FIN or a
        // stray RST is counted apart instead of opening a flow of its own.
        if !f.reported && (seg.flags.rst() || f.fin_acked == [true, true]) {
            f.reported = true;
            self.closing = Some(FlowEnd { flow: f.id, key: f.key, reason: EndReason::Closed });
            self.timers.push(Reverse((now.saturating_add(dup_window), slot, f.id.0)));
        }
    }

    /// The event for an ICMP error captured at `ts_ns` as frame `frame` on `interface` that
    /// quotes a segment of a flow alive on that interface: `from` is the endpoint that sent the
    /// quoted segment (the quote's source address and port). None when no such flow is
    /// remembered (never seen, filtered out, ended): an ICMP error never creates a flow. It
    /// does not count as the flow's activity (idle timeout) nor as a packet for duplicates.
    pub fn icmp(&mut self, p: &IcmpPacket, ts_ns: u64, frame: u64, interface: u32) -> Option<FlowEvent> {
        let (origin, _) = self.advance(ts_ns);
        let canon = if p.src <= p.dst { (interface, p.src, p.dst) } else { (interface, p.dst, p.src) };
        let slot = match self.last {
            Some((k, i)) if k == canon => i,
            _ => *self.by_pair.get(&canon)?,
        };
        let f = &self.slots[slot as usize];
        if f.reported {
            return None; // the connection's close completed: the analysis is over
        }
        let from = if p.src == f.key.a { Endpoint::A } else { Endpoint::B };
        Some(FlowEvent {
            flow: f.id,
            event: Event {
                t: Instant(ts_ns.saturating_sub(origin)),
                from,
                kind: EventKind::Icmp(p.error),
                evidence: Evidence::Frame(frame),
            },
            loopback: f.loopback,
        })
    }

    /// Moves capture time to `ts_ns` (never back): reports the flow whose close completed with
    /// the packet before, forgets the flows that expired. Returns (origin, now).
    fn advance(&mut self, ts_ns: u64) -> (u64, u64) {
        let origin = *self.origin_ns.get_or_insert(ts_ns);
        let now = self.now_ns.max(ts_ns);
        self.now_ns = now;
        if let Some(c) = self.closing.take() {
            self.ended.push_back(c);
        }
        self.expire(now);
        (origin, now)
    }

    /// Forgets the flows whose linger or idle time ran out by `now`; a flow whose close
    /// completed more than the duplicate window ago becomes a tombstone.
    fn expire(&mut self, now: u64) {
        while let Some(&(at, h)) = self.tomb_queue.front() {
            if at > now {
                break;
            }
            self.tomb_queue.pop_front();
            if self.tombs.get(&h) == Some(&at) {
                self.tombs.remove(&h);
            }
        }
        while let Some(&Reverse((at, slot, id))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(f) = self.slots.get(slot as usize) else { continue };
            if f.id.0 != id || self.by_pair.get(&canon_of(&f.key)).is_none_or(|&s| s != slot) {
                continue; // the slot was reused or freed since
            }
            let idle_end = f.last_ns.saturating_add(self.limits.idle_ns);
            let close_end = f.closed_at.map(|c| c.saturating_add(self.limits.close_linger_ns));
            // A reported flow's last packet is the one that completed the close.
            let tomb_at = f.reported.then(|| f.last_ns.saturating_add(self.limits.dup_window_ns));
            let due = [Some(idle_end), close_end, tomb_at].into_iter().flatten().min().unwrap_or(idle_end);
            if due > now {
                self.timers.push(Reverse((due, slot, id)));
                continue;
            }
            let reason = if close_end.is_some_and(|c| c <= now) { EndReason::Closed } else { EndReason::Idle };
            let canon = canon_of(&f.key);
            if !f.reported {
                self.ended.push_back(FlowEnd { flow: f.id, key: f.key, reason });
            }
            if let Some(end) = close_end.filter(|&c| c > now && idle_end > now) {
                let h = tomb_hash(&canon);
                self.tombs.insert(h, end);
                self.tomb_queue.push_back((end, h));
            }
            self.by_pair.remove(&canon);
            if self.last.is_some_and(|(_, s)| s == slot) {
                self.last = None;
            }
            self.free.push(slot);
        }
        // Timers of forgotten flows wait in the heap for their (idle) deadline: drop them once
        // they outnumber the flows alive, so the heap stays in proportion to the live flows.
        if self.timers.len() > 4 * self.by_pair.len() + 1024 {
            let (slots, by_pair) = (&self.slots, &self.by_pair);
            self.timers.retain(|&Reverse((_, slot, id))| {
                slots
                    .get(slot as usize)
                    .is_some_and(|f| f.id.0 == id && by_pair.get(&canon_of(&f.key)).is_some_and(|&s| s == slot))
            });
        }
    }

    /// A new flow for `p`, in slot `reuse` (the pair's previous flow) or a free one.
    fn new_flow(&mut self, canon: PairKey, p: &TcpPacket, now: u64, reuse: Option<u32>) -> u32 {
        // A = SYN sender; for a SYN-ACK seen first, its destination; else the first sender.
        let synack = p.segment.flags.syn() && p.segment.flags.ack();
        let (a, b) = if synack { (p.dst, p.src) } else { (p.src, p.dst) };
        let id = FlowId(self.next_id);
        self.next_id = self.next_id.saturating_add(1);
        let state = FlowState {
            id,
            key: FlowKey { a, b, interface: canon.0 },
            wscale: [None, None],
            isn: [None, None],
            fin: [false, false],
            fin_end: [None, None],
            fin_acked: [false, false],
            closed_at: None,
            reported: false,
            last_ns: now,
            seen: [0, 0],
            established: false,
            recent: [Sig::default(); RECENT],
            recent_seq: [0; RECENT],
            next_recent: 0,
            loopback: p.loopback,
        };
        let slot = match reuse.or_else(|| self.free.pop()) {
            Some(s) => {
                self.slots[s as usize] = state;
                s
            }
            None => {
                self.slots.push(state);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_pair.insert(canon, slot);
        self.timers.push(Reverse((now.saturating_add(self.limits.idle_ns), slot, id.0)));
        slot
    }
}

/// A tombstone's key: a 64-bit SipHash of the pair (std's `DefaultHasher::new`, the same keys
/// for every hasher it makes), 8 bytes instead of the 68 of two socket addresses. Two pairs
/// sharing a hash (about 1 in 2^64 per lookup) would only make a new flow's first non-SYN packet
/// count as after-close.
fn tomb_hash(k: &PairKey) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    k.hash(&mut h);
    h.finish()
}

fn canon_of(k: &FlowKey) -> PairKey {
    if k.a <= k.b {
        (k.interface, k.a, k.b)
    } else {
        (k.interface, k.b, k.a)
    }
}

/// Whether `p` opens a new connection on the pair of flow `f` (RFC 9293 3.4, 3.10.7.4).
///
/// A SYN (or SYN-ACK) after the connection closed, or whose ISN differs from the one its sender
/// used in this flow, is a new connection: a retransmitted SYN keeps its ISN (RFC 9293 3.8.1 /
/// RFC 6298 5: the same segment is sent again). A SYN without ACK after the connection carried
/// non-SYN segments, when its sender's SYN was not captured, is a new connection too: in a
/// synchronized connection a SYN is never sent again (RFC 9293 3.10.7.4 answers one with a
/// challenge ACK, RFC 5961 4), so it comes from a new incarnation on the same ports.
fn starts_new(f: &FlowState, p: &TcpPacket) -> bool {
    let seg: &Segment = &p.segment;
    if !seg.flags.syn() || seg.flags.rst() {
        return false;
    }
    if f.closed_at.is_some() {
        return true;
    }
    let from = if p.src == f.key.a { Endpoint::A } else { Endpoint::B };
    match f.isn[from.index()] {
        Some(isn) => isn != seg.seq,
        None => !seg.flags.ack() && f.established,
    }
}

/// Whether `new` is a copy of the remembered packet `old` (see [`FlowTable::event`]).
fn is_copy(old: &Sig, new: &Sig, window_ns: u64) -> bool {
    if !old.used || new.ts_ns.saturating_sub(old.ts_ns) > window_ns {
        return false;
    }
    // The fields that differ most often first: most packets fail at seq or ack.
    let same = old.seq == new.seq
        && old.ack == new.ack
        && old.from_a == new.from_a
        && old.id_usable == new.id_usable
        && old.has_ts == new.has_ts
        && old.len == new.len
        && old.flags == new.flags
        && old.window == new.window
        && old.tsval == new.tsval
        && old.tsecr == new.tsecr
        && old.sack_blocks == new.sack_blocks
        && old.ip_id == new.ip_id;
    same && (new.id_usable || old.peer_seen == new.peer_seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::TcpFlags;

    const MS: u64 = 1_000_000;

    fn pkt(src: SocketAddr, dst: SocketAddr, seq: u32, ack: u32, flags: u8) -> TcpPacket {
        let segment = Segment { wire_len: 54, ..trace::testing::segment(seq, ack, flags, 0) };
        TcpPacket { src, dst, segment, loopback: false }
    }

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 1024 + (i % 50_000) as u16))
    }

    /// Issue 25: the SYN-scan shape (SYN, RST-ACK; RFC 9293 3.10.7.1: a SYN to a closed port is
    /// answered by a RST) at 100,000 flows a second of capture time. Through the 5 s linger the
    /// table remembers half a million closed pairs, as tombstones: the full flow states in use
    /// stay at the handful alive, and the timer heap stays in proportion to them.
    #[test]
    fn closed_flows_linger_as_tombstones_not_as_states() {
        let mut t = FlowTable::new();
        let srv = SocketAddr::from(([10, 255, 0, 1], 80));
        let (mut max_slots, mut max_timers) = (0, 0);
        for i in 0..600_000u32 {
            let now = u64::from(i) * 10_000; // 10 us apart
            let c = addr(i);
            assert!(t.event(&pkt(c, srv, i, 0, TcpFlags::SYN), now, 0, 0).is_some());
            assert!(t.event(&pkt(srv, c, 0, i + 1, TcpFlags::RST | TcpFlags::ACK), now + 5_000, 0, 0).is_some());
            while t.pop_ended().is_some() {}
            max_slots = max_slots.max(t.slots.len());
            max_timers = max_timers.max(t.timers.len());
        }
        // Flows stay full states only for the 5 ms duplicate window: 500 of them at this rate.
        assert!(max_slots <= 600, "{max_slots} flow states");
        assert!(max_timers <= 4 * 600 + 1024 + 2, "{max_timers} timers");
        assert!(t.tombs.len() >= 490_000, "{} tombstones", t.tombs.len());
        assert_eq!(t.live(), t.by_pair.len() + t.tombs.len());
    }

    /// A tombstone keeps the table's answers (RFC 9293 3.6 close, 3.10.7.4 a new SYN): within
    /// the linger a late FIN or RST is after-close, a SYN opens the next flow; once the linger
    /// ran out the pair is forgotten and any packet opens a flow.
    #[test]
    fn a_tombstone_answers_as_the_closed_flow_did() {
        let mut t = FlowTable::new();
        let (a, b) = (addr(1), addr(2));
        t.event(&pkt(a, b, 100, 0, TcpFlags::SYN), 0, 0, 0).unwrap();
        t.event(&pkt(b, a, 500, 101, TcpFlags::SYN | TcpFlags::ACK), MS, 0, 0).unwrap();
        t.event(&pkt(a, b, 101, 501, TcpFlags::FIN | TcpFlags::ACK), 2 * MS, 0, 0).unwrap();
        t.event(&pkt(b, a, 501, 102, TcpFlags::FIN | TcpFlags::ACK), 3 * MS, 0, 0).unwrap();
        // A copy of the last ACK within the duplicate window is still a duplicate (full state).
        t.event(&pkt(a, b, 102, 502, TcpFlags::ACK), 4 * MS, 0, 0).unwrap();
        assert!(t.event(&pkt(a, b, 102, 502, TcpFlags::ACK), 5 * MS, 0, 0).is_none());
        assert_eq!((t.duplicates(), t.after_close()), (1, 0));
        // 1 s later: a tombstone; the retransmitted FIN is after-close.
        assert!(t.event(&pkt(b, a, 501, 102, TcpFlags::FIN | TcpFlags::ACK), 1_000 * MS, 0, 0).is_none());
        assert_eq!((t.tombs.len(), t.by_pair.len(), t.after_close()), (1, 0, 1));
        // A SYN with a new ISN opens flow 1 and clears the tombstone.
        let e = t.event(&pkt(a, b, 9_000, 0, TcpFlags::SYN), 1_001 * MS, 0, 0).unwrap();
        assert_eq!((e.flow, t.tombs.len()), (FlowId(1), 0));
        // Flow 1 closes by RST; 6 s later its tombstone is gone: a stray ACK opens flow 2.
        t.event(&pkt(b, a, 0, 9_001, TcpFlags::RST | TcpFlags::ACK), 1_002 * MS, 0, 0).unwrap();
        assert!(t.event(&pkt(a, b, 9_001, 0, TcpFlags::ACK), 2_000 * MS, 0, 0).is_none());
        let e = t.event(&pkt(a, b, 9_001, 0, TcpFlags::ACK), 8_000 * MS, 0, 0).unwrap();
        assert_eq!((e.flow, t.live()), (FlowId(2), 1));
    }
}
