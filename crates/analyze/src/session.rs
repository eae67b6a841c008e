//! Many flows at once: the driver between the capture decoder (`wire`) and one
//! [`FlowAnalyzer`] per flow.
//!
//! Memory follows the flows alive, not the flows in the file: the decoder's flow table ends a
//! flow (FIN both ways or RST plus a linger, an idle timeout, or a new connection on the same
//! pair; see [`wire::FlowLimits`] for the rules and their sources), the session then finishes
//! that flow's analyser, frees it, and hands the [`FlowAnalysis`] to the caller. What the
//! caller keeps of it (the stall records, a summary, nothing) is its choice.

use std::collections::HashMap;
use std::io::Read;

use crate::{Config, FlowAnalysis, FlowAnalyzer};
use wire::{Decoder, EndReason, FlowEnd, FlowEvent, FlowFilter, FlowId, FlowKey, WireError};

/// Stands for the key of a flow whose addresses the caller could not give (never with the
/// decoder: a flow's key is known on its first event).
const UNKNOWN: FlowKey = FlowKey {
    a: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0)),
    b: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0)),
    interface: 0,
};

/// What a flow's addresses say about the capture point: both endpoints on loopback addresses
/// (127.0.0.0/8, ::1) or on one address is one host (`Some(true)`); two different addresses
/// are two hosts, or two namespaces of one, as far as the packets' timing goes (`Some(false)`).
/// The unknown key says nothing.
pub fn same_host_by_address(key: &FlowKey) -> Option<bool> {
    if *key == UNKNOWN {
        return None;
    }
    let (a, b) = (key.a.ip(), key.b.ip());
    Some(a == b || (a.is_loopback() && b.is_loopback()))
}

/// Where a flow was captured, from what the file says: on a loopback interface (see
/// [`wire::FlowEvent::loopback`]) both endpoints are on the capturing host (`Some(true)`),
/// whatever their addresses (a host talking to one of its own non-loopback addresses goes
/// through `lo` on Linux); otherwise the addresses decide ([`same_host_by_address`]).
pub fn same_host(key: &FlowKey, loopback_interface: bool) -> Option<bool> {
    if loopback_interface {
        return Some(true);
    }
    same_host_by_address(key)
}

/// One flow's finished analysis.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub id: FlowId,
    pub key: FlowKey,
    /// Why the flow ended before the capture did (None: still alive at the end of input).
    pub end: Option<EndReason>,
    pub analysis: FlowAnalysis,
}

/// The analysers of the flows alive.
#[derive(Debug)]
pub struct Session {
    cfg: Config,
    /// By flow id (ids are dense counters): 8 bytes per flow ever seen, the analyser (1.6 KB
    /// and its queues) only while the flow is alive, with the count of its stall records
    /// already handed out by [`Session::take_new_stalls`].
    slots: Vec<Option<Box<(FlowKey, FlowAnalyzer, usize)>>>,
    live: usize,
}

impl Session {
    pub fn new(cfg: Config) -> Self {
        Session { cfg, slots: Vec::new(), live: 0 }
    }

    /// Feeds one event to its flow's analyser (created on the flow's first event, with the
    /// flow's addresses from `key`: `|| dec.flows().key(fe.flow)` right after the event).
    pub fn push(&mut self, fe: &FlowEvent, key: impl FnOnce() -> Option<FlowKey>) {
        let cfg = self.cfg;
        let i = fe.flow.0 as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        let live = &mut self.live;
        let e = self.slots[i].get_or_insert_with(|| {
            *live += 1;
            let key = key().unwrap_or(UNKNOWN);
            let mut fa = FlowAnalyzer::new(cfg);
            fa.set_same_host(same_host(&key, fe.loopback));
            Box::new((key, fa, 0))
        });
        e.1.push(&fe.event);
    }

