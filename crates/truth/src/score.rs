//! `score`: the classifier against the corpus's truth. Every capture point and view, from the
//! packets alone and with the kernel records; a classifier record matches the label of the
//! same held side whose segment it ends at (its end time within a tolerance of the segment's
//! time at that capture point). Only `stall` records name a cause; `wait`, `ambiguous` and
//! `gap` records are no stalls.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use analyze::RecordKind;
use serde::{Deserialize, Serialize};
use trace::Cause;

use crate::corpus::{capture_name, CaseMeta};
use crate::kernel::KernelRec;
use crate::label::{Kind, Label};
use crate::log::{read_jsonl, Side};
use crate::verdicts::{classify, Verdict};
use crate::views::View;

/// Where the classifier looked, relative to the held side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The capture on the held side's own host.
    Sender,
    /// The capture on its peer's host.
    Receiver,
    /// The capture in the middle of the path (the veth path's router).
    Middle,
    /// A view of the sender's capture.
    SenderView(View),
}

impl Point {
    pub const ALL: [Point; 6] = [
        Point::Sender,
        Point::Receiver,
        Point::Middle,
        Point::SenderView(View::OneDirection),
        Point::SenderView(View::DataOnly),
        Point::SenderView(View::Coarse),
    ];
    pub fn name(self) -> String {
        match self {
            Point::Sender => "sender".into(),
            Point::Receiver => "receiver".into(),
            Point::Middle => "middle".into(),
            Point::SenderView(v) => format!("sender-{}", v.suffix()),
        }
    }
    fn file(self, held: Side) -> String {
        match self {
            Point::Sender => capture_name(held, None),
            Point::Receiver => capture_name(other(held), None),
            Point::Middle => crate::corpus::MIDDLE.into(),
            Point::SenderView(v) => capture_name(held, Some(v)),
        }
    }
}

fn other(s: Side) -> Side {
    match s {
        Side::Client => Side::Server,
        Side::Server => Side::Client,
    }
}

/// Precision and recall counts of one cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CauseScore {
    /// Waits whose truth is this cause.
    pub truth: u64,
    /// Of them, matched by a stall record naming it.
    pub found: u64,
    /// Stall records naming this cause (matched to a scored label or to none).
    pub named: u64,
    /// Of them, matched to a wait of this cause.
    pub right: u64,
}

impl CauseScore {
    pub fn precision(&self) -> Option<f64> {
        (self.named > 0).then(|| self.right as f64 / self.named as f64)
    }
    pub fn recall(&self) -> Option<f64> {
        (self.truth > 0).then(|| self.found as f64 / self.truth as f64)
    }
}

/// Confidence bands (docs/explain.md "Calibration").
pub const BANDS: [(&str, f64, f64); 4] =
    [("Top", 0.90, 1.01), ("High", 0.75, 0.90), ("Medium", 0.50, 0.75), ("Low", 0.0, 0.50)];

/// One point's score in one mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointScore {
    pub causes: BTreeMap<String, CauseScore>,
    /// Negative labels, and how many a stall record named a cause at.
    pub negatives: u64,
    pub false_stalls: u64,
    /// Stall records matching no label at all.
    pub unmatched_stalls: u64,
    /// Per band: records, right.
    pub bands: Vec<(u64, u64)>,
    /// Each stall record that named a cause the truth does not have (for `score --mismatches`).
    #[serde(skip)]
    pub mismatches: Vec<String>,
}

/// What the corpus holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    pub cases: usize,
    pub shapes: BTreeSet<String>,
    pub programs: BTreeSet<String>,
    pub rtts_ms: BTreeSet<u32>,
    /// Waits per truth cause.
    pub waits: BTreeMap<String, u64>,
    pub negatives: u64,
    pub short: u64,
}

/// The whole scorecard: composition, and per point and mode ("packets", "kernel") the scores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scorecard {
    pub composition: Composition,
    pub points: BTreeMap<String, BTreeMap<String, PointScore>>,
}

