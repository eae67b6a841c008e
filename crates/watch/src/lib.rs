//! The session of `tcpstall watch`, without the OS: captured frames go in with their capture
//! time ([`Watcher::push`]), the one-second clock comes in as a time ([`Watcher::tick`]), and
//! out come stall records as they are classified ([`Record`]), each with the packets the
//! flight recorder kept around it. Inside: the same flow table (wire) and classifier (analyze)
//! as `explain`, fed packet by packet; kernel evidence joined to each flow ([`KernelJoin`]);
//! bounded memory (flows forgotten on FIN/RST, when idle, and least recently seen first beyond
//! a maximum); and the counts the watch keeps about itself ([`report::watch::WatchHealth`]).
//! Around it, the watch running ([`Live`]): where the records go (the JSON lines, the live
//! table and the summary, `--write`'s packets, the [`Metrics`]). The binary opens the capture
//! ring, the kernel evidence and the outputs, keeps the clock, and nothing else.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
mod kernel;
mod live;
mod metrics;
mod recorder;
pub mod sockets;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use analyze::{Session, Stall};
use report::owner::{Owner, OwnerFilter};
use report::watch::{CauseTotal, FlowKernel, WatchFlowRow, WatchHealth};
use wire::{EndReason, FlowEnd, FlowEvent, FlowId, FlowKey, FlowLimits, FlowTable, TcpPacket};

pub use kernel::{KernelJoin, KernelRecord, Target, HOLD_NS};
pub use live::{cpu_share, Clock, Live, LiveError, Mode, Outputs};
pub use metrics::Metrics;
pub use recorder::{Pkt, Recorder};

/// How a watch analyses, and what it keeps.
#[derive(Debug, Clone)]
pub struct Config {
    /// The classifier's settings (minimum gap, the kernel's timers).
    pub analyze: analyze::Config,
    /// The frames' link type (101, LINKTYPE_RAW, for the cooked capture ring).
    pub linktype: u32,
    /// A flow without a packet for this long is forgotten (capture time).
    pub idle_ns: u64,
    /// Flows analysed at once at most; beyond, the least recently seen is forgotten.
    pub max_flows: usize,
    /// Flight recorder: how long and how many packets are kept per flow.
    pub keep_ns: u64,
    pub keep_packets: usize,
    /// Keep packets at all (the flight recorder is for `--write`).
    pub record: bool,
    /// The ports asked for: a flow's server port for the metrics when its SYN was not seen.
    pub ports: Vec<u16>,
    /// Stop after this many stall records (later ones are neither counted nor handed out).
    pub count: Option<u64>,
    /// Kernel evidence comes ([`Watcher::kernel_record`]).
    pub kernel: bool,
    /// `--pid`, `--comm`, `--cgroup`: only the stall records of flows one of whose sockets such
    /// an owner holds (the owners come with the kernel evidence; empty: every record).
    pub owners: OwnerFilter,
}

/// One captured frame.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
    /// The capture interface's index.
    pub interface: u32,
}

/// A stall record, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub key: FlowKey,
    pub stall: Stall,
    /// The stall's start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The flow's server port: the one its SYN went to, else one asked for, else the one
    /// below the ephemeral range ([`server_port`]).
    pub port: u16,
    /// With kernel evidence: the flow's counts so far.
    pub kernel: Option<FlowKernel>,
    /// With [`Config::record`]: the packets to write for it (each packet once per flow).
    pub packets: Vec<Pkt>,
    /// With kernel evidence, when known: the owner of the held end's socket (the process that
    /// stalls), and of the other end's when it is on this host.
    pub owner: Option<Arc<Owner>>,
    pub peer_owner: Option<Arc<Owner>>,
}

/// What the watch keeps of a flow alive.
#[derive(Default)]
struct Flow {
    /// Its latest packet (ns, Unix).
    last_ns: u64,
    /// The port its SYN went to: the server's.
    server_port: Option<u16>,
    recorder: Recorder,
}