    /// Finishes and frees a flow the decoder ended. None when it had no event here.
    pub fn end(&mut self, end: &FlowEnd) -> Option<Finished> {
        let (key, fa, _) = *self.slots.get_mut(end.flow.0 as usize)?.take()?;
        self.live -= 1;
        let mut analysis = fa.finish();
        if end.reason == EndReason::Idle {
            analysis.notes.push(
                "no packet for the flow table's idle timeout: the flow ends here, later packets on these ports are a new flow"
                    .into(),
            );
        }
        Some(Finished { id: end.flow, key, end: Some(end.reason), analysis })
    }

    /// Stall records of flow `id` classified since the last call (a live watcher's output):
    /// appended to `out` with the flow's key. Records classified only when the flow ends come
    /// with [`Session::end`] (all of them; skip the first ones already taken).
    pub fn take_new_stalls(&mut self, id: FlowId, out: &mut Vec<(FlowKey, crate::Stall)>) {
        if let Some(Some(e)) = self.slots.get_mut(id.0 as usize) {
            let (key, fa, taken) = &mut **e;
            let all = fa.stalls_so_far();
            out.extend(all[*taken..].iter().map(|s| (*key, s.clone())));
            *taken = all.len();
        }
    }

    /// Settles every live flow's pending gap at `now` (see [`FlowAnalyzer::settle`]) and hands
    /// out the stall records that classified, as [`Session::take_new_stalls`] does.
    pub fn settle_all(&mut self, now: trace::Instant, out: &mut Vec<(FlowKey, crate::Stall)>) {
        for e in self.slots.iter_mut().flatten() {
            let (key, fa, taken) = &mut **e;
            fa.settle(now);
            let all = fa.stalls_so_far();
            out.extend(all[*taken..].iter().map(|s| (*key, s.clone())));
            *taken = all.len();
        }
    }

    /// Stall records of flow `id` already handed out by [`Session::take_new_stalls`].
    pub fn taken(&self, id: FlowId) -> usize {
        self.slots.get(id.0 as usize).and_then(|s| s.as_ref()).map_or(0, |e| e.2)
    }

    /// Flows alive (analysers held).
    pub fn live(&self) -> usize {
        self.live
    }

    /// Finishes every flow still alive, in first-seen order.
    pub fn finish_all(self) -> Vec<Finished> {
        self.slots
            .into_iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let (key, fa, _) = *b?;
                Some(Finished { id: FlowId(i as u32), key, end: None, analysis: fa.finish() })
            })
            .collect()
    }
}

/// Reads `dec` to the end: every event goes to `each` (a plot collector, say) and to its flow's
/// analyser; every flow, once ended, goes to `done` (ended flows as they end, then the flows
/// alive at the end of input in first-seen order). On a damaged file the flows seen so far are
/// still all finished and handed over before the error is returned.
pub fn run<R: std::io::Read + Send>(
    dec: &mut Decoder<R>,
    cfg: Config,
    each: impl FnMut(&FlowEvent),
    mut done: impl FnMut(Finished),
) -> Result<(), WireError> {
    run_with_decoder(dec, cfg, each, |_, f| done(f))
}

/// What the decoder knew of the file when a flow finished, handed to `done` with the flow:
/// whether TCP came from several capture interfaces so far, the container format, the name of
/// the flow's interface (pcapng `if_name`), and the processes its packet comments named.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowContext {
    pub several_interfaces: bool,
    pub format: wire::Format,
    pub interface_name: Option<String>,
    pub processes: Option<wire::comment::FlowProcesses>,
}

impl FlowContext {
    /// The decoder's knowledge now, for flow `id` captured on `interface`.
    pub fn of<R: Read>(dec: &Decoder<R>, id: FlowId, interface: u32) -> FlowContext {
        FlowContext {
            several_interfaces: dec.several_interfaces(),
            format: dec.format(),
            interface_name: dec.interface_name(interface).map(str::to_string),
            processes: dec.processes(id).cloned(),
        }
    }
}

/// What the decoding thread hands the analysing one at once, in file order: packets, and the
/// names of capture interfaces (pcapng `if_name`), each before its first packet.
struct Batch {
    packets: Vec<wire::DecodedPacket>,
    /// (index in `packets` of the first packet after it, interface, name).
    names: Vec<(usize, u32, Option<String>)>,
}

