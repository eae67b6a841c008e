//! Flows, stalls and their causes, wire cost (pure).
//!
//! The analyser consumes [`trace::Event`]s one at a time ([`FlowAnalyzer::push`]), so a capture,
//! a lab run and a model run are analysed by the same code, and memory does not grow with the
//! length of the trace beyond per-flow state (plus one record per stall found).
//!
//! A **stall** is a gap in a connection's data flow, in both directions at once, longer than
//! `Config::min_gap` plus the path's round-trip time, that ends with a data segment: somebody
//! had data to send and it did not move. `classify` names its cause from what the capture
//! shows around the gap: what the sender had unacknowledged when the gap began, which ACK came
//! during the gap and how late, and what was sent when the gap ended. The rules and their
//! sources (RFC sections, Linux functions) are in `classify.rs`.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
mod classify;
mod dir;
mod flow;
mod pacing;
pub mod session;
mod stats;
mod summary;
pub mod testing;
mod timers;
mod write_log;

pub use classify::confidence::{self, Band};
pub use dir::NagleOffShown;
pub use flow::{DirSummary, FlowAnalysis, FlowAnalyzer, Handshake, ShownOptions};
pub use session::{Finished, Session};
pub use stats::{DurationStats, WireCost};
pub use summary::{outside_notes, verdict, CauseCount, StallSummary, Window};
pub use timers::Timers;

use serde::{Deserialize, Serialize};
use trace::{Cause, Duration, Endpoint, Event, Evidence, Instant};

/// The stall margin: a gap longer than the path RTT by more than this is a stall (10 ms: far
/// above loopback and LAN scheduling noise, far below the 40 ms delayed-ACK timer). The one
/// default of explain's, lab's and watch's `--min-gap`, the model's slow samples and rows.
pub const DEFAULT_MIN_GAP: Duration = Duration::from_millis(10);

/// Analysis settings. Times are arguments; nothing here reads a clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// A gap shorter than this (plus the path RTT) is not a stall. Default [`DEFAULT_MIN_GAP`].
    pub min_gap: Duration,
    /// Timer constants (HZ-dependent tolerance) the rules match intervals against.
    pub timers: Timers,
}

impl Default for Config {
    fn default() -> Self {
        Config { min_gap: DEFAULT_MIN_GAP, timers: Timers::default() }
    }
}

/// One piece of evidence: a packet (or counter) and what it shows, with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceItem {
    /// When it happened (ns since the trace's origin).
    #[serde(rename = "t_ns")]
    pub t: Instant,
    /// Where it came from: a capture frame, a model step, a lab counter.
    pub source: Evidence,
    /// What it shows ("A data 12 B, unacknowledged", "B pure ACK, 40.1 ms after the data").
    pub what: String,
}

/// One stall record: a wait for bytes the writer had already handed to TCP (or, for
/// [`Cause::Application`], a gap where it had not), and why. The same record serves lab,
/// simulate and explain (JSON schema v2, docs/json-schema.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Time of the last data segment before the gap (ns since the trace's origin).
    #[serde(rename = "start_ns")]
    pub start: Instant,
    /// Length of the gap (ns).
    #[serde(rename = "length_ns")]
    pub length: Duration,
    /// The endpoint that waited for the bytes (the reader; for a connect stall, the opener).
    pub waited: Endpoint,
    /// The endpoint whose bytes (or SYN) were held: the one that sent the segment ending the gap.
    pub held: Endpoint,
    /// Payload bytes of the segment that ended the gap.
    pub bytes_held: u32,
    pub cause: Cause,
    /// 0..1: how sure the classification is, lowered where the evidence cannot show the cause.
    pub confidence: f64,
    /// The packets (or counters) that show it, in time order.
    pub evidence: Vec<EvidenceItem>,
    /// How late the peer's ACK was beyond the path's round trip, when an ACK released the data
    /// and the capture let it be measured (ns).
    #[serde(rename = "ack_delay_ns")]
    pub ack_delay: Option<Duration>,
    /// One sentence with the specifics (sizes, delays, and what the evidence could not show).
    pub detail: String,
    /// What the record proves (see [`RecordKind`]); only `stall` records are counted as stalls.
    #[serde(default)]
    pub kind: RecordKind,
    /// For an ambiguous record, the other causes the evidence explains as well as `cause`.
    #[serde(default)]
    pub alternatives: Vec<Cause>,
    /// The command that would settle an ambiguous record (kernel evidence or the lab).
    #[serde(default)]
    pub settle: Option<String>,
}

impl Stall {
    /// The evidence shows bytes waited: a stall, or a wait with no signature (not an ambiguous
    /// pause, not an application gap).
    pub fn shows_a_wait(&self) -> bool {
        matches!(self.kind, RecordKind::Stall | RecordKind::Wait)
    }
}

/// What a record proves, from its evidence (docs/explain.md, "What a record proves").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordKind {
    /// Bytes were waiting and the evidence carries the mechanism's signature (a resent range,
    /// a timer's own interval, a small segment held behind an unacknowledged small one, a
    /// window at its limit): a stall, counted in the headline.
    #[default]
    Stall,
    /// Bytes were waiting (the writer's write time, the peer visibly waiting, bytes
    /// unacknowledged past any timer) but no mechanism's signature shows: cause `unknown`,
    /// counted apart ("waits with no signature").
    Wait,
    /// The evidence fits several explanations equally (`alternatives`), among them some where
    /// nothing was held: not counted as a stall; `settle` names what would tell.
    Ambiguous,
    /// Nothing shows the bytes existed before they left: the writer had not written (think
    /// time, idle, its own clock). Cause `application`; not a stall.
    Gap,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Stall => "stall",
            RecordKind::Wait => "wait",
            RecordKind::Ambiguous => "ambiguous",
            RecordKind::Gap => "gap",
        }
    }
}

/// The analysis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub flows: Vec<FlowAnalysis>,
}

impl Analysis {
    /// All stall records of all flows (application gaps included), in time order within each
    /// flow.
    pub fn stalls(&self) -> impl Iterator<Item = &Stall> {
        self.flows.iter().flat_map(|f| f.stalls.iter())
    }
    /// Wire cost per side (A, B), summed over flows.
    pub fn wire_cost(&self) -> [WireCost; 2] {
        let mut out = [WireCost::default(); 2];
        for f in &self.flows {
            for (o, d) in out.iter_mut().zip(&f.dirs) {
                let w = d.wire;
                o.packets += w.packets;
                o.data_segments += w.data_segments;
                o.pure_acks += w.pure_acks;
                o.payload_bytes += w.payload_bytes;
                o.wire_bytes += w.wire_bytes;
            }
        }
        out
    }
}

/// Analyses a trace of ONE connection (what the lab and the model produce). Events other than
/// segments (writes, reads, timers) are accepted and ignored by the stall classifier.
pub fn analyze_events<I: IntoIterator<Item = Event>>(events: I, cfg: Config) -> Analysis {
    let mut fa = FlowAnalyzer::new(cfg);
    for e in events {
        fa.push(&e);
    }
    Analysis { flows: vec![fa.finish()] }
}

#[cfg(test)]
mod tests;
