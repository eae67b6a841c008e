//! `tcpstall advise`: run a workload as written and with each candidate fix, interleaved, and
//! say which change to make on which side, how sure we are, and the code for it.

use std::collections::BTreeMap;
use std::time::Instant;

use advise::{candidates, Candidate};
use anyhow::{bail, Context};
use rand::SeedableRng;
use report::RunResult;
use scenario::{Scenario, Side};
use serde::Serialize;

use super::output::{self, OutputFormat};

const EXAMPLES: &str = "\
Examples:
  tcpstall advise --exchange \"client 275,24,292; server 100\"
      seed 001's request on a reused connection: which fix, on which side
  tcpstall advise multi-write --lang go     the same built-in, the code in Go
  tcpstall advise my-service.toml --fail-on-stall
      a CI guard: exit 3 when the write pattern as written stalls
  tcpstall advise chunked --model --peer-profile macos
      the peer is a macOS stack (model): advice for the Linux side
  tcpstall advise burst --format json       the whole ranking as JSON
  tcpstall advise multi-write --report advise.html
      the ranking with its intervals as error bars, the code, and each candidate's first run

Every candidate (the workload as written, each strategy alone on the side it applies to, and
the pairs that make sense) runs --reps times, round-robin, so drift hits all alike. Latency
intervals are 95% two-stage bootstrap intervals over runs and rounds. Ranking: stalls removed
first, then p99; candidates whose p99 intervals overlap the best one's are a declared tie, and
among them the smallest change comes first, by these rules in order: no busy-poll unless it
alone removes the wait; fewest sides changed; a gathered write before a socket option; portable
(TCP_NODELAY, writev) before Linux/FreeBSD-only (MSG_MORE) before Linux-only (TCP_CORK,
TCP_QUICKACK, busy-poll); less CPU per round; fewer segments; the smaller code change. The
output names the tie and the rule that chose. Stalls are the classifier's stall records when
the rows carry them (model; lab with capture), else the lab's slow samples (waits over the
stall threshold), and the output says which. Ctrl-C (or SIGTERM) stops the run in progress and
ranks the runs finished (exit 128 + the signal: 130, 143).";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct AdviseArgs {
    /// Workload: a built-in scenario name, a scenario FILE.toml, or a CAPTURE (.pcap/.pcapng:
    /// its exchange is derived as `tcpstall replay` does) [default: multi-write]
    pub scenario: Option<String>,
    /// With a CAPTURE: the flow to use, ADDR:PORT-ADDR:PORT (default: the most stall time)
    #[arg(long, value_name = "FLOW")]
    pub flow: Option<String>,
    /// With a CAPTURE: only flows with this port
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Run behind an emulated link (the lab's SPEC; with a CAPTURE whose RTT is above 1 ms the
    /// default is rtt=THAT)
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,
    /// The workload inline: turns separated by `;`, e.g. "client 275,24,292; server 100"
    #[arg(long, value_name = "TURNS")]
    pub exchange: Option<String>,
    /// Override a workload parameter (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Measured rounds per run (each candidate runs --reps times)
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub rounds: u32,
    /// Runs per candidate, interleaved round-robin with the other candidates
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub reps: u32,
    /// Run on the model (crates/model) instead of real sockets
    #[arg(long)]
    pub model: bool,
    /// The other side is this stack (macos, windows, freebsd, rfc-classic, linux-2.6): it runs in
    /// the model, and only fixes on --side are tried
    #[arg(long, value_name = "NAME")]
    pub peer_profile: Option<String>,
    /// The side you can change when the peer is not yours (with --peer-profile)
    #[arg(long, value_name = "client|server", default_value = "client")]
    pub side: String,
    /// Language of the code shown: c, go, rust, python, java, node
    #[arg(long, value_name = "LANG", default_value = "c")]
    pub lang: String,
    /// Exit 3 when the workload as written stalls: any classified stall record, or slow samples
    /// in more than 2% of its rounds (the lab without capture)
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Seed of the bootstrap's random resampling
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Output format: table or json
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
    /// Write a self-contained HTML report to FILE: the ranking with its 95% intervals as error
    /// bars, the recommendation and its code, and each candidate's first run (latency CDF, wire
    /// cost, stall records with ladders)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub remote: super::remote_lab::RemoteArgs,
}

