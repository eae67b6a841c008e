//! One advise session: the candidates run round-robin through the caller's [`Runner`] (the lab,
//! the model or a remote host: the binary injects it), their runs pooled, then ranked and put
//! into words as one [`AdviseDoc`]. Time and randomness come from the caller (the elapsed time,
//! the bootstrap's seed).

use rand::SeedableRng;
use report::advise::{AdviseDecision, AdviseDoc, AdviseRow, Interval, StallSource};
use report::{Report, RunResult};
use scenario::{Scenario, Side, SideOpts, StrategyPair};

use crate::pool::Pooled;
use crate::text::{self, View};
use crate::{candidates, Candidate, Lang};

/// What to advise on and how (the binary turns its flags into this).
#[derive(Debug, Clone)]
pub struct Request {
    /// The workload, its rounds per run already set.
    pub scenario: Scenario,
    /// Runs per candidate, interleaved round-robin.
    pub reps: u32,
    pub rounds: u32,
    /// On the model (crates/model) rather than real sockets.
    pub model: bool,
    /// The peer's stack when it is not the user's (model): only fixes on `own` are tried.
    pub peer_profile: Option<String>,
    /// The side the user can change (with `peer_profile`).
    pub own: Side,
    pub lang: Lang,
    /// The bootstrap's seed.
    pub seed: u64,
    /// Keep each candidate's first run with its packets (the HTML report).
    pub keep_first: bool,
    /// Sides whose writes the capture shows are separate replies: gathering them is a change
    /// the program cannot make (scenario::derive::separate_replies).
    pub separate_replies: Vec<Side>,
    /// Stop starting runs once another round-robin pass would end past this (seconds from the
    /// start, as the runner's clock tells: [`Runner::elapsed_s`]); None: run `reps` passes.
    pub budget_s: Option<f64>,
}

impl Request {
    /// The candidates to run: with a peer profile only the own side's fixes; busy-poll only
    /// over real sockets (the model has no wake-up to save).
    pub fn candidates(&self) -> Vec<Candidate> {
        candidates(&self.scenario, self.peer_profile.as_ref().map(|_| self.own), !self.model)
    }

    /// The model profiles, client:server (`linux`, or the peer's stack opposite the own side).
    pub fn model_profiles(&self) -> String {
        match (self.own, &self.peer_profile) {
            (_, None) => "linux".to_string(),
            (Side::Client, Some(peer)) => format!("linux:{peer}"),
            (Side::Server, Some(peer)) => format!("{peer}:linux"),
        }
    }

    /// The notes of a model run.
    pub fn model_notes(&self) -> Vec<String> {
        text::model_notes(self.own, self.peer_profile.as_deref())
    }
}

/// What runs one candidate's scenario once: the binary's lab, model or remote session.
pub trait Runner {
    /// One run of `one` (the workload with a single strategy pair), repetition `rep` (from 0);
    /// `keep`: keep its packets. Returns the report and, on the model, its recorded trace.
    fn run(&mut self, one: &Scenario, rep: u32, keep: bool) -> (Report, Vec<trace::Event>);
    /// The user asked to stop (Ctrl-C): no run starts, and the run in progress is not counted.
    fn cancelled(&self) -> bool;
    /// A run of `label` starts (progress).
    fn starting(&mut self, _label: &str) {}
    /// A run finished and was counted (progress).
    fn finished(&mut self) {}
    /// Seconds since the session started (the caller's clock: the budget's).
    fn elapsed_s(&self) -> f64 {
        0.0
    }
    /// Whether `run` takes a scenario of several strategy rows and reports one result per row
    /// in the matrix's order (the lab: timer-bound rows wait side by side, crates/lab
    /// schedule.rs); else each candidate is run alone.
    fn runs_rows_together(&self) -> bool {
        false
    }
}

/// A candidate's first run and its packets (for the HTML report).
pub type FirstRun = (RunResult, Vec<trace::Event>);

