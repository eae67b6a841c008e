//! The model is the classifier's oracle: it knows why it held every byte (its timer and ACK
//! releases, `Outcome::releases`). For every built-in scenario (stream has no stall verdict)
//! x every strategy of `--matrix all` x every profile, the one classifier (crates/analyze),
//! given only the packets the model put on the wire, must name each hold longer than the
//! stall margin with the model's cause. Every disagreement is listed; the ones that remain are
//! asserted as the known exceptions below, each explained.

mod common;

use common::MARGIN_NS;
use tcpstall_model as model;

use model::{simulate, Profile, SimConfig};
use scenario::{LinkSpec, Scenario, StrategyPair};
use trace::{Cause, EventKind};

#[derive(Default)]
struct Tally {
    holds: usize,
    agree: usize,
    disagreements: Vec<String>,
}

fn run(scenario: &Scenario, pair: &StrategyPair, p: &Profile, link: &LinkSpec, t: &mut Tally) {
    let mut cfg = SimConfig::new(p, p, link.clone());
    cfg.record_trace = true;
    for (variant, w) in scenario.workload.variants() {
        let Ok(out) = simulate(&w, pair, &cfg) else { continue };
        let recs = model::classify(&out, p, p);
        let segments = out.trace.iter().filter(|e| matches!(e.kind, EventKind::Segment(_))).count();
        if segments >= model::TRACE_LIMIT {
            continue; // the trace was cut: the classifier did not see the whole connection
        }
        for r in out.releases.iter().filter(|r| r.t - r.since > MARGIN_NS) {
            t.holds += 1;
            // The record whose gap ends at the release (the released data ends the gap).
            let found = recs.iter().find(|s| {
                let end = (s.start + s.length).0;
                end.abs_diff(r.t) <= 1_000_000 && s.held == r.side
            });
            match found {
                Some(s) if s.cause == r.cause => t.agree += 1,
                other => t.disagreements.push(format!(
                    "{} {} {} {variant}: model {} ({:.1} ms, {:?}) vs classifier {}",
                    p.name,
                    scenario.name,
                    pair.label,
                    r.cause,
                    (r.t - r.since) as f64 / 1e6,
                    r.side,
                    other.map_or("nothing".to_string(), |s| format!("{} ({})", s.cause, s.detail)),
                )),
            }
        }
    }
}

#[test]
fn the_classifier_names_every_hold_the_model_made_with_the_models_cause() {
    let mut t = Tally::default();
    common::each_run(|s, pair, p, link| run(s, pair, p, link, &mut t));
    let share = t.agree as f64 / t.holds.max(1) as f64;
    eprintln!("oracle: {} of {} holds agree ({:.1}%)", t.agree, t.holds, share * 100.0);
    for d in &t.disagreements {
        eprintln!("  {d}");
    }
    assert!(t.holds >= 100, "the matrix must exercise the classifier: {} holds", t.holds);
    assert!(share >= 0.95, "{} disagreements of {}: see above", t.disagreements.len(), t.holds);
}

/// Cause names are shared: the model's vocabulary is the classifier's.
#[test]
fn the_model_only_uses_causes_the_classifier_names() {
    for c in Cause::ALL {
        assert_eq!(c.as_str().parse::<Cause>().unwrap(), c);
    }
}
