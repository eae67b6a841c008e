//! A row's packets and kernel records classified as they arrive (issue 25: the lab's memory
//! stays flat in rounds): each frame is decoded (`wire::decode`) into a trace event, the
//! kernel's records (`kevidence`) are converted with the row's clock map, and both reach the
//! one classifier (`analyze::FlowAnalyzer`) in one time-ordered stream. Pure: the frames and
//! records are handed in by the capture reader (`capture::RowCapture`), nothing here reads a
//! clock or a socket.
//!
//! The order is exactly the one the whole-row path made (every packet event, then every kernel
//! event, then a stable sort by time): by (time, packets before kernel events, frame number or
//! kernel evidence number). Without kernel records the packets pass in capture order, unsorted,
//! as that path left them. With kernel records, events wait in a small reorder buffer until
//! they are older than the newest time seen minus [`RowStream`]'s margin (the watermark); the
//! kernel's records themselves wait in a buffer of their own ordered by their monotonic stamp
//! (as `kevidence::to_events` sorted them), because the write converter
//! (`kevidence::Converter`) and the evidence numbers follow that order. At the row's end
//! [`RowStream::finish`] flushes both buffers in order.
//!
//! A *late* event (one arriving after an event that sorts after it was already released) cannot
//! be put back in order: it is released at once, out of order, and counted
//! ([`StreamCounts::late`]); the row's notes say so. With the margin well above both sources'
//! delivery delay none is expected.

use std::collections::VecDeque;

use trace::{Event, EventKind, Evidence, Instant, KernelEvent};

use super::Skipped;

/// What the stream needs to know of the row.
#[derive(Debug, Clone)]
pub struct StreamCfg {
    /// The frames' link type (Ethernet on loopback, IPv4 from a link's tap).
    pub linktype: u32,
    /// Tells the sides apart: endpoint A is the client, the side whose port is not this one.
    pub server_port: u16,
    /// The trace's time 0 (CLOCK_REALTIME ns, the frames' clock); earlier times clamp to 0.
    pub origin_ns: u64,
    /// Frames before the row's first in the `--capture` file (evidence numbers are the file's).
    pub frame_base: u64,
    /// The kernel's clock map when the row records kernel evidence (None: packets only, in
    /// capture order).
    pub kernel: Option<kevidence::ClockMap>,
    /// The reorder margin (ns): events older than the newest time seen minus this are final.
    pub margin_ns: u64,
    /// Keep the ordered events (`LabOptions::keep_packets`, for the HTML report).
    pub keep: bool,
    pub analyze: analyze::Config,
}

/// An event waiting in a reorder queue, with its place in the whole-row path's stable sort:
/// (time, number); packets sort before kernel events of the same time.
#[derive(Debug)]
struct Pending {
    key: (u64, u64),
    ev: Event,
}

/// Put `x` into `q`, kept sorted by `key`, after every element of the same key. Both sources
/// deliver nearly in order, so this is almost always a push at the back (a binary heap cost
/// most of the reader's time: every pop moved its events down a tree).
fn insert_sorted<T, K: Ord>(q: &mut VecDeque<T>, x: T, key: impl Fn(&T) -> K) {
    let k = key(&x);
    if q.back().is_none_or(|b| key(b) <= k) {
        q.push_back(x);
    } else {
        let at = q.partition_point(|e| key(e) <= k);
        q.insert(at, x);
    }
}

/// The kernel side of a stream: its clock map, its records waiting for the converter (by
/// monotonic stamp, then arrival, as `kevidence::to_events` sorted them), the converter.
struct KernelStage {
    clock: kevidence::ClockMap,
    recs: VecDeque<((u64, u64), kevidence::Record)>,
    arrived: u64,
    /// The last record released to the converter (mono_ns, arrival).
    released: Option<(u64, u64)>,
    conv: kevidence::Converter,
    counts: report::KernelCounts,
    /// Converted events waiting for their turn (in time order: they leave the converter so).
    events: VecDeque<Pending>,
}

/// The counts of what the stream saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounts {
    /// Frames handed in.
    pub frames: u64,
    /// Of those, TCP packets of the row's connection (trace events).
    pub tcp_packets: u64,
    pub skipped: Skipped,
    /// Events (packets or kernel events) that arrived after the watermark had passed them and
    /// were classified out of order; kernel records released to the converter out of their
    /// stamp order count here too.
    pub late: u64,
    /// The most events and records held in the reorder queues at once.
    pub held_max: u64,
}

