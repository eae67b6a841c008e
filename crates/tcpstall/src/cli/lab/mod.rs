//! `tcpstall lab`: run a scenario over real sockets across a matrix of strategies.

pub(crate) mod remote;

use anyhow::{bail, Context};
use lab::LabOptions;
use scenario::Scenario;

use super::output;
use crate::flags::common::OutputFormat;
use crate::flags::lab::{lab_options, scenario_from, seed003_scenario, LabArgs};

/// Ctrl-C from the first row to the last line of output (advise and replay use it too).
pub(crate) use lab::Interrupts;

pub(crate) fn run(args: LabArgs) -> anyhow::Result<i32> {
    let veth = args.veth.veth()?;
    let knobs = args.veth.knobs()?;
    if let Some(s) = seed003_scenario(&args)? {
        return super::seed003::run_matrix(&args.veth, &s, args.common.format, args.quiet);
    }
    let s = scenario_from(&args)?;
    if args.remote.remote.is_some() {
        return remote::run(&args, &s);
    }
    let mut opts = lab_options(&args)?;
    let veth_path = open_veth(&args, veth, &knobs, &mut opts)?;
    // --report draws each row's packets (ladders, time-sequence graphs).
    opts.keep_packets = args.report.is_some();
    // Before measuring: an output path that cannot be written must not cost a run.
    let sink = output::Sink::open(args.common.output.as_deref())?;
    let (link_capture, own_capture) = captures(&args)?;
    opts.capture_file = own_capture.clone();
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    let mut env = super::linkenv::open(args.link.as_deref(), link_capture, opts.capture)?;
    if let Some(p) = &veth_path {
        env.placement = p.placement(&format!("{}; {}", knobs.label(), p.readback));
    }
    opts.tap = env.tap();
    // Kernel evidence (after the link is up: the source starts a reader thread), opened on a
    // thread of its own while the rows' probes run (they record nothing): the first recorded
    // row waits for it if it is not open yet.
    if opts.capture && !args.no_kernel {
        opts.kernel = lab::KernelEvidence::opening(false);
    }
    // The link is up (it may need a single-threaded process): now the signal thread may start.
    // Ctrl-C is listened to from here to the last line of output (`exit_status` stops it).
    let interrupts = Interrupts::start(opts.cancel.clone());
    let mut report = rows(&args, &s, |p| lab::run_scenario(&s, &env.placement, &opts, p));
    let link = env.finish_report();
    if let Some(f) = &own_capture {
        match f.finish() {
            // Rows without packets (no CAP_NET_RAW) say why in the report's link line.
            Ok(n) => eprintln!("tcpstall: wrote {n} packets to {}", f.path().display()),
            Err(e) => report.errors.push(format!("--capture: {e}")),
        }
    }
    // Dropped packets it was not asked to drop: the link summarises the run, so every row is marked.
    let warning = link.as_ref().ok().and_then(Option::as_ref).and_then(link::LinkReport::unasked_drops_warning);
    if warning.is_some() {
        report.mark_untrusted("the emulated link dropped packets it was not asked to drop");
    }
    write(&report, sink, args.common.format)?;
    if let Some(path) = &args.report {
        html_report(path, &args, &report)?;
    }
    output::stall_records(&report, &args.common)?;
    if args.common.format == OutputFormat::Table {
        if let Ok(Some(l)) = &link {
            for l in l.summary_lines() {
                println!("{l}");
            }
        }
    }
    link?;
    if let Some(w) = &warning {
        eprintln!("tcpstall: warning: {w}");
    }
    Ok(exit_status(&report, interrupts))
}

/// --path veth: two namespaces joined by a veth pair with the seed's knobs (seed 003); the rows
/// run pinned in them, without the loopback capture.
fn open_veth(
    args: &LabArgs,
    veth: bool,
    knobs: &lab::veth::Knobs,
    opts: &mut LabOptions,
) -> anyhow::Result<Option<lab::veth::VethPath>> {
    if !veth {
        return Ok(None);
    }
    if args.link.is_some() {
        bail!("--path veth and --link are two different paths: pick one");
    }
    // What killed runs left was swept at the start (cli::run).
    let p = lab::veth::VethPath::open(knobs).map_err(|e| anyhow::anyhow!("--path veth: {e}"))?;
    opts.set_veth(&p);
    Ok(Some(p))
}

