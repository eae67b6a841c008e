//! `tcpstall explain FILE`: find and classify the stalls in a pcap/pcapng capture of any
//! program. Decoding is `wire`, analysis is `analyze`; this file only wires them to flags and
//! prints.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use analyze::{Config, DirSummary, Finished, Session};
use anyhow::{bail, Context};
use std::collections::HashMap;
use trace::{Duration, Endpoint, Event, Evidence};
use wire::{Decoder, FlowFilter, FlowId, FlowKey, WireError};

use super::spool::Spool;

const EXAMPLES: &str = "\
Examples:
  tcpdump -i lo -w x.pcap port 8000 &   ...   tcpstall explain x.pcap
  tcpstall explain x.pcapng --port 8000
  tcpstall explain x.pcap --flow 10.0.0.1:5000-10.0.0.2:80 --format json
  tcpstall explain x.pcap --report x.html
  tcpdump -i any -w - port 8000 | tcpstall explain -

Reads pcap (micro- or nanosecond, FCS flag) and pcapng (any number of interfaces), link types
Ethernet, Linux cooked v1/v2 (tcpdump -i any), raw IP, BSD loopback, PPP, PPPoE and Cisco HDLC;
IPv4 and IPv6, inside VLAN/QinQ, MPLS, PPPoE, GRE/ERSPAN, VXLAN, Geneve, GTP-U or IP-in-IP. A stall is a gap in
a connection's data flow longer than the path RTT plus --min-gap; each gets a cause:
nagle-delayed-ack, delayed-ack, cwnd-limited, rwnd-limited, retransmission-timeout, probe-timer or
application. Exit status: 0 done, 1 the file is damaged after some packets (the valid prefix is
analysed and printed), 2 not readable at all, or no TCP packet decoded because of its link type.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ExplainArgs {
    /// Capture file (pcap or pcapng), as written by tcpdump, tshark, Wireshark or tcpstall;
    /// `-` reads standard input
    pub file: PathBuf,
    /// Only the flow between these two endpoints: ADDR:PORT-ADDR:PORT (IPv6 as [ADDR]:PORT)
    #[arg(long, value_name = "A-B")]
    pub flow: Option<String>,
    /// Only flows with this port at either end
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// A gap is a stall when it exceeds the path RTT by more than MS milliseconds
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub min_gap: f64,
    /// Output format
    #[arg(long, value_enum, default_value = "text")]
    pub format: ExplainFormat,
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
pub fn parse_flow(s: &str) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    // Split at a '-' that follows a port digit and precedes an address.
    for (i, _) in s.match_indices('-') {
        if let (Ok(a), Ok(b)) = (s[..i].parse::<SocketAddr>(), s[i + 1..].parse::<SocketAddr>()) {
            return Ok((a, b));
        }
    }
    bail!("--flow '{s}': expected ADDR:PORT-ADDR:PORT, e.g. 127.0.0.1:5000-127.0.0.1:8000 or [::1]:5000-[::1]:80")
}

/// Where one flow's report piece is in the spool, and where its label gets the capture
/// interface appended when the file turns out to have several (known only at the end).
#[derive(Debug, Clone, Copy, Default)]
struct Piece {
    from: u64,
    to: u64,
    /// Offset in the piece where " on interface N" goes.
    label_at: u32,
    interface: u32,
}

