//! Flows, stalls and their causes, wire cost (pure).
//!
//! The analyser consumes [`trace::Event`]s one at a time ([`FlowAnalyzer::push`]), so a capture,
//! a lab run and a model run are analysed by the same code, and memory does not grow with the
//! length of the trace beyond per-flow state (plus one record per stall found).
//!
//! A **stall** is a gap in a connection's data flow, in both directions at once, longer than
//! `Config::min_gap` plus the path's round-trip time, that ends with a data segment: somebody
//! had data to send and it did not move. [`classify`] names its cause from what the capture
//! shows around the gap: what the sender had unacknowledged when the gap began, which ACK came
//! during the gap and how late, and what was sent when the gap ended. The rules and their
//! sources (RFC sections, Linux functions) are in `classify.rs`.

mod classify;
mod flow;
pub mod plot;
pub mod session;
mod stats;

pub use flow::{DirSummary, FlowAnalysis, FlowAnalyzer, Handshake};
pub use session::{Finished, Session};
pub use stats::{DurationStats, WireCost};

use serde::Serialize;
use trace::{Cause, Duration, Endpoint, Event, Evidence, Instant};

/// Analysis settings. Times are arguments; nothing here reads a clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// A gap shorter than this (plus the path RTT) is not a stall. Default 10 ms: far above
    /// loopback and LAN scheduling noise, far below the 40 ms delayed-ACK timer.
    pub min_gap: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { min_gap: Duration::from_millis(10) }
    }
}

/// One stall: a gap in the data flow and why it happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stall {
    /// Time of the last data segment before the gap.
    pub start: Instant,
    /// Length of the gap.
    pub length: Duration,
    /// The endpoint whose data was held (the one that sent the segment ending the gap).
    pub held: Endpoint,
    pub cause: Cause,
    /// 0..1: how sure the classification is, lowered where the capture point hides the truth.
    pub confidence: f64,
    /// The packets that show it: data before the gap, the unacknowledged segment, the ACK that
    /// came during the gap, the segment that ended it.
    pub evidence: Vec<Evidence>,
    /// How late the peer's ACK was, beyond the path's round trip, if an ACK released the data.
    pub ack_delay: Option<Duration>,
    /// Payload bytes of the segment that ended the gap.
    pub released_bytes: u32,
    /// One sentence with the specifics (sizes, delays, what could not be seen).
    pub detail: String,
}

/// The analysis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub flows: Vec<FlowAnalysis>,
}

impl Analysis {
    /// All stalls of all flows, in time order within each flow.
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
