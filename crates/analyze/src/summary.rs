//! From stall records to the comparable verdict of a run: how many stalls, of which causes.
//! Counting only; the causes themselves come from the classifier (classify.rs).

use crate::{RecordKind, Stall};
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

/// Counts by what each record proves (see [`crate::RecordKind`]): only stalls, waits whose bytes
/// the evidence proves waited and whose mechanism it names, are counted as stalls. Waits with
/// no signature, ambiguous pauses and application gaps are counted apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallSummary {
    /// Records of kind `stall`: bytes waited and the mechanism's signature shows.
    pub stall_count: u64,
    /// Records of kind `wait`: bytes provably waited, no mechanism's signature (cause `unknown`).
    #[serde(default)]
    pub unattributed_wait_count: u64,
    /// Records of kind `ambiguous`: several explanations fit, some with nothing held.
    #[serde(default)]
    pub ambiguous_count: u64,
    /// Records of kind `gap` (cause `application`): the writer had not written.
    pub application_gap_count: u64,
    /// The stalls per cause, most frequent first.
    pub by_cause: Vec<CauseCount>,
}

impl StallSummary {
    pub fn of<'a>(stalls: impl IntoIterator<Item = &'a Stall>) -> StallSummary {
        let mut lens: Vec<(Cause, Vec<u64>)> = Vec::new();
        let mut out = StallSummary::default();
        for s in stalls {
            match s.kind {
                RecordKind::Stall => {}
                RecordKind::Wait => {
                    out.unattributed_wait_count += 1;
                    continue;
                }
                RecordKind::Ambiguous => {
                    out.ambiguous_count += 1;
                    continue;
                }
                RecordKind::Gap => {
                    out.application_gap_count += 1;
                    continue;
                }
            }
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
                    total: Duration(v.iter().fold(0u64, |a, &b| a.saturating_add(b))),
                    median: Duration(v[v.len() / 2]),
                }
            })
            .collect();
        by_cause.sort_by(|a, b| b.count.cmp(&a.count).then(b.total.cmp(&a.total)).then(a.cause.cmp(&b.cause)));
        out.stall_count = by_cause.iter().map(|c| c.count).sum();
        out.by_cause = by_cause;
        out
    }

    /// "3 stalls (2 nagle-delayed-ack (~44 ms), ...); 5 waits with no signature; 2 ambiguous
    /// pauses; 7 application gaps": what the headline counts, and what it counts apart.
    pub fn headline(&self) -> String {
        let mut parts = vec![match self.stall_count {
            0 => "no stalls".to_string(),
            n => format!("{n} stall{} ({})", if n == 1 { "" } else { "s" }, self.counts_text()),
        }];
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        if self.unattributed_wait_count > 0 {
            let n = self.unattributed_wait_count;
            parts.push(format!("{n} wait{} with no signature", plural(n)));
        }
        if self.ambiguous_count > 0 {
            let n = self.ambiguous_count;
            parts.push(format!("{n} ambiguous pause{} (not stalls)", plural(n)));
        }
        if self.application_gap_count > 0 {
            let n = self.application_gap_count;
            parts.push(format!("{n} application gap{} (not stalls)", plural(n)));
        }
        parts.join("; ")
    }

    /// The most frequent stall cause (ties: the longer total).
    pub fn dominant(&self) -> Option<&CauseCount> {
        self.by_cause.first()
    }

    /// The comparable verdict over `rounds` measured rounds: it stalls when stall records with
    /// a named mechanism number more than one per ten rounds (a rare scheduling hiccup does not
    /// flip the key; the records themselves are all listed). `unknown` records are counted and
    /// listed but make no key: the evidence shows no mechanism to compare. With `rounds` 0 any
    /// named stall counts.
    pub fn key(&self, rounds: u64) -> VerdictKey {
        let named: u64 = self.by_cause.iter().filter(|c| c.cause.names_a_mechanism()).map(|c| c.count).sum();
        let stalls = named > 0 && named * 10 > rounds;
        let cause = self.by_cause.iter().find(|c| c.cause.names_a_mechanism()).map(|c| c.cause);
        VerdictKey { stalls, cause: if stalls { cause } else { None } }
    }

    /// "2 nagle-delayed-ack (~44 ms), 1 retransmission-timeout (~210 ms)"; "no stalls".
    pub fn counts_text(&self) -> String {
        let parts: Vec<String> = self
            .by_cause
            .iter()
            .map(|c| format!("{} {} (~{:.0} ms)", c.count, c.cause, c.median.as_millis_f64()))
            .collect();
        if parts.is_empty() {
            "no stalls".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// The measured rounds on the records' clock (ns), and whether warm-up rounds ran before them
/// (then waits before the window are the warm-up's, not a prologue's, and are not named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    pub warmed_up: bool,
}

impl Window {
    /// A record belongs to the measured rounds when its wait starts and ends inside them.
    pub fn contains(&self, s: &Stall) -> bool {
        s.start.0 >= self.from_ns && (s.start + s.length).0 <= self.to_ns
    }
}

/// The verdict of a run of `samples` measured samples (`unit`: "rounds" or "reads") from its
/// stall records: the summary of the measured ones, the comparable key, and one line for
/// people naming the waits outside the window after a "; " (bulk-ack's drain wait).
pub fn verdict(records: &[Stall], w: Window, samples: u64, unit: &str) -> (StallSummary, VerdictKey, String) {
    let summary = StallSummary::of(records.iter().filter(|s| w.contains(s)));
    let key = summary.key(samples);
    let mut text = match summary.dominant() {
        Some(_) if key.stalls => {
            let c = summary.by_cause.iter().find(|c| Some(c.cause) == key.cause).expect("the key's cause is counted");
            format!(
                "stalls ~{:.0} ms, {} in {samples} {unit} ({}): {}",
                c.median.as_millis_f64(),
                summary.stall_count,
                summary.counts_text(),
                c.cause.explain()
            )
        }
        _ if summary.stall_count > 0 => {
            format!("no stalls (rare or unexplained: {} in {samples} {unit})", summary.counts_text())
        }
        _ => "no stalls".to_string(),
    };
    if let Some(note) = outside_notes(records, w) {
        text = format!("{text}; {note}");
    }
    (summary, key, text)
}

/// Stalls outside the measured rounds, which neither the samples nor the wall time cover: the
/// epilogue (a wait released after the last round: bulk-ack at depth 2 ends with the drain wait
/// of its last message, seed 004) and the prologue (unless warm-up rounds ran there).
pub fn outside_notes(records: &[Stall], w: Window) -> Option<String> {
    let describe = |rs: Vec<&Stall>, when: &str| -> Option<String> {
        let longest = rs.iter().max_by_key(|r| r.length)?;
        let ms = longest.length.as_millis_f64();
        let what = match rs.len() {
            1 => format!("1 wait of {ms:.0} ms"),
            n => format!("{n} waits up to {ms:.0} ms"),
        };
        let side = longest.held.role();
        Some(format!("{when} (not in the samples or ms/round): {what}, the {side}'s data held ({})", longest.cause))
    };
    let tcp = |r: &&Stall| r.kind == RecordKind::Stall;
    let after: Vec<_> = records.iter().filter(|r| (r.start + r.length).0 > w.to_ns).filter(tcp).collect();
    let mut notes = Vec::new();
    notes.extend(describe(after, "epilogue after the measured rounds"));
    if !w.warmed_up {
        let before: Vec<_> = records.iter().filter(|r| r.start.0 < w.from_ns).filter(tcp).collect();
        notes.extend(describe(before, "prologue before the measured rounds"));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Endpoint, Instant};

    fn st(cause: Cause, ms: u64) -> Stall {
        crate::testing::stall(Instant::ZERO, Duration::from_millis(ms), cause)
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
        assert!(s.by_cause.iter().all(|c| c.cause != Cause::Application));
        // One stall in 20 rounds is not "it stalls"; one in 5 is.
        assert!(!s.key(20).stalls);
        assert_eq!(s.key(5), VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) });
        assert_eq!(s.counts_text(), "1 nagle-delayed-ack (~44 ms)");
    }

    fn at(start_ms: u64, ms: u64, cause: Cause, held: Endpoint) -> Stall {
        Stall { start: Instant(start_ms * 1_000_000), held, waited: held.peer(), ..st(cause, ms) }
    }

    /// A wait released after the last measured round (bulk-ack's drain wait, seed 004) or
    /// before the first is neither counted nor hidden: the verdict names it. Warm-up waits are
    /// not named.
    #[test]
    fn waits_outside_the_measured_rounds_are_named_not_counted() {
        let w = Window { from_ns: 300_000_000, to_ns: 400_000_000, warmed_up: false };
        let recs = [at(10, 240, Cause::DelayedAck, Endpoint::B), at(390, 200, Cause::NagleDelayedAck, Endpoint::A)];
        let (sum, key, text) = verdict(&recs, w, 10, "rounds");
        assert_eq!((sum.stall_count, key.stalls), (0, false), "{text}");
        assert!(text.starts_with("no stalls"), "{text}");
        assert!(
            text.contains("epilogue after the measured rounds (not in the samples or ms/round): 1 wait of 200 ms, the client's data held (nagle-delayed-ack)"),
            "{text}"
        );
        assert!(
            text.contains("prologue before the measured rounds")
                && text.contains("the server's data held (delayed-ack)"),
            "{text}"
        );
        let (_, _, text) = verdict(&recs, Window { warmed_up: true, ..w }, 10, "rounds");
        assert!(!text.contains("prologue"), "{text}");
    }

    #[test]
    fn the_verdict_names_the_dominant_cause_with_its_typical_length() {
        let w = Window { from_ns: 0, to_ns: u64::MAX, warmed_up: true };
        let recs: Vec<Stall> = (0..8).map(|i| at(i * 100, 44, Cause::NagleDelayedAck, Endpoint::A)).collect();
        let (_, key, text) = verdict(&recs, w, 4, "rounds");
        assert_eq!(key, VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) });
        assert!(text.starts_with("stalls ~44 ms, 8 in 4 rounds (8 nagle-delayed-ack (~44 ms))"), "{text}");
    }
}
