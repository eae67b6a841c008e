//! `tcpstall replay CAPTURE`: derive the exchange a captured connection carried (turns by
//! direction, write boundaries from PSH, think times from the gaps no TCP stall explains,
//! the path RTT from the handshake), print it, optionally save it, and run it here.

use std::path::PathBuf;

use analyze::{Config, FlowAnalysis, FlowAnalyzer};
use anyhow::{bail, Context};
use scenario::{CallKind, Connection, Exchange, Scenario, Side, Turn};
use trace::{Endpoint, EventKind};
use wire::{Decoder, FlowFilter};

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
pub struct ReplayArgs {
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
    /// Output format: text, or one JSON document (the exchange, the capture's stall records and
    /// the run's report; docs/json-schema.md, "Replay")
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReplayFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayFormat {
    Text,
    Json,
}

/// One data segment of the flow, as the derivation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub t_ns: u64,
    pub client: bool,
    pub seq: u32,
    pub len: u32,
    pub psh: bool,
}

/// Turns from data segments in time order: a turn per run of one direction, a write per PSH
/// (or the turn's end); bytes at or below the highest sequence already seen are resent, skipped.
/// Each turn comes with the times of its first and last segments.
pub fn turns_of(segs: &[Seg]) -> Vec<(u64, u64, Turn)> {
    let mut out: Vec<(u64, u64, Turn)> = Vec::new();
    let mut next: [Option<u32>; 2] = [None, None];
    let mut pending = 0u32;
    for s in segs.iter().filter(|s| s.len > 0) {
        let d = usize::from(!s.client);
        let end = s.seq.wrapping_add(s.len);
        // Resent: ends at or before what this direction already sent (RFC 9293 3.4 sequence
        // comparison, modulo 2^32).
        if let Some(n) = next[d] {
            if trace::SeqNum(end) <= trace::SeqNum(n) {
                continue;
            }
        }
        next[d] = Some(end);
        let side = if s.client { Side::Client } else { Side::Server };
        let new_turn = out.last().map(|(_, _, t)| t.side) != Some(side);
        if new_turn {
            if let Some((_, _, t)) = out.last_mut() {
                if pending > 0 {
                    t.writes.push(pending);
                }
            }
            pending = 0;
            out.push((
                s.t_ns,
                s.t_ns,
                Turn { side, writes: Vec::new(), call: CallKind::Write, think_ns: 0, peer_reads: true },
            ));
        }
        pending += s.len;
        if let Some((_, end, t)) = out.last_mut() {
            *end = s.t_ns;
            if s.psh {
                t.writes.push(pending);
                pending = 0;
            }
        }
    }
    if let Some((_, _, t)) = out.last_mut() {
        if pending > 0 {
            t.writes.push(pending);
        }
    }
    out
}

/// The shortest period P such that the turns repeat by (side, bytes); the whole list when none.
pub fn period(turns: &[Turn]) -> usize {
    let key = |t: &Turn| (t.side, t.total());
    (1..=turns.len() / 2)
        .find(|&p| (p..turns.len()).all(|i| key(&turns[i]) == key(&turns[i - p])))
        .unwrap_or(turns.len().max(1))
}

/// The exchange of one period: per position, the repetition with the most write boundaries
/// (TCP only merges writes, so the finest split seen is closest to the application's), and
/// the median think time.
pub fn exchange_of(turns: &[Turn]) -> Option<(Exchange, usize)> {
    if turns.is_empty() {
        return None;
    }
    let p = period(turns);
    let reps = turns.len() / p;
    let template: Vec<Turn> = (0..p)
        .map(|k| {
            let same: Vec<&Turn> = turns.iter().skip(k).step_by(p).collect();
            let mut best = (*same.iter().max_by_key(|t| t.writes.len()).expect("one at least")).clone();
            let mut thinks: Vec<u64> = same.iter().map(|t| t.think_ns).collect();
            thinks.sort_unstable();
            best.think_ns = thinks[thinks.len() / 2];
            best
        })
        .collect();
    let e = Exchange { turns: template, rounds: reps.clamp(1, 100) as u32, warmup: 20, connection: Connection::Reuse };
    Some((e, reps))
}

