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
    /// The strategy the replica runs as written: what the capture showed of each side's options
    /// ("client:nodelay"; "default" when it showed none).
    pub as_written: String,
    /// What the replica keeps of what the capture shows, with the evidence.
    pub shown_options: Vec<String>,
    /// Per turn of the period, its think times in the capture (ms): median, min, max.
    pub think_ms: Vec<ThinkMs>,
    /// What the smallest exchange dropped of the capture (size and think-time jitter, the
    /// repetitions, a partial one).
    pub dropped: Vec<String>,
    /// Where `--emit` saved the exchange; null without it.
    pub saved: Option<String>,
    /// The run that reproduced it; null with `--no-run` or when interrupted.
    pub run: Option<Report>,
}

/// One turn's think times in the capture (ms).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ThinkMs {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub samples: u64,
}

/// `tcpstall replay`'s output: the document (its JSON is the document's, unchanged) and what
/// the text says besides it.
#[derive(Debug, Clone)]
pub struct ReplayOutput {
    pub doc: ReplayDoc,
    /// Turns in one period of the derived exchange.
    pub turns: usize,
    /// Where the run ran: "loopback" or "--link SPEC".
    pub how: String,
    /// The run was stopped by a signal before it finished (`doc.run` is then None).
    pub interrupted: bool,
}

impl Serialize for ReplayOutput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.doc.serialize(s)
    }
}

impl ReplayOutput {
    /// The document of a flow derived from the capture `file` (scenario::derive), with the
    /// flow's analysis (`captured`), before any run: where it will run is behind an emulated
    /// link with the capture's RTT when that is above 1 ms, else loopback. `version` is the
    /// tool's.
    pub fn derived(
        version: &'static str,
        file: String,
        d: &scenario::derive::Derived,
        captured: &analyze::session::CapturedFlow,
    ) -> ReplayOutput {
        let fa = &captured.analysis;
        let doc = ReplayDoc {
            tool: "tcpstall",
            version,
            schema_version: crate::SCHEMA_VERSION,
            mode: "replay",
            file,
            flow: d.key.clone(),
            repetitions: d.reps as u64,
            exchange: d.exchange.inline(),
            path_rtt_ns: d.rtt.map(|(ns, _)| ns),
            path_rtt_from_handshake: fa.path_rtt_from_handshake,
            capture_stall_summary: analyze::StallSummary::of(fa.stalls.iter().filter(|s| s.shows_a_wait())),
            capture_stall_records: fa.stalls.clone(),
            as_written: d.as_written().label.clone(),
            shown_options: d.kept.clone(),
            think_ms: d
                .thinks
                .iter()
                .map(|t| ThinkMs {
                    median_ms: t.median_ns as f64 / 1e6,
                    min_ms: t.min_ns as f64 / 1e6,
                    max_ms: t.max_ns as f64 / 1e6,
                    samples: t.samples as u64,
                })
                .collect(),
            dropped: d.dropped.clone(),
            saved: None,
            run: None,
        };
        let how = d.link().map_or("loopback".to_string(), |l| format!("--link {l}"));
        ReplayOutput { doc, turns: d.exchange.turns.len(), how, interrupted: false }
    }
}

/// `replay --report`'s connections: the captured flow of `capture` (derived as `d`, analysed
/// as `captured`) and the reproduced run's (its first row), each with its stall records and
/// packets; and the note comparing their causes. `how` says where the run ran ("loopback",
/// "--link SPEC").
pub fn html_flows<'a>(
    capture: &str,
    d: &scenario::derive::Derived,
    captured: &'a analyze::session::CapturedFlow,
    run: &'a Report,
    how: &str,
) -> (Vec<crate::html::FlowIn<'a>>, String) {
    use trace::{CapturePoint, Endpoint};
    let row = run.results.first();
    let mut flows = vec![crate::html::FlowIn {
        label: format!("captured: {capture} flow {}", d.key),
        row: None,
        stalls: &captured.analysis.stalls,
        events: Some(&captured.events),
        events_note: None,
        rtt_ns: captured.analysis.path_rtt.map(|r| r.0),
        capture_point: format!("{:?}", captured.analysis.capture_point),
        capture_at: match captured.analysis.capture_point {
            CapturePoint::AtA => Some(Endpoint::A),
            CapturePoint::AtB => Some(Endpoint::B),
            _ => None,
        },
    }];
    if let Some(r) = row {
        flows.push(crate::html::FlowIn {
            label: format!("reproduced ({}, {how}): {}", run.mode, r.strategy),
            row: Some(0),
            stalls: &r.stall_records,
            events: (!r.packets.is_empty()).then_some(r.packets.as_slice()),
            events_note: r
                .packets
                .is_empty()
                .then(|| "the run recorded no packets (the lab captures them as root)".into()),
            rtt_ns: d.link().and(d.rtt.map(|(ns, _)| ns)).or((run.mode == "lab").then_some(0)),
            capture_point: run.mode.clone(),
            capture_at: (run.mode == "lab" && d.link().is_some()).then_some(Endpoint::B),
        });
    }
    let by = |st: &[analyze::Stall]| causes_text(&analyze::StallSummary::of(st.iter().filter(|s| s.shows_a_wait())));
    let note = format!(
        "Cause by cause: the capture {}; the run {} (in {} rounds).",
        by(&captured.analysis.stalls),
        row.map_or("none".into(), |r| by(&r.stall_records)),
        row.map_or(0, |r| r.rounds)
    );
    (flows, note)
}

