//! A captured connection as a scenario (`tcpstall replay`, `tcpstall advise CAPTURE`): the
//! capture decoded and each flow analysed (`analyze::Session`, as explain does), the flow whose
//! records show the most waiting picked, and its exchange derived ([`derive_exchange`]) from
//! its data segments, the classifier's TCP waits and its path RTT. Pure: the capture is any
//! `Read` the caller opened.

use std::collections::HashMap;
use std::io::Read;

use analyze::{Config, Finished, FlowAnalysis, Session};
use wire::{Decoder, FlowFilter, FlowId};

use super::{derive_exchange, segments};
use crate::{Exchange, Scenario, ScenarioError};

/// A capture that gives no exchange to replay.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The capture does not decode (the decoder's message follows).
    #[error("{file}")]
    Read {
        file: String,
        #[source]
        source: wire::WireError,
    },
    #[error("{0}: no TCP flow (check --flow/--port)")]
    NoFlow(String),
    #[error("{file}: flow {key} carried no data to replay")]
    NoData { file: String, key: String },
    /// The derived exchange (with its rounds) does not validate.
    #[error(transparent)]
    Invalid(#[from] ScenarioError),
}

/// What a capture's connection becomes.
#[derive(Debug, Clone)]
pub struct Derived {
    /// The flow ("A <-> B").
    pub key: String,
    pub scenario: Scenario,
    pub exchange: Exchange,
    /// How many times the exchange repeats in the capture.
    pub reps: usize,
    /// Path RTT (ns) and whether it came from the handshake.
    pub rtt: Option<(u64, bool)>,
    pub analysis: FlowAnalysis,
    /// The flow's packets as captured.
    pub events: Vec<trace::Event>,
}

impl Derived {
    /// The emulated link to run it behind: the capture's RTT when it is above 1 ms.
    pub fn link(&self) -> Option<String> {
        self.rtt.map(|(ns, _)| ns).filter(|&ns| ns > 1_000_000).map(|ns| format!("rtt={}us", ns / 1000))
    }
}

/// The flow of `input` (named `file` in messages) whose records show the most waiting (the
/// first seen among equals): its key, analysis and packets. Memory follows the flows alive plus
/// the best so far: a flow's packets are dropped when it ends behind the best.
pub fn busiest_flow(
    input: impl Read,
    filter: FlowFilter,
    file: &str,
) -> Result<(String, FlowAnalysis, Vec<trace::Event>), CaptureError> {
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
    Ok((f.key.to_string(), f.analysis, events))
}

/// The exchange of the busiest flow ([`busiest_flow`]) as a scenario named "replay", run
/// `rounds` times when given (else the capture's count).
pub fn derive(input: impl Read, filter: FlowFilter, file: &str, rounds: Option<u32>) -> Result<Derived, CaptureError> {
    let (key, fa, events) = busiest_flow(input, filter, file)?;
    let tcp_waits: Vec<(u64, u64)> =
        fa.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| (s.start.0, s.start.0 + s.length.0)).collect();
    let rtt_ns = fa.path_rtt.map_or(0, |d| d.0);
    let Some((mut e, reps)) = derive_exchange(&segments(&events), &tcp_waits, rtt_ns) else {
        return Err(CaptureError::NoData { file: file.to_string(), key });
    };
    if let Some(r) = rounds {
        e.rounds = r;
    }
    e.validate()?;
    let mut s = Scenario::from_exchange("replay", &format!("replayed from {file} ({key})"), e.clone());
    s.finding = format!("derived by tcpstall replay: {reps} repetitions of {} turn(s)", e.turns.len());
    let rtt = fa.path_rtt.map(|d| (d.0, fa.path_rtt_from_handshake));
    Ok(Derived { key, scenario: s, exchange: e, reps, rtt, analysis: fa, events })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(name: &str) -> std::fs::File {
        let path = format!("{}/../../testdata/captures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::File::open(path).unwrap()
    }

    /// Seed 001 as captured: 20 requests of three writes, each answered with 100 bytes; the
    /// stalls are the classifier's, the RTT the handshake's (loopback: no emulated link).
    #[test]
    fn a_capture_becomes_its_exchange() {
        let d = derive(open("seed001-default.pcap"), FlowFilter::default(), "s.pcap", None).unwrap();
        assert_eq!(d.key, "127.0.0.1:56256 <-> 127.0.0.1:27110");
        assert_eq!((d.reps, d.exchange.inline().as_str()), (20, "client 275,24,292; server 100"));
        assert_eq!(d.scenario.summary, format!("replayed from s.pcap ({})", d.key));
        assert!(d.rtt.is_some_and(|(ns, handshake)| ns < 1_000_000 && handshake));
        assert_eq!(d.link(), None, "under 1 ms: loopback");
        assert!(!d.events.is_empty() && !d.analysis.stalls.is_empty());
        // The path RTT: the smaller of the handshake's (20.40 ms) and the client's own data ACKs
        // (third smallest: 20.20 ms), captured at the client.
        let d = derive(open("link20ms-seed001-default.pcapng"), FlowFilter::default(), "l.pcapng", Some(3)).unwrap();
        assert_eq!(d.link().as_deref(), Some("rtt=20201us"));
        assert_eq!(d.exchange.rounds, 3);
    }

    #[test]
    fn no_flow_no_data_and_bad_bytes_are_errors_naming_the_file() {
        let port = FlowFilter { pair: None, port: Some(1) };
        let e = derive(open("seed001-default.pcap"), port, "s.pcap", None).unwrap_err().to_string();
        assert_eq!(e, "s.pcap: no TCP flow (check --flow/--port)");
        let e = derive(&b"not a capture"[..], FlowFilter::default(), "x.pcap", None).unwrap_err();
        assert!(matches!(&e, CaptureError::Read { file, .. } if file == "x.pcap"), "{e:?}");
        let e = derive(open("seed001-default.pcap"), FlowFilter::default(), "s.pcap", Some(0)).unwrap_err();
        assert!(matches!(e, CaptureError::Invalid(_)), "{e:?}");
    }
}
