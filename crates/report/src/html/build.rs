//! The report's data: what the page's script draws, built from a [`Page`] (pure). Limits keep a
//! big run's page small; every limit that cut something is said on the page.

use analyze::Stall;
use serde::Serialize;
use trace::{Cause, Endpoint, Event, EventKind, SeqNum};

use super::{FlowIn, Header, Page};
use crate::cells::ms_of_ns_to_us;
use crate::{Latency, LatencyDist, RunResult, Wire};

/// How much the page carries at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Time-sequence graphs drawn (flows with the most stalls first).
    pub graphs: usize,
    /// Time bins per direction of a drawn flow: more points are merged per bin (min/max).
    pub bins: usize,
    /// Stall records listed per flow, and in all.
    pub stalls_per_flow: usize,
    pub stalls: usize,
    /// Ladder diagrams per flow and in all (the first stalls of each flow).
    pub ladders_per_flow: usize,
    pub ladders: usize,
    /// Arrows per ladder.
    pub arrows: usize,
}

pub const LIMITS: Limits =
    Limits { graphs: 8, bins: 1000, stalls_per_flow: 20, stalls: 400, ladders_per_flow: 3, ladders: 60, arrows: 120 };

/// What the page draws (embedded as JSON; also what the snapshot tests compare).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportData {
    pub header: Header,
    pub strategies: Vec<StrategyRow>,
    /// The strategy whose histogram is shown first, and why.
    pub chosen: Option<usize>,
    pub chosen_why: String,
    pub stalls: Vec<StallRow>,
    /// Stall records in all flows (the table lists at most `Limits::stalls`).
    pub stalls_total: usize,
    pub ladders: Vec<Ladder>,
    pub timeseq: Vec<TimeSeq>,
    /// Flows that had packets (graphs drawn for at most `Limits::graphs` of them).
    pub flows_with_packets: usize,
    pub flows_total: usize,
    pub limits: Limits,
    pub notes: Vec<String>,
    /// advise's ranking (error bars) and recommendation.
    pub ranking: Option<super::Ranking>,
}

/// One strategy row: the JSON's numbers plus its latency distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyRow {
    pub label: String,
    pub verdict: String,
    pub rounds: u64,
    pub latency_us: Latency,
    /// None: not measured (no packets).
    pub stall_count: Option<u64>,
    pub slow_samples: u64,
    pub wire: Wire,
    /// Wire bytes per round (message), client and server.
    pub bytes_per_msg: [f64; 2],
    pub dist: Option<LatencyDist>,
}

/// One stall record as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StallRow {
    pub flow: usize,
    pub start_ms: f64,
    pub length_ms: f64,
    pub held: String,
    pub waited: String,
    pub bytes_held: u32,
    pub cause: Cause,
    pub confidence: f64,
    /// "12.345 ms #17: A data 12 B, unacknowledged"
    pub evidence: Vec<String>,
    pub detail: String,
    /// Index into `ladders`.
    pub ladder: Option<usize>,
}

/// The ladder (message sequence) diagram of one stall: every packet from the stall's start to
/// the packet that ended it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ladder {
    pub stall: usize,
    pub flow: usize,
    /// The stall's start on the trace's clock (ms); arrow times are relative to it.
    pub t0_ms: f64,
    pub length_ms: f64,
    /// One-way delay used to slant the arrows (half the path RTT, 0 when unknown).
    pub one_way_ms: f64,
    /// The path RTT was known (else the arrows are flat for want of it).
    pub rtt_known: bool,
    /// Where the packets were stamped: 0 = at A, 1 = at B (the peer's packets as they
    /// arrived: their arrows end at the stamp); None = at each sender.
    pub captured_at: Option<u8>,
    pub arrows: Vec<LadderArrow>,
    /// Timers and application calls at a host: `[t_ms, side (0 = A), text]`.
    pub marks: Vec<(f64, u8, String)>,
    /// Packets in the window beyond `Limits::arrows` (not drawn).
    pub cut: usize,
    /// The rule or timer that released the data, with its source.
    pub release: String,
}