impl Batch {
    fn with_capacity(n: usize) -> Batch {
        Batch { packets: Vec::with_capacity(n), names: Vec::new() }
    }
}

/// Packets sent at once: large enough that the two threads meet rarely (one hand-over, and at
/// most one wake-up, per 4,096 packets), small enough to stay in the cache (about 800 KB).
const BATCH: usize = 4096;
/// Batches in flight between the threads: memory stays bounded however far decoding runs ahead.
const IN_FLIGHT: usize = 4;

/// [`run`], with what the decoder knew when each flow finished handed to `done` too (its
/// interfaces' names, whether it has several: see [`FlowContext`]).
///
/// The decoder's two halves run on two threads: reading and decoding frames
/// ([`wire::FrameHalf`]) on a thread of its own, the flow table ([`wire::FlowHalf`]) and the
/// analysis on the caller's; on a capture of small packets the two take about as long, and they
/// overlap. Packets cross in batches of 4,096, in file order, so the results are those of one
/// thread doing both. `each` and `done` run on the caller's thread.
pub fn run_with_decoder<R: std::io::Read + Send>(
    dec: &mut Decoder<R>,
    cfg: Config,
    mut each: impl FnMut(&FlowEvent),
    mut done: impl FnMut(&FlowContext, Finished),
) -> Result<(), WireError> {
    let mut s = Session::new(cfg);
    let format = dec.format();
    let res = std::thread::scope(|scope| {
        let (frames, flows) = dec.halves();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(IN_FLIGHT);
        let (free_tx, free_rx) = std::sync::mpsc::channel::<Batch>();
        let decoder = std::thread::Builder::new()
            .name("decode".into())
            .spawn_scoped(scope, move || decode_batches(frames, &tx, &free_rx));
        let decoder = match decoder {
            Ok(h) => h,
            // No thread to be had: decode here, then analyse (the same results, one core).
            Err(_) => return None,
        };
        let mut names: Vec<Option<String>> = Vec::new();
        let mut ended = |flows: &mut wire::FlowHalf, s: &mut Session, names: &[Option<String>]| {
            while let Some(end) = flows.pop_ended() {
                if let Some(f) = s.end(&end) {
                    let ctx = FlowContext {
                        several_interfaces: flows.several_interfaces(),
                        format,
                        interface_name: names.get(end.key.interface as usize).cloned().flatten(),
                        processes: flows.processes(end.flow).cloned(),
                    };
                    done(&ctx, f);
                }
            }
        };
        for mut batch in rx {
            // Read in place, then cleared: a packet is not moved out of the batch.
            let mut names_at = batch.names.drain(..).peekable();
            for (at, p) in batch.packets.iter().enumerate() {
                while let Some((_, id, name)) = names_at.next_if(|n| n.0 <= at) {
                    let i = id as usize;
                    if i >= names.len() {
                        names.resize(i + 1, None);
                    }
                    names[i] = name;
                }
                if let Some(fe) = flows.record(p) {
                    // Flows the packet ended are finished before its event, as
                    // `Decoder::next_event` and `Decoder::pop_ended` order them.
                    ended(flows, &mut s, &names);
                    each(&fe);
                    s.push(&fe, || flows.flows().key(fe.flow));
                }
            }
            drop(names_at);
            batch.packets.clear();
            // The decoder may have ended (an error): a batch nobody takes back is dropped.
            let _ = free_tx.send(batch);
        }
        let res = decoder.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // As `Decoder::next_event`: the end of input (not an error) ends a flow closing.
        if res.is_ok() {
            flows.end_of_input();
        }
        ended(flows, &mut s, &names);
        Some(res)
    });
    let res = match res {
        Some(r) => r,
        None => return run_on_one_thread(dec, s, each, done),
    };
    for f in s.finish_all() {
        let ctx = FlowContext::of(dec, f.id, f.key.interface);
        done(&ctx, f);
    }
    res
}

