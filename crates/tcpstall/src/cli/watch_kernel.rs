//! `watch --kernel`: kernel evidence (crates/kevidence: eBPF on TCP tracepoints) joined to the
//! packets of each flow. The kernel's records arrive within milliseconds; the packets in
//! TPACKET blocks retired every 50 ms. So the records wait here, per socket pair, and each one
//! enters its flow's analyser just before the first packet of that flow stamped after it (or,
//! when the flow goes quiet, once it is older than [`HOLD_NS`]): one stream per flow, in time
//! order, as the analyser requires.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use kevidence::{ClockMap, Converter, Filter, Reader, Source};
use serde::Serialize;
use trace::{Endpoint, Event, EventKind, Evidence, KernelEvent};
use wire::{FlowEvent, FlowId, FlowKey};

/// A record older than this (realtime ns) enters its flow on the one-second tick even without
/// a later packet: the ring's block timeout (50 ms) plus a margin.
pub const HOLD_NS: u64 = 200_000_000;
/// A record whose socket pair has no flow after this long is dropped (counted `unmatched`):
/// the capture never saw a packet of that connection (another interface, filtered out).
const UNMATCHED_NS: u64 = 5_000_000_000;
/// Records waiting at most (beyond, the oldest are dropped and counted `unmatched`).
const MAX_PENDING: usize = 1 << 20;

/// What the kernel evidence counted, for the table, the JSON lines and the summary.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernel events given to the analysers.
    pub events: u64,
    /// Of those: writes (`tcp:tcp_sendmsg_locked`, one per call), resends
    /// (`tcp:tcp_retransmit_skb`), window states (`tcp:tcp_probe`).
    pub writes: u64,
    pub resends: u64,
    pub windows: u64,
    /// Records lost before they reached the analysers: ring buffer full (counted in the
    /// kernel), unparsed, or not kept.
    pub lost: u64,
    /// Records of connections the capture never showed a packet of.
    pub unmatched: u64,
}

/// Per flow, what the kernel reported (the table's kernel column).
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct FlowKernel {
    pub writes: u64,
    pub resends: u64,
}

struct Pending {
    unix_ns: u64,
    local: SocketAddr,
    ev: KernelEvent,
}

type Pair = (SocketAddr, SocketAddr);

fn pair(x: SocketAddr, y: SocketAddr) -> Pair {
    if x <= y {
        (x, y)
    } else {
        (y, x)
    }
}

/// The kernel evidence of a watch.
pub struct KernelFeed {
    reader: Reader,
    clock: ClockMap,
    conv: Converter,
    pending: HashMap<Pair, VecDeque<Pending>>,
    waiting: usize,
    pub stats: KernelStats,
    pub per_flow: HashMap<Pair, FlowKernel>,
    status: String,
    next_evidence: u64,
}

