//! The emulated link as a pure function of (time, packet, randomness): no clock, no OS. Time
//! and random numbers are arguments (as smoltcp's `poll(now)`), so the same packets at the same
//! times with the same seed meet the same fate wherever the model runs. It has two users, which
//! must not disagree (held by the `model` crate's `one_link` test, for every key of the spec):
//! - the forwarder (`link::forward`, behind `tcpstall lab --link` and `tcpstall shell`): each
//!   packet read from a TUN device goes through [`DirectionModel::on_datagram`], stamped with
//!   CLOCK_MONOTONIC;
//! - the simulator (`model`, behind `tcpstall simulate --link`): each segment the simulated
//!   stacks send goes through [`DirectionModel::on_packet_of_kind`] at the simulated time.
//!
//! Both build it from `scenario::LinkSpec` with [`LinkModel::new`] and draw their random
//! numbers from [`rngs`] (one generator per direction, from one seed).
//!
//! Each direction is a [`DirectionModel`]: packets pass, in this order,
//! 1. the MTU check (a packet longer than the link MTU is dropped, as a real link would);
//! 2. pure-ACK thinning (`ack-every=N`, then `ack-loss=P`) in the directions `ack-dir` names,
//!    the emulated form of seed 003's `iptables ... -m length --length 52 ... -m statistic
//!    --mode nth --every 2 --packet 0 -j DROP` on the receiver's OUTPUT (phase and direction:
//!    `AckThinning`);
//! 3. random loss (`loss=P`), drawn before the queue like netem's loss (sch_netem.c netem_enqueue);
//! 4. the bottleneck queue: drop-tail when the packets waiting (not yet fully serialised) would
//!    exceed the limit in packets or bytes (netem's 1000 packets when a rate has no `queue`);
//! 5. serialisation at `rate` (a byte-accurate token bucket with no burst: transmission of a
//!    packet starts when the previous one has left, and lasts exactly bytes*8/rate seconds);
//!    the bytes are IP bytes, what a TUN device carries (no Ethernet framing);
//! 6. propagation delay plus uniform jitter; without `reorder` a packet never leaves before the
//!    one ahead of it (as netem since Linux 3.x does for jitter without reorder: tfifo order).
//!
//! [`gso`] says what a GSO super-packet stands for on the wire: its segments.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod gso;

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use scenario::{AckDir, LinkSpec, QueueLimit};

/// Direction of travel: `Up` is client to server, `Down` server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Up,
    Down,
}

impl Dir {
    pub const BOTH: [Dir; 2] = [Dir::Up, Dir::Down];
    pub fn index(self) -> usize {
        match self {
            Dir::Up => 0,
            Dir::Down => 1,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Dir::Up => "client->server",
            Dir::Down => "server->client",
        }
    }
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Longer than the link MTU.
    Mtu,
    /// A pure ACK removed by `ack-every=N`.
    AckEvery,
    /// A pure ACK removed by `ack-loss=P`.
    AckLoss,
    /// Random loss (`loss=P`).
    Loss,
    /// Drop-tail at the bottleneck queue.
    Queue,
    /// The OS refused the packet when the forwarder wrote it out (counted by the forwarder).
    WriteError,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::Mtu,
        DropReason::AckEvery,
        DropReason::AckLoss,
        DropReason::Loss,
        DropReason::Queue,
        DropReason::WriteError,
    ];
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn label(self) -> &'static str {
        match self {
            DropReason::Mtu => "mtu",
            DropReason::AckEvery => "ack-every",
            DropReason::AckLoss => "ack-loss",
            DropReason::Loss => "loss",
            DropReason::Queue => "queue",
            DropReason::WriteError => "write-error",
        }
    }
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Drop(DropReason),
    /// Deliver at this time (same clock as `now_ns`).
    Deliver {
        at_ns: u64,
    },
}

/// What kind of segment a packet is, for ACK thinning and the pure-ACK/data ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// TCP with no payload and exactly the ACK flag set (no SYN, FIN, RST, PSH, URG, ECE, CWR):
    /// the segments seed 003's rule drops (it matches `--length 52`, i.e. 20 bytes IPv4 + 20 TCP
    /// + 12 timestamp option and no data; here any option length counts, SACK blocks included).
    PureAck,
    /// TCP carrying payload bytes.
    TcpData,
    /// Any other TCP segment (SYN, FIN, RST, ... without payload).
    TcpControl,
    /// Not TCP, or not parseable as IPv4/IPv6.
    Other,
}

