//! A whole advise session on the model (deterministic) through a test [`Runner`]: seed 001's
//! request (Nagle x delayed ACK, RFC 896 / RFC 1122 4.2.3.2) is fixed by a client-side
//! gathered write, chosen among the tied fixes by the written rule; a cancelled or failing
//! session keeps the runs finished.

use report::Report;
use scenario::{Scenario, Side};
use tcpstall_advise::{conclude, measure, Lang, Request, Runner};

struct ModelRunner {
    spec: model::RunSpec,
    /// Cancel once this many runs have finished.
    cancel_after: Option<usize>,
    /// Fail the run with this index (0-based).
    fail_at: Option<usize>,
    started: Vec<String>,
    finished: usize,
    /// The test's clock: seconds each finished run takes.
    secs_per_run: f64,
    /// Run a pass's candidates as rows of one scenario.
    together: bool,
}

impl ModelRunner {
    fn new() -> ModelRunner {
        let linux = model::Profile::builtin("linux").unwrap();
        let spec = model::RunSpec {
            profiles: vec![(linux.clone(), linux)],
            link: model::loopback_link(),
            link_label: "loopback".into(),
            seed: 1,
            mss: None,
            timestamps: None,
            call_ns: 2_000,
        };
        ModelRunner {
            spec,
            cancel_after: None,
            fail_at: None,
            started: Vec::new(),
            finished: 0,
            secs_per_run: 0.0,
            together: false,
        }
    }
}

impl Runner for ModelRunner {
    fn run(&mut self, one: &Scenario, rep: u32, keep: bool) -> (Report, Vec<trace::Event>) {
        let spec = model::RunSpec { seed: u64::from(rep) + 1, ..self.spec.clone() };
        let (mut r, mut out) = model::report(one, &one.matrix, &spec, keep);
        if self.fail_at == Some(self.started.len() - 1) {
            r.errors.push("the peer went away".into());
        }
        let trace = if keep && !out.is_empty() { out.swap_remove(0).trace } else { Vec::new() };
        (r, trace)
    }
    fn cancelled(&self) -> bool {
        self.cancel_after.is_some_and(|n| self.finished >= n)
    }
    fn starting(&mut self, label: &str) {
        self.started.push(label.to_string());
    }
    fn finished(&mut self) {
        self.finished += 1;
    }
    fn elapsed_s(&self) -> f64 {
        self.finished as f64 * self.secs_per_run
    }
    fn runs_rows_together(&self) -> bool {
        self.together
    }
}

/// Issue 34's budget: passes stop once the decision's top group holds from one pass to the
/// next (after two), or when another pass would end past the budget; a pass's candidates run
/// as rows of one scenario (the lab's side by side) pool the same figures.
#[test]
fn passes_stop_when_the_ranking_holds_or_the_budget_would_be_passed() {
    let mut req = seed_001();
    req.reps = 5;
    let mut r = ModelRunner::new();
    let n = req.candidates().len() as u64;
    let m = measure(&req, req.candidates(), &mut r);
    assert_eq!(m.done, 2 * n, "the model is deterministic: the top holds after two passes");
    assert!(m.stopped.as_deref().unwrap_or("").contains("held from one pass to the next"), "{:?}", m.stopped);
    let (_, notes) = m.ending(None).unwrap();
    assert!(notes.iter().any(|n| n.starts_with("stopped after 2 runs per candidate of up to 5")), "{notes:?}");
    // A pass of 10 s a run: one pass fits a budget of 1.5 passes, a second would not.
    req.budget_s = Some(15.0 * n as f64);
    let mut r = ModelRunner { secs_per_run: 10.0, ..ModelRunner::new() };
    let m = measure(&req, req.candidates(), &mut r);
    assert_eq!(m.done, n);
    assert!(m.stopped.as_deref().unwrap_or("").contains("past the budget"), "{:?}", m.stopped);
    // Together: one run per pass, the same pooled rows and decision.
    req.budget_s = None;
    let mut a = ModelRunner::new();
    let mut b = ModelRunner { together: true, ..ModelRunner::new() };
    let (ma, mb) = (measure(&req, req.candidates(), &mut a), measure(&req, req.candidates(), &mut b));
    assert_eq!(b.started.len(), 2, "{:?}", b.started);
    assert_eq!(ma.done, mb.done);
    let rows = |m: &tcpstall_advise::Runs| m.pooled.iter().map(|p| (p.rows, p.stalls)).collect::<Vec<_>>();
    assert_eq!(rows(&ma), rows(&mb));
    let da = conclude(&req, ma, Vec::new(), 1.0).unwrap();
    let db = conclude(&req, mb, Vec::new(), 1.0).unwrap();
    assert_eq!(da.doc.decision.chosen, db.doc.decision.chosen);
}

