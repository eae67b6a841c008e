//! `tcpstall replay CAPTURE`: derive the exchange a captured connection carried (turns by
//! direction, write boundaries from PSH, think times from the gaps no TCP stall explains,
//! the path RTT from the handshake), print it, optionally save it, and run it here.

use std::path::PathBuf;

use std::collections::HashMap;

use analyze::{Config, Finished, FlowAnalysis, Session};
use anyhow::{bail, Context};
use report::{Export as _, ReplayOutput};
use scenario::derive::derive_exchange;
use scenario::{Exchange, Scenario};
use trace::Endpoint;
use wire::{Decoder, FlowFilter};

use super::output::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall replay capture.pcapng                 the flow with the most stall time, run in the lab
  tcpstall replay capture.pcapng --emit mine.toml --no-run
                                                 save the derived exchange to edit it
  tcpstall replay capture.pcapng --port 8000 --model
                                                 run it on the model (causes classified)
  tcpstall replay capture.pcapng --report replay.html
                                                 the capture's flow and the run side by side
  tcpstall advise mine.toml                      then: which fix, on which side

The derivation: the client is the side that sent the SYN (else the first to send data); a
turn is a run of data segments in one direction; a segment with PSH ends a write (Linux sets
PSH at the end of each send call it transmits whole, tcp_push(); writes Nagle or a cork
coalesced cannot be told apart and come out as one); resent bytes are skipped; a turn's think
time is the gap before it (from the previous turn's last segment, less the path RTT) when no
TCP stall record of the classifier overlaps it and it is at least 1 ms; the conversation's period is the shortest repeating sequence
of (side, bytes) turns.

Ctrl-C (or SIGTERM) during the run stops it at once: the exchange derived (printed, and saved
with --emit) is kept, and the exit status is 128 + the signal (130, 143). --report says where it
wrote the page.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ReplayArgs {
    /// A pcap or pcapng capture
    pub file: PathBuf,
    /// The flow to replay: ADDR:PORT-ADDR:PORT (default: the flow with the most stall time)
    #[arg(long, value_name = "FLOW")]
    pub flow: Option<String>,
    /// Only flows with this port
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Save the derived exchange as a scenario file
    #[arg(long, value_name = "FILE.toml")]
    pub emit: Option<PathBuf>,
    /// Print (and save) the exchange without running it
    #[arg(long)]
    pub no_run: bool,
    /// Run it on the model instead of real sockets (the stalls' causes are classified)
    #[arg(long)]
    pub model: bool,
    /// Rounds to run (default: the capture's, at most 100)
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Write a self-contained HTML report to FILE: the captured flow and the reproduced run
    /// side by side (stall records, ladders, time-sequence graphs)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Output format: the text for people (`text` works too), or one JSON document (the
    /// exchange, the capture's stall records and the run's report; docs/json-schema.md,
    /// "Replay"). The run's rows as CSV or Markdown: `--emit FILE`, then `tcpstall lab FILE
    /// --format csv`
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}

/// Decode the capture and analyse each flow (`analyze::Session`, as explain does); the flow
/// whose records show the most waiting (the first seen among equals): its key, analysis and
/// packets. Memory follows the flows alive plus the best so far: a flow's packets are dropped
/// when it ends behind the best.
fn load(args: &ReplayArgs) -> anyhow::Result<(String, FlowAnalysis, Vec<trace::Event>)> {
    let pair = args.flow.as_deref().map(super::explain::parse_flow).transpose()?;
    let file = std::fs::File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let input = wire::decompressed(std::io::BufReader::new(file))
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut dec = Decoder::new(input, FlowFilter { pair, port: args.port })
        .with_context(|| format!("{}", args.file.display()))?;
    let mut session = Session::new(Config::default());
    let mut live: HashMap<wire::FlowId, Vec<trace::Event>> = HashMap::new();
    let mut best: Option<(u64, Finished, Vec<trace::Event>)> = None;
    let mut keep = |f: Finished, live: &mut HashMap<wire::FlowId, Vec<trace::Event>>| {
        let events = live.remove(&f.id).unwrap_or_default();
        let waited: u64 = f.analysis.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| s.length.0).sum();
        if best.as_ref().is_none_or(|(w, b, _)| waited > *w || (waited == *w && f.id < b.id)) {
            best = Some((waited, f, events));
        }
    };
    while let Some(fe) = dec.next_event().with_context(|| format!("{}", args.file.display()))? {
        while let Some(end) = dec.pop_ended() {
            if let Some(f) = session.end(&end) {
                keep(f, &mut live);
            }
        }
        session.push(&fe, || dec.flows().key(fe.flow));
        live.entry(fe.flow).or_default().push(fe.event);
    }
    while let Some(end) = dec.pop_ended() {
        if let Some(f) = session.end(&end) {
            keep(f, &mut live);
        }
    }
    for f in session.finish_all() {
        keep(f, &mut live);
    }
    let Some((_, f, events)) = best else {
        bail!("{}: no TCP flow (check --flow/--port)", args.file.display());
    };
    Ok((f.key.to_string(), f.analysis, events))
}