/// Classify a raw IPv4/IPv6 packet (as read from a TUN device with IFF_NO_PI).
pub fn classify(packet: &[u8]) -> PacketKind {
    let Ok(p) = etherparse::SlicedPacket::from_ip(packet) else {
        return PacketKind::Other;
    };
    let Some(etherparse::TransportSlice::Tcp(tcp)) = p.transport else {
        return PacketKind::Other;
    };
    if !tcp.payload().is_empty() {
        return PacketKind::TcpData;
    }
    let only_ack = tcp.ack()
        && !(tcp.syn() || tcp.fin() || tcp.rst() || tcp.psh() || tcp.urg() || tcp.ece() || tcp.cwr() || tcp.ns());
    if only_ack {
        PacketKind::PureAck
    } else {
        PacketKind::TcpControl
    }
}

/// netem's default queue limit (1000 packets, `limit` in tc-netem(8)), used when a rate is set
/// and no `queue=` is given.
pub const DEFAULT_QUEUE_PACKETS: u64 = 1000;

/// Counters of one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub delivered: u64,
    pub delivered_bytes: u64,
    pub pure_acks_in: u64,
    pub data_segments_in: u64,
    pub drops: [u64; 6],
}

impl DirCounters {
    pub fn drops_of(&self, r: DropReason) -> u64 {
        self.drops[r.index()]
    }
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Which pure ACKs a direction thins: `ack-every=N`, then `ack-loss=P`, only in the
/// directions `ack-dir` names (`both` by default; seed 003's rule matched the data receiver's
/// OUTPUT with `--sport 5001`, i.e. `ack-dir=down` when the client sends).
///
/// The phase of `ack-every=N` is decided once, from seed 003's rule
/// `-m statistic --mode nth --every 2 --packet 0 -j DROP` (docs/seeds.md, docs/link.md):
/// - xt_statistic's nth mode (net/netfilter/xt_statistic.c `statistic_mt`,
///   `XT_STATISTIC_MODE_NTH`) keeps a counter, `nval = (oval == every) ? 0 : oval + 1`, and
///   the packet matches when `nval == 0`; iptables stores `every` as N-1 and starts the counter
///   at `every - packet` (iptables extensions/libxt_statistic.c `statistic_check`). With
///   `--packet 0` the counter starts at N-1, so the FIRST packet matches, then the (N+1)th...:
///   the rule DROPs the first of each N. Checked on Linux 6.18 with 8 datagrams through
///   OUTPUT: `--every 2 --packet 0 -j DROP` delivered the 2nd, 4th, 6th and 8th; two such
///   rules stacked, the seed's way to thin further, the 4th and 8th.
/// - So `ack-every=N` keeps one pure ACK in N, the LAST of each N (the Nth, 2Nth, ...), and
///   drops the N-1 before it: for N = 2 exactly the seed's rule (of four pure ACKs the 2nd and
///   4th pass), for N = 2^k exactly k of its rules stacked.
#[derive(Debug, Clone)]
struct AckThinning {
    /// Keep the last of every N pure ACKs (None: no `ack-every`, or not this direction).
    every: Option<u32>,
    /// Then drop each pure ACK with this probability (0 if not this direction).
    loss: f64,
    /// Pure ACKs this direction has counted for `every`.
    seen: u64,
}

impl AckThinning {
    fn new(spec: &LinkSpec, dir: Dir) -> AckThinning {
        let here = matches!((spec.ack_dir, dir), (AckDir::Both, _) | (AckDir::Up, Dir::Up) | (AckDir::Down, Dir::Down));
        AckThinning { every: spec.ack_every.filter(|_| here), loss: if here { spec.ack_loss } else { 0.0 }, seen: 0 }
    }