/// A watch's state: the flows alive, their analysers and recorders, and its counts.
pub struct Watcher {
    cfg: Config,
    table: FlowTable,
    session: Session,
    flows: HashMap<FlowId, Flow>,
    ids: HashMap<FlowKey, FlowId>,
    kernel: Option<KernelJoin>,
    kbuf: Vec<FlowEvent>,
    /// Records classified, not handed out yet.
    new: Vec<(FlowKey, Stall)>,
    health: WatchHealth,
    rows: HashMap<FlowKey, WatchFlowRow>,
    by_cause: BTreeMap<&'static str, CauseTotal>,
    frame_no: u64,
}

impl Watcher {
    pub fn new(cfg: Config) -> Self {
        let limits = FlowLimits { idle_ns: cfg.idle_ns, ..FlowLimits::default() };
        Watcher {
            table: FlowTable::with_limits(limits),
            session: Session::new(cfg.analyze),
            kernel: cfg.kernel.then(KernelJoin::default),
            cfg,
            flows: HashMap::new(),
            ids: HashMap::new(),
            kbuf: Vec::new(),
            new: Vec::new(),
            health: WatchHealth::default(),
            rows: HashMap::new(),
            by_cause: BTreeMap::new(),
            frame_no: 0,
        }
    }

    /// One frame, in capture order: the records it settles (and those of the flows it ends or
    /// pushes out) are appended to `out`.
    pub fn push(&mut self, f: &Frame<'_>, out: &mut Vec<Record>) {
        self.health.packets_seen += 1;
        self.frame_no += 1;
        match wire::decode(self.cfg.linktype, f.data, f.orig_len) {
            Ok(p) => {
                if let Some(fe) = self.table.event(&p, f.ts_ns, self.frame_no, f.interface) {
                    self.analyse(&p, &fe, f);
                }
            }
            Err(_) => self.health.packets_not_tcp += 1,
        }
        self.emit_new(out);
        // Flows the table ended (FIN/RST and linger, idle, reuse): their last records.
        while let Some(end) = self.table.pop_ended() {
            if let Some(k) = self.kernel.as_mut() {
                k.end(&end.key);
            }
            self.end_flow(&end, out);
        }
        // Bounded memory: beyond `max_flows`, forget the least recently seen.
        while self.session.live() > self.cfg.max_flows {
            let Some((&id, _)) = self.flows.iter().min_by_key(|(_, f)| f.last_ns) else { break };
            match self.table.key(id) {
                Some(key) => self.end_flow(&FlowEnd { flow: id, key, reason: EndReason::Idle }, out),
                None => {
                    self.flows.remove(&id);
                }
            }
            self.health.flows_evicted += 1;
        }
    }

    /// A packet of a flow: the flow's kernel events up to it, the packet, the recorder.
    fn analyse(&mut self, p: &TcpPacket, fe: &FlowEvent, f: &Frame<'_>) {
        let id = fe.flow;
        let key = self.table.key(id);
        if let (Some(k), Some(key), Some(origin_ns)) = (self.kernel.as_mut(), key, self.table.origin_ns()) {
            // The flow's kernel events up to this packet, never before its previous one.
            let floor_ns = self.flows.get(&id).map_or(0, |s| s.last_ns);
            self.kbuf.clear();
            k.release(&Target { id, key: &key, origin_ns, floor_ns, loopback: fe.loopback }, f.ts_ns, &mut self.kbuf);
            for ke in &self.kbuf {
                self.session.push(ke, || Some(key));
            }
        }
        self.session.push(fe, || key);
        let flow = self.flows.entry(id).or_insert_with(|| {
            if let Some(k) = key {
                self.ids.insert(k, id);
            }
            Flow::default()
        });
        flow.last_ns = f.ts_ns;
        let flags = p.segment.flags;
        if flags.syn() && !flags.ack() {
            flow.server_port = Some(p.dst.port());
        }
        if self.cfg.record {
            let pkt = Pkt { ts_ns: f.ts_ns, orig_len: f.orig_len, data: f.data.to_vec() };
            flow.recorder.push(pkt, flags.syn(), self.cfg.keep_packets, self.cfg.keep_ns);
        }
        self.session.take_new_stalls(id, &mut self.new);
    }

