//! One analysis for every source: the capture analyser (crates/analyze), given only the model's
//! trace (segments, as a capture would show them, handshake included), must find the stalls the
//! model knows it caused (its ground-truth timer releases), one for one, with the same cause.

use tcpstall_model as model;

use model::{simulate, Profile, SimConfig};
use scenario::{LinkSpec, Scenario};
use trace::{Cause, EventKind};

fn check(scenario: &str, sets: &[&str], profile: &str, link: LinkSpec, expect: Option<Cause>) {
    let mut s = Scenario::builtin(scenario).unwrap();
    s.apply_sets(sets).unwrap();
    let p = Profile::builtin(profile).unwrap();
    let mut cfg = SimConfig::new(&p, &p, link);
    cfg.record_trace = true;
    cfg.call_ns = 2_000;
    let pair = s.matrix[0].clone();
    let out = simulate(&s.workload, &pair, &cfg).unwrap();
    let segments: Vec<_> = out.trace.iter().filter(|e| matches!(e.kind, EventKind::Segment(_))).cloned().collect();
    let a = analyze::analyze_events(segments, analyze::Config::default());
    for st in a.stalls().take(2) {
        eprintln!("  analyser: {:?} {:.1} ms: {}", st.cause, st.length.as_millis_f64(), st.detail);
    }
    // The workload's own sleeps (seed 002's interval) are application gaps, not TCP stalls: the
    // analyser rightly calls them so, and the model does not count them.
    let found: Vec<Cause> = a.stalls().map(|st| st.cause).filter(|&c| c != Cause::Application).collect();
    let truth: Vec<Cause> = out.releases.iter().filter(|r| r.t - r.since > 10_000_000).map(|r| r.cause).collect();
    eprintln!("{profile} {scenario} {sets:?}: analyser {found:?}; model {truth:?}");
    match expect {
        Some(c) => {
            assert!(!truth.is_empty() && truth.iter().all(|&t| t == c), "model: {truth:?}");
            assert_eq!(found.len(), truth.len(), "one stall found per timer hold: {found:?} vs {truth:?}");
            assert!(found.iter().all(|&f| f == c), "analyser says {found:?}, the model knows {c}");
        }
        None => {
            assert!(truth.is_empty(), "model: {truth:?}");
            assert!(found.is_empty(), "analyser found stalls the model did not cause: {found:?}");
        }
    }
}

fn lo() -> LinkSpec {
    LinkSpec { mtu: 1500, ..model::loopback_link() }
}

/// Seed 000 on Linux: Nagle + delayed ACK, twice per round after the first.
#[test]
fn seed_000_linux() {
    check("chunked", &["round=5"], "linux", lo(), Some(Cause::NagleDelayedAck));
}

/// Seed 004 on the classic stack, over a 10 ms link.
#[test]
fn seed_004_rfc_classic() {
    check("bulk-ack", &["rounds=4"], "rfc-classic", "rtt=10ms,mtu=1500".parse().unwrap(), Some(Cause::NagleDelayedAck));
    check("bulk-ack", &["rounds=4", "size=99900"], "rfc-classic", "rtt=10ms,mtu=1500".parse().unwrap(), None);
}

/// Seed 001 and 002 on Linux.
#[test]
fn seeds_001_002_linux() {
    check("multi-write", &["requests=5"], "linux", lo(), Some(Cause::NagleDelayedAck));
    check("burst", &["rounds=5"], "linux", lo(), Some(Cause::NagleDelayedAck));
}

/// No stall where the model has none.
#[test]
fn rr_has_none() {
    check("rr", &["rounds=200"], "linux", lo(), None);
}