/// Scores every case under `dir`.
pub fn score(dir: &Path) -> anyhow::Result<Scorecard> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("truth.jsonl").exists() && p.join("case.json").exists())
        .collect();
    cases.sort();
    if cases.is_empty() {
        anyhow::bail!("{}: no case (a directory with case.json and truth.jsonl)", dir.display());
    }
    let mut sc = Scorecard::default();
    for c in &cases {
        score_case(c, &mut sc)?;
    }
    Ok(sc)
}

fn score_case(dir: &Path, sc: &mut Scorecard) -> anyhow::Result<()> {
    let meta: CaseMeta = serde_json::from_str(
        &std::fs::read_to_string(dir.join("case.json")).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?,
    )
    .map_err(|e| anyhow::anyhow!("{}/case.json: {e}", dir.display()))?;
    let labels: Vec<Label> = read_jsonl(&dir.join("truth.jsonl"))?;
    let kernel: Vec<KernelRec> =
        if dir.join("kernel.jsonl").exists() { read_jsonl(&dir.join("kernel.jsonl"))? } else { Vec::new() };
    let comp = &mut sc.composition;
    comp.cases += 1;
    comp.shapes.insert(meta.case.shape.name.clone());
    comp.programs.insert(meta.program.clone());
    comp.rtts_ms.insert(meta.case.rtt_ms);
    for l in &labels {
        match l.kind {
            Kind::Wait => *comp.waits.entry(l.cause.unwrap_or(Cause::Unknown).as_str().into()).or_default() += 1,
            Kind::Negative => comp.negatives += 1,
            Kind::Short => comp.short += 1,
        }
    }
    let mut cache: HashMap<(String, bool), Vec<Verdict>> = HashMap::new();
    for point in Point::ALL {
        for with_kernel in [false, true] {
            let mode = if with_kernel { "kernel" } else { "packets" };
            for held in [Side::Client, Side::Server] {
                let file = point.file(held);
                if !dir.join(&file).exists() {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = cache.entry((file.clone(), with_kernel)) {
                    e.insert(classify(&dir.join(&file), with_kernel.then_some(kernel.as_slice()))?);
                }
                let recs: Vec<&Verdict> = cache[&(file, with_kernel)]
                    .iter()
                    .filter(|v| v.port == meta.port && v.held == held.endpoint())
                    .collect();
                let ls: Vec<&Label> = labels.iter().filter(|l| l.held == held).collect();
                let ps = sc.points.entry(point.name()).or_default().entry(mode.into()).or_default();
                let m = Match { case: meta.case.name.clone(), ..Match::new(point, meta.rtt_ns) };
                tally(ps, &recs, &ls, &m);
            }
        }
    }
    Ok(())
}

/// Where a label's segment shows in a capture, and how far a record's end may be from it.
pub struct Match {
    offset_ns: u64,
    tolerance_ns: u64,
    /// The case's name, for the mismatch list.
    pub case: String,
}

impl Match {
    pub fn new(point: Point, rtt_ns: u64) -> Match {
        let offset_ns = match point {
            Point::Receiver => rtt_ns / 2,
            Point::Middle => rtt_ns / 4,
            _ => 0,
        };
        let coarse = if point == Point::SenderView(View::Coarse) { 10_000_000 } else { 0 };
        Match { offset_ns, tolerance_ns: 3_000_000 + rtt_ns / 4 + coarse, case: String::new() }
    }
    /// The label a record ends at: the nearest within the tolerance.
    pub fn find<'a>(&self, v: &Verdict, labels: &[&'a Label]) -> Option<&'a Label> {
        labels
            .iter()
            .map(|l| (l, (l.left_at + self.offset_ns).abs_diff(v.end_ns)))
            .filter(|&(_, d)| d <= self.tolerance_ns)
            .min_by_key(|&(_, d)| d)
            .map(|(l, _)| *l)
    }
}