    /// Finishes a flow (ended by the table, or pushed out): its records not handed out yet,
    /// then its state is dropped.
    fn end_flow(&mut self, end: &FlowEnd, out: &mut Vec<Record>) {
        let taken = self.session.taken(end.flow);
        if let Some(fin) = self.session.end(end) {
            self.new.extend(fin.analysis.stalls.into_iter().skip(taken).map(|s| (fin.key, s)));
        }
        self.emit_new(out);
        self.flows.remove(&end.flow);
        // A reused pair's new flow may hold the key already.
        if self.ids.get(&end.key) == Some(&end.flow) {
            self.ids.remove(&end.key);
        }
    }

    /// The one-second clock at `now_unix_ns`: kernel events of quiet flows enter once no
    /// packet can come before them any more; every flow's pending gap is settled (a stall is
    /// classified about a second after its release at the latest); kernel records of no flow
    /// and the counts of flows gone are dropped.
    pub fn tick(&mut self, now_unix_ns: u64, out: &mut Vec<Record>) {
        if let Some(origin_ns) = self.table.origin_ns() {
            if let Some(k) = self.kernel.as_mut() {
                let until = now_unix_ns.saturating_sub(HOLD_NS);
                for (key, &id) in &self.ids {
                    let floor_ns = self.flows.get(&id).map_or(0, |f| f.last_ns);
                    self.kbuf.clear();
                    // The flow's analyser exists (its packets came first): `loopback` is unused.
                    k.release(&Target { id, key, origin_ns, floor_ns, loopback: false }, until, &mut self.kbuf);
                    for ke in &self.kbuf {
                        self.session.push(ke, || Some(*key));
                    }
                }
            }
            self.session.settle_all(trace::Instant(now_unix_ns.saturating_sub(origin_ns)), &mut self.new);
        }
        self.emit_new(out);
        if let Some(k) = self.kernel.as_mut() {
            // After this tick's records are out: the counts of flows gone can go.
            let pairs: HashSet<(SocketAddr, SocketAddr)> =
                self.ids.keys().flat_map(|k| [(k.a, k.b), (k.b, k.a)]).collect();
            k.tick(now_unix_ns, |x, y| pairs.contains(&(x, y)));
        }
    }

    /// The end of the watch: every flow still alive is finished, its last records (a gap
    /// pending at the end is classified now) appended to `out`. Nothing comes after.
    pub fn finish(&mut self, out: &mut Vec<Record>) {
        let session = std::mem::replace(&mut self.session, Session::new(self.cfg.analyze));
        let taken: HashMap<FlowId, usize> = self.flows.keys().map(|&id| (id, session.taken(id))).collect();
        for fin in session.finish_all() {
            let skip = taken.get(&fin.id).copied().unwrap_or(0);
            for st in fin.analysis.stalls.into_iter().skip(skip) {
                if self.emit(fin.key, st, out) {
                    self.health.classified_at_end += 1;
                }
            }
        }
    }

    fn emit_new(&mut self, out: &mut Vec<Record>) {
        let mut new = std::mem::take(&mut self.new);
        for (key, st) in new.drain(..) {
            self.emit(key, st, out);
        }
        self.new = new;
    }