/// --capture FILE: on loopback the lab writes its own capture (created now, so an unwritable
/// path fails before measuring); behind --link the link's tap does (the path for the link).
fn captures(args: &LabArgs) -> anyhow::Result<(Option<&std::path::Path>, Option<lab::CaptureFile>)> {
    if let Some(p) = &args.capture {
        output::check_writable("--capture", p)?;
    }
    Ok(match (&args.link, &args.capture) {
        (Some(_), c) => (c.as_deref(), None),
        (None, Some(p)) => {
            let f = lab::CaptureFile::create(p).with_context(|| format!("--capture: cannot write {}", p.display()))?;
            (None, Some(f))
        }
        (None, None) => (None, None),
    })
}

/// The rows, with a progress bar (lab and lab --remote).
pub(crate) fn rows<R>(args: &LabArgs, s: &Scenario, run: impl FnOnce(&mut dyn FnMut(lab::Progress)) -> R) -> R {
    let bar = output::progress_bar((s.workload.variants().len() * s.matrix.len()) as u64, args.quiet);
    let r = run(&mut output::row_progress(&bar));
    bar.finish_and_clear();
    r
}

/// The report in --format where --output says; an empty table is not written (lab and lab
/// --remote).
pub(crate) fn write(report: &report::Report, sink: output::Sink, format: OutputFormat) -> anyhow::Result<()> {
    if !report.results.is_empty() || format != OutputFormat::Table {
        sink.write(&report::Export::export(report, format.into())?)
    } else {
        sink.discard();
        Ok(())
    }
}

/// --report: the rows' tables, latency CDFs, and each row's packets as ladders and graphs.
fn html_report(path: &std::path::Path, args: &LabArgs, report: &report::Report) -> anyhow::Result<()> {
    let header =
        super::htmlreport::header("lab", &report.scenario, &report.link, report.kernel.clone().unwrap_or_default());
    let packets: Vec<&[trace::Event]> = report.results.iter().map(|r| r.packets.as_slice()).collect();
    let no_packets = "no row recorded its packets (the capture needs CAP_NET_RAW, and --no-capture turns it \
                      off): the ladders and time-sequence graphs need them";
    // On loopback both ends share one clock and no path delay; behind the link the tap
    // stamps at the server's end (its packets as sent, the client's as delivered).
    let (rtt, at) = match args.link.as_deref().map(str::parse::<link::LinkSpec>) {
        Some(Ok(l)) => (Some(l.rtt_ns()), Some(trace::Endpoint::B)),
        Some(Err(_)) => (None, None),
        None => (Some(0), None),
    };
    let page = super::htmlreport::rows_page(report, header, &packets, rtt, no_packets, at);
    super::htmlreport::write(path, &page)
}

/// 128 + the signal that stopped the run, 1 after an error (said in one line; what was
/// measured before it is printed above), else 0.
fn exit_status(report: &report::Report, interrupts: std::io::Result<Interrupts>) -> i32 {
    if let Some(e) = report.errors.first() {
        eprintln!("tcpstall: {e}");
    }
    let signal = interrupts.ok().and_then(Interrupts::stop);
    if signal.is_some() && report.errors.is_empty() {
        eprintln!("tcpstall: interrupted after the last row: every row above is complete");
    }
    exit_code(signal, report)
}

/// 128 + the signal that stopped the run, 1 after an error, else 0 (lab and lab --remote).
pub(crate) fn exit_code(signal: Option<i32>, report: &report::Report) -> i32 {
    match (signal, report.errors.is_empty()) {
        (Some(sig), _) => 128 + sig,
        (None, false) => 1,
        (None, true) => 0,
    }
}
