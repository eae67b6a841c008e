//! The JSON contract of `tcpstall explain` (schema v2, docs/json-schema.md): typed, like the
//! lab/simulate report, so every field is documented and checked by a test.

use analyze::{DirSummary, FlowAnalysis, Stall, StallSummary};
use serde::Serialize;
use trace::CapturePoint;

/// One connection of a capture.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainFlow<'a> {
    /// 1-based, in the order flows were first seen.
    pub flow: usize,
    /// Endpoint A (the SYN sender, or the first sender seen without a handshake).
    pub a: String,
    pub b: String,
    /// pcapng interface index (0 for pcap): each interface is its own capture point.
    pub interface: u32,
    pub label: String,
    /// First and last packet (ns since the capture's first packet).
    pub first_ns: u64,
    pub last_ns: u64,
    pub capture_point: CapturePoint,
    pub capture_note: &'a str,
    pub path_rtt_ns: Option<u64>,
    pub path_rtt_from_handshake: bool,
    pub directions: Directions<'a>,
    pub notes: &'a [String],
    /// Stall records by cause (application gaps counted apart).
    pub stall_summary: StallSummary,
    pub stalls: &'a [Stall],
}

/// Per-direction summaries: A's sends and B's sends.
#[derive(Debug, Clone, Serialize)]
pub struct Directions<'a> {
    pub a_to_b: &'a DirSummary,
    pub b_to_a: &'a DirSummary,
}

impl<'a> ExplainFlow<'a> {
    pub fn new(flow: usize, a: String, b: String, interface: u32, label: String, fa: &'a FlowAnalysis) -> Self {
        ExplainFlow {
            flow,
            a,
            b,
            interface,
            label,
            first_ns: fa.first.0,
            last_ns: fa.last.0,
            capture_point: fa.capture_point,
            capture_note: &fa.capture_note,
            path_rtt_ns: fa.path_rtt.map(|d| d.0),
            path_rtt_from_handshake: fa.path_rtt_from_handshake,
            directions: Directions { a_to_b: &fa.dirs[0], b_to_a: &fa.dirs[1] },
            notes: &fa.notes,
            stall_summary: StallSummary::of(&fa.stalls),
            stalls: &fa.stalls,
        }
    }
}

/// Where a damaged capture stopped being readable.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainError {
    /// Byte offset in the file.
    pub offset_bytes: u64,
    pub message: String,
}

/// The document's head; `flows` follows it, streamed one [`ExplainFlow`] at a time so a capture
/// with many flows is never held as one value tree. `decode` is the decoder's counts
/// (`wire::DecodeStats`; this crate does not depend on the decoder).
#[derive(Debug, Clone, Serialize)]
pub struct ExplainHead<'a, D: Serialize> {
    pub tool: &'static str,
    pub version: &'static str,
    pub schema_version: u32,
    /// Always "explain".
    pub mode: &'static str,
    pub file: String,
    pub decode: &'a D,
    /// Where a damaged file stopped; null when the whole file was read.
    pub error: Option<ExplainError>,
}
