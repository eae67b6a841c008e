//! `tcpstall replay CAPTURE`: derive the exchange a captured connection carried (turns by
//! direction, write boundaries from PSH, think times from the gaps no TCP stall explains,
//! the path RTT from the handshake), print it, optionally save it, and run it here.

use std::path::Path;

use analyze::session::CapturedFlow;
use anyhow::{bail, Context};
use report::{Export as _, ReplayOutput};
use scenario::derive::Derived;
use wire::FlowFilter;

use crate::flags::common::OutputFormat;
use crate::flags::replay::ReplayArgs;

/// Derive the exchange of one flow of a capture (`tcpstall replay`, `tcpstall advise CAPTURE`):
/// the file opened here, the flow with the most waiting picked and analysed
/// (analyze::session::busiest_flow), its exchange derived (scenario::derive); the analysis
/// comes back beside the exchange.
pub(crate) fn derive(
    file: &Path,
    flow: Option<&str>,
    port: Option<u16>,
    rounds: Option<u32>,
) -> anyhow::Result<(Derived, CapturedFlow)> {
    let pair = flow.map(crate::flags::explain::parse_flow).transpose()?;
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let input =
        wire::decompressed(std::io::BufReader::new(f)).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file.display().to_string();
    let captured = analyze::session::busiest_flow(input, FlowFilter { pair, port }, &name)?;
    let (waits, rtt) = (captured.tcp_waits(), captured.rtt());
    let shown = captured
        .shown_evidence()
        .map(|(nodelay, held_coalescing)| scenario::derive::Shown { nodelay, held_coalescing });
    let cap = scenario::derive::Capture { events: &captured.events, tcp_waits: &waits, rtt, shown: &shown };
    let d = scenario::derive::derive(&name, &captured.key, cap, rounds)?;
    Ok((d, captured))
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
    let (d, captured) = derive(&args.file, args.flow.as_deref(), args.port, args.rounds)?;
    let json = args.format == OutputFormat::Json;
    let mut out = ReplayOutput::derived(env!("CARGO_PKG_VERSION"), args.file.display().to_string(), &d, &captured);
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
        write_report(path, &args, (&d, &captured), run, &out.how)?;
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
        let (mut r, packets) = spec.run_first(s, args.report.is_some());
        if let Some(row) = r.results.first_mut() {
            row.packets = packets;
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
    (d, captured): (&Derived, &CapturedFlow),
    run: &report::Report,
    how: &str,
) -> anyhow::Result<()> {
    let kernel = if run.mode == "lab" { super::htmlreport::this_kernel() } else { "model, profile linux".into() };
    let file = args.file.display();
    let header =
        super::htmlreport::header("replay", &format!("{file} flow {}: {}", d.key, d.exchange.inline()), how, kernel);
    let mut page = super::htmlreport::rows_page(run, header, &[], None, "", None);
    let (flows, note) = report::replay_html_flows(&file.to_string(), d, captured, run, how);
    page.flows = flows;
    page.notes = vec![note];
    super::htmlreport::write(path, &page)
}