impl KernelFeed {
    /// Attach to the sockets with `ports` (all when empty) in this process's network namespace
    /// (the one the capture sees); with `reads`, also report their reads. Err: one line saying
    /// why not.
    pub fn open(ports: &[u16], reads: bool) -> Result<KernelFeed, String> {
        use std::os::unix::fs::MetadataExt;
        let netns = std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino() as u32);
        let src = Source::open(&Filter { ports: ports.to_vec(), netns, reads })
            .map_err(|e| format!("{e}; the packets are analysed alone"))?;
        let status = src.status();
        let reader = Reader::spawn(src).map_err(|e| format!("no kernel evidence: reader thread: {e}"))?;
        Ok(KernelFeed {
            reader,
            clock: ClockMap::sample(),
            conv: Converter::new(),
            pending: HashMap::new(),
            waiting: 0,
            stats: KernelStats::default(),
            per_flow: HashMap::new(),
            status,
            next_evidence: 1,
        })
    }

    /// What is attached and what is missing, one line.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// Take the records read so far into the per-pair queues.
    pub fn pull(&mut self) {
        let mut recs = self.reader.take();
        recs.sort_by_key(|r| r.mono_ns);
        for r in &recs {
            let Some(ev) = self.conv.event(r) else { continue };
            if self.waiting >= MAX_PENDING {
                self.stats.unmatched += 1;
                continue;
            }
            let unix_ns = self.clock.to_realtime(r.mono_ns);
            self.pending.entry(pair(r.local, r.remote)).or_default().push_back(Pending { unix_ns, local: r.local, ev });
            self.waiting += 1;
        }
        self.stats.lost = self.reader.counts().lost();
    }

    /// The kernel events of flow `id` (addresses `key`) stamped at or before `until_ns`
    /// (realtime), as flow events on the trace's clock (ns since `origin_ns`), in time order.
    /// A record that reached the ring after a later packet of its flow was analysed (another
    /// CPU's, microseconds late) is stamped `floor_ns`, that packet's time: the analyser takes
    /// each flow's events in time order. `loopback`: the flow was captured on a loopback
    /// interface (its packets' `FlowEvent::loopback`).
    #[allow(clippy::too_many_arguments)]
    pub fn release(
        &mut self,
        id: FlowId,
        key: &FlowKey,
        until_ns: u64,
        floor_ns: u64,
        origin_ns: u64,
        loopback: bool,
        out: &mut Vec<FlowEvent>,
    ) {
        let p = pair(key.a, key.b);
        let Some(q) = self.pending.get_mut(&p) else { return };
        while q.front().is_some_and(|x| x.unix_ns <= until_ns) {
            let x = q.pop_front().expect("front");
            self.waiting -= 1;
            let from = if x.local == key.a { Endpoint::A } else { Endpoint::B };
            let f = self.per_flow.entry(p).or_default();
            self.stats.events += 1;
            match x.ev {
                KernelEvent::Sendmsg { .. } => {
                    self.stats.writes += 1;
                    f.writes += 1;
                }
                KernelEvent::Retransmit { .. } => {
                    self.stats.resends += 1;
                    f.resends += 1;
                }
                KernelEvent::State(_) => self.stats.windows += 1,
                _ => {}
            }
            let n = self.next_evidence;
            self.next_evidence += 1;
            out.push(FlowEvent {
                loopback,
                flow: id,
                event: Event {
                    t: trace::Instant(x.unix_ns.max(floor_ns).saturating_sub(origin_ns)),
                    from,
                    kind: EventKind::Kernel(x.ev),
                    evidence: Evidence::Kernel(n),
                },
            });
        }
        if q.is_empty() {
            self.pending.remove(&p);
        }
    }

    /// The one-second tick: sample the clocks again (a step of the realtime clock moves the
    /// offset), and drop what waited too long for a flow (`flow_of` finds a pair's flow).
    pub fn tick(&mut self, now_unix: u64, mut flow_of: impl FnMut(SocketAddr, SocketAddr) -> bool) {
        self.clock = ClockMap::sample();
        let old = now_unix.saturating_sub(UNMATCHED_NS);
        let mut gone = 0;
        self.pending.retain(|&(x, y), q| {
            if flow_of(x, y) {
                return true;
            }
            while q.front().is_some_and(|p| p.unix_ns < old) {
                q.pop_front();
                gone += 1;
            }
            !q.is_empty()
        });
        self.per_flow.retain(|&(x, y), _| flow_of(x, y));
        self.waiting -= gone;
        self.stats.unmatched += gone as u64;
    }

    /// This flow's counts.
    pub fn flow(&self, key: &FlowKey) -> FlowKernel {
        self.per_flow.get(&pair(key.a, key.b)).copied().unwrap_or_default()
    }

    /// The flow ended: its waiting records are dropped (its counts stay until the next tick,
    /// for its last stall records).
    pub fn end(&mut self, key: &FlowKey) {
        let p = pair(key.a, key.b);
        if let Some(q) = self.pending.remove(&p) {
            self.waiting -= q.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_the_same_either_way_round() {
        let a: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(pair(a, b), pair(b, a));
    }
}
