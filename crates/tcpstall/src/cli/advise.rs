//! `tcpstall advise`: run a workload as written and with each candidate fix, interleaved, and
//! say which change to make on which side, how sure we are, and the code for it.

use std::time::Instant;

use anyhow::bail;
use indicatif::ProgressBar;
use report::{Export, Report};
use scenario::Scenario;

use super::output;
use crate::flags::advise::AdviseArgs;
use crate::flags::common::OutputFormat;

/// Where the runs happen: the model, the lab (behind its link environment) or a remote host.
enum Engine {
    Model(model::RunSpec),
    Lab(Box<super::linkenv::LinkEnv>),
    Remote(Box<remote::client::Session>),
}

/// advise's runs, injected into crates/advise: one candidate's scenario once on the engine,
/// with the progress bar and Ctrl-C's cancel.
struct CliRunner {
    engine: Engine,
    opts: lab::LabOptions,
    bar: ProgressBar,
    started: Instant,
}

impl advise::Runner for CliRunner {
    fn run(&mut self, one: &Scenario, rep: u32, keep: bool) -> (Report, Vec<trace::Event>) {
        match &mut self.engine {
            Engine::Model(spec) => {
                let spec = model::RunSpec { seed: u64::from(rep) + 1, ..spec.clone() };
                spec.run_first(one, keep)
            }
            Engine::Lab(env) => {
                let o = lab::LabOptions { keep_packets: keep, ..self.opts.clone() };
                (lab::run_scenario(one, &env.placement, &o, &mut |_| {}), Vec::new())
            }
            Engine::Remote(session) => (session.run_scenario(one, &self.opts, &mut |_| {}), Vec::new()),
        }
    }
    fn cancelled(&self) -> bool {
        self.opts.cancel.is_cancelled()
    }
    fn starting(&mut self, label: &str) {
        self.bar.set_message(label.to_string());
    }
    fn finished(&mut self) {
        self.bar.inc(1);
    }
    fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
    fn runs_rows_together(&self) -> bool {
        // The lab runs a pass's candidates as rows of one scenario: those that only wait on
        // timers wait side by side (crates/lab schedule.rs).
        matches!(self.engine, Engine::Lab(_))
    }
}

/// The workload to advise on, the link the runs go behind (--link, else the one a capture asks
/// for) and the notes saying where the workload came from and the link.
fn workload(args: &AdviseArgs) -> anyhow::Result<(Scenario, Option<String>, Vec<String>)> {
    let name = args.scenario.as_deref().or(if args.exchange.is_some() { None } else { Some("multi-write") });
    match name {
        Some(file) if scenario::is_capture(file) => {
            if args.exchange.is_some() {
                bail!("--exchange is the workload; drop the capture '{file}'");
            }
            let (d, _) = super::replay::derive(file.as_ref(), args.flow.as_deref(), args.port, None)?;
            let link = args.link.clone().or(d.link());
            let notes = advise::source_notes(Some((file, &d)), link.as_deref());
            Ok((d.scenario, link, notes))
        }
        _ => {
            if args.flow.is_some() || args.port.is_some() {
                bail!("--flow and --port choose a flow of a CAPTURE; the workload here is not one");
            }
            let s = crate::flags::common::load(name, args.exchange.as_deref())?;
            Ok((s, args.link.clone(), advise::source_notes(None, args.link.as_deref())))
        }
    }
}

/// The flags as a typed request, with the link the runs go behind and the first notes (where
/// the workload came from, the link).
fn request(args: &AdviseArgs) -> anyhow::Result<(advise::Request, Option<String>, Vec<String>)> {
    let lang = advise::Lang::parse(&args.lang)?;
    if !matches!(args.format, OutputFormat::Table | OutputFormat::Json) {
        bail!("--format: advise prints table or json");
    }
    let own = advise::parse_side(&args.side)?;
    let (scenario, link, mut notes) = workload(args)?;
    let separate_replies =
        args.separate_replies.iter().map(|s| advise::parse_side(s)).collect::<Result<Vec<_>, _>>()?;
    notes.extend(separate_replies.iter().map(|s| {
        format!(
            "{}: its writes are separate replies (--separate-replies): gathering them ranks after any fix it can make",
            s.as_str()
        )
    }));
    let req = advise::Request {
        scenario,
        rounds: args.rounds,
        reps: args.reps,
        model: args.model,
        peer_profile: args.peer_profile.clone(),
        own,
        lang,
        seed: args.seed,
        keep_first: args.report.is_some(),
        separate_replies,
        budget_s: (args.budget > 0).then_some(args.budget as f64),
    }
    .with_overrides(&args.sets)?;
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    Ok((req, link, notes))
}