/// Decode the capture and analyse each flow; the chosen one's segments and analysis.
fn load(args: &ReplayArgs) -> anyhow::Result<(String, Vec<Seg>, FlowAnalysis, Vec<trace::Event>)> {
    let pair = args.flow.as_deref().map(super::explain::parse_flow).transpose()?;
    let file = std::fs::File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let input = wire::decompressed(std::io::BufReader::new(file))
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut dec = Decoder::new(input, FlowFilter { pair, port: args.port })
        .with_context(|| format!("{}", args.file.display()))?;
    let mut flows: Vec<(FlowAnalyzer, Vec<trace::Event>)> = Vec::new();
    while let Some(fe) = dec.next_event().with_context(|| format!("{}", args.file.display()))? {
        let i = fe.flow.0 as usize;
        while flows.len() <= i {
            flows.push((FlowAnalyzer::new(Config::default()), Vec::new()));
        }
        flows[i].0.push(&fe.event);
        flows[i].1.push(fe.event);
    }
    let mut done: Vec<(usize, FlowAnalysis, Vec<trace::Event>)> =
        flows.into_iter().enumerate().map(|(i, (a, ev))| (i, a.finish(), ev)).collect();
    let stall_time =
        |fa: &FlowAnalysis| -> u64 { fa.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| s.length.0).sum() };
    done.sort_by_key(|(i, fa, _)| (std::cmp::Reverse(stall_time(fa)), *i));
    let Some((i, fa, events)) = done.into_iter().next() else {
        bail!("{}: no TCP flow (check --flow/--port)", args.file.display());
    };
    let key = dec.flows().key(wire::FlowId(i as u32)).map(|k| k.to_string()).unwrap_or_default();
    // The client sent the SYN (without ACK); else the first to send data.
    let client = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Segment(s) if s.flags.has(trace::TcpFlags::SYN) && !s.flags.has(trace::TcpFlags::ACK) => {
                Some(e.from)
            }
            _ => None,
        })
        .or_else(|| {
            events.iter().find_map(|e| match &e.kind {
                EventKind::Segment(s) if s.len > 0 => Some(e.from),
                _ => None,
            })
        })
        .unwrap_or(Endpoint::A);
    let segs = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Segment(s) if s.len > 0 => {
                Some(Seg { t_ns: e.t.0, client: e.from == client, seq: s.seq, len: s.len, psh: s.flags.psh() })
            }
            _ => None,
        })
        .collect();
    Ok((key, segs, fa, events))
}

/// What a capture's connection becomes.
pub struct Derived {
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
    pub fn link(&self) -> Option<String> {
        self.rtt.map(|(ns, _)| ns).filter(|&ns| ns > 1_000_000).map(|ns| format!("rtt={}us", ns / 1000))
    }
}