/// The row's classified stream, finished.
#[derive(Debug)]
pub struct StreamOut {
    pub analysis: analyze::Analysis,
    pub counts: StreamCounts,
    /// Counts of the kernel events (`lost` left 0: the caller knows it), when kernel evidence
    /// was on.
    pub kernel: Option<report::KernelCounts>,
    /// The ordered events, when kept.
    pub events: Vec<Event>,
}

/// A row's packets and kernel records on their way to the classifier.
pub struct RowStream {
    cfg: StreamCfg,
    analyzer: analyze::FlowAnalyzer,
    /// Packet events waiting (with kernel evidence on), by (time, frame number).
    packets: VecDeque<Pending>,
    /// The newest event time seen (trace ns).
    newest: u64,
    /// The place of the last event released to the analyzer: (time, 0 packet / 1 kernel, number).
    released: Option<(u64, u8, u64)>,
    kernel: Option<KernelStage>,
    counts: StreamCounts,
    kept: Vec<Event>,
}

impl std::fmt::Debug for RowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RowStream({:?}, {} packets waiting)", self.counts, self.packets.len())
    }
}

impl RowStream {
    pub fn new(cfg: StreamCfg) -> RowStream {
        let kernel = cfg.kernel.map(|clock| KernelStage {
            clock,
            recs: VecDeque::new(),
            arrived: 0,
            released: None,
            conv: kevidence::Converter::new(),
            counts: report::KernelCounts::default(),
            events: VecDeque::new(),
        });
        RowStream {
            analyzer: analyze::FlowAnalyzer::new(cfg.analyze),
            cfg,
            packets: VecDeque::new(),
            newest: 0,
            released: None,
            kernel,
            counts: StreamCounts::default(),
            kept: Vec::new(),
        }
    }

    /// One captured frame (`ts_ns` CLOCK_REALTIME, `orig_len` on the wire), decoded as
    /// `capture::events` decodes it: a frame of another connection or not TCP is counted in
    /// `skipped`; its number counts all the same.
    pub fn frame(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) {
        self.counts.frames += 1;
        let n = self.cfg.frame_base + self.counts.frames;
        let port = self.cfg.server_port;
        let Some(seg) = super::row_segment(self.cfg.linktype, data, orig_len, port, &mut self.counts.skipped) else {
            return;
        };
        self.counts.tcp_packets += 1;
        let t = ts_ns.saturating_sub(self.cfg.origin_ns);
        let ev = Event { t: Instant(t), from: seg.1, kind: EventKind::Segment(seg.0), evidence: Evidence::Frame(n) };
        if self.kernel.is_none() {
            // Packets only: capture order, as the whole-row path left them.
            self.release(ev);
            return;
        }
        self.newest = self.newest.max(t);
        if self.released.is_some_and(|r| (t, 0, n) < r) {
            self.counts.late += 1;
            self.release(ev);
            return;
        }
        insert_sorted(&mut self.packets, Pending { key: (t, n), ev }, |p| p.key);
        self.note_held();
    }

    /// Kernel records as the reader delivered them (in ring order). Ignored without kernel
    /// evidence.
    pub fn records(&mut self, recs: impl IntoIterator<Item = kevidence::Record>) {
        let Some(k) = self.kernel.as_mut() else { return };
        for rec in recs {
            k.arrived += 1;
            let t = k.clock.to_realtime(rec.mono_ns).saturating_sub(self.cfg.origin_ns);
            self.newest = self.newest.max(t);
            insert_sorted(&mut k.recs, ((rec.mono_ns, k.arrived), rec), |r| r.0);
        }
        self.note_held();
    }

    /// Release everything older than the watermark (call after each batch of frames and
    /// records).
    pub fn advance(&mut self) {
        let mark = self.newest.saturating_sub(self.cfg.margin_ns);
        self.release_below(Some(mark));
    }

    /// Everything in order, then the analysis.
    pub fn finish(mut self) -> StreamOut {
        self.release_below(None);
        let kernel = self.kernel.as_ref().map(|k| k.counts);
        StreamOut {
            analysis: analyze::Analysis { flows: vec![self.analyzer.finish()] },
            counts: self.counts,
            kernel,
            events: self.kept,
        }
    }

