//! `tcpstall explain FILE`: find and classify the stalls in a pcap/pcapng capture of any
//! program. Decoding is `wire`, analysis is `analyze`; this file only wires them to flags and
//! prints.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use analyze::{Config, Finished, Session};
use anyhow::{bail, Context};
use report::explain::{ExplainFlow, ExplainSummary};
use report::Export as _;
use std::collections::HashMap;
use trace::{Duration, Event};
use wire::{Decoder, FlowFilter, FlowId, FlowKey, WireError};

use super::output::OutputFormat;
use super::spool::Spool;

const EXAMPLES: &str = "\
Examples:
  tcpdump -i lo -w x.pcap port 8000 &   ...   tcpstall explain x.pcap
  tcpstall explain x.pcapng --port 8000
  tcpstall explain x.pcap --flow 10.0.0.1:5000-10.0.0.2:80 --format json
  tcpstall explain x.pcap --report x.html
  tcpstall explain client.pcapng server.pcapng   one connection captured at both ends, merged
  tcpdump -i any -w - port 8000 | tcpstall explain -

Reads pcap (micro- or nanosecond, FCS flag) and pcapng (any number of interfaces), link types
Ethernet, Linux cooked v1/v2 (tcpdump -i any), raw IP, BSD loopback, PPP, PPPoE and Cisco HDLC;
IPv4 and IPv6, inside VLAN/QinQ, MPLS, PPPoE, GRE/ERSPAN, VXLAN, Geneve, GTP-U or IP-in-IP. A stall is a gap in
a connection's data flow longer than the path RTT plus --min-gap; each gets a cause:
nagle-delayed-ack, delayed-ack, cwnd-limited, rwnd-limited, retransmission-timeout, probe-timer or
application. Exit status: 0 done, 1 the file is damaged after some packets (the valid prefix is
analysed and printed), 2 not readable at all, or no TCP packet decoded because of its link type.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ExplainArgs {
    /// Capture file (pcap or pcapng), as written by tcpdump, tshark, Wireshark or tcpstall;
    /// `-` reads standard input
    pub file: PathBuf,
    /// A second capture of the same connections, taken at their other end: one merged verdict
    /// per connection, each stall's time split by host (docs/remote.md)
    #[arg(value_name = "FILE2")]
    pub peer: Option<PathBuf>,
    /// Only the flow between these two endpoints: ADDR:PORT-ADDR:PORT (IPv6 as [ADDR]:PORT)
    #[arg(long, value_name = "A-B")]
    pub flow: Option<String>,
    /// Only flows with this port at either end
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// A gap is a stall when it exceeds the path RTT by more than MS milliseconds
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub min_gap: f64,
    /// Output format: the text for people (`text` works too), one JSON document
    /// (docs/json-schema.md, "Explain"), or one CSV/Markdown row per record
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Also list the records that are not stalls, counted apart: ambiguous pauses (several
    /// explanations fit; each says which, and what would settle it) and application gaps (the
    /// writer had not written yet)
    #[arg(long, visible_alias = "all")]
    pub app_gaps: bool,
    /// Also write a self-contained HTML report: stall table, ladder of each stall's packets,
    /// zoomable time-sequence graphs (the most stalled flows first, downsampled when big)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Replaced by --report (its time-sequence graphs have axes, zoom and the stall table)
    #[arg(long, value_name = "FILE.svg", hide = true)]
    pub plot: Option<PathBuf>,
}

/// Packets kept per flow for --report (beyond them the page says the flow was cut).
const REPORT_EVENTS_PER_FLOW: usize = 2_000_000;

/// A flow's packets kept for --report, and how many more were not kept.
type Packets = (Vec<Event>, u64);

/// Parses `ADDR:PORT-ADDR:PORT` (IPv6 in brackets).
pub(crate) fn parse_flow(s: &str) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    // Split at a '-' that follows a port digit and precedes an address.
    for (i, _) in s.match_indices('-') {
        if let (Ok(a), Ok(b)) = (s[..i].parse::<SocketAddr>(), s[i + 1..].parse::<SocketAddr>()) {
            return Ok((a, b));
        }
    }
    bail!("--flow '{s}': expected ADDR:PORT-ADDR:PORT, e.g. 127.0.0.1:5000-127.0.0.1:8000 or [::1]:5000-[::1]:80")
}

