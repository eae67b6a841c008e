//! `tcpstall replay --format json`: the exchange derived from a captured connection, the
//! capture's own stall records, and the run that reproduced it (docs/json-schema.md, "Replay").

use crate::Report;
use serde::Serialize;

/// The replay document. Times in ns; the run is the lab's (or the model's) report, same schema.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayDoc {
    pub tool: &'static str,
    pub version: &'static str,
    pub schema_version: u32,
    /// Always "replay".
    pub mode: &'static str,
    /// The capture file read.
    pub file: String,
    /// The connection replayed ("A <-> B").
    pub flow: String,
    /// How many times the derived exchange repeats in the capture.
    pub repetitions: u64,
    /// The derived exchange, in `--exchange`'s inline form.
    pub exchange: String,
    /// The capture's path round trip; null without a handshake or RTT sample.
    pub path_rtt_ns: Option<u64>,
    pub path_rtt_from_handshake: bool,
    /// What the capture shows: the flow's records that show a wait, counted by kind and cause.
    pub capture_stall_summary: analyze::StallSummary,
    /// The flow's records, all kinds (the stall records' schema).
    pub capture_stall_records: Vec<analyze::Stall>,
    /// Where `--emit` saved the exchange; null without it.
    pub saved: Option<String>,
    /// The run that reproduced it; null with `--no-run` or when interrupted.
    pub run: Option<Report>,
}