    /// Kernel records through the converter, then packet and kernel events merged, up to
    /// `mark` (trace ns, exclusive; None: all).
    fn release_below(&mut self, mark: Option<u64>) {
        let below = |t: u64| mark.is_none_or(|m| t < m);
        self.convert_below(&below);
        let empty = &mut VecDeque::new();
        loop {
            let kev = self.kernel.as_mut().map_or(&mut *empty, |k| &mut k.events);
            let p = self.packets.front().map(|p| (p.key.0, 0u8, p.key.1));
            let k = kev.front().map(|p| (p.key.0, 1u8, p.key.1));
            let (key, from_kernel) = match (p, k) {
                (Some(p), Some(k)) if k < p => (k, true),
                (Some(p), _) => (p, false),
                (None, Some(k)) => (k, true),
                (None, None) => break,
            };
            if !below(key.0) {
                break;
            }
            let next = if from_kernel { kev.pop_front() } else { self.packets.pop_front() };
            let Some(next) = next else { break };
            self.released = Some(key);
            self.release(next.ev);
        }
    }

    /// The kernel's records older than the mark, in stamp order, as trace events (as
    /// `capture::kernel_events` makes them: the client (A) is the socket whose remote port is
    /// the server's), numbered in that order.
    fn convert_below(&mut self, below: &impl Fn(u64) -> bool) {
        let (port, origin) = (self.cfg.server_port, self.cfg.origin_ns);
        let Some(k) = self.kernel.as_mut() else { return };
        while let Some((key, rec)) = k.recs.front() {
            let t = k.clock.to_realtime(rec.mono_ns).saturating_sub(origin);
            if !below(t) {
                break;
            }
            let (key, r) = (*key, *rec);
            k.recs.pop_front();
            if k.released.is_some_and(|x| key < x) {
                self.counts.late += 1;
            } else {
                k.released = Some(key);
            }
            let Some(from) = super::kernel_side(&r, port) else { continue };
            let Some(kind) = k.conv.event(&r) else { continue };
            k.counts.events += 1;
            match kind {
                KernelEvent::Sendmsg { .. } => k.counts.writes += 1,
                KernelEvent::Retransmit { .. } => k.counts.resends += 1,
                KernelEvent::State(_) => k.counts.windows += 1,
                _ => {}
            }
            let n = k.counts.events;
            let ev = Event { t: Instant(t), from, kind: EventKind::Kernel(kind), evidence: Evidence::Kernel(n) };
            if self.released.is_some_and(|x| (t, 1, n) < x) {
                // The watermark passed it already: out of order, now.
                self.counts.late += 1;
                deliver((&mut self.analyzer, &mut self.kept, self.cfg.keep), ev);
                continue;
            }
            k.events.push_back(Pending { key: (t, n), ev });
        }
    }

    fn note_held(&mut self) {
        let held = self.packets.len() + self.kernel.as_ref().map_or(0, |k| k.recs.len() + k.events.len());
        self.counts.held_max = self.counts.held_max.max(held as u64);
    }

    fn release(&mut self, ev: Event) {
        deliver((&mut self.analyzer, &mut self.kept, self.cfg.keep), ev);
    }
}

