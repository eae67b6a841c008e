//! A run that keeps neither its trace nor its samples (`model::report_kept`, what `tcpstall
//! simulate` does without --trace/--pcap/--report: memory flat in rounds) reports what a run
//! that keeps everything reports: the same rows, stall records, verdicts, slow samples and
//! rounds, and percentiles within the lab's histogram precision (3 significant digits).

use model::{report, report_kept, Keep, Profile, RunSpec};
use scenario::{LinkSpec, Scenario};
use tcpstall_model as model;

fn spec() -> RunSpec {
    let p = Profile::builtin("linux").unwrap();
    let link = LinkSpec::default();
    RunSpec {
        profiles: vec![(p.clone(), p)],
        link_label: link.to_string(),
        link,
        seed: 1,
        mss: None,
        timestamps: None,
        call_ns: 2_000,
    }
}

#[test]
fn a_run_that_keeps_nothing_reports_what_a_run_that_keeps_everything_does() {
    for (name, sets) in
        [("chunked", &["round=30"][..]), ("multi-write", &["requests=30"][..]), ("rr", &["rounds=500"][..])]
    {
        let mut s = Scenario::builtin(name).unwrap();
        s.apply_sets(sets).unwrap();
        let (full, _) = report(&s, &s.matrix, &spec(), true);
        let (flat, outs) = report_kept(&s, &s.matrix, &spec(), Keep { trace: false, samples: false });
        assert!(outs.iter().all(|o| o.trace.is_empty() && o.samples.is_empty()), "{name}: nothing kept");
        assert_eq!(full.results.len(), flat.results.len(), "{name}");
        for (a, b) in full.results.iter().zip(&flat.results) {
            let what = format!("{name} {}", a.strategy);
            assert_eq!(a.rounds, b.rounds, "{what}");
            assert_eq!(a.stall_records, b.stall_records, "{what}");
            assert_eq!(a.verdict, b.verdict, "{what}");
            assert_eq!(a.slow_samples, b.slow_samples, "{what}");
            assert_eq!(a.wire, b.wire, "{what}");
            for (x, y) in [(a.latency_us.p50, b.latency_us.p50), (a.latency_us.p99, b.latency_us.p99)] {
                assert!((x - y).abs() <= x.abs() * 0.002 + 0.001, "{what}: {x} against {y}");
            }
        }
    }
}
