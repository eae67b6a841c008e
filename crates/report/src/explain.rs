//! The output of `tcpstall explain`: its JSON contract (schema v2, docs/json-schema.md), typed
//! like the lab/simulate report so every field is documented and checked by a test, and its
//! text. Both are written one flow at a time: a capture with many flows is never held as one
//! value tree (the caller keeps each flow's rendering, see [`write_json`]).

use std::cell::RefCell;
use std::io::Write;

use analyze::{DirSummary, FlowAnalysis, RecordKind, Stall, StallSummary};
use serde::Serialize;
use trace::{CapturePoint, Duration, Endpoint, Evidence, Instant};

use crate::owner::{FlowOwners, Owner};

mod stream;
pub use stream::{on_interface, ExplainFlows, ExplainPackets, Interfaces, StreamError};

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
    /// The processes of A and B, when the capture's packet comments name them (ptcpdump's);
    /// absent otherwise.
    #[serde(skip_serializing_if = "FlowOwners::is_empty")]
    pub owners: FlowOwners,
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
    /// The handshake's SYN was captured (A sent it); else A is the first sender seen. Text only.
    #[serde(skip)]
    pub syn_seen: bool,
    /// The text lists ambiguous pauses and application gaps too (`--app-gaps`). Text only.
    #[serde(skip)]
    pub app_gaps: bool,
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
            owners: FlowOwners::default(),
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
            syn_seen: fa.handshake.syn.is_some(),
            app_gaps: false,
        }
    }

    /// The stall records the text lists: stalls and waits, and with `app_gaps` every record.
    fn shown(&self) -> impl Iterator<Item = &'a Stall> + '_ {
        self.stalls.iter().filter(|st| self.app_gaps || matches!(st.kind, RecordKind::Stall | RecordKind::Wait))
    }

    /// The flow's head: label, times, RTT, notes and the per-direction table.
    fn text_head(&self, s: &mut String) {
        let who = if self.syn_seen { "sent the SYN" } else { "seen first: handshake not captured" };
        s.push_str(&format!("\nflow {}: {} (A = {}, {who})\n", self.flow, self.label, self.a));
        if !self.owners.is_empty() {
            let long = |o: &Option<Owner>| o.as_ref().map_or("-".to_string(), Owner::long);
            s.push_str(&format!(
                "  processes (the capture's packet comments): A {}; B {}\n",
                long(&self.owners.a),
                long(&self.owners.b)
            ));
        }
        s.push_str(&format!(
            "  {} .. {} s, path RTT {}, capture point: {}\n",
            Instant(self.first_ns),
            Instant(self.last_ns),
            dur(self.path_rtt_ns),
            self.capture_note
        ));
        for n in self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s.push_str(&format!(
            "  {:<7} {:>7} {:>6} {:>6} {:>9} {:>9} {:>4} {:>4} {:>5}\n",
            "dir", "packets", "data", "p-ack", "payload", "wire B", "retx", "ooo", "mss"
        ));
        s.push_str(&dir_line("A->B", self.directions.a_to_b));
        s.push_str(&dir_line("B->A", self.directions.b_to_a));
    }

    /// One listed record: its row and the line that explains it.
    fn text_record(j: usize, st: &Stall, s: &mut String) {
        let held = st.held.letter();
        let cause = match st.kind {
            RecordKind::Ambiguous => format!("{}?", st.cause.as_str()),
            _ => st.cause.as_str().to_string(),
        };
        s.push_str(&format!(
            "  {:>4} {:>10} {:>10} {:>4}  {:<22} {:>4.2}  {}\n",
            j + 1,
            st.start.to_string(),
            st.length.to_string(),
            held,
            cause,
            st.confidence,
            frames(&st.evidence)
        ));
        match st.kind {
            RecordKind::Ambiguous => {
                let alts: Vec<&str> = st.alternatives.iter().map(|c| c.as_str()).collect();
                let or =
                    if alts.is_empty() { String::new() } else { format!(" ({} or {})", st.cause, alts.join(" or ")) };
                s.push_str(&format!("       ambiguous{or}: {}\n", st.detail));
                if let Some(how) = &st.settle {
                    s.push_str(&format!("       to settle it: {how}\n"));
                }
            }
            _ => s.push_str(&format!("       {}: {}\n", st.cause.explain(), st.detail)),
        }
    }
}