/// What every run of one candidate measured, pooled.
#[derive(Debug, Default)]
struct Pooled {
    runs: Vec<Vec<u64>>,
    rounds: u64,
    stalls: u64,
    /// Stall records by cause (classified rows only).
    causes: BTreeMap<String, u64>,
    /// Rows whose stalls are slow samples (no stall records: the lab without capture).
    unclassified_rows: u32,
    segs: u64,
    wire_bytes: u64,
    rows: u32,
    /// Both sides' CPU (µs) and the rounds it covers, from rows that measured it (lab).
    cpu_us: f64,
    cpu_rounds: u64,
}

impl Pooled {
    fn add(&mut self, r: &RunResult, mode: &str) {
        self.runs.push(r.samples_ns.clone());
        self.rounds += r.rounds;
        self.rows += 1;
        self.segs += r.wire.client.segs_out + r.wire.server.segs_out;
        self.wire_bytes += r.wire.client.wire_bytes + r.wire.server.wire_bytes;
        if let Some(c) = &r.cpu {
            self.cpu_us += c.client_cpu_us + c.server_cpu_us;
            self.cpu_rounds += r.rounds;
        }
        // A lab row without its packets (no capture) has no stall records: its stall count is
        // its slow samples. Stalls whose mechanism the packets do not show (`unknown`) do not
        // count against a candidate, as they make no verdict key.
        let classified = mode != "lab" || r.capture.is_some();
        if classified {
            for c in &r.stall_summary.by_cause {
                if c.cause.names_a_mechanism() {
                    self.stalls += c.count;
                    *self.causes.entry(c.cause.as_str().to_string()).or_default() += c.count;
                }
            }
        } else {
            self.stalls += r.slow_samples;
            self.unclassified_rows += 1;
        }
    }
}

/// One candidate's result, as printed and in the JSON.
#[derive(Debug, Serialize)]
struct Row {
    rank: usize,
    /// In the declared tie at the top of the ranking.
    tied: bool,
    label: String,
    client: Vec<String>,
    server: Vec<String>,
    runs: u32,
    rounds: u64,
    stalls: u64,
    stalls_per_round: f64,
    /// "stall records" (the classifier) or "slow samples" (no capture: causes unknown).
    stall_source: &'static str,
    stalls_by_cause: BTreeMap<String, u64>,
    p50_us: advise::Interval,
    p99_us: advise::Interval,
    p999_us: advise::Interval,
    segments_per_message: f64,
    wire_bytes_per_message: f64,
    /// Both sides' CPU time per round, µs (lab: CLOCK_THREAD_CPUTIME_ID of the two threads; absent on the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_us_per_round: Option<f64>,
    change_size: u32,
}

/// What decided the first place: the declared tie and the rule that chose within it.
#[derive(Debug, Serialize)]
struct Decision {
    /// The candidates equal to the first on stalls and p99, in rank order (one when none ties).
    tie: Vec<String>,
    chosen: String,
    /// The rule that put `chosen` before the next in the tie (`alone` when nothing ties).
    rule: &'static str,
    /// The rules, in the order they apply.
    rules: Vec<&'static str>,
    /// One sentence: who ties and why the chosen one is first.
    reason: String,
}

#[derive(Debug, Serialize)]
struct Advice {
    tool: &'static str,
    mode: String,
    scenario: String,
    workload: String,
    peer_profile: Option<String>,
    runs_per_candidate: u32,
    rounds_per_run: u32,
    messages_per_round: usize,
    elapsed_s: f64,
    as_written_stalls: bool,
    ranking: Vec<Row>,
    decision: Decision,
    recommendation: String,
    lang: String,
    code: String,
    notes: Vec<String>,
}

fn side_arg(s: &str) -> anyhow::Result<Side> {
    match s {
        "client" => Ok(Side::Client),
        "server" => Ok(Side::Server),
        o => bail!("--side {o}: expected client or server"),
    }
}