/// The decoding thread of [`run_with_decoder`]: every packet of `frames`, each interface's
/// name before its first packet (of each pcapng section), sent in batches. Stops early when
/// the receiver is gone.
fn decode_batches<R: std::io::Read>(
    frames: &mut wire::FrameHalf<R>,
    tx: &std::sync::mpsc::SyncSender<Batch>,
    free: &std::sync::mpsc::Receiver<Batch>,
) -> Result<(), WireError> {
    let mut named: Vec<bool> = Vec::new();
    let mut section = frames.sections();
    let mut batch = Batch::with_capacity(BATCH);
    let res = loop {
        match frames.next_packet_into(&mut batch.packets) {
            Ok(true) => {
                let p = batch.packets.last().expect("a packet was pushed");
                // A new pcapng section describes its interfaces anew: their names are sent again.
                if frames.sections() != section {
                    section = frames.sections();
                    named.clear();
                }
                let i = p.interface as usize;
                if i >= named.len() {
                    named.resize(i + 1, false);
                }
                if !named[i] {
                    named[i] = true;
                    let name = frames.interface_name(p.interface).map(str::to_string);
                    batch.names.push((batch.packets.len() - 1, p.interface, name));
                }
                if batch.packets.len() >= BATCH {
                    let next = free.try_recv().unwrap_or_else(|_| Batch::with_capacity(BATCH));
                    if tx.send(std::mem::replace(&mut batch, next)).is_err() {
                        return Ok(());
                    }
                }
            }
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let _ = tx.send(batch);
    res
}

/// [`run_with_decoder`] without a second thread (when none can be started).
fn run_on_one_thread<R: std::io::Read>(
    dec: &mut Decoder<R>,
    mut s: Session,
    mut each: impl FnMut(&FlowEvent),
    mut done: impl FnMut(&FlowContext, Finished),
) -> Result<(), WireError> {
    let mut ended = |dec: &mut Decoder<R>, s: &mut Session| {
        while let Some(end) = dec.pop_ended() {
            if let Some(f) = s.end(&end) {
                done(&FlowContext::of(dec, end.flow, end.key.interface), f);
            }
        }
    };
    let res = loop {
        match dec.next_event() {
            Ok(Some(fe)) => {
                ended(dec, &mut s);
                each(&fe);
                s.push(&fe, || dec.flows().key(fe.flow));
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    ended(dec, &mut s);
    for f in s.finish_all() {
        done(&FlowContext::of(dec, f.id, f.key.interface), f);
    }
    res
}

/// The flow of a capture whose records show the most waiting (see [`busiest_flow`]): what
/// `tcpstall replay` and `tcpstall advise CAPTURE` derive an exchange from, and show beside it.
#[derive(Debug, Clone)]
pub struct CapturedFlow {
    /// The flow ("A <-> B").
    pub key: String,
    pub analysis: FlowAnalysis,
    /// The flow's packets as captured.
    pub events: Vec<trace::Event>,
}

impl CapturedFlow {
    /// When someone waited for TCP (start, end; ns): the spans of its records that show a wait.
    pub fn tcp_waits(&self) -> Vec<(u64, u64)> {
        let waits = self.analysis.stalls.iter().filter(|s| s.shows_a_wait());
        waits.map(|s| (s.start.0, s.start.0 + s.length.0)).collect()
    }

    /// What each endpoint's packets showed of its options (index 0 = A), in words: Nagle off
    /// (the segments that showed it), held coalescing (the record of the probe timer's release).
    pub fn shown_evidence(&self) -> [(Option<String>, Option<String>); 2] {
        let first = self.analysis.first;
        self.analysis.shown.clone().map(|s| {
            let held = s.held_coalescing.map(|st| {
                format!(
                    "{} bytes held {:.0} ms from {:.3} s until the probe timer sent them with nothing in flight",
                    st.bytes_held,
                    st.length.0 as f64 / 1e6,
                    st.start.since(first).0 as f64 / 1e9
                )
            });
            (s.nagle_off.map(|n| n.describe(first)), held)
        })
    }

    /// The path RTT (ns), and whether it came from the handshake.
    pub fn rtt(&self) -> Option<(u64, bool)> {
        self.analysis.path_rtt.map(|d| (d.0, self.analysis.path_rtt_from_handshake))
    }
}

/// A capture with no flow to pick.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The capture does not decode (the decoder's message follows).
    #[error("{file}")]
    Read {
        file: String,
        #[source]
        source: WireError,
    },
    #[error("{0}: no TCP flow (check --flow/--port)")]
    NoFlow(String),
}

/// The flow of `input` (named `file` in messages) whose records show the most waiting (the
/// first seen among equals), analysed as explain does. Memory follows the flows alive plus the
/// best so far: a flow's packets are dropped when it ends behind the best.
pub fn busiest_flow(input: impl Read, filter: FlowFilter, file: &str) -> Result<CapturedFlow, CaptureError> {
    let read = |source| CaptureError::Read { file: file.to_string(), source };
    let mut dec = Decoder::new(input, filter).map_err(read)?;
    let mut session = Session::new(Config::default());
    let mut live: HashMap<FlowId, Vec<trace::Event>> = HashMap::new();
    let mut best: Option<(u64, Finished, Vec<trace::Event>)> = None;
    let mut keep = |f: Finished, live: &mut HashMap<FlowId, Vec<trace::Event>>| {
        let events = live.remove(&f.id).unwrap_or_default();
        let waited: u64 = f.analysis.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| s.length.0).sum();
        if best.as_ref().is_none_or(|(w, b, _)| waited > *w || (waited == *w && f.id < b.id)) {
            best = Some((waited, f, events));
        }
    };
    while let Some(fe) = dec.next_event().map_err(read)? {
        while let Some(end) = dec.pop_ended() {
            if let Some(f) = session.end(&end) {
                keep(f, &mut live);
            }
        }
        session.push(&fe, || dec.flows().key(fe.flow));
        live.entry(fe.flow).or_default().push(fe.event);
    }
    while let Some(end) = dec.pop_ended() {
        if let Some(f) = session.end(&end) {
            keep(f, &mut live);
        }
    }
    for f in session.finish_all() {
        keep(f, &mut live);
    }
    let (_, f, events) = best.ok_or_else(|| CaptureError::NoFlow(file.to_string()))?;
    Ok(CapturedFlow { key: f.key.to_string(), analysis: f.analysis, events })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::synth::{pkt, Pkt};

    /// Client port `port`: a connection of `rounds` request/response exchanges from `t0` (us),
    /// closed with FIN both ways.
    fn connection(port: u16, t0: u64, rounds: u32) -> Vec<Pkt> {
        let at = |p: Pkt| Pkt { port, ..p };
        let (mut c, mut s) = (1000u32, 9000u32);
        let mut v = vec![at(pkt(t0, true, c, 0, "S", 0)), at(pkt(t0 + 100, false, s, c + 1, "SA", 0))];
        c += 1;
        s += 1;
        v.push(at(pkt(t0 + 200, true, c, s, "A", 0)));
        let mut t = t0 + 1000;
        for r in 0..rounds {
            v.push(at(pkt(t, true, c, s, "PA", 100)));
            c += 100;
            // Every 50th reply waits 40 ms: stalls to find on both paths.
            let wait = if r % 50 == 49 { 40_000 } else { 100 };
            v.push(at(pkt(t + wait, false, s, c, "PA", 200)));
            s += 200;
            v.push(at(pkt(t + wait + 100, true, c, s, "A", 0)));
            t += wait + 1000;
        }
        v.push(at(pkt(t, true, c, s, "FA", 0)));
        v.push(at(pkt(t + 100, false, s, c + 1, "FA", 0)));
        v.push(at(pkt(t + 200, true, c + 1, s + 1, "A", 0)));
        v
    }

    /// The two-thread run and the one-thread run give the same events, the same flows in the
    /// same order and the same context for each: flows that end mid-file (closed, then their
    /// linger over), flows alive at the end, and more events than one batch.
    #[test]
    fn two_threads_give_what_one_thread_gives() {
        let mut pkts = Vec::new();
        for (i, port) in [5001u16, 5002, 5003, 5004].into_iter().enumerate() {
            // 5001 and 5002 close early and their linger ends while 5003 and 5004 run.
            let rounds = if i < 2 { 700 } else { 3000 };
            pkts.extend(connection(port, i as u64 * 10_000_000, rounds));
        }
        pkts.sort_by_key(|p| p.t_us);
        let file = wire::synth::pcap(&pkts).unwrap();
        assert!(pkts.len() > 2 * BATCH);
        let go = |threads: bool| go_on(&file, threads).map(|(r, e, d)| (r.unwrap(), e, d)).unwrap();
        let (one, two) = (go(false), go(true));
        assert_eq!(one.1.len(), pkts.len());
        assert_eq!(one.2.len(), 4);
        assert!(one.2.iter().filter(|(_, f)| f.end.is_some()).count() >= 2, "flows ended mid-file");
        assert!(one.2.iter().any(|(_, f)| !f.analysis.stalls.is_empty()));
        assert_eq!(one, two);
        // A file cut inside a record: the same error, events and flows on both paths (the end
        // of input, which ends a closing flow, is not an error's).
        let cut = &file[..file.len() - 30];
        let (one, two) = (go_on(cut, false).unwrap(), go_on(cut, true).unwrap());
        assert!(one.0.is_err() && one.1.len() > 2 * BATCH && one.2.len() == 4, "{:?}", one.0);
        assert_eq!(one.0.as_ref().err().map(ToString::to_string), two.0.as_ref().err().map(ToString::to_string));
        assert_eq!((one.1, one.2), (two.1, two.2));
    }

    /// Two pcapng sections (two files concatenated, as `cat` makes them), each naming its
    /// interface 0 anew: the two paths give the same contexts, and a flow of the second section
    /// its section's name. (A flow of the first section whose end is only noticed in the
    /// second, as here, takes the second's name on both paths: the context is taken when the
    /// flow ends, not when it began. Known, kept as it was.)
    #[test]
    fn a_new_pcapng_section_names_its_interfaces_anew_on_two_threads() {
        let frames = |port: u16, t0: u64, rounds: u32| -> Vec<(u64, Vec<u8>)> {
            connection(port, t0, rounds).iter().map(|p| (p.t_us, p.frame().unwrap())).collect()
        };
        let mut file = wire::synth::pcapng("eth0", 1, &frames(5001, 0, 300)).unwrap();
        // The second section starts after the first flow's linger is over.
        file.extend(wire::synth::pcapng("wlan0", 1, &frames(5002, 600_000_000, 300)).unwrap());
        let (one, two) = (go_on(&file, false).unwrap(), go_on(&file, true).unwrap());
        assert!(one.0.is_ok(), "{:?}", one.0);
        let names: Vec<_> = one.2.iter().map(|(c, f)| (f.key.a.port(), c.interface_name.clone())).collect();
        assert_eq!(names.len(), 2);
        assert_eq!(names[1], (5002, Some("wlan0".to_string())));
        assert_eq!((one.1, one.2), (two.1, two.2));
    }

    type Run = (Result<(), WireError>, Vec<FlowEvent>, Vec<(FlowContext, Finished)>);

    /// The events and finished flows of `file`, on two threads or one.
    fn go_on(file: &[u8], threads: bool) -> Option<Run> {
        let mut dec = Decoder::new(file, wire::FlowFilter::default()).ok()?;
        let (mut events, mut done) = (Vec::new(), Vec::new());
        let each = |fe: &FlowEvent| events.push(fe.clone());
        let end = |ctx: &FlowContext, f: Finished| done.push((ctx.clone(), f));
        let r = if threads {
            run_with_decoder(&mut dec, Config::default(), each, end)
        } else {
            run_on_one_thread(&mut dec, Session::new(Config::default()), each, end)
        };
        Some((r, events, done))
    }
}
