//! The committed scorecard (crates/truth/scorecard.json) and the regression check of the test.
//!
//! The corpus is real traffic: which waits a run has varies (a burst of three stalls in one run
//! and not in the next, as the kernel's quick-ACK budget and the scheduler decide), so a cause's
//! rate over the whole corpus moves with the mix of cases even when the classifier does not
//! change. The check therefore compares like with like: per cause, the new run's per-case
//! rates weighted by the baseline's per-case support, against the baseline's over the same
//! cases. The baseline itself can be the worst of several runs (`--keep-lower`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::score::{CauseScore, Scorecard};

/// One cause's committed figures: rates and their support.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    /// Stall records naming the cause (precision's support) and waits of it (recall's).
    pub named: u64,
    pub truth: u64,
}

impl Rates {
    fn of(c: &CauseScore) -> Rates {
        Rates { precision: c.precision(), recall: c.recall(), named: c.named, truth: c.truth }
    }
    /// The lower of two runs' rates.
    fn lower(self, o: Rates) -> Rates {
        let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        Rates {
            precision: min(self.precision, o.precision),
            recall: min(self.recall, o.recall),
            named: self.named.max(o.named),
            truth: self.truth.max(o.truth),
        }
    }
}

/// (point, mode, cause, precision or recall) of the check; its sums are (weight, baseline,
/// new run).
type Key = (String, String, String, bool);

/// Point -> mode -> cause -> rates.
pub type Table = BTreeMap<String, BTreeMap<String, BTreeMap<String, Rates>>>;

/// The committed baseline: the whole corpus's rates (for people) and each case's (the check's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub points: Table,
    pub cases: BTreeMap<String, Table>,
}

fn table<'a>(t: impl Iterator<Item = (&'a String, &'a BTreeMap<String, BTreeMap<String, CauseScore>>)>) -> Table {
    t.map(|(p, modes)| {
        let modes = modes
            .iter()
            .map(|(m, causes)| (m.clone(), causes.iter().map(|(c, x)| (c.clone(), Rates::of(x))).collect()))
            .collect();
        (p.clone(), modes)
    })
    .collect()
}

fn lower_table(mut a: Table, b: &Table) -> Table {
    for (p, modes) in b {
        for (m, causes) in modes {
            let e = a.entry(p.clone()).or_default().entry(m.clone()).or_default();
            for (c, r) in causes {
                let v = e.get(c).map_or(*r, |x| x.lower(*r));
                e.insert(c.clone(), v);
            }
        }
    }
    a
}

impl Baseline {
    pub fn of(sc: &Scorecard) -> Baseline {
        let whole: BTreeMap<String, BTreeMap<String, BTreeMap<String, CauseScore>>> = sc
            .points
            .iter()
            .map(|(p, modes)| (p.clone(), modes.iter().map(|(m, ps)| (m.clone(), ps.causes.clone())).collect()))
            .collect();
        Baseline {
            points: table(whole.iter()),
            cases: sc.cases.iter().map(|(k, strata)| (k.clone(), table(strata.iter()))).collect(),
        }
    }

    /// Each rate the lower of this baseline's and `o`'s.
    pub fn lower(self, o: &Baseline) -> Baseline {
        let mut cases = self.cases;
        for (k, t) in &o.cases {
            let v = lower_table(cases.remove(k).unwrap_or_default(), t);
            cases.insert(k.clone(), v);
        }
        Baseline { points: lower_table(self.points, &o.points), cases }
    }

