//! `watch --kernel`: kernel evidence (eBPF on TCP tracepoints, read by crates/kevidence in the
//! binary) joined to the packets of each flow. The kernel's records arrive within
//! milliseconds; the packets in TPACKET blocks retired every 50 ms. So the records wait here,
//! per socket pair, and each one enters its flow's analyser just before the first packet of
//! that flow stamped after it (or, when the flow goes quiet, once it is older than
//! [`HOLD_NS`]): one stream per flow, in time order, as the analyser requires.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use report::owner::Owner;
use report::watch::{FlowKernel, KernelStats};
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

/// One kernel record, its time already on the realtime clock.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRecord {
    /// When the kernel saw it, ns since the Unix epoch.
    pub unix_ns: u64,
    /// The socket's own address and its peer's.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub event: KernelEvent,
    /// The socket's owner, when known (the kernel's socket-to-owner map, or /proc).
    pub owner: Option<Arc<Owner>>,
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

/// The kernel records waiting for their flows, and what they counted.
#[derive(Default)]
pub struct KernelJoin {
    pending: HashMap<Pair, VecDeque<Pending>>,
    waiting: usize,
    pub stats: KernelStats,
    per_flow: HashMap<Pair, FlowKernel>,
    /// Each socket's latest owner, by (its own address, its peer's).
    owners: HashMap<Pair, Arc<Owner>>,
    next_evidence: u64,
}

/// Where a flow's kernel events go: its id, addresses and the clock of its trace.
pub struct Target<'a> {
    pub id: FlowId,
    pub key: &'a FlowKey,
    /// The trace's origin (ns, Unix): event times count from it.
    pub origin_ns: u64,
    /// The flow's previous packet (ns, Unix): no event is stamped before it.
    pub floor_ns: u64,
    /// The flow was captured on a loopback interface.
    pub loopback: bool,
}

impl KernelJoin {
    /// Queues a record for its socket pair.
    pub fn add(&mut self, r: KernelRecord) {
        if let Some(o) = r.owner {
            match self.owners.get(&(r.local, r.remote)) {
                Some(had) if Arc::ptr_eq(had, &o) || **had == *o => {}
                _ => {
                    self.owners.insert((r.local, r.remote), o);
                }
            }
        }
        if self.waiting >= MAX_PENDING {
            self.stats.unmatched += 1;
            return;
        }
        let p = pair(r.local, r.remote);
        self.pending.entry(p).or_default().push_back(Pending { unix_ns: r.unix_ns, local: r.local, ev: r.event });
        self.waiting += 1;
    }

    /// The kernel events of flow `t` stamped at or before `until_ns` (realtime), as flow events
    /// on the trace's clock, in time order. A record that reached the ring after a later packet
    /// of its flow was analysed (another CPU's, microseconds late) is stamped `floor_ns`, that
    /// packet's time: the analyser takes each flow's events in time order.
    pub fn release(&mut self, t: &Target<'_>, until_ns: u64, out: &mut Vec<FlowEvent>) {
        let p = pair(t.key.a, t.key.b);
        let Some(q) = self.pending.get_mut(&p) else { return };
        while q.front().is_some_and(|x| x.unix_ns <= until_ns) {
            let Some(x) = q.pop_front() else { break };
            self.waiting -= 1;
            let from = if x.local == t.key.a { Endpoint::A } else { Endpoint::B };
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
            self.next_evidence += 1;
            out.push(FlowEvent {
                loopback: t.loopback,
                flow: t.id,
                event: Event {
                    t: trace::Instant(x.unix_ns.max(t.floor_ns).saturating_sub(t.origin_ns)),
                    from,
                    kind: EventKind::Kernel(x.ev),
                    evidence: Evidence::Kernel(self.next_evidence),
                },
            });
        }
        if q.is_empty() {
            self.pending.remove(&p);
        }
    }

    /// The one-second tick: drops what waited too long for a flow, and the counts of flows
    /// gone (`flow_of` says whether a pair has a flow).
    pub fn tick(&mut self, now_unix_ns: u64, mut flow_of: impl FnMut(SocketAddr, SocketAddr) -> bool) {
        let old = now_unix_ns.saturating_sub(UNMATCHED_NS);
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
        self.owners.retain(|&(x, y), _| flow_of(x, y));
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
        if let Some(q) = self.pending.remove(&pair(key.a, key.b)) {
            self.waiting -= q.len();
        }
    }