    /// The fate of one pure ACK: None if it passes.
    fn judge<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<DropReason> {
        if let Some(n) = self.every {
            // xt_statistic nth, seed 003's --every 2 --packet 0 DROP: the first of each N is
            // dropped; here all but the Nth are (see above).
            self.seen += 1;
            if !self.seen.is_multiple_of(u64::from(n)) {
                return Some(DropReason::AckEvery);
            }
        }
        if self.loss > 0.0 && rng.gen_bool(self.loss) {
            return Some(DropReason::AckLoss);
        }
        None
    }
}

/// One direction of the link.
#[derive(Debug, Clone)]
pub struct DirectionModel {
    delay_ns: u64,
    jitter_ns: u64,
    reorder: bool,
    rate_bps: Option<u64>,
    queue: Option<QueueLimit>,
    loss: f64,
    thinning: AckThinning,
    mtu: u32,
    /// When the transmitter is free, in units of ns * rate_bps (exact integer arithmetic: one
    /// byte costs 8e9 of these units, so serialisation never accumulates rounding error).
    busy_until_scaled: u128,
    /// Packets accepted but not yet fully serialised: (time their last bit leaves, bytes).
    /// Packets in the bottleneck's queue: (when the last bit leaves, wire bytes, segments).
    backlog: VecDeque<(u64, u64, u64)>,
    backlog_bytes: u64,
    backlog_segments: u64,
    last_deliver_ns: u64,
    pub counters: DirCounters,
}

impl DirectionModel {
    pub fn new(spec: &LinkSpec, dir: Dir) -> Self {
        let queue = match (spec.queue, spec.rate_bps) {
            (Some(q), _) => Some(q),
            (None, Some(_)) => Some(QueueLimit::Packets(DEFAULT_QUEUE_PACKETS)),
            (None, None) => None,
        };
        DirectionModel {
            delay_ns: match dir {
                Dir::Up => spec.delay_up_ns,
                Dir::Down => spec.delay_down_ns,
            },
            jitter_ns: spec.jitter_ns,
            reorder: spec.reorder,
            rate_bps: spec.rate_bps.filter(|&r| r > 0),
            queue,
            loss: spec.loss,
            thinning: AckThinning::new(spec, dir),
            mtu: spec.mtu,
            busy_until_scaled: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            backlog_segments: 0,
            last_deliver_ns: 0,
            counters: DirCounters::default(),
        }
    }

    /// The configured one-way delay of this direction.
    pub fn delay_ns(&self) -> u64 {
        self.delay_ns
    }
    /// The configured jitter (+-).
    pub fn jitter_ns(&self) -> u64 {
        self.jitter_ns
    }

    /// Decide the fate of `packet` arriving at `now_ns`. Times must not go backwards.
    pub fn on_packet<R: Rng + ?Sized>(&mut self, now_ns: u64, packet: &[u8], rng: &mut R) -> Verdict {
        let kind = classify(packet);
        self.on_packet_of_kind(now_ns, packet.len() as u64, kind, rng)
    }

    /// A packet as the forwarder reads it from a TUN device: `vnet` is its `virtio_net_hdr`
    /// (empty without IFF_VNET_HDR), `packet` the IP packet after it. A GSO super-packet is
    /// judged as the segments it stands for ([`gso::segments`]), a plain packet as itself.
    pub fn on_datagram<R: Rng + ?Sized>(&mut self, now_ns: u64, vnet: &[u8], packet: &[u8], rng: &mut R) -> Verdict {
        let (segments, segment_len, wire_bytes) = gso::segments(vnet, packet);
        self.on_packet_segments(now_ns, packet, segments, segment_len, wire_bytes, rng)
    }

    /// A GSO super-packet standing for `segments` segments of at most `segment_len` bytes and
    /// `wire_bytes` on the wire in all (crate::gso): the MTU applies to each segment, the rate
    /// and a byte queue to the wire bytes, a packet queue to the segments. Only whole-packet
    /// decisions apply: the link carries super-packets only without loss or ACK thinning.
    fn on_packet_segments<R: Rng + ?Sized>(
        &mut self,
        now_ns: u64,
        packet: &[u8],
        segments: u64,
        segment_len: u64,
        wire_bytes: u64,
        rng: &mut R,
    ) -> Verdict {
        if segments <= 1 {
            return self.on_packet(now_ns, packet, rng);
        }
        let c = &mut self.counters;
        c.packets_in += 1;
        c.bytes_in += wire_bytes;
        c.data_segments_in += segments;
        let v = if segment_len > u64::from(self.mtu) {
            Verdict::Drop(DropReason::Mtu)
        } else {
            self.schedule(now_ns, wire_bytes, segments, rng)
        };
        match v {
            Verdict::Drop(r) => self.counters.drops[r.index()] += 1,
            Verdict::Deliver { .. } => {
                self.counters.delivered += 1;
                self.counters.delivered_bytes += wire_bytes;
            }
        }
        v
    }

    /// As [`on_packet`](Self::on_packet) with the packet already classified.
    pub fn on_packet_of_kind<R: Rng + ?Sized>(
        &mut self,
        now_ns: u64,
        bytes: u64,
        kind: PacketKind,
        rng: &mut R,
    ) -> Verdict {
        let c = &mut self.counters;
        c.packets_in += 1;
        c.bytes_in += bytes;
        match kind {
            PacketKind::PureAck => c.pure_acks_in += 1,
            PacketKind::TcpData => c.data_segments_in += 1,
            _ => {}
        }
        let v = self.decide(now_ns, bytes, kind, rng);
        match v {
            Verdict::Drop(r) => self.counters.drops[r.index()] += 1,
            Verdict::Deliver { .. } => {
                self.counters.delivered += 1;
                self.counters.delivered_bytes += bytes;
            }
        }
        v
    }

