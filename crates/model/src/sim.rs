//! The discrete-event engine: an event queue keyed by (time, sequence number) for determinism,
//! two endpoints (A = client, B = server), the link, and the two applications executing the
//! scenario's Step programs through the strategies' exact socket-operation plans.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use scenario::{Program, Sample as SampleKind, SideOpts, SideProgram, SockOp, Step, StrategyPair, Workload};
use trace::{Endpoint, Event, EventKind, Evidence, Segment, SeqNum, TcpFlags};

use crate::app::{compile, App, Compiled, Op, State};
use crate::sim_link::SimLink;
use crate::tcp::{Action, Counters, Seg, Tcp, TimerId};
use crate::{ModelError, Outcome, Release, RoundSample, SideEnd, SimConfig};

#[derive(Debug, Clone, Copy)]
enum Ev {
    Arrive { to: u8, seg: Seg },
    Timer { ep: u8, timer: u8 },
    Wake { side: u8 },
}

struct Item {
    t: u64,
    seq: u64,
    ev: Ev,
}
impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (time, insertion order).
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

pub(crate) struct Sim {
    now: u64,
    seq: u64,
    heap: BinaryHeap<Item>,
    eps: [Tcp; 2],
    apps: [App; 2],
    link: SimLink,
    actions: Vec<Action>,
    trace: Option<Vec<Event>>,
    /// The classifier, fed each segment as it is sent (`SimConfig::classify`).
    analyzer: Option<analyze::FlowAnalyzer>,
    step: u64,
    releases: Vec<Release>,
    samples: Vec<RoundSample>,
    keep_samples: bool,
    sample_stats: crate::SampleStats,
    sample_kind: SampleKind,
    writes: u64,
    max_time: u64,
    max_events: u64,
    events: u64,
    call_ns: u64,
    /// Each side's counters when its first measured round began: the prologue and warm-up
    /// rounds are not the measured rounds' wire cost (the lab reads tcp_info at the same point).
    before: [Option<Counters>; 2],
    /// Both sides' state when the client finished its last measured round (the lab reads
    /// tcp_info there too): what the epilogue sends is not counted.
    after: Option<[SideEnd; 2]>,
    /// When measuring began: the client's first measured round (after prologue and warm-up).
    measured_from: u64,
    /// When the client finished its last measured round (None until then, and for a stream).
    measured_to: Option<u64>,
}

const EP: [Endpoint; 2] = [Endpoint::A, Endpoint::B];

/// At most this many trace events are kept (about 100 MB); later events are not recorded.
pub const TRACE_LIMIT: usize = 1_000_000;