/// An event to the classifier, and to the kept events when they are kept.
fn deliver((analyzer, kept, keep): (&mut analyze::FlowAnalyzer, &mut Vec<Event>, bool), ev: Event) {
    analyzer.push(&ev);
    if keep {
        kept.push(ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{self, Frames, LINKTYPE};
    use kevidence::{ClockMap, Kind, Record};

    const PORT: u16 = 5001;
    const ORIGIN: u64 = 1_000_000_000;
    const CLOCK: ClockMap = ClockMap { offset_ns: 500_000_000, error_ns: 0 };

    /// An Ethernet (loopback) + IPv4 + TCP frame, 20-byte headers.
    fn frame(from_client: bool, seq: u32, ack: u32, flags: u8, payload: u16) -> Vec<u8> {
        let (s, d) = if from_client { (40000u16, PORT) } else { (PORT, 40000) };
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&(40 + payload).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        f.extend_from_slice(&s.to_be_bytes());
        f.extend_from_slice(&d.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&ack.to_be_bytes());
        f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f
    }

    /// A kernel record at trace time `t` (ns since ORIGIN) of the client's socket.
    fn rec(t: u64, kind: Kind) -> Record {
        let mono = ORIGIN + t - CLOCK.offset_ns as u64;
        Record {
            mono_ns: mono,
            sk: 7,
            local: "127.0.0.1:40000".parse().unwrap(),
            remote: "127.0.0.1:5001".parse().unwrap(),
            tcp_state: 1,
            kind,
            owner: None,
        }
    }

    fn write(t: u64, left: u32, seq: u32, msg: u64) -> Record {
        rec(t, Kind::Sendmsg { left, write_seq: seq, msg, size_goal: 1448 })
    }

    /// A row: handshake, then `rounds` request/response rounds 100 us apart with a 40 ms
    /// delayed ACK in round 3, each client write reported by the kernel (round 5's in two
    /// passes of the copy loop, one write), a resend, and a record stamped at exactly a
    /// packet's time.
    fn row(rounds: u32) -> (Frames, Vec<Record>) {
        let mut frames = Frames::default();
        let mut recs = Vec::new();
        let mut t = 1_000u64;
        let push = |frames: &mut Frames, t: u64, f: Vec<u8>, payload: u32| {
            frames.push(ORIGIN + t, f.len() as u32 + payload, &f);
        };
        push(&mut frames, t, frame(true, 0, 0, 0x02, 0), 0);
        push(&mut frames, t + 10_000, frame(false, 0, 1, 0x12, 0), 0);
        push(&mut frames, t + 20_000, frame(true, 1, 1, 0x10, 0), 0);
        let (mut cs, mut ss) = (1u32, 1u32);
        for i in 0..rounds {
            t += 100_000;
            recs.push(write(t - 2_000, 100, cs, u64::from(i) + 1));
            if i == 5 {
                recs.push(write(t - 1_000, 50, cs + 50, u64::from(i) + 1));
            }
            push(&mut frames, t, frame(true, cs, ss, 0x18, 100), 100);
            cs += 100;
            let wait = if i == 3 { 40_000_000 } else { 20_000 };
            push(&mut frames, t + wait, frame(false, ss, cs, 0x18, 50), 50);
            ss += 50;
            push(&mut frames, t + wait + 10_000, frame(true, cs, ss, 0x10, 0), 0);
            t += wait + 10_000;
        }
        // A resend of the last request, its record at exactly the packet's time.
        t += 300_000;
        recs.push(rec(t, Kind::Retransmit { seq: cs - 100, end_seq: cs, flags: 0x18 }));
        push(&mut frames, t, frame(true, cs - 100, ss, 0x18, 100), 100);
        (frames, recs)
    }

    fn cfg(kernel: bool, margin_ns: u64) -> StreamCfg {
        StreamCfg {
            linktype: LINKTYPE,
            server_port: PORT,
            origin_ns: ORIGIN,
            frame_base: 10,
            kernel: kernel.then_some(CLOCK),
            margin_ns,
            keep: true,
            analyze: analyze::Config::default(),
        }
    }

    /// The whole-row path this stream replaces: every frame decoded, the kernel's events
    /// after them, one stable sort by time, then the classifier.
    fn whole_row(frames: &Frames, recs: Option<&[Record]>) -> (Vec<Event>, analyze::Analysis) {
        let (mut ev, _) = capture::events(frames, LINKTYPE, PORT, ORIGIN, 10);
        if let Some(recs) = recs {
            ev.extend(capture::kernel_events(recs, &CLOCK, PORT, ORIGIN));
            ev.sort_by_key(|e| e.t);
        }
        let a = analyze::analyze_events(ev.iter().cloned(), analyze::Config::default());
        (ev, a)
    }

    /// Feed `frames` in chunks of `chunk`, the records of each chunk's time span with it, each
    /// chunk's records in reverse (the ring's order across CPUs is not time order).
    fn streamed(frames: &Frames, recs: &[Record], chunk: usize, margin_ns: u64) -> StreamOut {
        let mut s = RowStream::new(cfg(true, margin_ns));
        let all: Vec<_> = frames.iter().collect();
        let mut given = 0;
        for c in all.chunks(chunk) {
            for f in c {
                s.frame(f.ts_ns, f.orig_len, f.data);
            }
            let upto = c.last().map_or(0, |f| f.ts_ns);
            let mut batch: Vec<Record> =
                recs[given..].iter().take_while(|r| CLOCK.to_realtime(r.mono_ns) <= upto).copied().collect();
            given += batch.len();
            batch.reverse();
            s.records(batch);
            s.advance();
        }
        s.records(recs[given..].iter().copied());
        s.finish()
    }

    #[test]
    fn the_stream_orders_and_classifies_as_the_whole_row_did() {
        let (frames, recs) = row(40);
        let (want, analysis) = whole_row(&frames, Some(&recs));
        assert!(analysis.stalls().count() >= 1, "the delayed ACK is a stall");
        for chunk in [1, 3, 7, 1000] {
            let out = streamed(&frames, &recs, chunk, 1_000_000);
            assert_eq!(out.events, want, "chunks of {chunk}");
            assert_eq!(out.analysis, analysis, "chunks of {chunk}");
            assert_eq!(out.counts.late, 0);
            assert_eq!((out.counts.frames, out.counts.tcp_packets), (frames.len() as u64, want.len() as u64 - 41));
            let k = out.kernel.unwrap();
            // 40 writes (round 5's second pass is the same write), one resend.
            assert_eq!((k.events, k.writes, k.resends, k.windows), (41, 40, 1, 0));
        }
        // The margin bounds what is held: chunks of one frame hold about a margin's worth (1 ms:
        // eight rounds of four events), not the row's 161 events.
        let out = streamed(&frames, &recs, 1, 1_000_000);
        assert!(out.counts.held_max <= 40, "held {}", out.counts.held_max);
    }

    #[test]
    fn a_packet_and_a_kernel_event_at_the_same_ns_keep_the_packet_first() {
        let (frames, recs) = row(2);
        let out = streamed(&frames, &recs, 2, 1_000_000);
        let n = out.events.len();
        let last = &out.events[n - 2..];
        assert_eq!(last[0].t, last[1].t);
        assert!(matches!(last[0].evidence, Evidence::Frame(_)) && matches!(last[1].evidence, Evidence::Kernel(_)));
    }

    #[test]
    fn without_kernel_records_packets_pass_in_capture_order() {
        let (frames, _) = row(3);
        // Two frames swapped in time: the whole-row path did not sort them; neither does this.
        let mut swapped = Frames::default();
        let all: Vec<_> = frames.iter().collect();
        for (i, f) in all.iter().enumerate() {
            let ts = if i == 3 { all[4].ts_ns + 1 } else { f.ts_ns };
            swapped.push(ts, f.orig_len, f.data);
        }
        let (want, analysis) = whole_row(&swapped, None);
        let mut s = RowStream::new(cfg(false, 1_000_000));
        for f in swapped.iter() {
            s.frame(f.ts_ns, f.orig_len, f.data);
            s.advance();
        }
        s.records([rec(5, Kind::Read { rcv_wnd: 1 })]);
        let out = s.finish();
        assert_eq!((out.events, out.analysis, out.kernel), (want, analysis, None));
        assert_eq!(out.counts.held_max, 0);
    }

    #[test]
    fn a_record_later_than_the_margin_is_classified_out_of_order_and_counted() {
        let (frames, recs) = row(10);
        // Every record held back to the end, with a 1 us margin: the writes arrive after the
        // packets they precede were classified.
        let out = streamed(&frames, &[], 1, 1_000);
        assert_eq!(out.counts.late, 0);
        let mut s = RowStream::new(cfg(true, 1_000));
        for f in frames.iter() {
            s.frame(f.ts_ns, f.orig_len, f.data);
            s.advance();
        }
        s.records(recs.iter().copied());
        s.advance();
        let out = s.finish();
        assert!(out.counts.late >= 10, "late {}", out.counts.late);
        // Nothing is lost: every event is classified, only not in order.
        let (want, _) = whole_row(&frames, Some(&recs));
        assert_eq!(out.events.len(), want.len());
        assert_eq!(out.kernel.map(|k| k.writes), Some(10));
    }

    #[test]
    fn a_sorted_queue_takes_a_late_element_in_place_after_its_equals() {
        let mut q = VecDeque::new();
        for x in [(1, 'a'), (3, 'b'), (5, 'c'), (3, 'd'), (0, 'e'), (5, 'f')] {
            insert_sorted(&mut q, x, |x| x.0);
        }
        let got: String = q.iter().map(|x| x.1).collect();
        assert_eq!(got, "eabdcf");
    }

    #[test]
    fn frames_of_other_connections_are_skipped_but_numbered() {
        let mut frames = Frames::default();
        let mut other = frame(true, 0, 0, 0x02, 0);
        other[36..38].copy_from_slice(&6000u16.to_be_bytes());
        frames.push(ORIGIN + 1, 54, &other);
        let f = frame(true, 0, 0, 0x02, 0);
        frames.push(ORIGIN + 2, 54, &f);
        frames.push(ORIGIN + 3, 54, &f[..20]);
        let mut s = RowStream::new(cfg(true, 0));
        for f in frames.iter() {
            s.frame(f.ts_ns, f.orig_len, f.data);
        }
        let out = s.finish();
        assert_eq!(out.counts.skipped, Skipped { not_tcp: 0, malformed: 1, other_port: 1 });
        assert_eq!(out.events[0].evidence, Evidence::Frame(12));
        assert_eq!((out.counts.frames, out.counts.tcp_packets), (3, 1));
    }
}