/// The runs of every candidate, pooled.
#[derive(Debug)]
pub struct Runs {
    pub candidates: Vec<Candidate>,
    pub pooled: Vec<Pooled>,
    pub first: Vec<Option<FirstRun>>,
    /// The runs' mode ("lab", "simulate").
    pub mode: String,
    /// Runs finished, of `total`.
    pub done: u64,
    pub total: u64,
    /// The error that stopped the runs: "LABEL (run N of M): ERROR".
    pub failure: Option<String>,
    /// Why the session ran fewer passes than `reps` (the ranking separated, the budget).
    pub stopped: Option<String>,
}

impl Runs {
    /// The workload as written has at least one run (else nothing can be ranked against it).
    pub fn as_written_ran(&self) -> bool {
        self.pooled.first().is_some_and(|p| p.rows > 0)
    }

    /// The note of an interrupted session.
    pub fn interrupted(&self, signal: i32) -> String {
        format!(
            "interrupted by signal {signal} after {} of {} runs: the figures are those of the runs finished",
            self.done, self.total
        )
    }

    /// The note of a session stopped by a failing run.
    pub fn stopped_early(&self) -> Option<String> {
        self.failure.as_ref().map(|f| format!("the run stopped early: {f}; the figures are those of the runs finished"))
    }

    /// How the session ended (the caller's stop `signal` first, then a failed run) and the
    /// notes that say so in the advice; Err when it stopped before the workload as written had
    /// a run, so there is nothing to rank.
    pub fn ending(&self, signal: Option<i32>) -> Result<(Ending, Vec<String>), NothingToRank> {
        let ending = match (signal, &self.failure) {
            (Some(signal), _) => Ending::Interrupted { signal, msg: self.interrupted(signal) },
            (None, Some(f)) => Ending::Failed(f.clone()),
            (None, None) => Ending::Complete,
        };
        if !self.as_written_ran() {
            match ending {
                Ending::Interrupted { signal, msg } => return Err(NothingToRank::Interrupted { signal, msg }),
                Ending::Failed(f) => return Err(NothingToRank::Failed(f)),
                Ending::Complete => {}
            }
        }
        let mut notes = Vec::new();
        if let Ending::Interrupted { msg, .. } = &ending {
            notes.push(msg.clone());
        }
        notes.extend(self.stopped_early());
        notes.extend(self.stopped.clone());
        Ok((ending, notes))
    }
}

/// A session that stopped before the workload as written had a run: nothing to rank.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NothingToRank {
    #[error("{msg}: the workload as written has none, so there is nothing to rank")]
    Interrupted { signal: i32, msg: String },
    #[error("{0}")]
    Failed(String),
}

/// How an advise session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every run finished.
    Complete,
    /// Stopped by this signal; `msg` says after how many runs ([`Runs::interrupted`]).
    Interrupted { signal: i32, msg: String },
    /// A run failed (the message); the runs before it count.
    Failed(String),
}

/// Passes every candidate runs before the ranking may be called separated.
pub const MIN_REPS: u32 = 2;

/// Run every candidate (`req.candidates()`) up to `req.reps` times, round-robin (repetition r
/// of every candidate before repetition r + 1 of any, so drift hits all alike), until done,
/// cancelled or a run fails; adaptive: after [`MIN_REPS`] passes, stop once a pass leaves the
/// decision's top group as the pass before left it (`top_group`), or when another pass would
/// end past the budget (its length the mean pass so far).
pub fn measure(req: &Request, candidates: Vec<Candidate>, runner: &mut impl Runner) -> Runs {
    let mut m = Runs {
        pooled: candidates.iter().map(|_| Pooled::default()).collect(),
        first: candidates.iter().map(|_| None).collect(),
        mode: String::from(if req.model { "model" } else { "lab" }),
        done: 0,
        total: u64::from(req.reps) * candidates.len() as u64,
        failure: None,
        stopped: None,
        candidates,
    };
    let mut top: Option<Vec<String>> = None;
    for rep in 0..req.reps {
        let ok = if runner.runs_rows_together() {
            !runner.cancelled() && run_pass(req, runner, &mut m, rep)
        } else {
            (0..m.candidates.len()).all(|k| !runner.cancelled() && run_one(req, runner, &mut m, k, rep))
        };
        if !ok {
            return m;
        }
        let passes = rep + 1;
        if passes == req.reps {
            break;
        }
        let now = top_group(req, &m);
        if passes >= MIN_REPS && top.as_ref() == Some(&now) {
            m.stopped = Some(format!(
                "stopped after {passes} runs per candidate of up to {}: the ranking's first place and its tie \
                 held from one pass to the next",
                req.reps
            ));
            break;
        }
        top = Some(now);
        let elapsed = runner.elapsed_s();
        if let Some(b) = req.budget_s.filter(|&b| elapsed + elapsed / f64::from(passes) > b) {
            m.stopped = Some(format!(
                "stopped after {passes} runs per candidate of up to {}: another pass would end past the budget of \
                 {b:.0} s (--budget for more)",
                req.reps
            ));
            break;
        }
    }
    m
}