/// "nagle-delayed-ack 19, delayed-ack 1", or "none": a summary's records by cause.
pub fn causes_text(s: &analyze::StallSummary) -> String {
    if s.by_cause.is_empty() {
        return "none".into();
    }
    s.by_cause.iter().map(|c| format!("{} {}", c.cause.as_str(), c.count)).collect::<Vec<_>>().join(", ")
}

impl ReplayOutput {
    /// What was derived from the capture (printed before the run starts).
    pub fn derived_text(&self) -> String {
        let d = &self.doc;
        let mut s =
            format!("replay: {} flow {}: {} repetitions of {} turn(s)\n", d.file, d.flow, d.repetitions, self.turns);
        s += &format!("  exchange: {}\n", d.exchange);
        s += &match d.path_rtt_ns {
            Some(ns) => format!(
                "  path RTT: {:.3} ms ({})\n",
                ns as f64 / 1e6,
                if d.path_rtt_from_handshake { "from the handshake" } else { "estimated" }
            ),
            None => "  path RTT: unknown (no handshake in the capture)\n".into(),
        };
        s += &format!("  capture's stalls: {}\n", causes_text(&d.capture_stall_summary));
        for k in &d.shown_options {
            s += &format!("  kept: {k}\n");
        }
        if d.as_written != "default" {
            s += &format!("  runs as written with: {}\n", d.as_written);
        }
        for k in &d.dropped {
            s += &format!("  dropped: {k}\n");
        }
        if let Some(p) = &d.saved {
            s += &format!("  saved: {p} (edit it, then `tcpstall advise {p}`)\n");
        }
        s
    }

    /// The run's line: what it reproduced, or that it was interrupted; empty without a run.
    pub fn run_text(&self) -> String {
        let Some(report) = &self.doc.run else {
            return if self.interrupted {
                "  reproduced: interrupted before the run finished\n".into()
            } else {
                "".into()
            };
        };
        let Some(row) = report.results.first() else { return String::new() };
        let reproduced = if row.stall_records.is_empty() && report.mode == "lab" {
            format!(
                "{} slow rounds of {} (lab without capture: causes not classified; --model classifies)",
                row.slow_samples, row.rounds
            )
        } else {
            format!("{} in {} rounds", causes_text(&row.stall_summary), row.rounds)
        };
        format!(
            "  reproduced ({}, {}): {reproduced}; p50 {:.2} ms, p99 {:.2} ms\n",
            report.mode,
            self.how,
            row.latency_us.p50 / 1e3,
            row.latency_us.p99 / 1e3
        )
    }
}

impl crate::Export for ReplayOutput {
    const COMMAND: &'static str = "replay";

    fn table(&self) -> String {
        self.derived_text() + &self.run_text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Export, Format};

    fn output() -> ReplayOutput {
        let doc = ReplayDoc {
            tool: "tcpstall",
            version: "0",
            schema_version: crate::SCHEMA_VERSION,
            mode: "replay",
            file: "c.pcap".into(),
            flow: "a <-> b".into(),
            repetitions: 20,
            exchange: "client 275,24,292; server 100".into(),
            path_rtt_ns: Some(33_000),
            path_rtt_from_handshake: true,
            capture_stall_summary: analyze::StallSummary::default(),
            capture_stall_records: Vec::new(),
            as_written: "default".into(),
            shown_options: Vec::new(),
            think_ms: Vec::new(),
            dropped: Vec::new(),
            saved: Some("m.toml".into()),
            run: None,
        };
        ReplayOutput { doc, turns: 2, how: "loopback".into(), interrupted: false }
    }

    #[test]
    fn text_says_what_was_derived_and_json_is_the_document() {
        let mut o = output();
        assert_eq!(
            o.table(),
            "replay: c.pcap flow a <-> b: 20 repetitions of 2 turn(s)\n  exchange: client 275,24,292; server 100\n  \
             path RTT: 0.033 ms (from the handshake)\n  capture's stalls: none\n  \
             saved: m.toml (edit it, then `tcpstall advise m.toml`)\n"
        );
        o.interrupted = true;
        assert!(o.run_text().contains("interrupted"));
        let j = String::from_utf8(o.export(Format::Json).unwrap()).unwrap();
        assert_eq!(j, serde_json::to_string_pretty(&o.doc).unwrap() + "\n");
        assert!(o.export(Format::Csv).is_err());
    }

