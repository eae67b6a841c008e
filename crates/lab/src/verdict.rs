//! From what a run measured to its verdict: words and corroborating counters around the stall
//! records. Pure: the numbers come in as arguments; nothing here touches a socket or a clock.
//!
//! The cause of every stall is decided in one place, the classifier (`tcpstall-analyze`,
//! classify.rs), from the row's own packets. This module never names a cause: it counts the
//! classifier's records (`analyze::verdict`), adds the kernel counters that corroborate them as
//! evidence (tcpi_ato, TcpExt DelayedACKs, SO_TIMESTAMPING holds), and says so when a row has no
//! packets (no CAP_NET_RAW, `--no-capture`): then its slow samples are reported without a cause.

use analyze::{Stall, StallSummary, Window};
use report::cells::ms_words;
use report::stats;
use trace::VerdictKey;

/// The verdict: the comparable key and one line for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub key: VerdictKey,
    pub text: String,
}

/// Writes a side's TCP held before sending them (SCHED timestamp minus write time).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    /// Writes held longer than the stall threshold.
    pub count: u64,
    /// Median hold of those (µs).
    pub median_us: f64,
}

impl Held {
    /// Summarise hold times (ns) against a threshold (µs).
    pub fn from_holds(holds_ns: &[i64], threshold_us: f64) -> Held {
        let long: Vec<f64> = holds_ns.iter().map(|&h| h as f64 / 1000.0).filter(|&h| h > threshold_us).collect();
        Held { count: long.len() as u64, median_us: stats::median(long).unwrap_or(0.0) }
    }
}

/// Counters and timestamps that corroborate (never decide) the classifier's causes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corroboration {
    /// tcpi_ato at the end (µs), the larger of the two sides.
    pub ato_us: u32,
    /// TcpExt DelayedACKs delta (None when the run did not own its namespace).
    pub delayed_acks: Option<i64>,
    /// Retransmitted segments, both sides (tcp_info).
    pub retransmits: u64,
    /// TcpExt TCPTimeouts delta.
    pub timeouts: Option<i64>,
    /// Writes each side's TCP held (SO_TIMESTAMPING, `--tx-timestamps`).
    pub client_held: Option<Held>,
    pub server_held: Option<Held>,
}

impl Corroboration {
    fn words(&self) -> Vec<String> {
        let mut ev = Vec::new();
        for (name, h) in [("client", self.client_held), ("server", self.server_held)] {
            if let Some(h) = h.filter(|h| h.count > 0) {
                ev.push(format!("{name} writes held ~{} in TCP x{} (SO_TIMESTAMPING)", ms_words(h.median_us), h.count));
            }
        }
        if self.ato_us > 0 {
            ev.push(format!("tcpi_ato {}", ms_words(f64::from(self.ato_us))));
        }
        if let Some(d) = self.delayed_acks {
            ev.push(format!("DelayedACKs +{d}"));
        }
        if self.retransmits > 0 {
            ev.push(format!("retransmits +{}", self.retransmits));
        }
        if let Some(t) = self.timeouts.filter(|&t| t > 0) {
            ev.push(format!("TCPTimeouts +{t}"));
        }
        ev
    }
}

/// The row's packets through the classifier, or why there are none.
#[derive(Debug, Clone, Copy)]
pub enum Records<'a> {
    Classified {
        records: &'a [Stall],
        window: Window,
    },
    /// No packets: the reason, for the verdict.
    NotCaptured(&'a str),
}

/// The verdict of a row of rounds (`samples` latency samples, `unit` "rounds" or "reads"):
/// from the classifier's records when the row has packets; otherwise its slow samples
/// (`slow_ns`, each longer than the threshold) are reported without a cause.
///
/// `slow_at` is where the slow samples fall in a round of several reads ("read 3 of 3"), when
/// they all fall at the same one: a measurement said beside the stalls (seed 002).
pub fn rounds(
    records: Records<'_>,
    samples: u64,
    unit: &str,
    slow_ns: &[u64],
    slow_at: Option<String>,
    c: &Corroboration,
) -> (StallSummary, Verdict) {
    match records {
        Records::Classified { records, window } => {
            let (summary, key, mut text) = analyze::verdict(records, window, samples, unit);
            if let Some(at) = slow_at.filter(|_| key.stalls) {
                insert_before_notes(&mut text, &format!(" (slow samples on {at})"));
            }
            let ev = c.words();
            let text = if key.stalls && !ev.is_empty() { with_evidence(&text, &ev.join(", ")) } else { text };
            (summary, Verdict { key, text })
        }
        Records::NotCaptured(why) => {
            let text = if slow_ns.is_empty() {
                format!("no slow samples (stall causes not named: {why})")
            } else {
                let us: Vec<f64> = slow_ns.iter().map(|&n| n as f64 / 1000.0).collect();
                format!(
                    "{} slow samples ~{} in {samples} {unit}: cause not named: {why} ({})",
                    slow_ns.len(),
                    ms_words(stats::median(us).unwrap_or(0.0)),
                    c.words().join(", ")
                )
            };
            // Without packets nothing is known to be a TCP stall: the key says "no cause".
            let stalls = slow_ns.len() as u64 * 10 > samples;
            (StallSummary::default(), Verdict { key: VerdictKey { stalls, cause: None }, text })
        }
    }
}