    fn decide<R: Rng + ?Sized>(&mut self, now_ns: u64, bytes: u64, kind: PacketKind, rng: &mut R) -> Verdict {
        if bytes > u64::from(self.mtu) {
            return Verdict::Drop(DropReason::Mtu);
        }
        if kind == PacketKind::PureAck {
            if let Some(r) = self.thinning.judge(rng) {
                return Verdict::Drop(r);
            }
        }
        if self.loss > 0.0 && rng.gen_bool(self.loss) {
            return Verdict::Drop(DropReason::Loss);
        }
        self.schedule(now_ns, bytes, 1, rng)
    }

    /// The rate, queue, delay and jitter of a packet (or a super-packet of `segments`) of
    /// `bytes` on the wire that was not dropped for its own sake.
    fn schedule<R: Rng + ?Sized>(&mut self, now_ns: u64, bytes: u64, segments: u64, rng: &mut R) -> Verdict {
        let leaves_ns = match self.rate_bps {
            None => now_ns,
            Some(rate) => {
                // Packets whose last bit has left no longer occupy the queue.
                while let Some(&(done, b, n)) = self.backlog.front() {
                    if done > now_ns {
                        break;
                    }
                    self.backlog.pop_front();
                    self.backlog_bytes -= b;
                    self.backlog_segments -= n;
                }
                let full = match self.queue {
                    Some(QueueLimit::Packets(p)) => self.backlog_segments + segments > p,
                    Some(QueueLimit::Bytes(b)) => self.backlog_bytes + bytes > b,
                    None => false,
                };
                if full {
                    return Verdict::Drop(DropReason::Queue);
                }
                let rate = u128::from(rate);
                let now_scaled = u128::from(now_ns) * rate;
                let start = self.busy_until_scaled.max(now_scaled);
                self.busy_until_scaled = start + u128::from(bytes) * 8 * 1_000_000_000;
                let done = self.busy_until_scaled.div_ceil(rate) as u64;
                self.backlog.push_back((done, bytes, segments));
                self.backlog_bytes += bytes;
                self.backlog_segments += segments;
                done
            }
        };
        let mut at = leaves_ns + self.delay_ns;
        if self.jitter_ns > 0 {
            let j = self.jitter_ns as i64;
            let offset = rng.gen_range(-j..=j);
            // The jittered delay never goes below zero: a packet cannot arrive before it left.
            at = (at as i64 + offset).max(leaves_ns as i64) as u64;
        }
        if !self.reorder {
            at = at.max(self.last_deliver_ns);
        }
        self.last_deliver_ns = self.last_deliver_ns.max(at);
        Verdict::Deliver { at_ns: at }
    }
}

/// Both directions of a link.
#[derive(Debug, Clone)]
pub struct LinkModel {
    dirs: [DirectionModel; 2],
}

impl LinkModel {
    pub fn new(spec: &LinkSpec) -> Self {
        LinkModel { dirs: [DirectionModel::new(spec, Dir::Up), DirectionModel::new(spec, Dir::Down)] }
    }
    pub fn on_packet<R: Rng + ?Sized>(&mut self, now_ns: u64, dir: Dir, packet: &[u8], rng: &mut R) -> Verdict {
        self.dirs[dir.index()].on_packet(now_ns, packet, rng)
    }
    pub fn direction(&self, dir: Dir) -> &DirectionModel {
        &self.dirs[dir.index()]
    }
    pub fn direction_mut(&mut self, dir: Dir) -> &mut DirectionModel {
        &mut self.dirs[dir.index()]
    }
    /// Split into the two directions (the forwarder runs each on its own thread).
    pub fn into_directions(self) -> [DirectionModel; 2] {
        self.dirs
    }
}

/// The random numbers of the two directions (index [`Dir::index`]) from one seed: the first
/// generator drawn from a generator seeded with `seed` is the client->server direction's, the
/// second the server->client's. Each direction draws only from its own, so what one direction
/// does never shifts the other's numbers, whichever order the packets of the two come in (the
/// forwarder runs a thread per direction; the simulator interleaves them).
pub fn rngs(seed: u64) -> [SmallRng; 2] {
    let mut seeder = SmallRng::seed_from_u64(seed);
    let mut next = || SmallRng::from_rng(&mut seeder).expect("seeding from a PRNG cannot fail");
    [next(), next()]
}

#[cfg(test)]
mod tests;