/// The engine for the request: the model's run spec, a `--remote` session (every run on one
/// session with `tcpstall serve`, docs/remote.md), or the lab's link environment (its tap
/// supplies the rows' packets to the classifier behind a link).
fn engine(
    args: &AdviseArgs,
    req: &advise::Request,
    link: Option<&str>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Engine> {
    let spec = if req.model {
        notes.extend(req.model_notes());
        let run = model::RunRequest::with_link(link)?;
        Some(run.spec(super::simulate::profiles(&req.model_profiles())?))
    } else {
        None
    };
    let remote = super::lab::remote::session(&args.remote, req.model || link.is_some())?;
    if let Some(r) = &remote {
        notes.push(r.placement().link);
    }
    Ok(match (spec, remote) {
        (Some(spec), _) => Engine::Model(spec),
        (None, Some(session)) => Engine::Remote(Box::new(session)),
        (None, None) => Engine::Lab(Box::new(super::linkenv::open(link, None, true)?)),
    })
}

pub(crate) fn run(args: AdviseArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let (req, link, mut notes) = request(&args)?;
    let engine = engine(&args, &req, link.as_deref(), &mut notes)?;
    let cands = req.candidates();
    let bar = output::progress_bar(u64::from(req.reps) * cands.len() as u64, args.quiet);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed}}] {{bar:30}} {{pos}}/{{len}} runs, about {{eta}} left{} {{msg}}",
            req.budget_s.map_or(String::new(), |b| format!(" (budget {b:.0} s)"))
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut opts = lab::LabOptions::default();
    if let Engine::Lab(env) = &engine {
        opts.tap = env.tap();
    }
    let mut runner = CliRunner { engine, opts, bar, started };
    // Ctrl-C, SIGTERM: the run in progress stops (lab: its sockets are shut down), the runs
    // finished are ranked and printed, exit 128 + the signal (as `lab`).
    let interrupts = super::lab::Interrupts::start(runner.opts.cancel.clone());
    let measured = advise::measure(&req, cands, &mut runner);
    runner.bar.finish_and_clear();
    if let Engine::Lab(env) = runner.engine {
        notes.extend(env.finish()?);
    }
    let signal = interrupts.ok().and_then(|i| i.stop());
    let (ending, more) = match measured.ending(signal) {
        Ok(e) => e,
        Err(e @ advise::NothingToRank::Interrupted { signal, .. }) => {
            eprintln!("tcpstall: {e}");
            return Ok(128 + signal);
        }
        Err(e) => return Err(e.into()),
    };
    notes.extend(more);
    let advice = advise::conclude(&req, measured, notes, started.elapsed().as_secs_f64())?;
    output::write_bytes(&advice.doc.export(args.format.into())?, None)?;
    if let Some(path) = &args.report {
        write_report(path, &advice, link.as_deref().unwrap_or("none (loopback)"))?;
    }
    match ending {
        advise::Ending::Interrupted { signal, msg } => {
            eprintln!("tcpstall: {msg}; printed above");
            Ok(128 + signal)
        }
        advise::Ending::Failed(f) => {
            eprintln!("tcpstall: {f}");
            Ok(1)
        }
        advise::Ending::Complete => Ok(if args.fail_on_stall && advice.doc.as_written_stalls { 3 } else { 0 }),
    }
}

/// `--report`: the ranking (error bars), the recommendation and its code, and each candidate's
/// first run as a strategy row with its stall records and packets.
fn write_report(path: &std::path::Path, a: &advise::Advice, link: &str) -> anyhow::Result<()> {
    let d = &a.doc;
    let kernel = d.model_kernel().unwrap_or_else(super::htmlreport::this_kernel);
    let header = super::htmlreport::header("advise", &format!("{} ({})", d.scenario, d.workload), link, kernel);
    let rows = a.first_runs.iter().map(|(r, _)| r.clone()).collect();
    let rep = d.first_runs_report(rows, env!("CARGO_PKG_VERSION"), link);
    let events: Vec<&[trace::Event]> = a.first_runs.iter().map(|(_, e)| e.as_slice()).collect();
    let no_packets = "the runs recorded no packets (the lab captures them as root)";
    let mut page = super::htmlreport::rows_page(&rep, header, &events, None, no_packets, None);
    page.notes.extend(d.html_notes());
    page.ranking = Some(d.html_ranking());
    super::htmlreport::write(path, &page)
}