/// Derive the exchange of one flow of a capture (`tcpstall replay`, `tcpstall advise CAPTURE`).
pub fn derive(args: &ReplayArgs) -> anyhow::Result<Derived> {
    let (key, segs, fa, events) = load(args)?;
    let mut turns = turns_of(&segs);
    // Think times: the gap before a turn (from the previous turn's last segment) where nobody
    // waited for TCP: no TCP stall record overlaps it. Gaps under 1 ms are scheduling noise.
    let tcp_waits: Vec<(u64, u64)> =
        fa.stalls.iter().filter(|s| s.shows_a_wait()).map(|s| (s.start.0, s.start.0 + s.length.0)).collect();
    // At a capture point at one end, an answer is seen at least one round trip after the
    // request it answers: that much of a gap is the path, not the application.
    let rtt_ns = fa.path_rtt.map_or(0, |d| d.0);
    for i in 1..turns.len() {
        let (prev_end, start) = (turns[i - 1].1, turns[i].0);
        let gap = start.saturating_sub(prev_end).saturating_sub(rtt_ns);
        let waited = tcp_waits.iter().any(|&(a, b)| a < start && b > prev_end);
        if gap >= 1_000_000 && !waited {
            // Whole microseconds: the capture's clock says no more about an application's sleep.
            turns[i].2.think_ns = gap / 1000 * 1000;
        }
    }
    let turns: Vec<Turn> = turns.into_iter().map(|(_, _, t)| t).collect();
    let Some((mut e, reps)) = exchange_of(&turns) else {
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
pub fn is_capture(name: &str) -> bool {
    [".pcap", ".pcapng", ".cap"].iter().any(|ext| name.ends_with(ext))
}

pub fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    if let Some(p) = &args.emit {
        super::output::check_writable("--emit", p)?;
    }
    if let Some(p) = &args.report {
        if args.no_run {
            bail!("--report shows the capture next to the run: drop --no-run");
        }
        super::output::check_writable("--report", p)?;
    }
    let d = derive(&args)?;
    let (key, e, reps, fa, s) = (&d.key, &d.exchange, d.reps, &d.analysis, &d.scenario);
    let rtt = d.rtt.map(|(ns, _)| ns);
    let capture_stalls = analyze::StallSummary::of(fa.stalls.iter().filter(|s| s.shows_a_wait()));
    let text = args.format == ReplayFormat::Text;
    // The JSON document is printed once at the end (or when the run is interrupted).
    let doc = |saved: Option<String>, run: Option<report::Report>| report::ReplayDoc {
        tool: "tcpstall",
        version: env!("CARGO_PKG_VERSION"),
        schema_version: report::SCHEMA_VERSION,
        mode: "replay",
        file: args.file.display().to_string(),
        flow: key.to_string(),
        repetitions: reps as u64,
        exchange: e.inline(),
        path_rtt_ns: rtt,
        path_rtt_from_handshake: fa.path_rtt_from_handshake,
        capture_stall_summary: capture_stalls.clone(),
        capture_stall_records: fa.stalls.clone(),
        saved,
        run,
    };
    let print_doc = |d: &report::ReplayDoc| -> anyhow::Result<()> {
        println!("{}", serde_json::to_string_pretty(d)?);
        Ok(())
    };
    macro_rules! say {
        ($($t:tt)*) => { if text { println!($($t)*); } };
    }
    say!("replay: {} flow {key}: {reps} repetitions of {} turn(s)", args.file.display(), e.turns.len());
    say!("  exchange: {}", e.inline());
    match rtt {
        Some(ns) => say!(
            "  path RTT: {:.3} ms ({})",
            ns as f64 / 1e6,
            if fa.path_rtt_from_handshake { "from the handshake" } else { "estimated" }
        ),
        None => say!("  path RTT: unknown (no handshake in the capture)"),
    }
    let causes = |s: &analyze::StallSummary| -> String {
        if s.by_cause.is_empty() {
            return "none".into();
        }
        s.by_cause.iter().map(|c| format!("{} {}", c.cause.as_str(), c.count)).collect::<Vec<_>>().join(", ")
    };
    say!("  capture's stalls: {}", causes(&capture_stalls));
    let saved = args.emit.as_ref().map(|p| p.display().to_string());
    if let Some(p) = &args.emit {
        std::fs::write(p, s.to_toml()?).with_context(|| format!("cannot write {}", p.display()))?;
        say!("  saved: {} (edit it, then `tcpstall advise {}`)", p.display(), p.display());
    }
    if args.no_run {
        if !text {
            print_doc(&doc(saved, None))?;
        }
        return Ok(0);
    }
    // Behind an emulated link with the capture's RTT when it is above 1 ms.
    let link = d.link();
    let report = if args.model {
        let (l, label) = super::simulate::link(link.as_deref())?;
        let spec = model::RunSpec {
            profiles: super::simulate::profiles("linux")?,
            link: l,
            link_label: label,
            seed: 1,
            mss: None,
            timestamps: None,
            call_ns: 2_000,
        };
        let (mut r, out) = model::report(s, &s.matrix, &spec, args.report.is_some());
        if let (Some(row), Some(o)) = (r.results.first_mut(), out.into_iter().next()) {
            row.packets = o.trace;
        }
        r
    } else {
        // The classifier needs the rows' packets: behind a link, its tap supplies them.
        let env = super::linkenv::open(link.as_deref(), None, true)?;
        let opts =
            lab::LabOptions { tap: env.tap(), keep_packets: args.report.is_some(), ..lab::LabOptions::default() };
        // Ctrl-C, SIGTERM: the run stops at once; what was derived (printed above, saved with
        // --emit) is the finished work, and the exit is 128 + signal (as `lab`).
        let interrupts = super::lab::Interrupts::start(opts.cancel.clone());
        let r = lab::run_scenario(s, &env.placement, &opts, &mut |_| {});
        env.finish()?;
        if let Some(sig) = interrupts.ok().and_then(|i| i.stop()) {
            let where_saved = args.emit.as_ref().map_or(String::new(), |p| format!(", saved in {}", p.display()));
            if text {
                println!("  reproduced: interrupted before the run finished");
            } else {
                print_doc(&doc(saved, None))?;
            }
            eprintln!("tcpstall: interrupted by signal {sig}: the derived exchange is printed above{where_saved}");
            return Ok(128 + sig);
        }
        r
    };
    if let Some(err) = report.errors.first() {
        bail!("{err}");
    }
    let row = report.results.first().context("no row")?;
    let how = link.as_deref().map_or("loopback".to_string(), |l| format!("--link {l}"));
    let reproduced = if row.stall_records.is_empty() && report.mode == "lab" {
        format!(
            "{} slow rounds of {} (lab without capture: causes not classified; --model classifies)",
            row.slow_samples, row.rounds
        )
    } else {
        format!("{} in {} rounds", causes(&row.stall_summary), row.rounds)
    };
    say!(
        "  reproduced ({}, {how}): {reproduced}; p50 {:.2} ms, p99 {:.2} ms",
        report.mode,
        row.latency_us.p50 / 1e3,
        row.latency_us.p99 / 1e3
    );
    if let Some(path) = &args.report {
        // Says where on stderr (htmlreport::write).
        write_report(path, &args, &d, &report, &how)?;
    }
    if !text {
        print_doc(&doc(saved, Some(report)))?;
    }
    Ok(0)
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
    let by = |st: &[analyze::Stall]| {
        let s = analyze::StallSummary::of(st.iter().filter(|s| s.shows_a_wait()));
        if s.by_cause.is_empty() {
            "none".to_string()
        } else {
            s.by_cause.iter().map(|c| format!("{} {}", c.cause.as_str(), c.count)).collect::<Vec<_>>().join(", ")
        }
    };
    page.notes.push(format!(
        "Cause by cause: the capture {}; the run {} (in {} rounds).",
        by(&d.analysis.stalls),
        row.map_or("none".into(), |r| by(&r.stall_records)),
        row.map_or(0, |r| r.rounds)
    ));
    super::htmlreport::write(path, &page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(t: u64, client: bool, seq: u32, len: u32, psh: bool) -> Seg {
        Seg { t_ns: t, client, seq, len, psh }
    }

    /// Seed 001's tcpdump (275 and 24 with PSH, the ACK, then 292), twice, with a 100-byte answer.
    #[test]
    fn seed_001_capture_gives_its_request_back() {
        let mut segs = Vec::new();
        let (mut c, mut s) = (1u32, 1u32);
        for r in 0..3u64 {
            let t = r * 100_000_000;
            for (k, len) in [275u32, 24, 292].into_iter().enumerate() {
                segs.push(seg(t + k as u64 * 20_000_000, true, c, len, true));
                c += len;
            }
            segs.push(seg(t + 60_000_000, false, s, 100, true));
            s += 100;
        }
        // A resent segment is skipped.
        segs.insert(2, seg(15_000_000, true, 1, 275, true));
        let turns: Vec<Turn> = turns_of(&segs).into_iter().map(|(_, _, t)| t).collect();
        assert_eq!(turns.len(), 6);
        let (e, reps) = exchange_of(&turns).unwrap();
        assert_eq!(reps, 3);
        assert_eq!(e.inline(), "client 275,24,292; server 100");
    }

    #[test]
    fn coalesced_writes_take_the_finest_split_and_the_period_is_found() {
        let turns = |w: &[&[u32]]| -> Vec<Turn> {
            w.iter()
                .enumerate()
                .map(|(i, ws)| Turn {
                    side: if i % 2 == 0 { Side::Client } else { Side::Server },
                    writes: ws.to_vec(),
                    call: CallKind::Write,
                    think_ns: 0,
                    peer_reads: true,
                })
                .collect()
        };
        let t = turns(&[&[40], &[960], &[40], &[60, 900], &[40], &[960]]);
        assert_eq!(period(&t), 2);
        assert_eq!(exchange_of(&t).unwrap().0.inline(), "client 40; server 60,900");
        let t = turns(&[&[1], &[2], &[3]]);
        assert_eq!(period(&t), 3);
        assert!(exchange_of(&[]).is_none());
    }
}
