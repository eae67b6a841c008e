//! `tcpstall replay CAPTURE`: derive the exchange a captured connection carried (turns by
//! direction, write boundaries from PSH, think times from the gaps no TCP stall explains,
//! the path RTT from the handshake), print it, optionally save it, and run it here.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use report::{Export as _, ReplayOutput};
use scenario::derive::Derived;
use wire::FlowFilter;

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

/// Derive the exchange of one flow of a capture (`tcpstall replay`, `tcpstall advise CAPTURE`):
/// the file opened here, the rest is scenario::derive.
pub(crate) fn derive(
    file: &Path,
    flow: Option<&str>,
    port: Option<u16>,
    rounds: Option<u32>,
) -> anyhow::Result<Derived> {
    let pair = flow.map(super::explain::parse_flow).transpose()?;
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let input =
        wire::decompressed(std::io::BufReader::new(f)).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file.display().to_string();
    Ok(scenario::derive::derive(input, FlowFilter { pair, port }, &name, rounds)?)
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
    let d = derive(&args.file, args.flow.as_deref(), args.port, args.rounds)?;
    let json = args.format == OutputFormat::Json;
    let mut out = ReplayOutput::derived(env!("CARGO_PKG_VERSION"), args.file.display().to_string(), &d);
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
    d: &Derived,
    run: &report::Report,
    how: &str,
) -> anyhow::Result<()> {
    let kernel = if run.mode == "lab" { super::htmlreport::this_kernel() } else { "model, profile linux".into() };
    let file = args.file.display();
    let header =
        super::htmlreport::header("replay", &format!("{file} flow {}: {}", d.key, d.exchange.inline()), how, kernel);
    let mut page = super::htmlreport::rows_page(run, header, &[], None, "", None);
    let (flows, note) = report::replay_html_flows(&file.to_string(), d, run, how);
    page.flows = flows;
    page.notes = vec![note];
    super::htmlreport::write(path, &page)
}