/// One flow's text block (it starts with a blank line).
impl crate::Export for ExplainFlow<'_> {
    const COMMAND: &'static str = "explain";

    fn table(&self) -> String {
        let mut s = String::new();
        self.text_head(&mut s);
        // Stalls (and waits with no signature) first; ambiguous pauses and application gaps
        // are not stalls: counted apart, listed only with --app-gaps.
        let sum = &self.stall_summary;
        let hidden = sum.ambiguous_count + sum.application_gap_count;
        let hint = if hidden > 0 && !self.app_gaps { " (--app-gaps lists those)" } else { "" };
        s.push_str(&format!("  {}{hint}\n", sum.headline()));
        if self.shown().next().is_none() {
            return s;
        }
        s.push_str(&format!(
            "  {:>4} {:>10} {:>10} {:>4}  {:<22} {:>4}  evidence (frames)\n",
            "#", "start s", "length", "held", "cause", "conf"
        ));
        for (j, st) in self.shown().enumerate() {
            Self::text_record(j, st, &mut s);
        }
        s
    }

    /// One row per record shown (stalls and waits; every kind with `--app-gaps`), without the
    /// header ([`ExplainFlow::CSV_HEADER`]): a capture's flows stream one after another.
    fn csv(&self) -> Option<String> {
        use crate::cells::csv_field as q;
        let mut s = String::new();
        for st in self.shown() {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{:.2},{},{}\n",
                self.flow,
                q(&self.a),
                q(&self.b),
                Self::kind(st),
                st.cause.as_str(),
                st.start.0,
                st.length.0,
                q(self.side(st.waited)),
                q(self.side(st.held)),
                st.bytes_held,
                st.confidence,
                q(&frames(&st.evidence)),
                q(&st.detail),
            ));
        }
        Some(s)
    }

    /// The same rows as a Markdown table's body (header: [`ExplainFlow::MARKDOWN_HEADER`]).
    fn markdown(&self) -> Option<String> {
        let cell = crate::cells::md_cell;
        let mut s = String::new();
        for st in self.shown() {
            s.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.1} | {} | {} | {:.2} | {} |\n",
                self.flow,
                Self::kind(st),
                st.cause.as_str(),
                st.start.0 as f64 / 1e9,
                st.length.0 as f64 / 1e6,
                cell(self.side(st.held)),
                st.bytes_held,
                st.confidence,
                cell(&st.detail),
            ));
        }
        Some(s)
    }
}

impl ExplainFlow<'_> {
    /// `explain --format csv`'s header: written once, before the flows' rows.
    pub const CSV_HEADER: &'static str =
        "flow,a,b,kind,cause,start_ns,length_ns,waited,held,bytes_held,confidence,evidence,detail\n";
    /// `explain --format markdown`'s header: written once, before the flows' rows.
    pub const MARKDOWN_HEADER: &'static str =
        "| flow | kind | cause | start s | length ms | held | bytes | conf | detail |\n\
                                               |---:|---|---|---:|---:|---|---:|---:|---|\n";

    fn side(&self, e: Endpoint) -> &str {
        match e {
            Endpoint::A => &self.a,
            Endpoint::B => &self.b,
        }
    }

    fn kind(st: &Stall) -> &'static str {
        match st.kind {
            RecordKind::Stall => "stall",
            RecordKind::Wait => "wait",
            RecordKind::Ambiguous => "ambiguous",
            RecordKind::Gap => "gap",
        }
    }
}

fn dur(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |ns| Duration(ns).to_string())
}