pub fn run(args: ExplainArgs) -> anyhow::Result<i32> {
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
    let filter = FlowFilter { pair: args.flow.as_deref().map(parse_flow).transpose()?, port: args.port };
    let cfg = Config { min_gap: Duration((args.min_gap * 1e6) as u64), ..Config::default() };
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
    let mut dec = Decoder::new(input, filter).with_context(|| format!("{}", args.file.display()))?;

    // Memory follows the flows alive: the decoder ends flows (close + linger, idle, reuse), the
    // session finishes their analysis, and each finished flow's report piece goes to the spool
    // (memory, then a temporary file) until the report is printed in first-seen order.
    let mut session = Session::new(cfg);
    let mut spool = Spool::default();
    let mut pieces: Vec<Piece> = Vec::new();
    // --report: each flow's packets, kept past the flow's end (bounded per flow).
    let mut live_plots: HashMap<FlowId, Packets> = HashMap::new();
    let mut plotted: Vec<(Finished, Packets)> = Vec::new();
    let mut failure: Option<WireError> = None;
    let mut finished = |f: Finished, live_plots: &mut HashMap<FlowId, Packets>| -> anyhow::Result<()> {
        let from = spool.len();
        let label_at = match args.format {
            ExplainFormat::Text => text_flow(spool.buf(), &f, args.app_gaps)?,
            ExplainFormat::Json => json_flow(spool.buf(), &f)?,
        };
        spool.settle().context("writing the report to a temporary file")?;
        let i = f.id.0 as usize;
        if pieces.len() <= i {
            pieces.resize(i + 1, Piece::default());
        }
        pieces[i] = Piece { from, to: spool.len(), label_at, interface: f.key.interface };
        if let Some(pc) = live_plots.remove(&f.id) {
            plotted.push((f, pc));
        }
        Ok(())
    };
    loop {
        match dec.next_event() {
            Ok(Some(fe)) => {
                while let Some(end) = dec.pop_ended() {
                    if let Some(f) = session.end(&end) {
                        finished(f, &mut live_plots)?;
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
            Ok(None) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    while let Some(end) = dec.pop_ended() {
        if let Some(f) = session.end(&end) {
            finished(f, &mut live_plots)?;
        }
    }
    for f in session.finish_all() {
        finished(f, &mut live_plots)?;
    }
    if failure.is_none() {
        if let Some(why) = dec.stats().unsupported_linktype() {
            // Nothing to analyse, and an empty report would look like "no stalls".
            bail!("{}: {why}", args.file.display());
        }
    }
    let found = Findings { stats: dec.stats(), spool, pieces, failure };

    // Streamed to stdout: a capture with many stalls does not build its report in memory.
    let mut w = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match args.format {
        ExplainFormat::Text => text(&mut w, &args, &dec, &found),
        ExplainFormat::Json => json(&mut w, &args, &dec, &found),
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

/// The label suffix for a flow on `interface` when the capture has several interfaces.
fn interface_suffix<R: std::io::Read>(dec: &Decoder<R>, interface: u32) -> Option<String> {
    if !dec.several_interfaces() {
        return None;
    }
    Some(match dec.interface_name(interface) {
        Some(n) => format!(" on interface {interface} ({n})"),
        None => format!(" on interface {interface}"),
    })
}

/// Writes the flows' pieces in first-seen order, with the interface in each label when the
/// capture has several (`escape` turns the suffix into the output format's text).
fn write_pieces<R: std::io::Read>(
    w: &mut impl std::io::Write,
    dec: &Decoder<R>,
    found: &Findings,
    escape: impl Fn(&str) -> String,
) -> std::io::Result<()> {
    // Consecutive pieces usually sit one after the other in the spool: copy them as one range.
    let mut run: Option<(u64, u64)> = None;
    for p in &found.pieces {
        let suffix = interface_suffix(dec, p.interface);
        match (run, &suffix) {
            (Some((a, b)), None) if b == p.from => run = Some((a, p.to)),
            _ => {
                if let Some((a, b)) = run.take() {
                    found.spool.copy_range(a, b, w)?;
                }
                match suffix {
                    None => run = Some((p.from, p.to)),
                    Some(sfx) => {
                        let mid = p.from + u64::from(p.label_at);
                        found.spool.copy_range(p.from, mid, w)?;
                        w.write_all(escape(&sfx).as_bytes())?;
                        found.spool.copy_range(mid, p.to, w)?;
                    }
                }
            }
        }
    }
    if let Some((a, b)) = run {
        found.spool.copy_range(a, b, w)?;
    }
    Ok(())
}

/// "A <-> B", plus the capture interface when the file has several (each is a capture point).
fn label<R: std::io::Read>(dec: &Decoder<R>, k: &FlowKey) -> String {
    format!("{k}{}", interface_suffix(dec, k.interface).unwrap_or_default())
}

fn dur(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| d.to_string())
}

fn frames(ev: &[analyze::EvidenceItem]) -> String {
    ev.iter()
        .map(|e| match e.source {
            Evidence::Frame(n) => format!("#{n}"),
            Evidence::Model(n) => format!("step {n}"),
            Evidence::Lab => "lab".into(),
            Evidence::Kernel(n) => format!("kernel {n}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn dir_line(name: &str, d: &DirSummary) -> String {
    let rtt = |s: &analyze::DurationStats| {
        if s.count == 0 {
            "-".to_string()
        } else {
            format!("{}/{}/{}", dur(s.min()), dur(s.mean()), dur(s.max()))
        }
    };
    format!(
        "  {name:<7} {:>7} {:>6} {:>6} {:>9} {:>9} {:>4} {:>4} {:>5}  rtt(ack) {}  rtt(ts) {}  idle gaps {} (longest {})\n",
        d.wire.packets,
        d.wire.data_segments,
        d.wire.pure_acks,
        d.wire.payload_bytes,
        d.wire.wire_bytes,
        d.retransmissions,
        d.out_of_order,
        d.mss.map_or("-".into(), |m| m.to_string()),
        rtt(&d.rtt_ack),
        rtt(&d.rtt_ts),
        d.idle_gaps,
        Duration(d.longest_idle_ns)
    )
}

/// What a capture held: the decoder's counts, each flow's report piece (in the spool, by flow
/// id), and the error that ended the file early, if any.
struct Findings {
    stats: wire::DecodeStats,
    spool: Spool,
    pieces: Vec<Piece>,
    failure: Option<WireError>,
}

fn text<R: std::io::Read>(
    s: &mut impl std::io::Write,
    args: &ExplainArgs,
    dec: &Decoder<R>,
    found: &Findings,
) -> anyhow::Result<()> {
    let Findings { stats, pieces, failure, .. } = found;
    let _ = writeln!(
        s,
        "{}: {} frames, {} TCP packets in {} flows{}{}{}{}",
        args.file.display(),
        stats.frames,
        stats.tcp_packets,
        pieces.len(),
        if stats.not_tcp + stats.malformed + stats.unknown_linktype > 0 {
            format!(
                "; skipped {} not TCP, {} malformed, {} on unknown link types{}",
                stats.not_tcp,
                stats.malformed,
                stats.unknown_linktype,
                stats.first_unknown_linktype.map_or(String::new(), |l| format!(" (first: {l})"))
            )
        } else {
            String::new()
        },
        if stats.filtered_out > 0 { format!("; {} filtered out", stats.filtered_out) } else { String::new() },
        if stats.duplicates > 0 {
            format!("; {} duplicate frames collapsed (copies of a packet just seen)", stats.duplicates)
        } else {
            String::new()
        },
        if stats.after_close > 0 {
            format!("; {} packets after their connection closed, not analysed", stats.after_close)
        } else {
            String::new()
        }
    );
    if let Some(e) = failure {
        writeln!(s, "DAMAGED FILE: {e}; what follows covers the packets before it")?;
    }
    // Why tunnelled traffic has no TCP in the report, and frames whose clock went back.
    let notes = [stats.not_decoded_note(), stats.ts_backwards_note(), stats.icmp_note(), stats.wlan_retries_note()];
    for note in notes.into_iter().flatten() {
        writeln!(s, "note: {note}")?;
    }
    write_pieces(s, dec, found, |x| x.to_string())?;
    Ok(())
}

/// One flow's text; returns the offset in it where the label ends.
fn text_flow(s: &mut Vec<u8>, f: &Finished, app_gaps: bool) -> anyhow::Result<u32> {
    let (i, key, fa) = (f.id.0 as usize, &f.key, &f.analysis);
    let start = s.len();
    let who = if fa.handshake.syn.is_some() { "sent the SYN" } else { "seen first: handshake not captured" };
    write!(s, "\nflow {}: {key}", i + 1)?;
    let label_at = (s.len() - start) as u32;
    writeln!(s, " (A = {}, {who})", key.a)?;
    let _ = writeln!(
        s,
        "  {} .. {} s, path RTT {}, capture point: {}",
        fa.first,
        fa.last,
        dur(fa.path_rtt),
        fa.capture_note
    );
    for n in &fa.notes {
        writeln!(s, "  note: {n}")?;
    }
    let _ = writeln!(
        s,
        "  {:<7} {:>7} {:>6} {:>6} {:>9} {:>9} {:>4} {:>4} {:>5}",
        "dir", "packets", "data", "p-ack", "payload", "wire B", "retx", "ooo", "mss"
    );
    s.write_all(dir_line("A->B", &fa.dirs[0]).as_bytes())?;
    s.write_all(dir_line("B->A", &fa.dirs[1]).as_bytes())?;
    // Stalls (and waits with no signature) first; ambiguous pauses and application gaps are
    // not stalls: counted apart, listed only with --app-gaps.
    let sum = analyze::StallSummary::of(&fa.stalls);
    let hidden = sum.ambiguous_count + sum.application_gap_count;
    writeln!(s, "  {}{}", sum.headline(), if hidden > 0 && !app_gaps { " (--app-gaps lists those)" } else { "" })?;
    let shown: Vec<&analyze::Stall> = fa
        .stalls
        .iter()
        .filter(|st| app_gaps || matches!(st.kind, analyze::RecordKind::Stall | analyze::RecordKind::Wait))
        .collect();
    if shown.is_empty() {
        return Ok(label_at);
    }
    let _ = writeln!(
        s,
        "  {:>4} {:>10} {:>10} {:>4}  {:<22} {:>4}  evidence (frames)",
        "#", "start s", "length", "held", "cause", "conf"
    );
    for (j, st) in shown.iter().enumerate() {
        let held = match st.held {
            Endpoint::A => "A",
            Endpoint::B => "B",
        };
        let cause = match st.kind {
            analyze::RecordKind::Ambiguous => format!("{}?", st.cause.as_str()),
            _ => st.cause.as_str().to_string(),
        };
        let _ = writeln!(
            s,
            "  {:>4} {:>10} {:>10} {:>4}  {:<22} {:>4.2}  {}",
            j + 1,
            st.start.to_string(),
            st.length.to_string(),
            held,
            cause,
            st.confidence,
            frames(&st.evidence)
        );
        match st.kind {
            analyze::RecordKind::Ambiguous => {
                let alts: Vec<&str> = st.alternatives.iter().map(|c| c.as_str()).collect();
                writeln!(
                    s,
                    "       ambiguous{}: {}",
                    if alts.is_empty() { String::new() } else { format!(" ({} or {})", st.cause, alts.join(" or ")) },
                    st.detail
                )?;
                if let Some(how) = &st.settle {
                    writeln!(s, "       to settle it: {how}")?;
                }
            }
            _ => writeln!(s, "       {}: {}", st.cause.explain(), st.detail)?,
        }
    }
    Ok(label_at)
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

fn json<R: std::io::Read>(
    w: &mut impl std::io::Write,
    args: &ExplainArgs,
    dec: &Decoder<R>,
    found: &Findings,
) -> anyhow::Result<()> {
    let Findings { stats, failure, .. } = found;
    // One JSON document (schema v2, docs/json-schema.md), written piece by piece: the head,
    // then each flow's typed object from the spool.
    let head = report::explain::ExplainHead {
        tool: "tcpstall",
        version: env!("CARGO_PKG_VERSION"),
        schema_version: report::SCHEMA_VERSION,
        mode: "explain",
        file: args.file.display().to_string(),
        decode: stats,
        error: failure
            .as_ref()
            .map(|e| report::explain::ExplainError { offset_bytes: e.offset, message: e.to_string() }),
    };
    let head = serde_json::to_string(&head)?;
    write!(w, "{},\"flows\":[", &head[..head.len() - 1])?;
    write_pieces(w, dec, found, |x| {
        let q = serde_json::to_string(x).unwrap_or_default();
        q.get(1..q.len().saturating_sub(1)).unwrap_or_default().to_string()
    })?;
    w.write_all(b"]}\n")?;
    Ok(())
}

/// One flow's JSON object (with the separator before it); returns the offset in it where the
/// label string's text ends.
fn json_flow(w: &mut Vec<u8>, f: &Finished) -> anyhow::Result<u32> {
    let (i, k) = (f.id.0 as usize, &f.key);
    let label = k.to_string();
    let flow = report::explain::ExplainFlow::new(
        i + 1,
        k.a.to_string(),
        k.b.to_string(),
        k.interface,
        label.clone(),
        &f.analysis,
    );
    let flow = serde_json::to_string(&flow)?;
    let pre = if i > 0 { ",\n" } else { "\n" };
    let needle = format!("\"label\":{}", serde_json::to_string(&label)?);
    let label_at = pre.len() + flow.find(&needle).map_or(0, |p| p + needle.len() - 1);
    write!(w, "{pre}{flow}")?;
    Ok(label_at as u32)
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