/// One packet of a ladder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LadderArrow {
    /// 0 = A (client), 1 = B (server).
    pub from: u8,
    pub t_ms: f64,
    pub label: String,
    pub frame: Option<u64>,
    /// What the classifier's evidence says of this packet, or the release rule.
    pub note: String,
    /// This packet ended the wait.
    pub release: bool,
}

/// The time-sequence graph of one flow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeSeq {
    pub flow: usize,
    pub label: String,
    pub dirs: Vec<Series>,
}

/// One direction: relative sequence numbers against time (ms on the trace's clock).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// "A→B"
    pub dir: String,
    /// Data segments `[t_ms, seq_lo, seq_hi]` (relative to the first sequence number).
    pub data: Vec<[f64; 3]>,
    /// The peer's cumulative ACK `[t_ms, ack]`.
    pub ack: Vec<[f64; 2]>,
    /// The peer's receive window's right edge `[t_ms, ack + window]` (window scaled by the
    /// shift from the peer's SYN; unscaled when the SYN was not seen).
    pub win: Vec<[f64; 2]>,
    /// Stalls of this direction's data `[start_ms, end_ms, cause]`.
    pub stalls: Vec<(f64, f64, Cause)>,
    /// Segments of this direction before downsampling.
    pub segments: usize,
    /// More segments than `Limits::bins`: merged per time bin (each bin keeps its lowest and
    /// highest sequence number and its last ACK and window).
    pub downsampled: bool,
}

/// The page's data.
pub fn data(p: &Page) -> ReportData {
    let l = LIMITS;
    let strategies: Vec<StrategyRow> = p.rows.iter().map(strategy_row).collect();
    let chosen = strategies
        .iter()
        .enumerate()
        .filter(|(_, s)| s.dist.is_some())
        .min_by(|a, b| a.1.latency_us.p99.total_cmp(&b.1.latency_us.p99))
        .map(|(i, _)| i);
    let (stalls, ladders) = stall_rows(&p.flows, l);
    let stalls_total = p.flows.iter().map(|f| f.stalls.len()).sum();
    let (timeseq, flows_with_packets) = graphs(&p.flows, l);
    let mut notes = p.notes.clone();
    for f in &p.flows {
        if let Some(n) = &f.events_note {
            notes.push(format!("{}: {n}", f.label));
        }
    }
    ReportData {
        header: p.header.clone(),
        chosen_why: match chosen {
            Some(_) => "lowest p99 (pick another in the menu)".into(),
            None => "no latency samples".into(),
        },
        strategies,
        chosen,
        stalls,
        stalls_total,
        ladders,
        timeseq,
        flows_with_packets,
        flows_total: p.flows.len(),
        limits: l,
        notes,
        ranking: p.ranking.clone(),
    }
}

/// One strategy row as listed.
fn strategy_row(r: &RunResult) -> StrategyRow {
    let per = |b: u64| if r.rounds > 0 { (b as f64 / r.rounds as f64 * 10.0).round() / 10.0 } else { 0.0 };
    StrategyRow {
        label: if r.variant.is_empty() { r.strategy.clone() } else { format!("{} {}", r.strategy, r.variant) },
        verdict: r.verdict.clone(),
        rounds: r.rounds,
        latency_us: r.latency_us,
        stall_count: r.stall_count,
        slow_samples: r.slow_samples,
        wire: r.wire,
        bytes_per_msg: [per(r.wire.client.wire_bytes), per(r.wire.server.wire_bytes)],
        dist: r.latency_dist.clone().filter(|d| d.count > 0),
    }
}