fn seed_001() -> Request {
    let mut s = Scenario::from_exchange(
        "exchange",
        "",
        scenario::Exchange::parse_inline("client 275,24,292; server 100").unwrap(),
    );
    s.apply_sets(&["rounds=10".to_string()]).unwrap();
    Request {
        scenario: s,
        reps: 2,
        rounds: 10,
        model: true,
        peer_profile: None,
        own: Side::Client,
        lang: Lang::C,
        seed: 1,
        keep_first: true,
        separate_replies: Vec::new(),
        budget_s: None,
    }
}

#[test]
fn seed_001_is_fixed_by_the_clients_gathered_write_by_rule() {
    let req = seed_001();
    let mut runner = ModelRunner::new();
    let cands = req.candidates();
    let n = cands.len();
    let m = measure(&req, cands, &mut runner);
    // Round-robin: every candidate's first run before any second one.
    assert_eq!(runner.started.len(), 2 * n);
    assert_eq!(runner.started[..n], runner.started[n..]);
    assert_eq!((m.done, m.total, m.failure.as_deref()), (2 * n as u64, 2 * n as u64, None));
    let a = conclude(&req, m, Vec::new(), 1.5).unwrap();
    let d = &a.doc;
    assert_eq!(d.decision.chosen, "client:writev", "{:#?}", d.decision);
    assert_eq!(d.decision.rule, "gathered-write");
    assert_eq!((d.ranking[0].rank, d.ranking[0].tied), (1, true));
    assert!(d.as_written_stalls);
    let base = d.ranking.iter().find(|r| r.label == "default").unwrap();
    assert_eq!((base.runs, base.rounds, base.stalls), (2, 20, 20), "{base:#?}");
    assert_eq!(base.stalls_by_cause.get("nagle-delayed-ack"), Some(&20));
    assert!(d.recommendation.starts_with("Recommendation: change the code on the client side"));
    assert!(d.code.starts_with("client side (writev), c:\n"), "{}", d.code);
    assert_eq!((d.messages_per_round, d.elapsed_s), (2, 1.5));
    // Each candidate's first run, in rank order, for the HTML report.
    assert_eq!(a.first_runs.len(), n);
    assert_eq!(a.first_runs[0].0.strategy, "client:writev");
}

#[test]
fn a_cancelled_or_failing_session_keeps_the_runs_finished() {
    let req = seed_001();
    let mut runner = ModelRunner { cancel_after: Some(3), ..ModelRunner::new() };
    let m = measure(&req, req.candidates(), &mut runner);
    assert_eq!(m.done, 3);
    assert!(m.as_written_ran());
    assert!(m.interrupted(2).starts_with("interrupted by signal 2 after 3 of "), "{}", m.interrupted(2));
    let a = conclude(&req, m, Vec::new(), 0.0).unwrap();
    assert_eq!(a.doc.ranking.len(), 3);

    let mut runner = ModelRunner { fail_at: Some(1), ..ModelRunner::new() };
    let m = measure(&req, req.candidates(), &mut runner);
    let second = &runner.started[1];
    assert_eq!(m.failure, Some(format!("{second} (run 1 of 2): the peer went away")));
    assert_eq!(m.done, 1);
    assert!(m.stopped_early().unwrap().starts_with("the run stopped early: "));

    // Nothing of the workload as written: nothing to rank against.
    let mut runner = ModelRunner { fail_at: Some(0), ..ModelRunner::new() };
    let m = measure(&req, req.candidates(), &mut runner);
    assert!(!m.as_written_ran());
    assert!(conclude(&req, m, Vec::new(), 0.0).is_err());
}
