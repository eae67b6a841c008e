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
    pub fn add(&mut self, o: &CauseScore) {
        self.truth += o.truth;
        self.found += o.found;
        self.named += o.named;
        self.right += o.right;
    }
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

impl PointScore {
    /// Adds another (case, side)'s counts.
    pub fn add(&mut self, o: PointScore) {
        for (c, x) in &o.causes {
            self.causes.entry(c.clone()).or_default().add(x);
        }
        self.negatives += o.negatives;
        self.false_stalls += o.false_stalls;
        self.unmatched_stalls += o.unmatched_stalls;
        if self.bands.len() < o.bands.len() {
            self.bands.resize(o.bands.len(), (0, 0));
        }
        for (b, x) in self.bands.iter_mut().zip(&o.bands) {
            b.0 += x.0;
            b.1 += x.1;
        }
        self.mismatches.extend(o.mismatches);
    }
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
    /// The same counts per case: case -> point -> mode -> cause (the baseline's strata).
    pub cases: BTreeMap<String, Strata>,
}

/// Point -> mode -> cause -> counts.
pub type Strata = BTreeMap<String, BTreeMap<String, BTreeMap<String, CauseScore>>>;

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
                let m = Match { case: meta.case.name.clone(), ..Match::new(point, meta.rtt_ns) };
                let mut one = PointScore::default();
                tally(&mut one, &recs, &ls, &m);
                let per_case = sc.cases.entry(meta.case.name.clone()).or_default();
                let pc = per_case.entry(point.name()).or_default().entry(mode.into()).or_default();
                for (c, x) in &one.causes {
                    pc.entry(c.clone()).or_default().add(x);
                }
                sc.points.entry(point.name()).or_default().entry(mode.into()).or_default().add(one);
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
// long: one pass over the records (precision, calibration, mismatches) and one over the labels
// (recall, misses); the two share the matches.
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
        if let (false, Kind::Wait, Some(c)) = (f, l.kind, l.cause) {
            let said = recs
                .iter()
                .find(|v| m.find(v, labels).is_some_and(|x| std::ptr::eq(x, *l)))
                .map_or("no record".to_string(), |v| {
                    format!("{} {} {:.2}", v.kind.as_str(), v.cause.as_str(), v.confidence)
                });
            ps.mismatches.push(format!(
                "{} {:?} missed {} at {}: classifier said {said}",
                m.case,
                l.held,
                c.as_str(),
                l.left_at
            ));
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
    if markdown {
        let per: Vec<String> = c.waits.iter().map(|(cause, n)| format!("{cause} {n}")).collect();
        s += &format!("waits by truth cause: {}\n", per.join(", "));
    } else {
        for (cause, n) in &c.waits {
            s += &format!("  {cause:<24} {n}\n");
        }
    }
    for p in Point::ALL {
        let Some(modes) = sc.points.get(&p.name()) else { continue };
        let empty = PointScore::default();
        let (pk, kn) = (modes.get("packets").unwrap_or(&empty), modes.get("kernel").unwrap_or(&empty));
        let causes: BTreeSet<&String> = pk.causes.keys().chain(kn.causes.keys()).collect();
        if markdown {
            s += &format!("\n**capture point: {}**\n\n", p.name());
        } else {
            s += &format!("\ncapture point: {}\n", p.name());
        }
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
        let lead = if markdown { "\n- " } else { "  " };
        s += &format!("{lead}packets: {}\n{}kernel:  {}\n", neg(pk), lead.trim_start_matches('\n'), neg(kn));
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
        let lead = lead.trim_start_matches('\n');
        s += &format!("{lead}calibration, packets: {}\n{lead}calibration, kernel:  {}\n", bands(pk), bands(kn));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