    /// A kept capture's busiest flow (analyze::session) and the exchange derived from it
    /// (scenario::derive), joined as `tcpstall replay` joins them.
    fn replayed(name: &str, rounds: Option<u32>) -> (scenario::derive::Derived, analyze::session::CapturedFlow) {
        let path = format!("{}/../../testdata/captures/{name}", env!("CARGO_MANIFEST_DIR"));
        let c = analyze::session::busiest_flow(std::fs::File::open(path).unwrap(), Default::default(), name).unwrap();
        let shown =
            c.shown_evidence().map(|(nodelay, held_coalescing)| scenario::derive::Shown { nodelay, held_coalescing });
        let cap =
            scenario::derive::Capture { events: &c.events, tcp_waits: &c.tcp_waits(), rtt: c.rtt(), shown: &shown };
        let d = scenario::derive::derive(name, &c.key, cap, rounds).unwrap();
        (d, c)
    }

    /// Seed 001 as captured: 20 requests of three writes, each answered with 100 bytes; the
    /// stalls are the classifier's, the RTT the handshake's (loopback: no emulated link).
    #[test]
    fn a_capture_becomes_its_exchange() {
        let (d, c) = replayed("seed001-default.pcap", None);
        assert_eq!(d.key, "127.0.0.1:56256 <-> 127.0.0.1:27110");
        assert_eq!((d.reps, d.exchange.inline().as_str()), (20, "client 275,24,292; server 100"));
        assert_eq!(d.scenario.summary, format!("replayed from seed001-default.pcap ({})", d.key));
        assert!(d.rtt.is_some_and(|(ns, handshake)| ns < 1_000_000 && handshake));
        assert_eq!(d.link(), None, "under 1 ms: loopback");
        assert!(!c.events.is_empty() && !c.analysis.stalls.is_empty());
        // The path RTT: the smaller of the handshake's (20.40 ms) and the client's own data ACKs
        // (third smallest: 20.20 ms), captured at the client.
        let (d, _) = replayed("link20ms-seed001-default.pcapng", Some(3));
        assert_eq!(d.link().as_deref(), Some("rtt=20201us"));
        assert_eq!(d.exchange.rounds, 3);
    }

    /// The document of a derived flow: the flow, the exchange, the capture's records that show
    /// a wait; run behind `--link rtt=..` when the capture's RTT is above 1 ms.
    #[test]
    fn the_derived_document_carries_the_capture() {
        let (d, c) = replayed("link20ms-seed001-default.pcapng", None);
        let o = ReplayOutput::derived("0", "l.pcapng".into(), &d, &c);
        assert_eq!((o.doc.flow.as_str(), o.doc.repetitions), (d.key.as_str(), 10));
        assert_eq!(o.doc.exchange, "client 275,316; server 100");
        assert_eq!((o.how.as_str(), o.turns), ("--link rtt=20201us", 2));
        assert_eq!(o.doc.path_rtt_ns, Some(20_201_956));
        assert_eq!(o.doc.capture_stall_records.len(), c.analysis.stalls.len());
        assert!(o.doc.run.is_none() && o.doc.saved.is_none() && !o.interrupted);
    }

    /// Issue 34: what the capture shows of each side's options is the classifier's decision
    /// (analyze `ShownOptions`: a sub-MSS segment sent while an earlier one was unacknowledged,
    /// no loss probe possible; RFC 9293 3.7.4, Linux tcp_nagle_check) and the replica keeps it:
    /// http.client sets TCP_NODELAY (its body left with the header unacknowledged), http.server
    /// does not; seed 001 with nodelay shows it, as written does not.
    #[test]
    fn the_replica_keeps_the_nodelay_the_capture_shows() {
        let (d, _) = replayed("http-client-post.pcap", None);
        assert_eq!(d.as_written().label, "client:nodelay");
        assert_eq!(d.kept.len(), 1, "{:?}", d.kept);
        assert!(
            d.kept[0].starts_with("client: TCP_NODELAY shown on by the capture: segment of 332 bytes"),
            "{:?}",
            d.kept
        );
        let (d, c) = replayed("seed001-nodelay.pcap", None);
        assert_eq!(d.as_written().label, "client:nodelay");
        let o = ReplayOutput::derived("0", "s.pcap".into(), &d, &c);
        assert!(o.derived_text().contains("runs as written with: client:nodelay"), "{}", o.derived_text());
        for quiet in ["seed001-default.pcap", "seed000-default.pcap"] {
            let (d, _) = replayed(quiet, None);
            assert_eq!(d.as_written().label, "default", "{quiet}: {:?}", d.kept);
        }
    }
}