/// The labels of the decision's top group (the declared tie) on the runs so far: what
/// [`measure`] watches to call the ranking separated.
fn top_group(req: &Request, m: &Runs) -> Vec<String> {
    let messages = req.scenario.workload.as_exchange().map_or(1, |e| e.turns.len()).max(1);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(req.seed);
    let ran: Vec<usize> = (0..m.candidates.len()).filter(|&k| m.pooled[k].rows > 0).collect();
    let scored: Vec<crate::Scored> =
        ran.iter().map(|&k| score(req, &m.candidates[k], &m.pooled[k], messages, &mut rng).0).collect();
    crate::decide(&scored).tie.iter().map(|&i| scored[i].label.clone()).collect()
}

/// `pair` on top of the options the workload runs with as written (its matrix's first pair: a
/// capture's shown options); the pair alone when they do not combine.
pub fn on_top_of(pair: &StrategyPair, base: Option<&StrategyPair>) -> StrategyPair {
    let Some(b) = base else { return pair.clone() };
    let join = |a: &SideOpts, b: &SideOpts| SideOpts::new(a.opts().iter().chain(b.opts()).copied().collect());
    match (join(&pair.client, &b.client), join(&pair.server, &b.server)) {
        (Ok(c), Ok(s)) => StrategyPair::new(c, s),
        _ => pair.clone(),
    }
}

/// One pass: every candidate as one row of one scenario, run together (the lab runs the rows
/// that wait on timers side by side). False: stop (cancelled, failed).
fn run_pass(req: &Request, runner: &mut impl Runner, m: &mut Runs, rep: u32) -> bool {
    let base = req.scenario.matrix.first();
    let mut all = req.scenario.clone();
    all.matrix = m.candidates.iter().map(|c| on_top_of(&c.pair, base)).collect();
    runner.starting(&format!("{} candidates side by side", m.candidates.len()));
    let keep = req.keep_first && rep == 0;
    let (report, _) = runner.run(&all, rep, keep);
    if runner.cancelled() {
        return false;
    }
    if let Some(e) = report.errors.first() {
        m.failure = Some(format!("run {} of {}: {e}", rep + 1, req.reps));
        return false;
    }
    m.mode.clone_from(&report.mode);
    for (k, r) in report.results.iter().enumerate().take(m.candidates.len()) {
        m.pooled[k].add(r, &report.mode);
        if keep {
            let mut r = r.clone();
            let events = std::mem::take(&mut r.packets);
            r.strategy.clone_from(&m.candidates[k].pair.label);
            m.first[k] = Some((r, events));
        }
        runner.finished();
        m.done += 1;
    }
    true
}

/// Candidate `k`'s repetition `rep`: pooled when it finished. False: stop (cancelled, failed).
fn run_one(req: &Request, runner: &mut impl Runner, m: &mut Runs, k: usize, rep: u32) -> bool {
    let c = &m.candidates[k];
    runner.starting(&c.pair.label);
    let mut one = req.scenario.clone();
    one.matrix = vec![on_top_of(&c.pair, req.scenario.matrix.first())];
    let keep = req.keep_first && rep == 0;
    let (report, trace) = runner.run(&one, rep, keep);
    if runner.cancelled() {
        // The run in progress was cut short: it is not counted.
        return false;
    }
    if let Some(e) = report.errors.first() {
        // Stop, but keep what was measured: the runs finished are ranked and printed.
        m.failure = Some(format!("{} (run {} of {}): {e}", c.pair.label, rep + 1, req.reps));
        return false;
    }
    m.mode.clone_from(&report.mode);
    for r in &report.results {
        m.pooled[k].add(r, &report.mode);
    }
    if keep {
        if let Some(r) = report.results.first() {
            let mut r = r.clone();
            let events = if trace.is_empty() { std::mem::take(&mut r.packets) } else { trace };
            r.strategy.clone_from(&c.pair.label);
            m.first[k] = Some((r, events));
        }
    }
    runner.finished();
    m.done += 1;
    true
}