impl Sim {
    pub(crate) fn new(workload: &Workload, pair: &StrategyPair, cfg: &SimConfig) -> Sim {
        let link = &cfg.link;
        let ts_a = cfg.timestamps.unwrap_or(cfg.client.sender.timestamps);
        let ts_b = cfg.timestamps.unwrap_or(cfg.server.sender.timestamps);
        // RFC 7323: timestamps are used only if both SYNs carry the option.
        let ts = ts_a && ts_b;
        // advmss = MTU - 40 (IPv4 + TCP headers), capped by the 16-bit MSS option; the sender's
        // mss_cache subtracts the 12-byte timestamps option (tcp_sync_mss, RFC 7323 3).
        let advmss = link.mtu.saturating_sub(40).min(65_495);
        let ts_len = if ts { 12 } else { 0 };
        let mut mss = advmss - ts_len;
        // A forced MSS leaves room for the options (RFC 6691 2: "the sender MUST reduce the TCP
        // data length" for them; Linux's tcp_current_mss): no segment exceeds the link's MTU.
        if let Some(m) = cfg.mss {
            mss = m.min(advmss - ts_len);
        }
        let mut a = Tcp::new(cfg.client, mss, advmss, ts);
        let mut b = Tcp::new(cfg.server, mss, advmss, ts);
        // The handshake's RTT sample on both sides (Tcp::handshake_rtt): SYN and SYN-ACK cross
        // the link once each way.
        let rtt = link.delay_up_ns + link.delay_down_ns;
        a.handshake_rtt(rtt);
        b.handshake_rtt(rtt);
        let (program, sample_kind) = match workload.program() {
            Program::Rounds(p) => {
                let total = u64::from(p.warmup_rounds) + u64::from(p.rounds);
                let mk = |prog: SideProgram, opts: &SideOpts, is_client| {
                    let steps =
                        [compile(&prog.prologue, opts), compile(&prog.round, opts), compile(&prog.epilogue, opts)];
                    App::new(opts, steps, total, u64::from(p.warmup_rounds), is_client)
                };
                ([mk(p.client, &pair.client, true), mk(p.server, &pair.server, false)], p.sample)
            }
            Program::Stream { duration_ns, write_size } => {
                let mk = |step: Step, opts: &SideOpts, is_client: bool| App {
                    stream_until: is_client.then_some(duration_ns),
                    endless_reader: !is_client,
                    ..App::new(opts, [Vec::new(), compile(&[step], opts), Vec::new()], u64::MAX, 0, is_client)
                };
                (
                    [
                        mk(Step::Send(vec![write_size]), &pair.client, true),
                        mk(Step::Recv(write_size), &pair.server, false),
                    ],
                    SampleKind::ClientRound,
                )
            }
        };
        let mut apps = program;
        for app in &mut apps {
            app.normalise();
        }
        Sim {
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            eps: [a, b],
            apps,
            link: SimLink::new(link, cfg.seed),
            actions: Vec::with_capacity(64),
            trace: cfg.record_trace.then(Vec::new),
            analyzer: cfg.classify.map(analyze::FlowAnalyzer::new),
            step: 0,
            releases: Vec::new(),
            samples: Vec::new(),
            keep_samples: cfg.keep_samples,
            sample_stats: crate::SampleStats::default(),
            sample_kind,
            writes: 0,
            max_time: cfg.max_time_ns,
            max_events: cfg.max_events,
            events: 0,
            call_ns: cfg.call_ns,
            before: [None; 2],
            after: None,
            measured_from: 0,
            measured_to: None,
        }
    }