/// The workload to advise on, with its rounds per run; and the link a capture asks for, with a
/// note saying where the workload came from.
fn workload(args: &AdviseArgs) -> anyhow::Result<(Scenario, Option<String>, Option<String>)> {
    let name = args.scenario.as_deref().or(if args.exchange.is_some() { None } else { Some("multi-write") });
    let (mut s, link, note) = match name {
        Some(file) if super::replay::is_capture(file) => {
            if args.exchange.is_some() {
                bail!("--exchange is the workload; drop the capture '{file}'");
            }
            let r = super::replay::ReplayArgs {
                file: file.into(),
                flow: args.flow.clone(),
                port: args.port,
                emit: None,
                no_run: true,
                model: false,
                rounds: None,
                report: None,
                format: super::replay::ReplayFormat::Text,
            };
            let d = super::replay::derive(&r)?;
            let note = format!(
                "the workload is derived from {file} (flow {}, {} repetitions): {}; check it with `tcpstall replay {file}`",
                d.key,
                d.reps,
                d.exchange.inline()
            );
            (d.scenario.clone(), d.link(), Some(note))
        }
        _ => {
            if args.flow.is_some() || args.port.is_some() {
                bail!("--flow and --port choose a flow of a CAPTURE; the workload here is not one");
            }
            (super::common::load(name, args.exchange.as_deref())?, None, None)
        }
    };
    s.apply_sets(&args.sets)?;
    let key = super::common::rounds_key(&s.workload)?;
    s.apply_sets(&[format!("{key}={}", args.rounds)]).map_err(|e| anyhow::anyhow!("--rounds: {e}"))?;
    if !(1..=100).contains(&args.reps) {
        bail!("--reps {}: expected 1 to 100 runs per candidate", args.reps);
    }
    Ok((s, args.link.clone().or(link), note))
}