/// Insert the evidence before any prologue/epilogue note, beside the stalls it supports.
fn with_evidence(text: &str, ev: &str) -> String {
    let mut t = text.to_string();
    insert_before_notes(&mut t, &format!(" ({ev})"));
    t
}

/// How the notes on waits outside the measured rounds start (`analyze::outside_notes`).
const NOTES: [&str; 2] = ["; prologue before the measured rounds", "; epilogue after the measured rounds"];

/// Insert `text` (", fewest segments") into a verdict before its prologue/epilogue notes, so it
/// stays beside the part of the verdict it qualifies.
pub fn insert_before_notes(verdict: &mut String, text: &str) {
    let at = NOTES.iter().filter_map(|n| verdict.find(n)).min().unwrap_or(verdict.len());
    verdict.insert_str(at, text);
}

/// What a stream run (seed 003) measured: the sender's write waits and the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamFacts {
    /// Payload bytes the sender sent and the seconds it spent writing them.
    pub bytes: u64,
    pub wall_s: f64,
    /// The sender's data segments and the receiver's pure ACKs.
    pub data_segs: u64,
    pub pure_acks: u64,
}

/// The verdict of a stream: its stall records (any one counts: a stream has no rounds) and the
/// throughput and ACK ratio the seed compares. A write that waits for send-buffer room is flow
/// or congestion control, not a stall: only a gap in the data flow is.
pub fn stream(records: Records<'_>, f: &StreamFacts, c: &Corroboration) -> (StallSummary, Verdict) {
    let ratio = f.data_segs as f64 / f.pure_acks.max(1) as f64;
    let tail = format!(
        "{} one way; the receiver sent {} pure ACKs, one per {ratio:.1} data segments",
        fmt_rate(f.bytes as f64 / f.wall_s.max(1e-9)),
        f.pure_acks
    );
    match records {
        Records::Classified { records, window } => {
            let (summary, key, text) = analyze::verdict(records, window, 0, "writes");
            let ev = c.words();
            let text = if key.stalls && !ev.is_empty() { format!("{text} ({})", ev.join(", ")) } else { text };
            (summary, Verdict { key, text: format!("{text} (stream): {tail}") })
        }
        Records::NotCaptured(why) => (
            StallSummary::default(),
            Verdict { key: VerdictKey { stalls: false, cause: None }, text: format!("stream ({why}): {tail}") },
        ),
    }
}

/// A rate in bytes per second for people, never rounded to zero.
pub fn fmt_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} GB/s", bps / 1e9)
    } else if bps >= 10e6 {
        format!("{:.0} MB/s", bps / 1e6)
    } else if bps >= 1e6 {
        format!("{:.1} MB/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kB/s", bps / 1e3)
    } else {
        format!("{bps:.0} B/s")
    }
}

/// Wire cost of one row, for comparing rows: total segments both ways and payload bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub stalls: bool,
    pub segments: u64,
    /// Estimated wire bytes, both directions.
    pub wire_bytes: u64,
}