    /// Counts a record that shows a wait and hands it out; false for one that does not, or
    /// past the count asked for.
    fn emit(&mut self, key: FlowKey, stall: Stall, out: &mut Vec<Record>) -> bool {
        if self.done() || !stall.shows_a_wait() {
            return false;
        }
        let (held, other) = match stall.held {
            trace::Endpoint::A => (key.a, key.b),
            trace::Endpoint::B => (key.b, key.a),
        };
        let owner = self.kernel.as_ref().and_then(|k| k.owner(held, other)).cloned();
        let peer_owner = self.kernel.as_ref().and_then(|k| k.owner(other, held)).cloned();
        if !self.cfg.owners.is_empty()
            && ![&owner, &peer_owner].iter().any(|o| o.as_ref().is_some_and(|o| o.matches(&self.cfg.owners)))
        {
            self.health.stalls_of_other_owners += 1;
            return false;
        }
        self.health.stall_records += 1;
        let start_unix_ns = self.table.origin_ns().unwrap_or(0) + stall.start.0;
        let cause = stall.cause.as_str();
        let total = self.by_cause.entry(cause).or_default();
        total.records += 1;
        total.length_ns += stall.length.0;
        let kernel = self.kernel.as_ref().map(|k| k.flow(&key));
        let row = self.rows.entry(key).or_insert_with(|| WatchFlowRow {
            a: key.a,
            b: key.b,
            stalls: 0,
            stall_ns: 0,
            causes: BTreeMap::new(),
            last_unix_ns: 0,
            kernel: None,
            owner: None,
        });
        row.stalls += 1;
        row.stall_ns += stall.length.0;
        *row.causes.entry(cause).or_default() += 1;
        row.last_unix_ns = start_unix_ns + stall.length.0;
        row.kernel = kernel;
        if owner.is_some() {
            row.owner = owner.as_deref().cloned();
        }
        let flow = self.ids.get(&key).and_then(|id| self.flows.get_mut(id));
        let port = flow
            .as_ref()
            .and_then(|f| f.server_port)
            .or_else(|| [key.a.port(), key.b.port()].into_iter().find(|p| self.cfg.ports.contains(p)))
            .unwrap_or_else(|| server_port(&key));
        let packets = match flow {
            Some(f) if self.cfg.record => f.recorder.around(start_unix_ns),
            _ => Vec::new(),
        };
        self.health.packets_written += packets.len() as u64;
        out.push(Record { key, stall, start_unix_ns, port, kernel, packets, owner, peer_owner });
        true
    }

    /// The count asked for is reached: nothing more comes out.
    pub fn done(&self) -> bool {
        self.cfg.count.is_some_and(|c| self.health.stall_records >= c)
    }

    /// A kernel record (ignored without [`Config::kernel`]).
    pub fn kernel_record(&mut self, r: KernelRecord) {
        if let Some(k) = self.kernel.as_mut() {
            k.add(r);
        }
    }

    /// Kernel records lost before they reached the watch (ring buffer full, unread).
    pub fn set_kernel_lost(&mut self, lost: u64) {
        if let Some(k) = self.kernel.as_mut() {
            k.stats.lost = lost;
        }
    }

    /// The counts so far (the capture ring's and the CPU's are the caller's to fill in).
    pub fn health(&self) -> WatchHealth {
        WatchHealth {
            flows_seen: u64::from(self.table.seen()),
            flows_tracked: self.session.live(),
            kernel: self.kernel.as_ref().map(|k| k.stats),
            ..self.health.clone()
        }
    }

    /// Stall records so far by cause.
    pub fn by_cause(&self) -> &BTreeMap<&'static str, CauseTotal> {
        &self.by_cause
    }

    /// The `n` flows with the most stall time.
    pub fn top(&self, n: usize) -> Vec<WatchFlowRow> {
        let mut v: Vec<&WatchFlowRow> = self.rows.values().collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.stall_ns));
        v.into_iter().take(n).cloned().collect()
    }

    /// Flight recorders alive (one per flow alive), and the packets they hold.
    pub fn recorded(&self) -> (usize, usize) {
        (self.flows.len(), self.flows.values().map(|f| f.recorder.len()).sum())
    }
}

/// The flow's server port as a metric label when its SYN was not seen and neither port is one
/// asked for: the port below the ephemeral range (32768, net.ipv4.ip_local_port_range's default
/// start) when one is, else the lower one.
pub fn server_port(k: &FlowKey) -> u16 {
    let (a, b) = (k.a.port(), k.b.port());
    match (a < 32768, b < 32768) {
        (true, false) => a,
        (false, true) => b,
        _ => a.min(b),
    }
}

#[cfg(test)]
mod tests;