/// The stall records listed (within the limits) and the ladders drawn for them.
fn stall_rows(flows: &[FlowIn<'_>], l: Limits) -> (Vec<StallRow>, Vec<Ladder>) {
    let mut stalls = Vec::new();
    let mut ladders = Vec::new();
    for (fi, f) in flows.iter().enumerate() {
        let mut ladders_here = 0;
        for st in f.stalls.iter().take(l.stalls_per_flow) {
            if stalls.len() >= l.stalls {
                break;
            }
            let mut ladder = None;
            if let Some(ev) = f.events {
                if st.shows_a_wait() && ladders_here < l.ladders_per_flow && ladders.len() < l.ladders {
                    ladder = Some(ladders.len());
                    ladders.push(ladder_of(stalls.len(), fi, st, ev, f.rtt_ns, f.capture_at));
                    ladders_here += 1;
                }
            }
            stalls.push(StallRow {
                flow: fi,
                start_ms: ms_of_ns_to_us(st.start.0),
                length_ms: ms_of_ns_to_us(st.length.0),
                held: st.held.letter_and_role().into(),
                waited: st.waited.letter_and_role().into(),
                bytes_held: st.bytes_held,
                cause: st.cause,
                confidence: st.confidence,
                evidence: st
                    .evidence
                    .iter()
                    .map(|e| format!("{:.3} ms {}: {}", e.t.0 as f64 / 1e6, source(e.source), e.what))
                    .collect(),
                detail: st.detail.clone(),
                ladder,
            });
        }
    }
    (stalls, ladders)
}

/// Graphs: flows with packets, the most stalled first, at most `graphs`, in flow order; and
/// how many flows have packets.
fn graphs(flows: &[FlowIn<'_>], l: Limits) -> (Vec<TimeSeq>, usize) {
    let mut with: Vec<usize> = (0..flows.len()).filter(|&i| flows[i].events.is_some()).collect();
    let flows_with_packets = with.len();
    with.sort_by_key(|&i| std::cmp::Reverse(flows[i].stalls.iter().filter(|s| s.shows_a_wait()).count()));
    with.truncate(l.graphs);
    with.sort_unstable();
    let timeseq = with
        .into_iter()
        .map(|i| {
            let f = &flows[i];
            TimeSeq { flow: i, label: f.label.clone(), dirs: series(f.events.unwrap_or(&[]), f.stalls, l.bins) }
        })
        .collect();
    (timeseq, flows_with_packets)
}

fn source(e: trace::Evidence) -> String {
    match e {
        trace::Evidence::Frame(n) => format!("frame #{n}"),
        trace::Evidence::Model(n) => format!("model step {n}"),
        trace::Evidence::Lab => "lab".into(),
        trace::Evidence::Kernel(n) => format!("kernel event {n}"),
    }
}

/// The rule or timer that released a stall's data, with its source. Says only what the cause
/// (named by the classifier from its signature) means; the packets are drawn as they were.
fn release_rule(c: Cause) -> &'static str {
    match c {
        Cause::NagleDelayedAck => {
            "Nagle release on ACK (tcp_nagle_check, RFC 9293 3.7.4) after the peer's delayed-ACK timer (tcp_delack_timer, RFC 9293 3.8.6.3)"
        }
        Cause::DelayedAck => "the peer's delayed-ACK timer (tcp_delack_timer, RFC 9293 3.8.6.3)",
        Cause::CwndLimited => "the ACK that opened the congestion window (RFC 5681 3.1)",
        Cause::RwndLimited => "the window update that opened the receive window (RFC 9293 3.8.6.2)",
        Cause::RetransmissionTimeout => "retransmission timeout (RFC 6298 5, tcp_retransmit_timer)",
        Cause::TailLossProbe => "tail-loss probe timer (RFC 8985 7, tcp_send_loss_probe)",
        Cause::PathMtu => "ICMP fragmentation-needed, resent smaller (RFC 1191, tcp_v4_mtu_reduced)",
        Cause::FastRetransmit => "fast retransmit after duplicate ACKs (RFC 5681 3.2)",
        Cause::ProbeTimer => "probe / autocork timer (tcp_probe_timer, 200 ms; TCP_CORK ceiling, tcp(7))",
        Cause::Application => "the application wrote (not a TCP stall)",
        Cause::Unknown => "released, but the packets show no mechanism's signature (cause unknown)",
    }
}

fn seg_label(s: &trace::Segment) -> String {
    let mut f = String::new();
    for (bit, c) in [(trace::TcpFlags::SYN, 'S'), (trace::TcpFlags::FIN, 'F'), (trace::TcpFlags::RST, 'R')] {
        if s.flags.has(bit) {
            f.push(c);
        }
    }
    let f = if f.is_empty() { String::new() } else { format!(" [{f}]") };
    if s.len > 0 {
        format!("data {} B seq {} ack {}{f}", s.len, s.seq, s.ack)
    } else {
        format!("ACK {} win {}{f}", s.ack, s.window)
    }
}

fn ladder_of(stall: usize, flow: usize, st: &Stall, ev: &[Event], rtt_ns: Option<u64>, at: Option<Endpoint>) -> Ladder {
    let (t0, t1) = (st.start.0, st.start.0 + st.length.0);
    // A capture's timestamps need not be in order (several CPUs, several interfaces): select
    // and sort rather than search.
    let mut window: Vec<&Event> = ev.iter().filter(|e| (t0..=t1).contains(&e.t.0)).collect();
    window.sort_by_key(|e| e.t.0);
    let rule = release_rule(st.cause);
    let note_of = |e: &Event| -> String {
        st.evidence
            .iter()
            .filter(|x| x.t.0 == e.t.0 && (x.source == e.evidence || matches!(x.source, trace::Evidence::Lab)))
            .map(|x| x.what.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let segs: Vec<&Event> = window.iter().copied().filter(|e| matches!(e.kind, EventKind::Segment(_))).collect();
    // The packet that ended the wait: the held side's last data segment in the window.
    let release = segs
        .iter()
        .rposition(|e| e.from == st.held && matches!(&e.kind, EventKind::Segment(s) if s.len > 0 || s.flags.syn()));
    let mut arrows = Vec::new();
    for (k, e) in segs.iter().enumerate().take(LIMITS.arrows) {
        let EventKind::Segment(s) = &e.kind else { continue };
        let mut note = note_of(e);
        let is_release = Some(k) == release;
        if is_release {
            note = if note.is_empty() { format!("released: {rule}") } else { format!("{note}; released: {rule}") };
        }
        arrows.push(LadderArrow {
            from: e.from.index() as u8,
            t_ms: ms_of_ns_to_us(e.t.0 - t0),
            label: seg_label(s),
            frame: match e.evidence {
                trace::Evidence::Frame(n) | trace::Evidence::Model(n) => Some(n),
                trace::Evidence::Lab | trace::Evidence::Kernel(_) => None,
            },
            note,
            release: is_release,
        });
    }
    let marks = window
        .iter()
        .filter_map(|e| {
            let text = match &e.kind {
                EventKind::Timer(k) => format!("timer fires: {}", timer_name(*k)),
                EventKind::Write { bytes, more } => {
                    format!("write {bytes} B{}", if *more { " (MSG_MORE)" } else { "" })
                }
                EventKind::Read { bytes } => format!("read {bytes} B"),
                EventKind::Kernel(k) => k.describe(),
                EventKind::Icmp(i) => i.describe(),
                EventKind::Segment(_) => return None,
            };
            Some((ms_of_ns_to_us(e.t.0 - t0), e.from.index() as u8, text))
        })
        .take(LIMITS.arrows)
        .collect();
    Ladder {
        stall,
        flow,
        t0_ms: ms_of_ns_to_us(t0),
        length_ms: ms_of_ns_to_us(st.length.0),
        one_way_ms: rtt_ns.map_or(0.0, |r| ms_of_ns_to_us(r / 2)),
        rtt_known: rtt_ns.is_some(),
        captured_at: at.map(|e| e.index() as u8),
        cut: segs.len().saturating_sub(LIMITS.arrows),
        arrows,
        marks,
        release: rule.into(),
    }
}

fn timer_name(k: trace::TimerKind) -> &'static str {
    match k {
        trace::TimerKind::DelayedAck => "delayed ACK (tcp_delack_timer)",
        trace::TimerKind::Retransmit => "retransmission (RFC 6298)",
        trace::TimerKind::Probe => "probe (tcp_probe_timer)",
    }
}

/// Both directions' time-sequence series, merged into at most `bins` time bins each.
fn series(ev: &[Event], stalls: &[Stall], bins: usize) -> Vec<Series> {
    let mut isn: [Option<SeqNum>; 2] = [None, None];
    let mut data: [Vec<[f64; 3]>; 2] = [Vec::new(), Vec::new()];
    let mut ack: [Vec<[f64; 2]>; 2] = [Vec::new(), Vec::new()];
    let mut win: [Vec<[f64; 2]>; 2] = [Vec::new(), Vec::new()];
    let (Some(first), Some(last)) = (ev.iter().map(|e| e.t.0).min(), ev.iter().map(|e| e.t.0).max()) else {
        return Vec::new();
    };
    let width = (last.max(first + 1) - first) as f64 / bins as f64;
    let bin = |t: u64| (t.saturating_sub(first) as f64 / width) as usize;
    let mut last_bin: [Option<usize>; 2] = [None; 2];
    let mut segments = [0usize; 2];
    for e in ev {
        let EventKind::Segment(s) = &e.kind else { continue };
        let d = e.from.index();
        if s.flags.syn() || isn[d].is_none() {
            isn[d] = Some(if s.flags.syn() { s.seq + 1 } else { s.seq });
        }
        let t = ms_of_ns_to_us(e.t.0);
        let b = bin(e.t.0);
        if s.len > 0 {
            segments[d] += 1;
            let lo = f64::from(s.seq - isn[d].unwrap_or(s.seq));
            let hi = lo + f64::from(s.len);
            match data[d].last_mut() {
                // Same bin: widen its bar to the lowest and highest byte seen.
                Some(p) if last_bin[d] == Some(b) => {
                    p[1] = p[1].min(lo);
                    p[2] = p[2].max(hi);
                }
                _ => data[d].push([t, lo, hi]),
            }
            last_bin[d] = Some(b);
        }
        // This segment's ACK and window are about the peer's data.
        let p = e.from.peer().index();
        if s.flags.ack() {
            if let Some(i) = isn[p] {
                let a = s.ack - i;
                if a < 1 << 31 {
                    let a = f64::from(a);
                    let w = a + f64::from(u32::from(s.window) << s.wscale.unwrap_or(0).min(14));
                    for (v, line) in [(a, &mut ack[p]), (w, &mut win[p])] {
                        // Step lines: per bin keep the first point and the last.
                        let n = line.len();
                        let in_b = |q: &[f64; 2]| bin_of(q[0], first, width) == Some(b);
                        if n >= 2 && in_b(&line[n - 1]) && in_b(&line[n - 2]) {
                            line[n - 1] = [t, v];
                        } else if n == 0 || line[n - 1][1] != v {
                            line.push([t, v]);
                        }
                    }
                }
            }
        }
    }
    let names = ["A→B", "B→A"];
    let has: Vec<usize> = (0..2).filter(|&d| !data[d].is_empty()).collect();
    has.into_iter()
        .map(|d| Series {
            dir: names[d].into(),
            data: std::mem::take(&mut data[d]),
            ack: std::mem::take(&mut ack[d]),
            win: std::mem::take(&mut win[d]),
            stalls: stalls
                .iter()
                .filter(|s| s.held.index() == d)
                .map(|s| (ms_of_ns_to_us(s.start.0), ms_of_ns_to_us(s.start.0 + s.length.0), s.cause))
                .collect(),
            segments: segments[d],
            downsampled: segments[d] > bins,
        })
        .collect()
}

fn bin_of(t_ms: f64, first: u64, width: f64) -> Option<usize> {
    let ns = (t_ms * 1e6).round();
    (ns >= first as f64).then(|| ((ns - first as f64) / width) as usize)
}