pub fn run(args: AdviseArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let lang = advise::Lang::parse(&args.lang).map_err(|e| anyhow::anyhow!(e))?;
    if !matches!(args.format, OutputFormat::Table | OutputFormat::Json) {
        bail!("--format: advise prints table or json");
    }
    let own = side_arg(&args.side)?;
    let (s, link, source) = workload(&args)?;
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    let model = args.model || args.peer_profile.is_some();
    let only = args.peer_profile.as_ref().map(|_| own);
    let cands = candidates(&s, only, !model);
    let mut notes: Vec<String> = source.into_iter().collect();
    if let Some(l) = &link {
        notes.push(format!("runs behind an emulated link: {l}"));
    }
    let spec = if model {
        let peer = args.peer_profile.as_deref().unwrap_or("linux");
        let profile = match (own, args.peer_profile.is_some()) {
            (_, false) => "linux".to_string(),
            (Side::Client, true) => format!("linux:{peer}"),
            (Side::Server, true) => format!("{peer}:linux"),
        };
        if let Some(p) = &args.peer_profile {
            notes.push(format!(
                "the {} runs the {p} model and the {} the linux model (crates/model): these numbers are the model's, \
                 not this machine's; only fixes on the {} are tried",
                own.peer().as_str(),
                own.as_str(),
                own.as_str()
            ));
        }
        notes.push(
            "the model is deterministic: repetitions differ only through a link's loss or jitter (seeded per run), \
             so on a plain link each interval has zero width"
                .into(),
        );
        let (link, link_label) = super::simulate::link(link.as_deref())?;
        Some(model::RunSpec {
            profiles: super::simulate::profiles(&profile)?,
            link,
            link_label,
            seed: 1,
            mss: None,
            timestamps: None,
            call_ns: 2_000,
        })
    } else {
        None
    };
    // --remote: every run on one session with `tcpstall serve` (docs/remote.md).
    let mut remote = super::remote_lab::session(&args.remote, model || link.is_some())?;
    if let Some(r) = &remote {
        notes.push(r.placement().link);
    }
    // The classifier needs the rows' packets: behind a link, its tap supplies them.
    let env = if model || remote.is_some() { None } else { Some(super::linkenv::open(link.as_deref(), None, true)?) };
    let total = u64::from(args.reps) * cands.len() as u64;
    let bar = output::progress_bar(total, args.quiet);
    let mut pooled: Vec<Pooled> = cands.iter().map(|_| Pooled::default()).collect();
    let mut opts = lab::LabOptions::default();
    if let Some(e) = &env {
        opts.tap = e.tap();
    }
    // --report: each candidate's first run, with its packets (lab: kept by the capture; model:
    // its recorded trace).
    let want_report = args.report.is_some();
    let mut first: Vec<Option<(RunResult, Vec<trace::Event>)>> = cands.iter().map(|_| None).collect();
    let mut mode = String::from(if model { "model" } else { "lab" });
    // Ctrl-C, SIGTERM: the run in progress stops (lab: its sockets are shut down), the runs
    // finished are ranked and printed, exit 128 + signal (as `lab`).
    let interrupts = super::lab::Interrupts::start(opts.cancel.clone());
    let mut done = 0u64;
    // Round-robin: repetition r of every candidate before repetition r + 1 of any.
    let mut failure = None;
    'reps: for rep in 0..args.reps {
        for (k, c) in cands.iter().enumerate() {
            if opts.cancel.is_cancelled() {
                break 'reps;
            }
            bar.set_message(c.pair.label.clone());
            let mut one = s.clone();
            one.matrix = vec![c.pair.clone()];
            let keep = want_report && rep == 0;
            let (report, trace) = match (&spec, &env) {
                (Some(spec), _) => {
                    let spec = model::RunSpec { seed: u64::from(rep) + 1, ..spec.clone() };
                    let (r, mut out) = model::report(&one, &one.matrix, &spec, keep);
                    let trace = if keep && !out.is_empty() { out.swap_remove(0).trace } else { Vec::new() };
                    (r, trace)
                }
                (None, Some(env)) => {
                    let o = lab::LabOptions { keep_packets: keep, ..opts.clone() };
                    (lab::run_scenario(&one, &env.placement, &o, &mut |_| {}), Vec::new())
                }
                (None, None) => match remote.as_mut() {
                    Some(session) => (session.run_scenario(&one, &opts, &mut |_| {}), Vec::new()),
                    None => unreachable!("lab runs have an environment"),
                },
            };
            if opts.cancel.is_cancelled() {
                // The run in progress was cut short: it is not counted.
                break 'reps;
            }
            if let Some(e) = report.errors.first() {
                // Stop, but keep what was measured: the runs finished are ranked and printed.
                failure = Some(format!("{} (run {} of {}): {e}", c.pair.label, rep + 1, args.reps));
                break 'reps;
            }
            mode.clone_from(&report.mode);
            for r in &report.results {
                pooled[k].add(r, &report.mode);
            }
            if keep {
                if let Some(r) = report.results.first() {
                    let mut r = r.clone();
                    let events = if trace.is_empty() { std::mem::take(&mut r.packets) } else { trace };
                    r.strategy.clone_from(&c.pair.label);
                    first[k] = Some((r, events));
                }
            }
            bar.inc(1);
            done += 1;
        }
    }
    bar.finish_and_clear();
    if let Some(env) = env {
        notes.extend(env.finish()?);
    }
    let signal = interrupts.ok().and_then(|i| i.stop());
    let interrupted = signal.map(|sig| {
        format!("interrupted by signal {sig} after {done} of {total} runs: the figures are those of the runs finished")
    });
    if let (Some(sig), Some(msg)) = (signal, &interrupted) {
        if pooled[0].rows == 0 {
            eprintln!("tcpstall: {msg}: the workload as written has none, so there is nothing to rank");
            return Ok(128 + sig);
        }
        notes.push(msg.clone());
    }
    if let Some(f) = &failure {
        if pooled[0].rows == 0 {
            bail!("{f}");
        }
        notes.push(format!("the run stopped early: {f}; the figures are those of the runs finished"));
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(args.seed);
    let exchange = s.workload.as_exchange();
    let messages = exchange.as_ref().map_or(1, |e| e.turns.len()).max(1);
    let mut rows = Vec::new();
    let mut scored = Vec::new();
    // A candidate never run (the run stopped before it) has no figures to rank.
    for (c, p) in cands.iter().zip(&pooled).filter(|(_, p)| p.rows > 0) {
        let q = advise::bootstrap_quantiles(&p.runs, &[0.5, 0.99, 0.999], 1000, &mut rng);
        let us = |i: advise::Interval| advise::Interval { est: i.est / 1e3, lo: i.lo / 1e3, hi: i.hi / 1e3 };
        let per_round = |v: u64| if p.rounds > 0 { v as f64 / p.rounds as f64 } else { 0.0 };
        scored.push(advise::Scored {
            label: c.pair.label.clone(),
            client: c.pair.client.opts().to_vec(),
            server: c.pair.server.opts().to_vec(),
            cpu_us_per_round: (p.cpu_rounds > 0).then(|| p.cpu_us / p.cpu_rounds as f64),
            stalls: p.stalls,
            rounds: p.rounds,
            p99: us(q[1]),
            segs_per_round: per_round(p.segs),
            bytes_per_round: per_round(p.wire_bytes),
            change: c.change,
        });
        rows.push(Row {
            rank: 0,
            tied: false,
            label: c.pair.label.clone(),
            client: c.pair.client.opts().iter().map(|o| o.as_str().to_string()).collect(),
            server: c.pair.server.opts().iter().map(|o| o.as_str().to_string()).collect(),
            runs: p.rows,
            rounds: p.rounds,
            stalls: p.stalls,
            stalls_per_round: per_round(p.stalls),
            stall_source: if p.unclassified_rows > 0 { "slow samples" } else { "stall records" },
            stalls_by_cause: p.causes.clone(),
            p50_us: us(q[0]),
            p99_us: us(q[1]),
            p999_us: us(q[2]),
            segments_per_message: per_round(p.segs) / messages as f64,
            wire_bytes_per_message: per_round(p.wire_bytes) / messages as f64,
            cpu_us_per_round: (p.cpu_rounds > 0).then(|| p.cpu_us / p.cpu_rounds as f64),
            change_size: c.change,
        });
    }
    let decided = advise::decide(&scored);
    for (pos, &i) in decided.order.iter().enumerate() {
        rows[i].rank = pos + 1;
        rows[i].tied = decided.tie.contains(&i);
    }
    let decision = Decision {
        tie: decided.tie.iter().map(|&i| scored[i].label.clone()).collect(),
        chosen: decided.chosen().map(|i| scored[i].label.clone()).unwrap_or_default(),
        rule: decided.rule.as_str(),
        rules: advise::RULES.iter().map(|r| r.as_str()).collect(),
        reason: decided.reason(&scored),
    };
    rows.sort_by_key(|r| r.rank);
    if rows.iter().any(|r| r.stall_source == "slow samples") {
        notes.push(
            "stalls are slow samples (rounds that waited over the stall threshold): these lab rows carry no stall \
             records (no capture), so their causes are not classified; `tcpstall advise --model` classifies them"
                .into(),
        );
    }
    let base = rows.iter().find(|r| r.client.is_empty() && r.server.is_empty()).context("no as-written row")?;
    // Classified stalls are TCP's by their signature: any counts. Slow samples can be a
    // scheduling hiccup: only more than the rare rate counts.
    let as_written_stalls =
        if base.stall_source == "stall records" { base.stalls > 0 } else { base.stalls_per_round > advise::rank::RARE };
    let writes_per_msg = |side: Side| {
        exchange
            .as_ref()
            .map_or(1, |e| e.turns.iter().filter(|t| t.side == side).map(|t| t.writes.len()).max().unwrap_or(1))
    };
    let (recommendation, code) = super::advise_text::recommend(&rows_view(&rows), lang, writes_per_msg);
    let advice = Advice {
        tool: "tcpstall",
        mode,
        scenario: s.name.clone(),
        workload: exchange.as_ref().map_or_else(|| s.workload.params_json().to_string(), short_inline),
        peer_profile: args.peer_profile.clone(),
        runs_per_candidate: args.reps,
        rounds_per_run: args.rounds,
        messages_per_round: messages,
        elapsed_s: started.elapsed().as_secs_f64(),
        as_written_stalls,
        ranking: rows,
        decision,
        recommendation,
        lang: lang.as_str().into(),
        code,
        notes,
    };
    let text = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&advice)? + "\n",
        _ => table(&advice),
    };
    output::write_bytes(text.as_bytes(), None)?;
    if let Some(path) = &args.report {
        let link_label = link.clone().unwrap_or_else(|| "none (loopback)".into());
        write_report(path, &advice, &cands, first, &link_label)?;
    }
    if let (Some(sig), Some(msg)) = (signal, &interrupted) {
        eprintln!("tcpstall: {msg}; printed above");
        return Ok(128 + sig);
    }
    if let Some(f) = failure {
        eprintln!("tcpstall: {f}");
        return Ok(1);
    }
    Ok(if args.fail_on_stall && advice.as_written_stalls { 3 } else { 0 })
}

