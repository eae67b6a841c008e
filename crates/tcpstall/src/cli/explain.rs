//! `tcpstall explain FILE`: find and classify the stalls in a pcap/pcapng capture of any
//! program. Decoding is `wire`, analysis is `analyze`, the document `report::explain`; this
//! file opens the capture (or standard input), runs them and prints.

use std::io::Write as _;

use analyze::{session, Config};
use anyhow::{bail, Context};
use report::explain::{ExplainFlows, ExplainHead, ExplainPackets, ExplainSummary, Interfaces};
use report::owner::FlowOwners;
use tempfile::SpooledTempFile;
use wire::{Decoder, FlowFilter, WireError};

use crate::flags::explain::{parse_flow, ExplainArgs};

/// Packets kept per flow for --report (beyond them the page says the flow was cut).
const REPORT_EVENTS_PER_FLOW: usize = 2_000_000;

/// Flows' renderings kept in memory before they move to an unlinked temporary file.
const SPOOL_IN_MEMORY: usize = 8 << 20;

/// The input, decompressed when gzip'd, behind the decoder; "-" reads standard input.
fn decoder(args: &ExplainArgs) -> anyhow::Result<Decoder<Box<dyn std::io::Read + Send>>> {
    let filter = FlowFilter { pair: args.flow.as_deref().map(parse_flow).transpose()?, port: args.port };
    // "-" reads standard input: `tcpdump -w - ... | tcpstall explain -`.
    // (Stdin, not its lock: decoding runs on a thread of its own; BufReader batches the reads.)
    let raw: Box<dyn std::io::Read + Send> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else if args.file.is_dir() {
        // open(2) succeeds on a directory and read(2) then fails: say it once, up front.
        bail!("cannot read {}: Is a directory", args.file.display());
    } else {
        Box::new(std::fs::File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?)
    };
    // A gzip-compressed capture (tcpdump -z gzip, .pcap.gz) is read as it is.
    let input = wire::decompressed(std::io::BufReader::with_capacity(1 << 16, raw))
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    Decoder::new(input, filter).with_context(|| format!("{}", args.file.display()))
}

pub(crate) fn run(args: ExplainArgs) -> anyhow::Result<i32> {
    args.min_gap()?;
    if let Some(peer) = &args.peer {
        return super::explain_pair::run(&args, peer);
    }
    if args.plot.is_some() {
        bail!("--plot was replaced by --report FILE.html (time-sequence graphs with axes and zoom, the stall table and each stall's ladder)");
    }
    // Before any work: a report that cannot be written must not cost the analysis.
    if let Some(p) = &args.report {
        super::output::check_writable("--report", p)?;
    }
    let mut dec = decoder(&args)?;
    let (flows, mut packets, failure) = analyse(&args, &mut dec)?;
    let stats = dec.stats();
    let file = args.file.display().to_string();
    let damaged = failure.as_ref().map(|e| (e.offset, e.to_string()));
    let head = ExplainHead::new(env!("CARGO_PKG_VERSION"), file.clone(), &stats, damaged.clone());
    // Streamed to stdout: a capture with many stalls does not build its report in memory.
    let mut w = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let summary = ExplainSummary::of(file.clone(), &stats, flows.count(), damaged.map(|(_, m)| m));
    flows
        .write(&mut w, dec.several_interfaces(), &summary, &head)
        .map_err(anyhow::Error::new)
        .and_then(|()| w.flush().map_err(Into::into))
        .context("writing the report")?;

    if let Some(path) = &args.report {
        let link = format!("{} frames, {} TCP packets in {} flows", stats.frames, stats.tcp_packets, packets.flows());
        let kernel = format!("the capture's: not known (this host: {})", super::htmlreport::this_kernel());
        let header = super::htmlreport::header("explain", &file, &link, kernel);
        let damaged = failure.as_ref().map(|e| e.to_string());
        let page = packets.page(header, dec.several_interfaces(), |i| dec.interface_name(i), damaged);
        super::htmlreport::write(path, &page)?;
    }
    if let Some(e) = failure {
        eprintln!("tcpstall: {}: {e:#} (the {} packets before it were analysed)", args.file.display(), stats.frames);
        return Ok(1);
    }
    if let Some(why) = stats.no_tcp() {
        // The counts are printed, but a report without a flow would read as "no stalls": say
        // why nothing was analysed, and exit 1 (a result with an error beside it).
        eprintln!("tcpstall: {}: {why}", args.file.display());
        return Ok(1);
    }
    Ok(0)
}

/// Decode and analyse every flow (`analyze::session`). Memory follows the flows alive: each
/// finished flow's rendering goes to the spool (memory, then a temporary file) until the report
/// is printed in first-seen order; with --report each flow's packets are kept too (bounded).
/// The error that ended a damaged file comes back with what was read before it.
fn analyse<R: std::io::Read + Send>(
    args: &ExplainArgs,
    dec: &mut Decoder<R>,
) -> anyhow::Result<(ExplainFlows<SpooledTempFile>, ExplainPackets, Option<WireError>)> {
    let spool = SpooledTempFile::new(SPOOL_IN_MEMORY);
    let mut flows = ExplainFlows::new(spool, args.format.into(), args.app_gaps);
    let packets = std::cell::RefCell::new(ExplainPackets::new(REPORT_EVENTS_PER_FLOW));
    let mut spool_error = None;
    let cfg = Config { min_gap: args.min_gap()?, ..Config::default() };
    let keep = args.report.is_some();
    let failure = session::run_with_decoder(
        dec,
        cfg,
        |fe| {
            if keep {
                packets.borrow_mut().keep(fe.flow.0, &fe.event)
            }
        },
        |ctx, f| {
            let on = Interfaces {
                several: ctx.several_interfaces,
                may_add: ctx.format == wire::Format::PcapNg,
                name: ctx.interface_name.as_deref(),
            };
            if spool_error.is_none() {
                // The processes ptcpdump's packet comments name (none in most captures).
                let owners = FlowOwners::from_capture(ctx.processes.as_ref());
                spool_error = flows.push(&f, on, &owners).err();
            }
            packets.borrow_mut().finished(f);
        },
    )
    .err();
    if let Some(e) = spool_error {
        return Err(anyhow::Error::new(e).context("writing the report to a temporary file"));
    }
    if let (None, Some(why)) = (&failure, dec.stats().unsupported_linktype()) {
        // Nothing to analyse, and an empty report would look like "no stalls".
        bail!("{}: {why}", args.file.display());
    }
    Ok((flows, packets.into_inner(), failure))
}