/// The evidence's sources: "#12,#14" for frames.
fn frames(ev: &[analyze::EvidenceItem]) -> String {
    ev.iter()
        .map(|e| match e.source {
            Evidence::Frame(n) => format!("#{n}"),
            Evidence::Model(n) => format!("step {n}"),
            Evidence::Lab => "lab".into(),
            Evidence::Kernel(n) => format!("kernel {n}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn dir_line(name: &str, d: &DirSummary) -> String {
    let rtt = |s: &analyze::DurationStats| {
        if s.count == 0 {
            "-".to_string()
        } else {
            let ns = |d: Option<Duration>| d.map(|d| d.0);
            format!("{}/{}/{}", dur(ns(s.min())), dur(ns(s.mean())), dur(ns(s.max())))
        }
    };
    format!(
        "  {name:<7} {:>7} {:>6} {:>6} {:>9} {:>9} {:>4} {:>4} {:>5}  rtt(ack) {}  rtt(ts) {}  idle gaps {} (longest {})\n",
        d.wire.packets,
        d.wire.data_segments,
        d.wire.pure_acks,
        d.wire.payload_bytes,
        d.wire.wire_bytes,
        d.retransmissions,
        d.out_of_order,
        d.mss.map_or("-".into(), |m| m.to_string()),
        rtt(&d.rtt_ack),
        rtt(&d.rtt_ts),
        d.idle_gaps,
        Duration(d.longest_idle_ns)
    )
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
/// (`wire::DecodeStats` in the binary; any serializable counts in tests).
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

/// The first lines of explain's text: what the decoder read (`wire::DecodeStats`'s counts),
/// whether the file is damaged, and the decoder's notes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExplainSummary {
    pub file: String,
    pub frames: u64,
    pub tcp_packets: u64,
    pub flows: usize,
    pub not_tcp: u64,
    pub malformed: u64,
    pub unknown_linktype: u64,
    pub first_unknown_linktype: Option<u32>,
    pub filtered_out: u64,
    pub duplicates: u64,
    pub after_close: u64,
    /// The error that ended a damaged file.
    pub damaged: Option<String>,
    /// Tunnels not opened and fragments not reassembled, fragments reassembled, frames whose
    /// clock went back, ICMP errors, 802.11 retries.
    pub notes: Vec<String>,
}

impl<'a, D: Serialize> ExplainHead<'a, D> {
    /// The head of explain's document for `file`, read by tcpstall `version`; `error`: where a
    /// damaged file stopped (byte offset, message).
    pub fn new(version: &'static str, file: String, decode: &'a D, error: Option<(u64, String)>) -> Self {
        ExplainHead {
            tool: "tcpstall",
            version,
            schema_version: crate::SCHEMA_VERSION,
            mode: "explain",
            file,
            decode,
            error: error.map(|(offset_bytes, message)| ExplainError { offset_bytes, message }),
        }
    }
}

impl ExplainSummary {
    /// What the decoder read of `file`, the flows analysed, the error that ended a damaged file,
    /// and the decoder's notes: why tunnelled traffic has no TCP in the report, frames whose
    /// clock went back, ICMP errors, 802.11 retries.
    pub fn of(file: String, stats: &wire::DecodeStats, flows: usize, damaged: Option<String>) -> Self {
        ExplainSummary {
            file,
            frames: stats.frames,
            tcp_packets: stats.tcp_packets,
            flows,
            not_tcp: stats.not_tcp,
            malformed: stats.malformed,
            unknown_linktype: stats.unknown_linktype,
            first_unknown_linktype: stats.first_unknown_linktype,
            filtered_out: stats.filtered_out,
            duplicates: stats.duplicates,
            after_close: stats.after_close,
            damaged,
            notes: [
                stats.not_decoded_note(),
                stats.fragments_note(),
                stats.ts_backwards_note(),
                stats.icmp_note(),
                stats.wlan_retries_note(),
                stats.stepped_back_copies_note(),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }

    pub fn text(&self) -> String {
        let mut s =
            format!("{}: {} frames, {} TCP packets in {} flows", self.file, self.frames, self.tcp_packets, self.flows);
        if self.not_tcp + self.malformed + self.unknown_linktype > 0 {
            s.push_str(&format!(
                "; skipped {} not TCP, {} malformed, {} on unknown link types{}",
                self.not_tcp,
                self.malformed,
                self.unknown_linktype,
                self.first_unknown_linktype.map_or(String::new(), |l| format!(" (first: {l})"))
            ));
        }
        if self.filtered_out > 0 {
            s.push_str(&format!("; {} filtered out", self.filtered_out));
        }
        if self.duplicates > 0 {
            s.push_str(&format!("; {} duplicate frames collapsed (copies of a packet just seen)", self.duplicates));
        }
        if self.after_close > 0 {
            s.push_str(&format!("; {} packets after their connection closed, not analysed", self.after_close));
        }
        s.push('\n');
        if let Some(e) = &self.damaged {
            s.push_str(&format!("DAMAGED FILE: {e}; what follows covers the packets before it\n"));
        }
        for note in &self.notes {
            s.push_str(&format!("note: {note}\n"));
        }
        s
    }
}

/// The whole JSON document: the head's fields, then `flows`.
#[derive(Serialize)]
struct ExplainDoc<'h, 'a, D: Serialize, F: Serialize> {
    #[serde(flatten)]
    head: &'h ExplainHead<'a, D>,
    flows: F,
}

/// The flows as they were serialised one at a time (each an [`ExplainFlow`] object), read back
/// one at a time.
struct RawFlows<I>(RefCell<Option<I>>);

impl<I: Iterator<Item = std::io::Result<String>>> Serialize for RawFlows<I> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = s.serialize_seq(None)?;
        for flow in self.0.borrow_mut().take().into_iter().flatten() {
            let raw =
                serde_json::value::RawValue::from_string(flow.map_err(S::Error::custom)?).map_err(S::Error::custom)?;
            seq.serialize_element(&raw)?;
        }
        seq.end()
    }
}

/// serde_json's compact form, except that each flow starts a line.
#[derive(Default)]
struct FlowPerLine {
    depth: usize,
}

impl serde_json::ser::Formatter for FlowPerLine {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        w.write_all(b"[")
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        w.write_all(b"]")
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth += 1;
        w.write_all(b"{")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.depth -= 1;
        w.write_all(b"}")
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        // Depth 2: an array directly in the document's object, which holds only `flows`.
        let sep: &[u8] = match (self.depth, first) {
            (2, true) => b"\n",
            (2, false) => b",\n",
            (_, true) => b"",
            (_, false) => b",",
        };
        w.write_all(sep)
    }
}

/// Writes explain's JSON document (and a final newline): `head`'s fields, then `flows`, each
/// the JSON of one [`ExplainFlow`] as `serde_json::to_writer` wrote it, read one at a time.
pub fn write_json<W: Write, D: Serialize>(
    mut w: W,
    head: &ExplainHead<'_, D>,
    flows: impl Iterator<Item = std::io::Result<String>>,
) -> serde_json::Result<()> {
    let doc = ExplainDoc { head, flows: RawFlows(RefCell::new(Some(flows))) };
    doc.serialize(&mut serde_json::Serializer::with_formatter(&mut w, FlowPerLine::default()))?;
    w.write_all(b"\n").map_err(serde_json::Error::io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Export;

    #[derive(Serialize)]
    struct Counts {
        frames: u64,
    }

    /// The document is the head's fields then `flows`, one flow a line, and reads back as JSON.
    #[test]
    fn json_streams_each_flow_on_its_own_line() {
        let head = ExplainHead {
            tool: "tcpstall",
            version: "0",
            schema_version: crate::SCHEMA_VERSION,
            mode: "explain",
            file: "f".into(),
            decode: &Counts { frames: 3 },
            error: None,
        };
        let flows = ["{\"flow\":1,\"x\":[1,2]}".to_string(), "{\"flow\":2}".to_string()];
        let mut out = Vec::new();
        write_json(&mut out, &head, flows.into_iter().map(Ok)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"tool\":\"tcpstall\",\"version\":\"0\",\"schema_version\":2,\"mode\":\"explain\",\"file\":\"f\",\
             \"decode\":{\"frames\":3},\"error\":null,\"flows\":[\n{\"flow\":1,\"x\":[1,2]},\n{\"flow\":2}]}\n"
        );
        let mut out = Vec::new();
        write_json(&mut out, &head, std::iter::empty()).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("\"flows\":[]}\n"));
        let bad = std::iter::once(Err(std::io::Error::other("spool lost")));
        assert!(write_json(Vec::new(), &head, bad).is_err());
    }

    #[test]
    fn summary_line_names_what_was_skipped() {
        let s = ExplainSummary {
            file: "x.pcap".into(),
            frames: 10,
            tcp_packets: 8,
            flows: 1,
            not_tcp: 2,
            damaged: Some("cut".into()),
            notes: vec!["n".into()],
            ..ExplainSummary::default()
        };
        assert_eq!(
            s.text(),
            "x.pcap: 10 frames, 8 TCP packets in 1 flows; skipped 2 not TCP, 0 malformed, 0 on unknown link types\n\
             DAMAGED FILE: cut; what follows covers the packets before it\nnote: n\n"
        );
    }

    /// A flow's text names A and lists its records; app gaps only on request.
    #[test]
    fn flow_text_lists_stalls_and_app_gaps_on_request() {
        let fa = analyze::FlowAnalyzer::new(analyze::Config::default()).finish();
        let mut f = ExplainFlow::new(1, "a:1".into(), "b:2".into(), 0, "a:1 <-> b:2".into(), &fa);
        let t = f.table();
        assert!(t.starts_with("\nflow 1: a:1 <-> b:2 (A = a:1, seen first: handshake not captured)\n"), "{t}");
        assert!(t.contains("  no stalls"), "{t}");
        f.app_gaps = true;
        assert!(f.export(crate::Format::Table).is_ok());
    }
}