/// `--report`: the ranking (error bars), the recommendation and its code, and each candidate's
/// first run as a strategy row with its stall records and packets.
fn write_report(
    path: &std::path::Path,
    a: &Advice,
    cands: &[Candidate],
    first: Vec<Option<(RunResult, Vec<trace::Event>)>>,
    link: &str,
) -> anyhow::Result<()> {
    let kernel = if a.mode == "lab" {
        super::htmlreport::this_kernel()
    } else {
        format!("model ({})", a.peer_profile.as_deref().map_or("linux".into(), |p| format!("linux and {p}")))
    };
    let header = super::htmlreport::header("advise", &format!("{} ({})", a.scenario, a.workload), link, kernel);
    let iv = |i: &advise::Interval| [i.est, i.lo, i.hi];
    let ranking = report::html::Ranking {
        rows: a
            .ranking
            .iter()
            .map(|r| report::html::RankRow {
                rank: r.rank,
                label: r.label.clone(),
                stalls: r.stalls,
                rounds: r.rounds,
                stalls_by_cause: r.stalls_by_cause.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                p50_us: iv(&r.p50_us),
                p99_us: iv(&r.p99_us),
                p999_us: iv(&r.p999_us),
                segments_per_message: r.segments_per_message,
                wire_bytes_per_message: r.wire_bytes_per_message,
                change_size: r.change_size,
            })
            .collect(),
        recommendation: a.recommendation.clone(),
        lang: a.lang.clone(),
        code: a.code.clone(),
    };
    // The candidates' first runs, in rank order.
    let mut runs: Vec<(RunResult, Vec<trace::Event>)> = Vec::new();
    for r in &a.ranking {
        if let Some(k) = cands.iter().position(|c| c.pair.label == r.label) {
            if let Some(f) = &first[k] {
                runs.push(f.clone());
            }
        }
    }
    drop(first);
    let rows: Vec<RunResult> = runs.iter().map(|(r, _)| r.clone()).collect();
    let rep = report::Report {
        tool: "tcpstall".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        schema_version: report::SCHEMA_VERSION,
        kernel: None,
        profile: None,
        mode: a.mode.clone(),
        scenario: a.scenario.clone(),
        params: serde_json::Value::Null,
        link: link.into(),
        results: rows,
        errors: Vec::new(),
    };
    let events: Vec<&[trace::Event]> = runs.iter().map(|(_, e)| e.as_slice()).collect();
    let mut page = super::htmlreport::rows_page(
        &rep,
        header,
        &events,
        None,
        "the runs recorded no packets (the lab captures them as root)",
        None,
    );
    page.notes.extend(a.notes.iter().cloned());
    page.notes.push(format!(
        "The ranking pools all {} runs of each candidate; the strategy table, latency curves, wire bars and stalls \
         below are each candidate's first run.",
        a.runs_per_candidate
    ));
    page.ranking = Some(ranking);
    super::htmlreport::write(path, &page)
}