/// Where one flow's rendering is in the spool, labelled without the capture interface and with
/// it: while the capture may still turn out to have several interfaces (pcapng, until its end)
/// each flow is rendered both ways, and the end picks one.
#[derive(Debug, Clone, Copy, Default)]
struct Piece {
    plain: Option<(u64, u64)>,
    on_interface: Option<(u64, u64)>,
}

impl Piece {
    fn range(&self, several_interfaces: bool) -> Option<(u64, u64)> {
        if several_interfaces {
            self.on_interface.or(self.plain)
        } else {
            self.plain.or(self.on_interface)
        }
    }
}

/// What a capture held: the decoder's counts, each flow's rendering (in the spool, by flow
/// id), and the error that ended the file early, if any.
struct Findings {
    stats: wire::DecodeStats,
    spool: Spool,
    pieces: Vec<Piece>,
    failure: Option<WireError>,
    several_interfaces: bool,
}

impl Findings {
    /// The flows' renderings in first-seen order.
    fn flows(&self) -> impl Iterator<Item = std::io::Result<Vec<u8>>> + '_ {
        self.pieces.iter().filter_map(|p| p.range(self.several_interfaces)).map(|(from, to)| {
            let mut v = Vec::with_capacity((to - from) as usize);
            self.spool.copy_range(from, to, &mut v).map(|()| v)
        })
    }
}

/// The input, decompressed when gzip'd, behind the decoder; "-" reads standard input.
fn decoder(args: &ExplainArgs) -> anyhow::Result<Decoder<Box<dyn std::io::Read>>> {
    let filter = FlowFilter { pair: args.flow.as_deref().map(parse_flow).transpose()?, port: args.port };
    // "-" reads standard input: `tcpdump -w - ... | tcpstall explain -`.
    let raw: Box<dyn std::io::Read> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
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
    if let Some(peer) = &args.peer {
        return super::explain_pair::run(&args, peer);
    }
    if !(args.min_gap.is_finite() && args.min_gap >= 0.0 && args.min_gap <= 60_000.0) {
        bail!("--min-gap {}: expected milliseconds between 0 and 60000", args.min_gap);
    }
    if args.plot.is_some() {
        bail!("--plot was replaced by --report FILE.html (time-sequence graphs with axes and zoom, the stall table and each stall's ladder)");
    }
    // Before any work: a report that cannot be written must not cost the analysis.
    if let Some(p) = &args.report {
        super::output::check_writable("--report", p)?;
    }
    let mut dec = decoder(&args)?;
    let (found, mut plotted) = analyse(&args, &mut dec)?;

    // Streamed to stdout: a capture with many stalls does not build its report in memory.
    let mut w = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match args.format {
        OutputFormat::Table => text(&mut w, &args, &found),
        OutputFormat::Json => json(&mut w, &args, &found),
        OutputFormat::Csv => rows(&mut w, ExplainFlow::CSV_HEADER, &found),
        OutputFormat::Markdown => rows(&mut w, ExplainFlow::MARKDOWN_HEADER, &found),
    }
    .and_then(|()| w.flush().map_err(Into::into))
    .context("writing the report")?;

    if let Some(path) = &args.report {
        plotted.sort_by_key(|(f, _)| f.id);
        html_report(path, &args, &dec, &found, &plotted)?;
    }
    if let Some(e) = found.failure {
        eprintln!(
            "tcpstall: {}: {e:#} (the {} packets before it were analysed)",
            args.file.display(),
            found.stats.frames
        );
        return Ok(1);
    }
    Ok(0)
}