    /// Where `now` falls more than `slack` (0.02 = 2 points) below this baseline, and by more
    /// than one labelled wait (a single wait of live traffic on a loaded host can change its
    /// timing, and with 33 labels one is 3 points): per point, mode and cause, over the cases
    /// both runs have support in, each case weighted by the baseline's support; judged only
    /// with a total weight of at least `support`.
    pub fn regressions(&self, now: &Scorecard, slack: f64, support: u64) -> Vec<String> {
        let mut acc: BTreeMap<Key, (f64, f64, f64)> = BTreeMap::new();
        for (k, t) in &self.cases {
            let Some(cur) = now.cases.get(k) else { continue };
            for (p, modes) in t {
                for (m, causes) in modes {
                    for (c, b) in causes {
                        let n = cur.get(p).and_then(|x| x.get(m)).and_then(|x| x.get(c)).copied().unwrap_or_default();
                        let pairs =
                            [(true, b.precision, n.precision(), b.named), (false, b.recall, n.recall(), b.truth)];
                        for (is_p, br, nr, w) in pairs {
                            if let (Some(br), Some(nr)) = (br, nr) {
                                let e = acc.entry((p.clone(), m.clone(), c.clone(), is_p)).or_default();
                                e.0 += w as f64;
                                e.1 += w as f64 * br;
                                e.2 += w as f64 * nr;
                            }
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        for ((p, m, c, is_p), (w, b, n)) in acc {
            if w >= support as f64 && n / w + slack.max(1.0 / w) < b / w {
                let what = if is_p { "precision" } else { "recall" };
                out.push(format!(
                    "{p} {m} {c} {what}: {:.1}% < baseline {:.1}% (same cases, weight {w})",
                    n / w * 100.0,
                    b / w * 100.0
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(cases: &[(&str, CauseScore)]) -> Scorecard {
        let mut sc = Scorecard::default();
        for (k, cs) in cases {
            let e = sc.cases.entry(k.to_string()).or_default();
            e.entry("sender".into())
                .or_default()
                .entry("packets".into())
                .or_default()
                .insert("nagle-delayed-ack".into(), *cs);
            let ps = sc.points.entry("sender".into()).or_default().entry("packets".into()).or_default();
            ps.causes.entry("nagle-delayed-ack".into()).or_default().add(cs);
        }
        sc
    }

    fn cs(named: u64, right: u64, truth: u64, found: u64) -> CauseScore {
        CauseScore { truth, found, named, right }
    }

    #[test]
    fn a_drop_of_more_than_two_points_and_one_wait_with_support_is_a_regression() {
        let base = Baseline::of(&card(&[("a", cs(10, 10, 10, 9))]));
        assert!(base.regressions(&card(&[("a", cs(10, 10, 10, 9))]), 0.02, 5).is_empty());
        // One wait of ten named wrong: 10 points, but one wait, within live traffic's noise.
        assert!(base.regressions(&card(&[("a", cs(10, 9, 10, 9))]), 0.02, 5).is_empty());
        let r = base.regressions(&card(&[("a", cs(10, 8, 10, 9))]), 0.02, 5);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].contains("precision"));
        // Too little support: not judged.
        let small = Baseline::of(&card(&[("a", cs(4, 4, 4, 4))]));
        assert!(small.regressions(&card(&[("a", cs(4, 1, 4, 1))]), 0.02, 5).is_empty());
    }

    #[test]
    fn a_different_mix_of_cases_is_no_regression() {
        // Case b (always found) had 30 waits in the baseline's run and 2 in this one: the
        // corpus-wide recall falls from 75% to 25%, each case's is what it was.
        let base = Baseline::of(&card(&[("a", cs(1, 1, 10, 0)), ("b", cs(30, 30, 30, 30))]));
        let now = card(&[("a", cs(1, 1, 10, 0)), ("b", cs(2, 2, 2, 2))]);
        assert!(base.regressions(&now, 0.02, 5).is_empty(), "{:?}", base.regressions(&now, 0.02, 5));
    }

    #[test]
    fn the_lower_of_two_runs_is_kept() {
        let b =
            Baseline::of(&card(&[("a", cs(10, 10, 10, 9))])).lower(&Baseline::of(&card(&[("a", cs(10, 8, 10, 10))])));
        let r = b.cases["a"]["sender"]["packets"]["nagle-delayed-ack"];
        assert_eq!((r.precision, r.recall), (Some(0.8), Some(0.9)));
        let w = b.points["sender"]["packets"]["nagle-delayed-ack"];
        assert_eq!((w.precision, w.recall), (Some(0.8), Some(0.9)));
    }
}