/// The exchange inline, with a turn of more than 8 writes shortened to its count and bytes.
fn short_inline(e: &scenario::Exchange) -> String {
    let long = e.turns.iter().any(|t| t.writes.len() > 8);
    if !long {
        return e.inline();
    }
    e.turns
        .iter()
        .map(|t| format!("{} {} writes, {} B", t.side.as_str(), t.writes.len(), t.total()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn rows_view(rows: &[Row]) -> Vec<super::advise_text::View<'_>> {
    rows.iter()
        .map(|r| super::advise_text::View {
            label: &r.label,
            client: &r.client,
            server: &r.server,
            stalls: r.stalls,
            rounds: r.rounds,
            stall_source: r.stall_source,
            causes: &r.stalls_by_cause,
            p99_us: r.p99_us,
            segs_per_message: r.segments_per_message,
            cpu_us_per_round: r.cpu_us_per_round,
        })
        .collect()
}

fn ms(i: &advise::Interval) -> String {
    format!("{:.2} [{:.2}-{:.2}]", i.est / 1e3, i.lo / 1e3, i.hi / 1e3)
}

/// Words to lines of at most `width` columns (a longer word stands alone).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += w;
    }
    out + &line
}

fn table(a: &Advice) -> String {
    let mut out = format!(
        "advise: {} ({}), {} candidates x {} runs x {} rounds, interleaved; {} in {:.1} s\n",
        a.scenario,
        a.workload,
        a.ranking.len(),
        a.runs_per_candidate,
        a.rounds_per_run,
        a.mode,
        a.elapsed_s
    );
    out += &format!(
        "{:>4}  {:<40} {:>9}  {:>22}  {:>22}  {:>22}  {:>9}  {:>9}  {:>8}  {:>6}\n",
        "rank",
        "candidate",
        "stalls",
        "p50 ms [95% CI]",
        "p99 ms [95% CI]",
        "p99.9 ms [95% CI]",
        "segs/msg",
        "B/msg",
        "cpu us/r",
        "change"
    );
    for r in &a.ranking {
        let stalls = format!("{}/{}", r.stalls, r.rounds);
        out += &format!(
            "{:>4}{} {:<40} {:>9}  {:>22}  {:>22}  {:>22}  {:>9.2}  {:>9.0}  {:>8}  {:>6}\n",
            r.rank,
            if r.tied && a.decision.tie.len() > 1 { "=" } else { " " },
            r.label,
            stalls,
            ms(&r.p50_us),
            ms(&r.p99_us),
            ms(&r.p999_us),
            r.segments_per_message,
            r.wire_bytes_per_message,
            r.cpu_us_per_round.map_or("-".to_string(), |c| format!("{c:.1}")),
            r.change_size
        );
        if !r.stalls_by_cause.is_empty() {
            let c: Vec<String> = r.stalls_by_cause.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out += &format!("{:>6}{}\n", "", format_args!("stalls by cause: {}", c.join(", ")));
        }
    }
    out += "stalls: stalls / measured rounds (a round can hold several); p99.9 of fewer than 1000 rounds is the \
            slowest few rounds; cpu us/r: both sides' thread CPU time per round (lab, CLOCK_THREAD_CPUTIME_ID); change: size of the code change (1 one call after connect, 2 code around each \
            message or read, +1 a Linux-only option)\n";
    if a.decision.tie.len() > 1 {
        out += "=: in the declared tie (p99 within the best one's 95% interval, stalls alike); the smallest change \
                comes first (tcpstall advise --help: the rules)\n";
    }
    for n in &a.notes {
        out += &format!("note: {n}\n");
    }
    out += &format!("\n{}\n", wrap(&format!("Decision: {}", a.decision.reason), 100));
    out += &format!("{}\n", wrap(&a.recommendation, 100));
    if !a.code.is_empty() {
        out += &format!("\n{}\n", a.code);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paragraph_wraps_at_the_width() {
        let w = wrap("aaa bbb ccc ddd", 7);
        assert_eq!(w, "aaa bbb\nccc ddd");
        assert_eq!(wrap("", 10), "");
    }
}