/// The advice could not be formed.
#[derive(Debug, thiserror::Error)]
pub enum AdviseError {
    /// No run of the workload as written finished: nothing to rank the fixes against.
    #[error("no as-written row")]
    NoAsWritten,
}

/// The document, and each candidate's first run in rank order (with `keep_first`).
#[derive(Debug)]
pub struct Advice {
    pub doc: AdviseDoc,
    pub first_runs: Vec<FirstRun>,
}

/// One candidate scored: the ranking's input and the row printed.
fn score(
    req: &Request,
    c: &Candidate,
    p: &Pooled,
    messages: usize,
    rng: &mut rand::rngs::SmallRng,
) -> (crate::Scored, AdviseRow) {
    let q = crate::bootstrap_quantiles(&p.runs, &[0.5, 0.99, 0.999], 1000, rng);
    let us = |i: Interval| Interval { est: i.est / 1e3, lo: i.lo / 1e3, hi: i.hi / 1e3 };
    let scored = crate::Scored {
        label: c.pair.label.clone(),
        client: c.pair.client.opts().to_vec(),
        server: c.pair.server.opts().to_vec(),
        cpu_us_per_round: p.cpu_us_per_round(),
        stalls: p.stalls,
        rounds: p.rounds,
        p99: us(q[1]),
        segs_per_round: p.per_round(p.segs),
        bytes_per_round: p.per_round(p.wire_bytes),
        change: c.change,
        impractical: req.separate_replies.iter().any(|&side| {
            let o = if side == Side::Client { &c.pair.client } else { &c.pair.server };
            o.has(scenario::Opt::Writev) || o.has(scenario::Opt::Buffer)
        }),
    };
    let names = |o: &[scenario::Opt]| o.iter().map(|o| o.as_str().to_string()).collect();
    let row = AdviseRow {
        rank: 0,
        tied: false,
        label: c.pair.label.clone(),
        client: names(c.pair.client.opts()),
        server: names(c.pair.server.opts()),
        runs: p.rows,
        rounds: p.rounds,
        stalls: p.stalls,
        stalls_per_round: p.per_round(p.stalls),
        stall_source: p.stall_source(),
        stalls_by_cause: p.causes.clone(),
        p50_us: us(q[0]),
        p99_us: us(q[1]),
        p999_us: us(q[2]),
        segments_per_message: p.per_round(p.segs) / messages as f64,
        wire_bytes_per_message: p.per_round(p.wire_bytes) / messages as f64,
        cpu_us_per_round: p.cpu_us_per_round(),
        change_size: c.change,
    };
    (scored, row)
}