fn band(c: f64) -> usize {
    BANDS.iter().position(|&(_, lo, hi)| c >= lo && c < hi).unwrap_or(3)
}

/// Adds one (case, point, mode, held side) to `ps`.
pub fn tally(ps: &mut PointScore, recs: &[&Verdict], labels: &[&Label], m: &Match) {
    if ps.bands.is_empty() {
        ps.bands = vec![(0, 0); BANDS.len()];
    }
    let mut found: Vec<bool> = vec![false; labels.len()];
    for l in labels {
        match (l.kind, l.cause) {
            (Kind::Wait, Some(c)) => ps.causes.entry(c.as_str().into()).or_default().truth += 1,
            (Kind::Negative, _) => ps.negatives += 1,
            _ => {}
        }
    }
    for v in recs {
        let hit = m.find(v, labels);
        if let Some(l) = hit {
            if l.kind == Kind::Short {
                continue;
            }
        }
        let stall = v.kind == RecordKind::Stall;
        let truth = hit.and_then(|l| if l.kind == Kind::Wait { l.cause } else { None });
        if stall {
            let cs = ps.causes.entry(v.cause.as_str().into()).or_default();
            cs.named += 1;
            if truth == Some(v.cause) {
                cs.right += 1;
                if let Some(i) = labels.iter().position(|x| std::ptr::eq(*x, hit.expect("matched"))) {
                    found[i] = true;
                }
            }
            match hit {
                None => ps.unmatched_stalls += 1,
                Some(l) if l.kind == Kind::Negative => ps.false_stalls += 1,
                _ => {}
            }
            if truth != Some(v.cause) {
                let what = hit.map_or("no label".to_string(), |l| {
                    format!("{:?} {} ({})", l.kind, l.cause.map_or("-", |c| c.as_str()), l.note)
                });
                ps.mismatches.push(format!(
                    "{} {:?} ends {} named {} {:.2}: truth {what}",
                    m.case,
                    v.held,
                    v.end_ns,
                    v.cause.as_str(),
                    v.confidence
                ));
            }
        }
        // Calibration: right when it names the truth's cause, or names no stall where nothing
        // known was held; a wait of unknown cause is not scored.
        if truth == Some(Cause::Unknown) {
            continue;
        }
        let right = match truth {
            Some(c) => stall && v.cause == c,
            None => !stall,
        };
        if !right && !stall && v.confidence >= 0.75 {
            ps.mismatches.push(format!(
                "{} {:?} ends {} {:?} {} {:.2}, not a stall: truth {}",
                m.case,
                v.held,
                v.end_ns,
                v.kind,
                v.cause.as_str(),
                v.confidence,
                truth.map_or("-", |c| c.as_str())
            ));
        }
        let b = &mut ps.bands[band(v.confidence)];
        b.0 += 1;
        b.1 += u64::from(right);
    }
    for (l, f) in labels.iter().zip(found) {
        if let (true, Some(c)) = (f, l.cause) {
            ps.causes.entry(c.as_str().into()).or_default().found += 1;
        }
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

/// The mismatched stall records of every point and mode.
pub fn mismatches(sc: &Scorecard) -> String {
    let mut s = String::new();
    for (p, modes) in &sc.points {
        for (m, ps) in modes {
            for x in &ps.mismatches {
                s += &format!("{p} {m}: {x}\n");
            }
        }
    }
    s
}

/// The scorecard as text (or markdown tables).
// long: the composition, then one table per capture point; a table is one format call a row.
pub fn render(sc: &Scorecard, markdown: bool) -> String {
    let c = &sc.composition;
    let mut s = String::new();
    let join = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
    s += &format!(
        "corpus: {} cases, {} shapes ({}), programs: {}, RTTs (ms): {}\n",
        c.cases,
        c.shapes.len(),
        join(&c.shapes),
        join(&c.programs),
        c.rtts_ms.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
    );
    let waits: u64 = c.waits.values().sum();
    s += &format!("labelled: {waits} waits, {} negatives ({} short holds not scored)\n", c.negatives, c.short);
    for (cause, n) in &c.waits {
        s += &format!("  {cause:<24} {n}\n");
    }
    for p in Point::ALL {
        let Some(modes) = sc.points.get(&p.name()) else { continue };
        let empty = PointScore::default();
        let (pk, kn) = (modes.get("packets").unwrap_or(&empty), modes.get("kernel").unwrap_or(&empty));
        let causes: BTreeSet<&String> = pk.causes.keys().chain(kn.causes.keys()).collect();
        s += &format!("\ncapture point: {}\n", p.name());
        if markdown {
            s += "| cause | truth waits | packets: stalls named | precision | recall | kernel: stalls named | precision | recall |\n";
            s += "|---|---|---|---|---|---|---|---|\n";
        } else {
            s += &format!(
                "  {:<24} {:>6} | {:>6} {:>7} {:>7} | {:>6} {:>7} {:>7}\n",
                "cause", "truth", "named", "prec", "recall", "named", "prec", "recall"
            );
        }
        for cause in causes {
            let a = pk.causes.get(cause).copied().unwrap_or_default();
            let b = kn.causes.get(cause).copied().unwrap_or_default();
            let row = [
                a.truth.to_string(),
                a.named.to_string(),
                pct(a.precision()),
                pct(a.recall()),
                b.named.to_string(),
                pct(b.precision()),
                pct(b.recall()),
            ];
            if markdown {
                s += &format!("| {cause} | {} |\n", row.join(" | "));
            } else {
                s += &format!(
                    "  {cause:<24} {:>6} | {:>6} {:>7} {:>7} | {:>6} {:>7} {:>7}\n",
                    row[0], row[1], row[2], row[3], row[4], row[5], row[6]
                );
            }
        }
        let neg = |x: &PointScore| {
            format!(
                "{} of {} negatives named a stall, {} stalls matched no label",
                x.false_stalls, x.negatives, x.unmatched_stalls
            )
        };
        s += &format!("  packets: {}\n  kernel:  {}\n", neg(pk), neg(kn));
        let bands = |x: &PointScore| {
            BANDS
                .iter()
                .enumerate()
                .map(|(i, (n, _, _))| {
                    let (r, ok) = x.bands.get(i).copied().unwrap_or((0, 0));
                    format!(
                        "{n} {ok}/{r}{}",
                        if r > 0 { format!(" ({:.0}%)", ok as f64 * 100.0 / r as f64) } else { String::new() }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        s += &format!("  calibration, packets: {}\n  calibration, kernel:  {}\n", bands(pk), bands(kn));
    }
    s
}

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
    /// The lower of two runs' rates (a baseline kept as the worst of several runs).
    fn lower(self, o: Rates) -> Rates {
        let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        Rates {
            precision: min(self.precision, o.precision),
            recall: min(self.recall, o.recall),
            named: self.named.min(o.named),
            truth: self.truth.min(o.truth),
        }
    }
}

/// The committed baseline: per point, mode and cause, precision and recall with their support.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub points: BTreeMap<String, BTreeMap<String, BTreeMap<String, Rates>>>,
}

impl Baseline {
    pub fn of(sc: &Scorecard) -> Baseline {
        let points = sc
            .points
            .iter()
            .map(|(p, modes)| {
                let modes = modes
                    .iter()
                    .map(|(m, ps)| (m.clone(), ps.causes.iter().map(|(c, x)| (c.clone(), Rates::of(x))).collect()))
                    .collect();
                (p.clone(), modes)
            })
            .collect();
        Baseline { points }
    }

    /// Each rate the lower of this baseline's and `o`'s.
    pub fn lower(mut self, o: &Baseline) -> Baseline {
        for (p, modes) in &o.points {
            for (m, causes) in modes {
                for (c, r) in causes {
                    let e = self.points.entry(p.clone()).or_default().entry(m.clone()).or_default();
                    let v = e.get(c).map_or(*r, |x| x.lower(*r));
                    e.insert(c.clone(), v);
                }
            }
        }
        self
    }

    /// Where `now` falls more than `slack` (0.02 = 2 points) below this baseline, for causes
    /// with at least `support` labels (recall) or named records (precision) in both.
    pub fn regressions(&self, now: &Scorecard, slack: f64, support: u64) -> Vec<String> {
        let mut out = Vec::new();
        for (p, modes) in &self.points {
            for (m, causes) in modes {
                for (c, base) in causes {
                    let cur = now
                        .points
                        .get(p)
                        .and_then(|x| x.get(m))
                        .and_then(|x| x.causes.get(c))
                        .copied()
                        .unwrap_or_default();
                    let checks = [
                        ("precision", base.precision, cur.precision(), base.named.min(cur.named)),
                        ("recall", base.recall, cur.recall(), base.truth.min(cur.truth)),
                    ];
                    for (what, b, n, sup) in checks {
                        if let (Some(b), Some(n)) = (b, n) {
                            if sup >= support && n + slack < b {
                                out.push(format!("{p} {m} {c} {what}: {:.1}% < baseline {:.1}%", n * 100.0, b * 100.0));
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(named: u64, right: u64, truth: u64, found: u64) -> Scorecard {
        let mut sc = Scorecard::default();
        let ps = sc.points.entry("sender".into()).or_default().entry("packets".into()).or_default();
        ps.causes.insert("nagle-delayed-ack".into(), CauseScore { truth, found, named, right });
        sc
    }

    #[test]
    fn a_drop_of_more_than_two_points_with_support_is_a_regression() {
        let base = Baseline::of(&card(10, 10, 10, 9));
        assert!(base.regressions(&card(10, 10, 10, 9), 0.02, 5).is_empty());
        let r = base.regressions(&card(10, 9, 10, 9), 0.02, 5);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].contains("precision"));
        // Too few to judge: not compared.
        assert!(base.regressions(&card(4, 1, 4, 1), 0.02, 5).is_empty());
    }

    #[test]
    fn the_lower_of_two_runs_is_kept() {
        let b = Baseline::of(&card(10, 10, 10, 9)).lower(&Baseline::of(&card(10, 8, 10, 10)));
        let r = b.points["sender"]["packets"]["nagle-delayed-ack"];
        assert_eq!((r.precision, r.recall), (Some(0.8), Some(0.9)));
    }

    #[test]
    fn a_record_matches_the_nearest_label_within_the_tolerance() {
        let l = |t: u64| Label {
            held: Side::Client,
            kind: Kind::Wait,
            cause: Some(Cause::NagleDelayedAck),
            start: 0,
            end: 1,
            written_at: None,
            first_left: t,
            left_at: t,
            quiet_ns: 0,
            note: String::new(),
        };
        let (a, b) = (l(100_000_000), l(140_000_000));
        let v = |end_ns| Verdict {
            port: 1,
            held: trace::Endpoint::A,
            end_ns,
            length_ns: 1,
            kind: RecordKind::Stall,
            cause: Cause::NagleDelayedAck,
            confidence: 0.9,
        };
        let m = Match::new(Point::Sender, 0);
        assert_eq!(m.find(&v(101_000_000), &[&a, &b]).map(|x| x.left_at), Some(100_000_000));
        assert_eq!(m.find(&v(120_000_000), &[&a, &b]), None, "3 ms tolerance at rtt 0");
        let r = Match::new(Point::Receiver, 20_000_000);
        assert_eq!(r.find(&v(150_000_000), &[&a, &b]).map(|x| x.left_at), Some(140_000_000), "half an rtt later");
    }
}