/// For rows without stalls, the text that compares their segment count with the cheapest
/// stall-free row ("fewest segments", "7.1x the segments of the best fix") and, when `base`
/// (the default row) is given, their wire bytes with it, as seed 000 compared tshark byte
/// counts. None for stalled rows or when there is nothing to compare with.
pub fn compare_cost(rows: &[Cost], base: Option<Cost>) -> Vec<Option<String>> {
    let best = rows.iter().filter(|r| !r.stalls && r.segments > 0).map(|r| r.segments).min();
    let others = rows.iter().filter(|r| !r.stalls).count();
    rows.iter()
        .map(|r| {
            let best = best?;
            if r.stalls || others < 2 || r.segments == 0 {
                return None;
            }
            let ratio = r.segments as f64 / best as f64;
            let mut text = if ratio < 1.15 {
                "fewest segments".to_string()
            } else {
                format!("{ratio:.1}x the segments of the best fix")
            };
            if let Some(b) = base.filter(|b| b.wire_bytes > 0) {
                let w = r.wire_bytes as f64 / b.wire_bytes as f64;
                if w >= 1.15 {
                    text.push_str(&format!(" ({w:.1}x the wire bytes of default)"));
                }
            }
            Some(text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Cause, Duration, Endpoint, Instant};

    fn rec(start_ms: u64, ms: u64, cause: Cause) -> Stall {
        Stall {
            start: Instant(start_ms * 1_000_000),
            length: Duration::from_millis(ms),
            waited: Endpoint::B,
            held: Endpoint::A,
            bytes_held: 10,
            cause,
            confidence: 0.95,
            evidence: vec![],
            ack_delay: None,
            detail: String::new(),
            kind: analyze::RecordKind::Stall,
            alternatives: Vec::new(),
            settle: None,
        }
    }

    /// The cause is the classifier's; the counters are words beside it, not a second rule.
    #[test]
    fn the_cause_comes_from_the_records_and_counters_only_corroborate() {
        let recs: Vec<Stall> = (0..20).map(|i| rec(i * 100, 44, Cause::NagleDelayedAck)).collect();
        let w = Window { from_ns: 0, to_ns: u64::MAX, warmed_up: true };
        let c = Corroboration { ato_us: 40_000, delayed_acks: Some(0), ..Default::default() };
        let (s, v) = rounds(Records::Classified { records: &recs, window: w }, 10, "rounds", &[], None, &c);
        assert_eq!(s.stall_count, 20);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) });
        // A counter that disagrees (DelayedACKs +0) is shown, not used to overrule.
        assert!(v.text.contains("DelayedACKs +0") && v.text.contains("tcpi_ato 40 ms"), "{}", v.text);
    }

    #[test]
    fn without_packets_no_cause_is_named() {
        let c = Corroboration { ato_us: 40_000, ..Default::default() };
        let (_, v) = rounds(Records::NotCaptured("no CAP_NET_RAW"), 10, "rounds", &[44_000_000; 10], None, &c);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: None });
        assert!(v.text.contains("cause not named: no CAP_NET_RAW"), "{}", v.text);
        let (_, v) = rounds(Records::NotCaptured("off"), 10, "rounds", &[], None, &c);
        assert!(!v.key.stalls);
    }

    #[test]
    fn evidence_and_costs_go_before_the_epilogue_note() {
        let mut v = "no stalls; epilogue after the measured rounds (...)".to_string();
        insert_before_notes(&mut v, ", fewest segments");
        assert_eq!(v, "no stalls, fewest segments; epilogue after the measured rounds (...)");
    }

    #[test]
    fn a_stream_stalls_on_any_record_and_says_its_throughput() {
        let f = StreamFacts { bytes: 1_000_000_000, wall_s: 1.0, data_segs: 1000, pure_acks: 100 };
        let w = Window { from_ns: 0, to_ns: u64::MAX, warmed_up: true };
        let recs = [rec(10, 210, Cause::RetransmissionTimeout)];
        let (_, v) = stream(Records::Classified { records: &recs, window: w }, &f, &Corroboration::default());
        assert_eq!(v.key.cause, Some(Cause::RetransmissionTimeout));
        assert!(v.text.contains("1.00 GB/s one way") && v.text.contains("one per 10.0 data segments"), "{}", v.text);
        let (_, v) = stream(Records::Classified { records: &[], window: w }, &f, &Corroboration::default());
        assert!(!v.key.stalls, "{}", v.text);
    }

    #[test]
    fn cost_comparison_names_the_cheapest_fix() {
        let rows = [
            Cost { stalls: true, segments: 600, wire_bytes: 250_000 },
            Cost { stalls: false, segments: 20_000, wire_bytes: 1_500_000 },
            Cost { stalls: false, segments: 600, wire_bytes: 210_000 },
        ];
        let c = compare_cost(&rows, Some(rows[0]));
        assert_eq!(c[0], None);
        assert_eq!(c[1].as_deref(), Some("33.3x the segments of the best fix (6.0x the wire bytes of default)"));
        assert_eq!(c[2].as_deref(), Some("fewest segments"));
    }
}
