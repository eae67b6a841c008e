//! From stall records to the comparable verdict of a run: how many stalls, of which causes.
//! Counting only; the causes themselves come from the classifier (classify.rs).

use crate::Stall;
use serde::{Deserialize, Serialize};
use trace::{Cause, Duration, VerdictKey};

/// Stalls of one cause.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CauseCount {
    pub cause: Cause,
    pub count: u64,
    /// Sum of the stalls' lengths (ns).
    #[serde(rename = "total_ns")]
    pub total: Duration,
    /// Median stall length (ns).
    #[serde(rename = "median_ns")]
    pub median: Duration,
}

/// Counts by cause. TCP stalls and application gaps are kept apart: an application gap is
/// not a stall and is not in `stall_count`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallSummary {
    /// Stall records whose cause is a TCP mechanism (everything but `application`).
    pub stall_count: u64,
    /// Gaps where the writer had not written yet (cause `application`).
    pub application_gap_count: u64,
    /// Per cause, most frequent first (application last).
    pub by_cause: Vec<CauseCount>,
}

impl StallSummary {
    pub fn of<'a>(stalls: impl IntoIterator<Item = &'a Stall>) -> StallSummary {
        let mut lens: Vec<(Cause, Vec<u64>)> = Vec::new();
        for s in stalls {
            match lens.iter_mut().find(|(c, _)| *c == s.cause) {
                Some((_, v)) => v.push(s.length.0),
                None => lens.push((s.cause, vec![s.length.0])),
            }
        }
        let mut by_cause: Vec<CauseCount> = lens
            .into_iter()
            .map(|(cause, mut v)| {
                v.sort_unstable();
                CauseCount {
                    cause,
                    count: v.len() as u64,
                    total: Duration(v.iter().sum()),
                    median: Duration(v[v.len() / 2]),
                }
            })
            .collect();
        by_cause.sort_by(|a, b| {
            (a.cause == Cause::Application)
                .cmp(&(b.cause == Cause::Application))
                .then(b.count.cmp(&a.count))
                .then(b.total.cmp(&a.total))
                .then(a.cause.cmp(&b.cause))
        });
        let stall_count = by_cause.iter().filter(|c| c.cause.is_tcp_stall()).map(|c| c.count).sum();
        let application_gap_count = by_cause.iter().filter(|c| !c.cause.is_tcp_stall()).map(|c| c.count).sum();
        StallSummary { stall_count, application_gap_count, by_cause }
    }

    /// The most frequent TCP cause (ties: the longer total).
    pub fn dominant(&self) -> Option<&CauseCount> {
        self.by_cause.iter().find(|c| c.cause.is_tcp_stall())
    }

    /// The comparable verdict over `rounds` measured rounds: it stalls when stall records
    /// number more than one per ten rounds (a rare scheduling hiccup does not flip the key;
    /// the records themselves are all listed). With `rounds` 0 any stall counts.
    pub fn key(&self, rounds: u64) -> VerdictKey {
        let stalls = self.stall_count > 0 && self.stall_count * 10 > rounds;
        VerdictKey { stalls, cause: if stalls { self.dominant().map(|c| c.cause) } else { None } }
    }

    /// "2 nagle-delayed-ack (~44 ms), 1 retransmission-timeout (~210 ms)"; "no stalls".
    pub fn counts_text(&self) -> String {
        let parts: Vec<String> = self
            .by_cause
            .iter()
            .filter(|c| c.cause.is_tcp_stall())
            .map(|c| format!("{} {} (~{:.0} ms)", c.count, c.cause, c.median.as_millis_f64()))
            .collect();
        if parts.is_empty() {
            "no stalls".to_string()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Endpoint, Instant};

    fn st(cause: Cause, ms: u64) -> Stall {
        Stall {
            start: Instant::ZERO,
            length: Duration::from_millis(ms),
            waited: Endpoint::B,
            held: Endpoint::A,
            bytes_held: 10,
            cause,
            confidence: 0.9,
            evidence: vec![],
            ack_delay: None,
            detail: String::new(),
        }
    }

    #[test]
    fn application_gaps_are_counted_apart_and_never_dominate() {
        let v = [
            st(Cause::Application, 500),
            st(Cause::Application, 500),
            st(Cause::Application, 500),
            st(Cause::NagleDelayedAck, 44),
        ];
        let s = StallSummary::of(&v);
        assert_eq!((s.stall_count, s.application_gap_count), (1, 3));
        assert_eq!(s.dominant().unwrap().cause, Cause::NagleDelayedAck);
        assert_eq!(s.by_cause.last().unwrap().cause, Cause::Application);
        // One stall in 20 rounds is not "it stalls"; one in 5 is.
        assert!(!s.key(20).stalls);
        assert_eq!(s.key(5), VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) });
        assert_eq!(s.counts_text(), "1 nagle-delayed-ack (~44 ms)");
    }
}