/// What a capture's connection becomes.
pub(crate) struct Derived {
    pub key: String,
    pub scenario: Scenario,
    pub exchange: Exchange,
    pub reps: usize,
    /// Path RTT (ns) and whether it came from the handshake.
    pub rtt: Option<(u64, bool)>,
    pub analysis: FlowAnalysis,
    /// The flow's packets as captured.
    pub events: Vec<trace::Event>,
}

impl Derived {
    /// The emulated link to run it behind: the capture's RTT when it is above 1 ms.
    pub(crate) fn link(&self) -> Option<String> {
        self.rtt.map(|(ns, _)| ns).filter(|&ns| ns > 1_000_000).map(|ns| format!("rtt={}us", ns / 1000))
    }
}

/// Derive the exchange of one flow of a capture (`tcpstall replay`, `tcpstall advise CAPTURE`):
/// `scenario::derive` on the flow's data segments, the classifier's TCP waits and its path RTT.
pub(crate) fn derive(args: &ReplayArgs) -> anyhow::Result<Derived> {
    let (key, fa, events) = load(args)?;
    let tcp_waits: Vec<(u64, u64)> =
        fa.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| (s.start.0, s.start.0 + s.length.0)).collect();
    let rtt_ns = fa.path_rtt.map_or(0, |d| d.0);
    let Some((mut e, reps)) = derive_exchange(&scenario::derive::segments(&events), &tcp_waits, rtt_ns) else {
        bail!("{}: flow {key} carried no data to replay", args.file.display());
    };
    if let Some(r) = args.rounds {
        e.rounds = r;
    }
    e.validate()?;
    let mut s = Scenario::from_exchange("replay", &format!("replayed from {} ({key})", args.file.display()), e.clone());
    s.finding = format!("derived by tcpstall replay: {reps} repetitions of {} turn(s)", e.turns.len());
    let rtt = fa.path_rtt.map(|d| (d.0, fa.path_rtt_from_handshake));
    Ok(Derived { key, scenario: s, exchange: e, reps, rtt, analysis: fa, events })
}

/// A path that names a capture rather than a scenario file.
pub(crate) fn is_capture(name: &str) -> bool {
    [".pcap", ".pcapng", ".cap"].iter().any(|ext| name.ends_with(ext))
}

/// The document of a derived flow, before any run.
fn output(args: &ReplayArgs, d: &Derived) -> ReplayOutput {
    let fa = &d.analysis;
    let doc = report::ReplayDoc {
        tool: "tcpstall",
        version: env!("CARGO_PKG_VERSION"),
        schema_version: report::SCHEMA_VERSION,
        mode: "replay",
        file: args.file.display().to_string(),
        flow: d.key.clone(),
        repetitions: d.reps as u64,
        exchange: d.exchange.inline(),
        path_rtt_ns: d.rtt.map(|(ns, _)| ns),
        path_rtt_from_handshake: fa.path_rtt_from_handshake,
        capture_stall_summary: analyze::StallSummary::of(fa.stalls.iter().filter(|s| s.shows_a_wait())),
        capture_stall_records: fa.stalls.clone(),
        saved: None,
        run: None,
    };
    // Behind an emulated link with the capture's RTT when it is above 1 ms.
    let how = d.link().map_or("loopback".to_string(), |l| format!("--link {l}"));
    ReplayOutput { doc, turns: d.exchange.turns.len(), how, interrupted: false }
}

/// Text is printed as it becomes known; the JSON document once at the end.
fn print(out: &ReplayOutput, text: &str, json: bool) -> anyhow::Result<()> {
    use std::io::Write as _;
    let bytes = if json { out.export(report::Format::Json)? } else { text.as_bytes().to_vec() };
    std::io::stdout().lock().write_all(&bytes).context("writing the output")
}

pub(crate) fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    if let Some(p) = &args.emit {
        super::output::check_writable("--emit", p)?;
    }
    if let Some(p) = &args.report {
        if args.no_run {
            bail!("--report shows the capture next to the run: drop --no-run");
        }
        super::output::check_writable("--report", p)?;
    }
    if matches!(args.format, OutputFormat::Csv | OutputFormat::Markdown) {
        bail!("--format: replay prints table or json (for the run's rows as CSV or Markdown: --emit FILE, then `tcpstall lab FILE --format csv`)");
    }
    let d = derive(&args)?;
    let json = args.format == OutputFormat::Json;
    let mut out = output(&args, &d);
    if let Some(p) = &args.emit {
        std::fs::write(p, d.scenario.to_toml()?).with_context(|| format!("cannot write {}", p.display()))?;
        out.doc.saved = Some(p.display().to_string());
    }
    if !json {
        print(&out, &out.derived_text(), false)?;
    }
    if args.no_run {
        return print(&out, "", json).map(|()| 0);
    }
    let report = match reproduce(&args, &d)? {
        Ok(r) => r,
        Err(sig) => {
            out.interrupted = true;
            print(&out, &out.run_text(), json)?;
            let where_saved = args.emit.as_ref().map_or(String::new(), |p| format!(", saved in {}", p.display()));
            eprintln!("tcpstall: interrupted by signal {sig}: the derived exchange is printed above{where_saved}");
            return Ok(128 + sig);
        }
    };
    if let Some(err) = report.errors.first() {
        bail!("{err}");
    }
    report.results.first().context("no row")?;
    out.doc.run = Some(report);
    if !json {
        print(&out, &out.run_text(), false)?;
    }
    if let (Some(path), Some(run)) = (&args.report, &out.doc.run) {
        // Says where on stderr (htmlreport::write).
        write_report(path, &args, &d, run, &out.how)?;
    }
    if json {
        print(&out, "", true)?;
    }
    Ok(0)
}