/// Decode and analyse every flow. Memory follows the flows alive: the decoder ends flows
/// (close + linger, idle, reuse), the session finishes their analysis, and each finished
/// flow's rendering goes to the spool (memory, then a temporary file) until the report is
/// printed in first-seen order. With --report each flow's packets are kept too (bounded).
fn analyse<R: std::io::Read>(
    args: &ExplainArgs,
    dec: &mut Decoder<R>,
) -> anyhow::Result<(Findings, Vec<(Finished, Packets)>)> {
    let cfg = Config { min_gap: Duration((args.min_gap * 1e6) as u64), ..Config::default() };
    let mut session = Session::new(cfg);
    let mut spool = Spool::default();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut live_plots: HashMap<FlowId, Packets> = HashMap::new();
    let mut plotted: Vec<(Finished, Packets)> = Vec::new();
    let mut failure: Option<WireError> = None;
    let mut finished =
        |f: Finished, dec: &Decoder<R>, live_plots: &mut HashMap<FlowId, Packets>| -> anyhow::Result<()> {
            let piece = render(&mut spool, args, dec, &f)?;
            let i = f.id.0 as usize;
            if pieces.len() <= i {
                pieces.resize(i + 1, Piece::default());
            }
            pieces[i] = piece;
            if let Some(pc) = live_plots.remove(&f.id) {
                plotted.push((f, pc));
            }
            Ok(())
        };
    loop {
        let fe = match dec.next_event() {
            Ok(Some(fe)) => fe,
            Ok(None) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        while let Some(end) = dec.pop_ended() {
            if let Some(f) = session.end(&end) {
                finished(f, dec, &mut live_plots)?;
            }
        }
        if args.report.is_some() {
            let (kept, cut) = live_plots.entry(fe.flow).or_default();
            if kept.len() < REPORT_EVENTS_PER_FLOW {
                kept.push(fe.event.clone());
            } else {
                *cut += 1;
            }
        }
        session.push(&fe, || dec.flows().key(fe.flow));
    }
    while let Some(end) = dec.pop_ended() {
        if let Some(f) = session.end(&end) {
            finished(f, dec, &mut live_plots)?;
        }
    }
    for f in session.finish_all() {
        finished(f, dec, &mut live_plots)?;
    }
    if failure.is_none() {
        if let Some(why) = dec.stats().unsupported_linktype() {
            // Nothing to analyse, and an empty report would look like "no stalls".
            bail!("{}: {why}", args.file.display());
        }
    }
    let several_interfaces = dec.several_interfaces();
    Ok((Findings { stats: dec.stats(), spool, pieces, failure, several_interfaces }, plotted))
}

/// One finished flow's text or JSON (`report::explain::ExplainFlow`) into the spool, labelled
/// without the capture interface, with it, or both while the decoder cannot tell yet.
fn render<R: std::io::Read>(
    spool: &mut Spool,
    args: &ExplainArgs,
    dec: &Decoder<R>,
    f: &Finished,
) -> anyhow::Result<Piece> {
    let key = &f.key;
    let on_interface = format!("{key}{}", on_interface(dec, key.interface));
    let (plain, labelled) = if dec.several_interfaces() {
        (None, Some(on_interface))
    } else if dec.format() == wire::Format::PcapNg {
        (Some(key.to_string()), Some(on_interface))
    } else {
        (Some(key.to_string()), None)
    };
    let mut one = |label: String| -> anyhow::Result<(u64, u64)> {
        let mut flow = ExplainFlow::new(
            f.id.0 as usize + 1,
            key.a.to_string(),
            key.b.to_string(),
            key.interface,
            label,
            &f.analysis,
        );
        flow.app_gaps = args.app_gaps;
        let from = spool.len();
        match args.format {
            OutputFormat::Json => serde_json::to_writer(spool.buf(), &flow)?,
            f => spool.buf().extend_from_slice(&flow.export(f.into())?),
        }
        let to = spool.len();
        spool.settle().context("writing the report to a temporary file")?;
        Ok((from, to))
    };
    Ok(Piece { plain: plain.map(&mut one).transpose()?, on_interface: labelled.map(&mut one).transpose()? })
}

/// " on interface N (NAME)": where a flow was captured, for a capture with several interfaces.
fn on_interface<R: std::io::Read>(dec: &Decoder<R>, interface: u32) -> String {
    match dec.interface_name(interface) {
        Some(n) => format!(" on interface {interface} ({n})"),
        None => format!(" on interface {interface}"),
    }
}

/// "A <-> B", plus the capture interface when the file has several (each is a capture point).
fn label<R: std::io::Read>(dec: &Decoder<R>, k: &FlowKey) -> String {
    let suffix = if dec.several_interfaces() { on_interface(dec, k.interface) } else { String::new() };
    format!("{k}{suffix}")
}

/// The text: what was decoded (`report::explain::ExplainSummary`), then each flow's block.
fn text(w: &mut impl std::io::Write, args: &ExplainArgs, found: &Findings) -> anyhow::Result<()> {
    let stats = &found.stats;
    let summary = ExplainSummary {
        file: args.file.display().to_string(),
        frames: stats.frames,
        tcp_packets: stats.tcp_packets,
        flows: found.pieces.len(),
        not_tcp: stats.not_tcp,
        malformed: stats.malformed,
        unknown_linktype: stats.unknown_linktype,
        first_unknown_linktype: stats.first_unknown_linktype,
        filtered_out: stats.filtered_out,
        duplicates: stats.duplicates,
        after_close: stats.after_close,
        damaged: found.failure.as_ref().map(|e| e.to_string()),
        // Why tunnelled traffic has no TCP in the report, and frames whose clock went back.
        notes: [stats.not_decoded_note(), stats.ts_backwards_note(), stats.icmp_note(), stats.wlan_retries_note()]
            .into_iter()
            .flatten()
            .collect(),
    };
    w.write_all(summary.text().as_bytes())?;
    for flow in found.flows() {
        w.write_all(&flow?)?;
    }
    Ok(())
}

/// CSV or Markdown: the header once, then each flow's rows (one per record shown).
fn rows(w: &mut impl std::io::Write, header: &str, found: &Findings) -> anyhow::Result<()> {
    w.write_all(header.as_bytes())?;
    for flow in found.flows() {
        w.write_all(&flow?)?;
    }
    Ok(())
}

/// One JSON document (schema v2, docs/json-schema.md): the head, then each flow's typed object
/// from the spool, one at a time (`report::explain::write_json`).
fn json(w: &mut impl std::io::Write, args: &ExplainArgs, found: &Findings) -> anyhow::Result<()> {
    let head = report::explain::ExplainHead {
        tool: "tcpstall",
        version: env!("CARGO_PKG_VERSION"),
        schema_version: report::SCHEMA_VERSION,
        mode: "explain",
        file: args.file.display().to_string(),
        decode: &found.stats,
        error: found
            .failure
            .as_ref()
            .map(|e| report::explain::ExplainError { offset_bytes: e.offset, message: e.to_string() }),
    };
    let flows = found.flows().map(|f| f.and_then(|v| String::from_utf8(v).map_err(std::io::Error::other)));
    report::explain::write_json(w, &head, flows)?;
    Ok(())
}

/// `--report`: the flows' stall tables, ladders and time-sequence graphs on one page.
fn html_report<R: std::io::Read>(
    path: &std::path::Path,
    args: &ExplainArgs,
    dec: &Decoder<R>,
    found: &Findings,
    flows: &[(Finished, Packets)],
) -> anyhow::Result<()> {
    let stats = &found.stats;
    let summary = format!("{} frames, {} TCP packets in {} flows", stats.frames, stats.tcp_packets, flows.len());
    let kernel = format!("the capture's: not known (this host: {})", super::htmlreport::this_kernel());
    let header = super::htmlreport::header("explain", &args.file.display().to_string(), &summary, kernel);
    let page_flows = flows
        .iter()
        .map(|(f, (ev, cut))| report::html::FlowIn {
            label: format!("flow {}: {}", f.id.0 + 1, label(dec, &f.key)),
            row: None,
            stalls: &f.analysis.stalls,
            events: Some(ev.as_slice()),
            events_note: (*cut > 0)
                .then(|| format!("only its first {} packets are drawn ({cut} more not kept)", ev.len())),
            rtt_ns: f.analysis.path_rtt.map(|d| d.0),
            capture_point: f.analysis.capture_note.clone(),
            capture_at: match f.analysis.capture_point {
                trace::CapturePoint::AtA => Some(trace::Endpoint::A),
                trace::CapturePoint::AtB => Some(trace::Endpoint::B),
                _ => None,
            },
        })
        .collect();
    let mut notes = Vec::new();
    if let Some(e) = &found.failure {
        notes.push(format!("DAMAGED FILE: {e}; the page covers the packets before it"));
    }
    let page = report::html::Page { header, rows: &[], flows: page_flows, errors: &[], notes, ranking: None };
    super::htmlreport::write(path, &page)
}

#[cfg(test)]
mod tests {
    use super::parse_flow;

    #[test]
    fn flow_pairs_parse_for_ipv4_and_ipv6() {
        let (a, b) = parse_flow("127.0.0.1:5000-10.0.0.2:80").unwrap();
        assert_eq!((a.port(), b.to_string().as_str()), (5000, "10.0.0.2:80"));
        let (a, b) = parse_flow("[::1]:5000-[2001:db8::1]:443").unwrap();
        assert_eq!((a.port(), b.port()), (5000, 443));
        assert!(parse_flow("127.0.0.1:5000").is_err());
        assert!(parse_flow("a-b").is_err());
    }
}