/// Rank the candidates that ran, decide, and say it: the document `tcpstall advise` prints.
/// `notes`: the caller's (where the workload came from, the link, an interruption);
/// `elapsed_s`: the whole command's wall time.
pub fn conclude(req: &Request, m: Runs, mut notes: Vec<String>, elapsed_s: f64) -> Result<Advice, AdviseError> {
    let s = &req.scenario;
    let exchange = s.workload.as_exchange();
    let messages = exchange.as_ref().map_or(1, |e| e.turns.len()).max(1);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(req.seed);
    // A candidate never run (the run stopped before it) has no figures to rank.
    let ran: Vec<usize> = (0..m.candidates.len()).filter(|&k| m.pooled[k].rows > 0).collect();
    let (scored, mut rows): (Vec<_>, Vec<_>) =
        ran.iter().map(|&k| score(req, &m.candidates[k], &m.pooled[k], messages, &mut rng)).unzip();
    let decided = crate::decide(&scored);
    for (pos, &i) in decided.order.iter().enumerate() {
        rows[i].rank = pos + 1;
        rows[i].tied = decided.tie.contains(&i);
    }
    let decision = AdviseDecision {
        tie: decided.tie.iter().map(|&i| scored[i].label.clone()).collect(),
        chosen: decided.chosen().map(|i| scored[i].label.clone()).unwrap_or_default(),
        rule: decided.rule.as_str(),
        rules: crate::RULES.iter().map(|r| r.as_str()).collect(),
        reason: decided.reason(&scored),
    };
    if rows.iter().any(|r| r.stall_source == StallSource::SlowSamples) {
        notes.push(text::SLOW_SAMPLES_NOTE.into());
    }
    let views: Vec<View> = decided
        .order
        .iter()
        .map(|&i| View { client: &scored[i].client, server: &scored[i].server, row: &rows[i] })
        .collect();
    let base = views.iter().find(|v| v.client.is_empty() && v.server.is_empty()).ok_or(AdviseError::NoAsWritten)?;
    // Classified stalls are TCP's by their signature: any counts. Slow samples can be a
    // scheduling hiccup: only more than the rare rate counts.
    let as_written_stalls = match base.row.stall_source {
        StallSource::StallRecords => base.row.stalls > 0,
        StallSource::SlowSamples => base.row.stalls_per_round > crate::rank::RARE,
    };
    let writes_per_msg = |side: Side| {
        exchange
            .as_ref()
            .map_or(1, |e| e.turns.iter().filter(|t| t.side == side).map(|t| t.writes.len()).max().unwrap_or(1))
    };
    let (recommendation, code) = text::recommend(&views, req.lang, writes_per_msg);
    let first_runs = first_runs_in_rank_order(&m, &ran, &decided.order);
    let mut ranked: Vec<AdviseRow> = rows;
    ranked.sort_by_key(|r| r.rank);
    let doc = AdviseDoc {
        tool: "tcpstall",
        mode: m.mode,
        scenario: s.name.clone(),
        workload: exchange.as_ref().map_or_else(|| s.workload.params_json().to_string(), text::short_inline),
        peer_profile: req.peer_profile.clone(),
        runs_per_candidate: req.reps,
        rounds_per_run: req.rounds,
        messages_per_round: messages,
        elapsed_s,
        as_written_stalls,
        ranking: ranked,
        decision,
        recommendation,
        lang: req.lang.as_str().into(),
        code,
        notes,
    };
    Ok(Advice { doc, first_runs })
}

/// The candidates' first runs (those kept), best first. `ran[i]`: the candidate of scored row i.
fn first_runs_in_rank_order(m: &Runs, ran: &[usize], order: &[usize]) -> Vec<FirstRun> {
    order.iter().filter_map(|&i| m.first[ran[i]].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(as_written_rows: u32, failure: Option<&str>) -> Runs {
        let pooled = Pooled { rows: as_written_rows, ..Pooled::default() };
        let failure = failure.map(str::to_string);
        Runs {
            candidates: Vec::new(),
            pooled: vec![pooled],
            first: Vec::new(),
            mode: "lab".into(),
            done: 3,
            total: 10,
            failure,
            stopped: None,
        }
    }

    #[test]
    fn an_ending_ranks_what_ran_or_says_there_is_nothing() {
        assert_eq!(measured(1, None).ending(None), Ok((Ending::Complete, Vec::new())));
        let (e, notes) = measured(1, Some("x (run 4 of 10): boom")).ending(Some(2)).unwrap();
        assert!(matches!(e, Ending::Interrupted { signal: 2, .. }), "a signal comes first: {e:?}");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("interrupted by signal 2 after 3 of 10 runs"), "{notes:?}");
        let (e, _) = measured(1, Some("boom")).ending(None).unwrap();
        assert_eq!(e, Ending::Failed("boom".into()));
        assert_eq!(measured(0, Some("boom")).ending(None), Err(NothingToRank::Failed("boom".into())));
        let e = measured(0, None).ending(Some(15)).unwrap_err().to_string();
        assert!(
            e.ends_with("of the runs finished: the workload as written has none, so there is nothing to rank"),
            "{e}"
        );
    }
}