    fn schedule(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Item { t, seq: self.seq, ev });
    }

    fn record(&mut self, from: usize, kind: EventKind) {
        let tracing = self.trace.as_ref().is_some_and(|tr| tr.len() < TRACE_LIMIT);
        if !tracing && self.analyzer.is_none() {
            return;
        }
        self.step += 1;
        let ev = Event { t: trace::Instant(self.now), from: EP[from], kind, evidence: Evidence::Model(self.step) };
        if let (Some(fa), EventKind::Segment(_)) = (&mut self.analyzer, &ev.kind) {
            fa.push(&ev);
        }
        if let (true, Some(tr)) = (tracing, &mut self.trace) {
            tr.push(ev);
        }
    }

    /// Execute what endpoint `i` asked for.
    fn drain(&mut self, i: usize) {
        let mut acts = std::mem::take(&mut self.actions);
        for a in acts.drain(..) {
            match a {
                Action::Tx(seg) => {
                    let hdr = self.eps[i].hdr;
                    let wire = seg.len + hdr + 20 + 14;
                    if self.trace.is_some() || self.analyzer.is_some() {
                        let mut flags = TcpFlags::ACK;
                        if seg.psh && seg.len > 0 {
                            flags |= TcpFlags::PSH;
                        }
                        let s = Segment {
                            seq: SeqNum(seg.seq as u32) + 1,
                            ack: SeqNum(seg.ack as u32) + 1,
                            flags: TcpFlags(flags),
                            len: seg.len,
                            window: 65535,
                            wscale: None,
                            mss: None,
                            // RFC 7323 3: TSval in ms here; TSecr is not modelled.
                            ts: (hdr > 20).then_some(((self.now / 1_000_000) as u32, 0)),
                            sack_blocks: 0,
                            sack: [(SeqNum(0), SeqNum(0)); 4],
                            wire_len: wire,
                            ttl: None,
                            ip_id: None,
                        };
                        self.record(i, EventKind::Segment(s));
                    }
                    if let Some(at) = self.link.send(self.now, i, seg.len, hdr) {
                        self.schedule(at, Ev::Arrive { to: (1 - i) as u8, seg });
                    }
                }
                Action::Arm { timer, at } => self.schedule(at, Ev::Timer { ep: i as u8, timer: timer as u8 }),
                Action::Release { cause, since } => {
                    self.releases.push(Release { t: self.now, since, cause, side: EP[i] });
                }
                Action::Fired(t) => self.record(i, EventKind::Timer(t.kind())),
            }
        }
        self.actions = acts;
    }

    /// The handshake the model does not simulate, as a capture would show it: SYN at t = 0,
    /// SYN-ACK one way later, ACK after a round trip, when the applications start. It gives a
    /// trace's reader the MSS options and the path's RTT (RFC 9293 3.5).
    fn handshake(&mut self) {
        let (up, down) = (self.link.delay(0), self.link.delay(1));
        let ts = (self.eps[0].hdr > 20).then_some((0, 0));
        let hs = |flags: u8, seq: u32, ack: u32, mss: Option<u16>, hdr: u32| Segment {
            seq: SeqNum(seq),
            ack: SeqNum(ack),
            flags: TcpFlags(flags),
            len: 0,
            window: 65535,
            wscale: mss.map(|_| 7),
            mss,
            ts,
            sack_blocks: 0,
            sack: [(SeqNum(0), SeqNum(0)); 4],
            wire_len: 14 + 20 + hdr,
            ttl: None,
            ip_id: None,
        };
        let (mss_a, mss_b) = (self.eps[0].advmss as u16, self.eps[1].advmss as u16);
        let opt = if self.eps[0].hdr > 20 { 40 } else { 28 };
        self.now = 0;
        self.record(0, EventKind::Segment(hs(TcpFlags::SYN, 0, 0, Some(mss_a), opt)));
        self.now = up;
        self.record(1, EventKind::Segment(hs(TcpFlags::SYN | TcpFlags::ACK, 0, 1, Some(mss_b), opt)));
        self.now = up + down;
        self.record(0, EventKind::Segment(hs(TcpFlags::ACK, 1, 1, None, self.eps[0].hdr)));
        self.measured_from = self.now;
    }

    pub(crate) fn run(mut self) -> Result<Outcome, ModelError> {
        self.handshake();
        self.run_app(0);
        self.run_app(1);
        loop {
            if self.apps.iter().all(|a| a.state == State::Done) {
                break;
            }
            if self.stream_finished() {
                break;
            }
            let Some(item) = self.heap.pop() else {
                return Err(self.stuck("no event can make progress (deadlock)"));
            };
            self.now = item.t;
            self.events += 1;
            if self.now > self.max_time || self.events > self.max_events {
                return Err(self.stuck("the run did not finish within the model's budget (24 h of simulated time or 2e9 events): losses and RTO backoff can stall a transfer for ever"));
            }
            match item.ev {
                Ev::Arrive { to, seg } => {
                    let i = to as usize;
                    self.eps[i].on_segment(self.now, seg, &mut self.actions);
                    self.drain(i);
                    let app = &self.apps[i];
                    if (app.state == State::Recv && self.eps[i].readable() > 0)
                        || (app.state == State::SendBlocked && self.has_room(i))
                    {
                        self.run_app(i);
                    }
                }
                Ev::Timer { ep, timer } => {
                    let i = ep as usize;
                    self.eps[i].on_timer(self.now, TimerId::from_index(timer), &mut self.actions);
                    self.drain(i);
                }
                Ev::Wake { side } => {
                    let i = side as usize;
                    match self.apps[i].state {
                        State::Sleeping => {
                            self.apps[i].state = State::Ready;
                            self.advance(i);
                        }
                        State::BusySend => self.apps[i].state = State::SendBlocked,
                        State::BusyRecv => self.apps[i].state = State::Recv,
                        _ => continue,
                    }
                    self.run_app(i);
                }
            }
        }
        Ok(self.finish())
    }

    fn stream_finished(&self) -> bool {
        self.apps[1].endless_reader
            && self.apps[0].state == State::Done
            && self.eps[1].copied == self.eps[0].write_end
            && self.eps[0].snd_una == self.eps[0].write_end
    }

    fn stuck(&self, why: &str) -> ModelError {
        let describe = |i: usize| {
            let a = &self.apps[i];
            let e = &self.eps[i];
            format!(
                "{:?} step {:?} (round {}), unsent {} B, in flight {} segs, readable {} B",
                a.state,
                a.step(),
                a.cur.round,
                e.unsent(),
                e.packets_out(),
                e.readable()
            )
        };
        ModelError::Stuck { at_ms: self.now as f64 / 1e6, why: why.into(), client: describe(0), server: describe(1) }
    }

    fn has_room(&self, i: usize) -> bool {
        self.eps[i].queued() < self.eps[i].snd.sndbuf
    }

    fn apply(&mut self, i: usize, op: SockOp) {
        let now = self.now;
        match op {
            SockOp::Nodelay(on) => self.eps[i].set_nodelay(now, on, &mut self.actions),
            SockOp::Cork(on) => {
                self.eps[i].set_cork(now, on, &mut self.actions);
            }
            SockOp::Quickack => {
                self.eps[i].set_quickack(now, &mut self.actions);
            }
        }
        self.drain(i);
    }

    /// Run application `i` until it blocks, sleeps or finishes.
    fn run_app(&mut self, i: usize) {
        loop {
            match self.apps[i].state {
                State::Done | State::Sleeping | State::BusySend | State::BusyRecv => return,
                State::SendBlocked => {
                    if !self.has_room(i) {
                        return;
                    }
                    self.apps[i].state = State::Ready;
                    if !self.run_ops(i) {
                        return;
                    }
                    self.step_done(i);
                }
                State::Recv => {
                    if !self.do_recv(i) {
                        return;
                    }
                    self.step_done(i);
                }
                State::Ready => {
                    let Some(step) = self.apps[i].step().map(|c| match c {
                        Compiled::Send(_) => Compiled::Send(Vec::new()),
                        Compiled::Recv(n) => Compiled::Recv(*n),
                        Compiled::Sleep(n) => Compiled::Sleep(*n),
                    }) else {
                        self.apps[i].state = State::Done;
                        return;
                    };
                    self.step_begins(i);
                    if let Some(until) = self.apps[i].stream_until {
                        if self.now >= until {
                            self.apps[i].state = State::Done;
                            return;
                        }
                    }
                    match step {
                        Compiled::Send(_) => {
                            self.apps[i].op_idx = 0;
                            self.apps[i].partial = None;
                            if !self.run_ops(i) {
                                return;
                            }
                            self.step_done(i);
                        }
                        Compiled::Recv(n) => {
                            self.apps[i].recv_left = n;
                            self.apps[i].state = State::Recv;
                            if !self.do_recv(i) {
                                return;
                            }
                            self.step_done(i);
                        }
                        Compiled::Sleep(ns) => {
                            self.apps[i].state = State::Sleeping;
                            self.apps[i].round_sleep += ns;
                            let at = self.now + ns;
                            self.schedule(at, Ev::Wake { side: i as u8 });
                            return;
                        }
                    }
                }
            }
        }
    }

    fn step_begins(&mut self, i: usize) {
        let now = self.now;
        let tlen = self.trace.as_ref().map_or(0, Vec::len);
        let app = &self.apps[i];
        if app.cur.phase == 1 && app.cur.idx == 0 && app.cur.round == app.warmup && self.before[i].is_none() {
            // Like the lab's run_rounds: each side reads its counters once its prologue and
            // warm-up rounds are done, and the client's clock starts there.
            self.before[i] = Some(self.eps[i].c);
            if app.is_client {
                self.measured_from = now;
            }
        }
        let app = &mut self.apps[i];
        if app.cur.phase == 1 && app.cur.idx == 0 {
            app.round_start = now;
            app.round_sleep = 0;
            app.round_trace = tlen;
        }
        app.step_start = now;
        app.step_trace = tlen;
    }

    /// Runs the current send step's operations from `op_idx`; false if blocked on the send
    /// buffer (the rest of the write continues when ACKs make room).
    fn run_ops(&mut self, i: usize) -> bool {
        loop {
            let app = &self.apps[i];
            let Some(Compiled::Send(ops)) = app.step() else { return true };
            let Some(&op) = ops.get(app.op_idx) else { return true };
            match op {
                Op::Sock(o) => self.apply(i, o),
                Op::Write { len, more } => {
                    let len = self.apps[i].partial.unwrap_or(len);
                    let room = self.eps[i].snd.sndbuf.saturating_sub(self.eps[i].queued());
                    let take = len.min(room);
                    let blocked = take < len;
                    if take > 0 {
                        if !blocked {
                            self.record(i, EventKind::Write { bytes: take as u32, more });
                        }
                        let now = self.now;
                        self.eps[i].app_write(now, take, more, blocked, &mut self.actions);
                        self.drain(i);
                    }
                    if blocked {
                        self.apps[i].partial = Some(len - take);
                        self.apps[i].state = State::SendBlocked;
                        return false;
                    }
                    self.apps[i].partial = None;
                    self.writes += 1;
                }
            }
            self.apps[i].op_idx += 1;
            if self.call_ns > 0 && self.more_ops(i) {
                // The next call starts once this one has returned.
                self.busy(i, State::BusySend);
                return false;
            }
        }
    }

    /// One or more recv calls; true when the step's bytes are all read.
    fn do_recv(&mut self, i: usize) -> bool {
        let endless = self.apps[i].endless_reader;
        while self.apps[i].recv_left > 0 {
            let now = self.now;
            let want = if endless { u64::MAX } else { self.apps[i].recv_left };
            let n = self.eps[i].app_read(now, want, &mut self.actions);
            self.drain(i);
            if n == 0 {
                self.apps[i].state = State::Recv;
                return false;
            }
            self.record(i, EventKind::Read { bytes: n.min(u64::from(u32::MAX)) as u32 });
            for op in self.apps[i].opts.after_recv_ops() {
                self.apply(i, *op);
            }
            if endless {
                return false;
            }
            self.apps[i].recv_left -= n;
            if self.call_ns > 0 && self.apps[i].recv_left > 0 {
                self.busy(i, State::BusyRecv);
                return false;
            }
        }
        true
    }

    fn more_ops(&self, i: usize) -> bool {
        let app = &self.apps[i];
        matches!(app.step(), Some(Compiled::Send(ops)) if app.op_idx < ops.len())
    }

    fn busy(&mut self, i: usize, state: State) {
        self.apps[i].state = state;
        let at = self.now + self.call_ns;
        self.schedule(at, Ev::Wake { side: i as u8 });
    }

    fn step_done(&mut self, i: usize) {
        let now = self.now;
        let kind = self.sample_kind;
        let tlen = self.trace.as_ref().map_or(0, Vec::len);
        let app = &mut self.apps[i];
        app.state = State::Ready;
        let measured = app.cur.phase == 1 && app.cur.round >= app.warmup && app.stream_until.is_none();
        if app.is_client && measured {
            let is_recv = matches!(app.step(), Some(Compiled::Recv(_)));
            match kind {
                SampleKind::ClientRecv if is_recv => {
                    let s = RoundSample {
                        start: app.step_start,
                        end: now,
                        latency: now - app.step_start,
                        trace: (app.step_trace, tlen),
                    };
                    self.sample(s);
                }
                SampleKind::ClientRound if app.cur.idx + 1 == app.steps[1].len() => {
                    let lat = (now - app.round_start).saturating_sub(app.round_sleep);
                    let s =
                        RoundSample { start: app.round_start, end: now, latency: lat, trace: (app.round_trace, tlen) };
                    self.sample(s);
                }
                _ => {}
            }
        }
        self.advance(i);
    }

    /// Count a sample: its summary always, the sample itself when kept. Without keeping, the
    /// releases before its end are no longer needed (the next sample starts at or after it).
    fn sample(&mut self, s: RoundSample) {
        let st = &mut self.sample_stats;
        st.count += 1;
        st.hist.saturating_record(s.latency.max(1));
        let unwaited = s.latency.saturating_sub(crate::summary::waited(&self.releases, &s));
        st.min_unwaited = Some(st.min_unwaited.map_or(unwaited, |m| m.min(unwaited)));
        if self.keep_samples {
            self.samples.push(s);
        } else {
            let end = s.end;
            self.releases.retain(|r| r.t >= end);
        }
    }

    /// Move application `i` to its next step; when the client leaves its last measured round,
    /// the measured part ends: the time and both sides' state are taken there, as the lab
    /// stops its clock and reads tcp_info before running the epilogue.
    fn advance(&mut self, i: usize) {
        let app = &mut self.apps[i];
        let was_measuring = app.cur.phase == 1;
        app.advance();
        if app.is_client && was_measuring && app.cur.phase != 1 && self.measured_to.is_none() {
            self.measured_to = Some(self.now);
            self.after = Some([self.side_end(0), self.side_end(1)]);
        }
    }

    /// Endpoint `k`'s state now, its counters since its measured rounds began.
    fn side_end(&self, k: usize) -> SideEnd {
        let e = &self.eps[k];
        SideEnd {
            counters: match self.before[k] {
                Some(b) => e.c.since(&b),
                None => e.c,
            },
            cwnd: e.cwnd,
            srtt_ns: e.srtt.unwrap_or(0),
            ato_ns: e.ato,
            mss: e.mss,
            rcv_mss: e.rcv_mss,
            nodelay: e.nonagle & crate::tcp::NAGLE_OFF != 0,
            cork: e.nonagle & crate::tcp::NAGLE_CORK != 0,
            bytes_read: e.copied,
        }
    }

    /// Setup operations right after connect()/accept() (SideOpts::setup_ops).
    pub(crate) fn setup(&mut self) {
        for i in 0..2 {
            for op in self.apps[i].opts.setup_ops() {
                self.apply(i, op);
            }
        }
    }

    fn finish(self) -> Outcome {
        // A stream has no rounds: it is measured until the transfer is over.
        let sides = self.after.unwrap_or_else(|| [self.side_end(0), self.side_end(1)]);
        Outcome {
            end_ns: self.now,
            measured_from: self.measured_from,
            measured_to: self.measured_to.unwrap_or(self.now),
            warmup_rounds: self.apps[0].warmup,
            samples: self.samples,
            sample_stats: self.sample_stats,
            releases: self.releases,
            trace: self.trace.unwrap_or_default(),
            stalls: self.analyzer.map(|fa| fa.finish().stalls),
            sides,
            writes: self.writes,
            dropped: self.link.dropped(),
            events: self.events,
            stream: self.apps[1].endless_reader,
            sample_reads: self.sample_kind == SampleKind::ClientRecv,
        }
    }
}