/// Run the derived scenario on the model or in the lab (behind the capture's RTT when it is
/// above 1 ms); Err(signal) when Ctrl-C or SIGTERM stopped the lab run.
fn reproduce(args: &ReplayArgs, d: &Derived) -> anyhow::Result<Result<report::Report, i32>> {
    let (s, link) = (&d.scenario, d.link());
    if args.model {
        let spec = model::RunRequest::with_link(link.as_deref())?.spec(super::simulate::profiles("linux")?);
        let (mut r, out) = model::report(s, &s.matrix, &spec, args.report.is_some());
        if let (Some(row), Some(o)) = (r.results.first_mut(), out.into_iter().next()) {
            row.packets = o.trace;
        }
        return Ok(Ok(r));
    }
    // The classifier needs the rows' packets: behind a link, its tap supplies them.
    let env = super::linkenv::open(link.as_deref(), None, true)?;
    let opts = lab::LabOptions { tap: env.tap(), keep_packets: args.report.is_some(), ..lab::LabOptions::default() };
    // Ctrl-C, SIGTERM: the run stops at once; what was derived (printed, saved with --emit) is
    // the finished work, and the exit is 128 + signal (as `lab`).
    let interrupts = super::lab::Interrupts::start(opts.cancel.clone());
    let r = lab::run_scenario(s, &env.placement, &opts, &mut |_| {});
    env.finish()?;
    Ok(match interrupts.ok().and_then(|i| i.stop()) {
        Some(sig) => Err(sig),
        None => Ok(r),
    })
}

/// `--report`: the captured flow and the reproduced run's connection on one page, each with its
/// stall records, ladders and time-sequence graph; the run's row in the strategy table.
fn write_report(
    path: &std::path::Path,
    args: &ReplayArgs,
    d: &Derived,
    run: &report::Report,
    how: &str,
) -> anyhow::Result<()> {
    use report::html::FlowIn;
    let kernel = if run.mode == "lab" { super::htmlreport::this_kernel() } else { "model, profile linux".into() };
    let header = super::htmlreport::header(
        "replay",
        &format!("{} flow {}: {}", args.file.display(), d.key, d.exchange.inline()),
        how,
        kernel,
    );
    let mut page = super::htmlreport::rows_page(run, header, &[], None, "", None);
    page.notes.clear();
    let row = run.results.first();
    let cp = |c: trace::CapturePoint| format!("{c:?}");
    let mut flows = vec![FlowIn {
        label: format!("captured: {} flow {}", args.file.display(), d.key),
        row: None,
        stalls: &d.analysis.stalls,
        events: Some(&d.events),
        events_note: None,
        rtt_ns: d.analysis.path_rtt.map(|r| r.0),
        capture_point: cp(d.analysis.capture_point),
        capture_at: match d.analysis.capture_point {
            trace::CapturePoint::AtA => Some(Endpoint::A),
            trace::CapturePoint::AtB => Some(Endpoint::B),
            _ => None,
        },
    }];
    if let Some(r) = row {
        flows.push(FlowIn {
            label: format!("reproduced ({}, {how}): {}", run.mode, r.strategy),
            row: Some(0),
            stalls: &r.stall_records,
            events: (!r.packets.is_empty()).then_some(r.packets.as_slice()),
            events_note: r
                .packets
                .is_empty()
                .then(|| "the run recorded no packets (the lab captures them as root)".into()),
            rtt_ns: d.link().and(d.rtt.map(|(ns, _)| ns)).or((run.mode == "lab").then_some(0)),
            capture_point: run.mode.clone(),
            capture_at: (run.mode == "lab" && d.link().is_some()).then_some(Endpoint::B),
        });
    }
    page.flows = flows;
    let by =
        |st: &[analyze::Stall]| report::causes_text(&analyze::StallSummary::of(st.iter().filter(|s| s.shows_a_wait())));
    page.notes.push(format!(
        "Cause by cause: the capture {}; the run {} (in {} rounds).",
        by(&d.analysis.stalls),
        row.map_or("none".into(), |r| by(&r.stall_records)),
        row.map_or(0, |r| r.rounds)
    ));
    super::htmlreport::write(path, &page)
}
