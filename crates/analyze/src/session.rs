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
pub fn run<R: std::io::Read>(
    dec: &mut Decoder<R>,
    cfg: Config,
    each: impl FnMut(&FlowEvent),
    mut done: impl FnMut(Finished),
) -> Result<(), WireError> {
    run_with_decoder(dec, cfg, each, |_, f| done(f))
}

/// [`run`], with the decoder handed to `done` too: what it knows of the file so far (its
/// interfaces' names, whether it has several) labels the flow that just finished.
pub fn run_with_decoder<R: std::io::Read>(
    dec: &mut Decoder<R>,
    cfg: Config,
    mut each: impl FnMut(&FlowEvent),
    mut done: impl FnMut(&Decoder<R>, Finished),
) -> Result<(), WireError> {
    let mut s = Session::new(cfg);
    let res = loop {
        match dec.next_event() {
            Ok(Some(fe)) => {
                while let Some(end) = dec.pop_ended() {
                    if let Some(f) = s.end(&end) {
                        done(dec, f);
                    }
                }
                each(&fe);
                s.push(&fe, || dec.flows().key(fe.flow));
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    while let Some(end) = dec.pop_ended() {
        if let Some(f) = s.end(&end) {
            done(dec, f);
        }
    }
    for f in s.finish_all() {
        done(dec, f);
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