    /// The owner of the socket at `local` talking to `remote`, when known.
    pub fn owner(&self, local: SocketAddr, remote: SocketAddr) -> Option<&Arc<Owner>> {
        self.owners.get(&(local, remote))
    }

    /// Records waiting for their flow.
    pub fn waiting(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn write_at(unix_ns: u64, local: &str, remote: &str) -> KernelRecord {
        KernelRecord {
            unix_ns,
            local: addr(local),
            remote: addr(remote),
            event: KernelEvent::Sendmsg { bytes: 10, seq: 1 },
            owner: None,
        }
    }

    #[test]
    fn a_pair_is_the_same_either_way_round() {
        let (a, b) = (addr("127.0.0.1:5"), addr("127.0.0.1:40000"));
        assert_eq!(pair(a, b), pair(b, a));
    }

    #[test]
    fn records_enter_their_flow_in_time_order_up_to_the_packet_and_never_before_the_floor() {
        let mut j = KernelJoin::default();
        let key = FlowKey { a: addr("10.0.0.1:5000"), b: addr("10.0.0.2:80"), interface: 1 };
        j.add(write_at(1_000, "10.0.0.2:80", "10.0.0.1:5000"));
        j.add(write_at(3_000, "10.0.0.1:5000", "10.0.0.2:80"));
        let t = Target { id: FlowId(7), key: &key, origin_ns: 500, floor_ns: 1_500, loopback: false };
        let mut out = Vec::new();
        j.release(&t, 2_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].event.t, out[0].event.from, out[0].flow), (trace::Instant(1_000), Endpoint::B, FlowId(7)));
        assert_eq!(j.waiting(), 1);
        j.release(&t, 3_000, &mut out);
        assert_eq!((out[1].event.t, out[1].event.from), (trace::Instant(2_500), Endpoint::A));
        assert_eq!(j.flow(&key), FlowKernel { writes: 2, resends: 0 });
        assert_eq!((j.stats.events, j.stats.writes), (2, 2));
    }

    #[test]
    fn each_socket_keeps_its_latest_owner_until_its_flow_is_gone() {
        let mut j = KernelJoin::default();
        let owner = |pid| {
            Arc::new(Owner {
                pid,
                comm: "srv".into(),
                cgroup: None,
                container: None,
                container_name: None,
                pod_name: None,
                pod_namespace: None,
                shared_with: vec![],
                source: report::owner::OwnerSource::Kernel,
            })
        };
        let (s, c) = (addr("10.0.0.2:80"), addr("10.0.0.1:5000"));
        j.add(KernelRecord { owner: Some(owner(7)), ..write_at(1, "10.0.0.2:80", "10.0.0.1:5000") });
        j.add(KernelRecord { owner: None, ..write_at(2, "10.0.0.2:80", "10.0.0.1:5000") });
        assert_eq!(j.owner(s, c).map(|o| o.pid), Some(7), "a record without one keeps the known owner");
        assert_eq!(j.owner(c, s), None, "the peer's socket is another socket");
        j.add(KernelRecord { owner: Some(owner(8)), ..write_at(3, "10.0.0.2:80", "10.0.0.1:5000") });
        assert_eq!(j.owner(s, c).map(|o| o.pid), Some(8));
        j.tick(10, |_, _| true);
        assert!(j.owner(s, c).is_some());
        j.tick(10, |_, _| false);
        assert_eq!(j.owner(s, c), None);
    }

    #[test]
    fn records_of_no_flow_are_dropped_after_five_seconds_and_counted() {
        let mut j = KernelJoin::default();
        j.add(write_at(1_000_000_000, "10.0.0.9:1", "10.0.0.8:2"));
        j.tick(5_000_000_000, |_, _| false);
        assert_eq!((j.waiting(), j.stats.unmatched), (1, 0), "not yet 5 s old");
        j.tick(6_000_000_001, |_, _| false);
        assert_eq!((j.waiting(), j.stats.unmatched), (0, 1));
    }
}
