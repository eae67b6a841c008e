//! The exchange a captured connection carried (`tcpstall replay`, `tcpstall advise CAPTURE`):
//! pure, from the flow's data segments, the times TCP made someone wait, and the path RTT. The
//! caller picks the flow and analyses it (`analyze::session::busiest_flow`); this module reads
//! only its packets and those two facts.
//!
//! A turn is a run of data segments in one direction; a segment with PSH ends a write (Linux
//! sets PSH at the end of each send call it transmits whole, net/ipv4/tcp.c `tcp_push()`;
//! writes Nagle or a cork coalesced cannot be told apart and come out as one); resent bytes are
//! skipped; a turn's think time is the gap before it (from the previous turn's last segment,
//! less the path RTT) when no TCP wait overlaps it and it is at least 1 ms; the conversation's
//! period is the shortest repeating sequence of turns alike (same side, sizes within
//! [`SIZE_TOLERANCE_BYTES`] or [`SIZE_TOLERANCE_RATIO`], the same write structure), its think
//! times kept as a distribution (the replica waits the median). What the capture shows of each
//! side's options (the classifier's decisions, passed in as [`Shown`]) is kept: a side shown
//! with Nagle off runs with TCP_NODELAY.

use crate::{CallKind, Connection, Exchange, Opt, Scenario, ScenarioError, Side, SideOpts, StrategyPair, Turn};
use trace::SeqNum;

/// A captured flow that gives no exchange to replay.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    #[error("{file}: flow {key} carried no data to replay")]
    NoData { file: String, key: String },
    /// The derived exchange (with its rounds) does not validate.
    #[error(transparent)]
    Invalid(#[from] ScenarioError),
}

/// What the capture shows of one endpoint's sending options: the classifier's decisions
/// (crates/analyze `ShownOptions`), in its words. The derivation only carries them over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    /// Nagle shown off: the evidence ("segment of 12 bytes (frame 9) ... unacknowledged").
    pub nodelay: Option<String>,
    /// Held coalescing shown (TCP_CORK or MSG_MORE): the evidence.
    pub held_coalescing: Option<String>,
}

/// The facts of one captured flow the derivation reads.
#[derive(Debug, Clone, Copy)]
pub struct Capture<'a> {
    pub events: &'a [trace::Event],
    /// The spans in which its records show someone waited for TCP (ns).
    pub tcp_waits: &'a [(u64, u64)],
    /// Path RTT (ns), and whether from the handshake.
    pub rtt: Option<(u64, bool)>,
    /// What each endpoint showed, by `trace::Endpoint` index (0 = A).
    pub shown: &'a [Shown; 2],
}

/// The think times one turn of the period showed over its repetitions (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkSpread {
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub samples: usize,
}

/// What a captured connection becomes.
#[derive(Debug, Clone)]
pub struct Derived {
    /// The flow ("A <-> B").
    pub key: String,
    pub scenario: Scenario,
    pub exchange: Exchange,
    /// How many times the exchange repeats in the capture.
    pub reps: usize,
    /// Path RTT (ns) and whether it came from the handshake.
    pub rtt: Option<(u64, bool)>,
    /// Per turn of the period, its think times in the capture.
    pub thinks: Vec<ThinkSpread>,
    /// What the replica keeps of what the capture shows ("client: TCP_NODELAY shown on ...").
    pub kept: Vec<String>,
    /// What the smallest exchange dropped of the capture (jitter, repetitions, a partial one).
    pub dropped: Vec<String>,
}

impl Derived {
    /// The emulated link to run it behind: the capture's RTT when it is above 1 ms.
    pub fn link(&self) -> Option<String> {
        self.rtt.map(|(ns, _)| ns).filter(|&ns| ns > 1_000_000).map(|ns| format!("rtt={}us", ns / 1000))
    }

    /// The options the capture showed, as the strategy pair the replica runs as written.
    pub fn as_written(&self) -> &StrategyPair {
        &self.scenario.matrix[0]
    }
}

/// The exchange of the flow `key` of the capture `file` as a scenario named "replay", run
/// `rounds` times when given (else the capture's count), with the options each side showed.
pub fn derive(file: &str, key: &str, c: Capture<'_>, rounds: Option<u32>) -> Result<Derived, DeriveError> {
    let rtt_ns = c.rtt.map_or(0, |(ns, _)| ns);
    let client = client_endpoint(c.events);
    let segs = segments(c.events);
    let mut timed = turns_of(&segs);
    set_think_times(&mut timed, c.tcp_waits, rtt_ns);
    let turns: Vec<Turn> = timed.into_iter().map(|t| t.turn).collect();
    let Some(mut p) = period_of(&turns) else {
        return Err(DeriveError::NoData { file: file.to_string(), key: key.to_string() });
    };
    if let Some(r) = rounds {
        p.exchange.rounds = r;
    }
    p.exchange.validate()?;
    let (mut kept, mut opts) = (Vec::new(), [Vec::new(), Vec::new()]);
    for (side, ep) in [(Side::Client, client), (Side::Server, client.peer())] {
        let shown = &c.shown[ep.index()];
        if let Some(ev) = &shown.nodelay {
            kept.push(format!("{}: TCP_NODELAY shown on by the capture: {ev}", side.as_str()));
            opts[usize::from(side == Side::Server)].push(Opt::Nodelay);
        }
        if let Some(ev) = &shown.held_coalescing {
            kept.push(format!(
                "{}: TCP_CORK or MSG_MORE shown by the capture (held coalescing: {ev}); the replica writes what it sent as one write",
                side.as_str()
            ));
        }
    }
    let [co, so] = opts.map(|o| SideOpts::new(o).unwrap_or_default());
    let mut s = Scenario::from_exchange("replay", &format!("replayed from {file} ({key})"), p.exchange.clone());
    s.matrix = vec![StrategyPair::new(co, so)];
    s.finding = format!("derived by tcpstall replay: {} repetitions of {} turn(s)", p.reps, p.exchange.turns.len());
    Ok(Derived {
        key: key.to_string(),
        scenario: s,
        exchange: p.exchange,
        reps: p.reps,
        rtt: c.rtt,
        thinks: p.thinks,
        kept,
        dropped: p.dropped,
    })
}

/// The endpoint that opened the connection: the SYN's sender (without ACK); else the first to
/// send data; else A.
pub fn client_endpoint(events: &[trace::Event]) -> trace::Endpoint {
    use trace::{Endpoint, EventKind};
    events
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
        .unwrap_or(Endpoint::A)
}

/// One data segment of the flow, as the derivation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub t_ns: u64,
    /// Sent by the client (the side that sent the SYN, else the first to send data).
    pub client: bool,
    pub seq: SeqNum,
    pub len: u32,
    pub psh: bool,
}

/// The flow's data segments as the derivation reads them, each marked with whether the client
/// sent it: the client sent the SYN (without ACK); else it is the first to send data.
pub fn segments(events: &[trace::Event]) -> Vec<Seg> {
    use trace::EventKind;
    let client = client_endpoint(events);
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Segment(s) if s.len > 0 => {
                Some(Seg { t_ns: e.t.0, client: e.from == client, seq: s.seq, len: s.len, psh: s.flags.psh() })
            }
            _ => None,
        })
        .collect()
}

/// A turn with the times of its first and last segments (ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedTurn {
    pub first_ns: u64,
    pub last_ns: u64,
    pub turn: Turn,
}

/// Turns from data segments in time order: a turn per run of one direction, a write per PSH
/// (or the turn's end); bytes at or below the highest sequence already seen are resent, skipped.
pub fn turns_of(segs: &[Seg]) -> Vec<TimedTurn> {
    let mut out: Vec<TimedTurn> = Vec::new();
    let mut next: [Option<SeqNum>; 2] = [None, None];
    let mut pending = 0u32;
    for s in segs.iter().filter(|s| s.len > 0) {
        let d = usize::from(!s.client);
        let end = s.seq + s.len;
        // Resent: ends at or before what this direction already sent (sequence order, RFC 9293 3.4).
        if next[d].is_some_and(|n| end <= n) {
            continue;
        }
        next[d] = Some(end);
        let side = if s.client { Side::Client } else { Side::Server };
        if out.last().map(|t| t.turn.side) != Some(side) {
            if let Some(t) = out.last_mut() {
                if pending > 0 {
                    t.turn.writes.push(pending);
                }
            }
            pending = 0;
            let turn = Turn { side, writes: Vec::new(), call: CallKind::Write, think_ns: 0, peer_reads: true };
            out.push(TimedTurn { first_ns: s.t_ns, last_ns: s.t_ns, turn });
        }
        pending += s.len;
        if let Some(t) = out.last_mut() {
            t.last_ns = s.t_ns;
            if s.psh {
                t.turn.writes.push(pending);
                pending = 0;
            }
        }
    }
    if let Some(t) = out.last_mut() {
        if pending > 0 {
            t.turn.writes.push(pending);
        }
    }
    out
}

/// Think times: the gap before a turn (from the previous turn's last segment) where nobody
/// waited for TCP: none of `tcp_waits` (start, end in ns) overlaps it. At a capture point at
/// one end an answer is seen at least one round trip after the request it answers, so
/// `rtt_ns` of a gap is the path, not the application. Gaps under 1 ms are scheduling noise.
pub fn set_think_times(turns: &mut [TimedTurn], tcp_waits: &[(u64, u64)], rtt_ns: u64) {
    for i in 1..turns.len() {
        let (prev_end, start) = (turns[i - 1].last_ns, turns[i].first_ns);
        let gap = start.saturating_sub(prev_end).saturating_sub(rtt_ns);
        let waited = tcp_waits.iter().any(|&(a, b)| a < start && b > prev_end);
        if gap >= 1_000_000 && !waited {
            // Whole microseconds: the capture's clock says no more about an application's sleep.
            turns[i].turn.think_ns = gap / 1000 * 1000;
        }
    }
}

/// Sizes this close are the same message (a counter's extra digit, a timestamp's length): the
/// larger of a few bytes and a few percent.
pub const SIZE_TOLERANCE_BYTES: u64 = 8;
pub const SIZE_TOLERANCE_RATIO: f64 = 0.05;

fn close(a: u64, b: u64) -> bool {
    let (lo, hi) = (a.min(b), a.max(b));
    hi - lo <= SIZE_TOLERANCE_BYTES || (hi - lo) as f64 <= hi as f64 * SIZE_TOLERANCE_RATIO
}

/// Two turns are the same step of the conversation: same side, totals close, and, when both
/// show the same number of writes, each write close (TCP merges writes, so a repetition with
/// fewer boundaries is the same write structure coalesced: Nagle or a cork, tcp_push()).
pub fn alike(a: &Turn, b: &Turn) -> bool {
    a.side == b.side
        && close(a.total(), b.total())
        && (a.writes.len() != b.writes.len()
            || a.writes.iter().zip(&b.writes).all(|(x, y)| close(u64::from(*x), u64::from(*y))))
}

/// The capture's last turn cut by the capture's end: a capture stopped inside a turn (tcpdump
/// stopped while the connection was busy, or starved and killed before it read the last
/// segments) holds only its first bytes. Such a turn is on the side of its place in the period
/// with fewer bytes than that place's turn, and not [`alike`] it.
fn cut_short(last: &Turn, template: &Turn) -> bool {
    last.side == template.side && last.total() < template.total() && !alike(last, template)
}

/// The shortest period P such that every turn is [`alike`] the one at its place in the first
/// period (a trailing partial repetition allowed, and a last turn `cut_short` by the capture's
/// end); the whole list when none.
pub fn period(turns: &[Turn]) -> usize {
    let n = turns.len();
    (1..=n / 2)
        .find(|&p| {
            (p..n).all(|i| alike(&turns[i], &turns[i % p]) || (i + 1 == n && cut_short(&turns[i], &turns[i % p])))
        })
        .unwrap_or(n.max(1))
}

/// The smallest exchange a list of turns reproduces, and what it kept and dropped.
#[derive(Debug, Clone)]
pub struct Period {
    pub exchange: Exchange,
    /// Whole repetitions of the period in the capture.
    pub reps: usize,
    pub thinks: Vec<ThinkSpread>,
    pub dropped: Vec<String>,
}

/// A new connection's receiver ACKs its first segments at once (quick-ACK mode: Linux
/// `tcp_incr_quickack`, up to TCP_MAX_QUICKACKS = 16 in net/ipv4/tcp_input.c), so delayed-ACK
/// stalls show only after it: the warm-up rounds that use up 16 received segments on the side
/// that receives fewest per round, plus one, at most 20.
pub fn warmup_rounds(turns: &[Turn]) -> u32 {
    let received = |side: Side| turns.iter().filter(|t| t.side == side.peer()).map(|t| t.writes.len()).sum::<usize>();
    let fewest = received(Side::Client).min(received(Side::Server)).max(1) as u32;
    (16u32.div_ceil(fewest) + 1).min(20)
}

/// One period of `turns` as an exchange: per position, the repetition with the most write
/// boundaries (TCP only merges writes, so the finest split seen is closest to the
/// application's; then the largest), the median think time (the spread kept); warm-up rounds
/// sized by [`warmup_rounds`]. None without turns.
pub fn period_of(turns: &[Turn]) -> Option<Period> {
    let p = period(turns);
    let mut dropped = Vec::new();
    // A last turn the capture's end cut short is left out: its sizes are not the application's.
    let turns = match turns.split_last() {
        Some((last, rest)) if turns.len() > p && !alike(last, &turns[(turns.len() - 1) % p]) => {
            dropped.push(format!(
                "the capture's last turn ({}, {} bytes where its place in the period has {}) ends with the capture: left out",
                last.side.as_str(),
                last.total(),
                turns[(turns.len() - 1) % p].total()
            ));
            rest
        }
        _ => turns,
    };
    let reps = (turns.len() / p).max(1);
    let mut thinks = Vec::new();
    let mut template = Vec::new();
    for k in 0..p {
        let same: Vec<&Turn> = turns.iter().skip(k).step_by(p).collect();
        let mut best = (*same.iter().max_by_key(|t| (t.writes.len(), t.total()))?).clone();
        let mut ts: Vec<u64> = same.iter().map(|t| t.think_ns).collect();
        ts.sort_unstable();
        let spread =
            ThinkSpread { median_ns: ts[ts.len() / 2], min_ns: ts[0], max_ns: ts[ts.len() - 1], samples: ts.len() };
        best.think_ns = spread.median_ns;
        let name = format!("turn {} ({})", k + 1, best.side.as_str());
        let (lo, hi) = (same.iter().map(|t| t.total()).min()?, same.iter().map(|t| t.total()).max()?);
        if lo != hi {
            dropped.push(format!(
                "{name}: sizes {lo}..{hi} bytes over {} repetitions; the replica writes {}",
                same.len(),
                best.total()
            ));
        }
        if spread.min_ns != spread.max_ns {
            dropped.push(format!(
                "{name}: think times {}..{} (median {}) over {}; the replica waits the median",
                crate::format_duration(spread.min_ns),
                crate::format_duration(spread.max_ns),
                crate::format_duration(spread.median_ns),
                spread.samples
            ));
        }
        thinks.push(spread);
        template.push(best);
    }
    if template.is_empty() {
        return None;
    }
    let partial = turns.len() - reps * p;
    if reps > 1 || partial > 0 {
        let tail = if partial > 0 { format!(" and {partial} turn(s) of an unfinished one") } else { String::new() };
        dropped.push(format!(
            "{reps} repetitions of {p} turn(s) in the capture{tail}: the replica runs the period as rounds"
        ));
    }
    let warmup = warmup_rounds(&template);
    let exchange =
        Exchange { turns: template, rounds: reps.clamp(1, 100) as u32, warmup, connection: Connection::Reuse };
    Some(Period { exchange, reps, thinks, dropped })
}

/// The exchange of one period and how many times it repeats (see [`period_of`]).
pub fn exchange_of(turns: &[Turn]) -> Option<(Exchange, usize)> {
    period_of(turns).map(|p| (p.exchange, p.reps))
}

/// The exchange a flow carried, and how many times it repeats: turns from `segs`, their think
/// times (see [`set_think_times`]), then one period. None when the flow carried no data.
pub fn derive_exchange(segs: &[Seg], tcp_waits: &[(u64, u64)], rtt_ns: u64) -> Option<(Exchange, usize)> {
    let mut turns = turns_of(segs);
    set_think_times(&mut turns, tcp_waits, rtt_ns);
    let turns: Vec<Turn> = turns.into_iter().map(|t| t.turn).collect();
    exchange_of(&turns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(t: u64, client: bool, seq: u32, len: u32, psh: bool) -> Seg {
        Seg { t_ns: t, client, seq: SeqNum(seq), len, psh }
    }

    /// Seed 001's tcpdump (275 and 24 with PSH, the ACK, then 292), twice, with a 100-byte
    /// answer. A segment with PSH ends a write (tcp_push()); a resent one (RFC 9293 3.4
    /// sequence comparison) is skipped.
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
        segs.insert(2, seg(15_000_000, true, 1, 275, true));
        let turns: Vec<Turn> = turns_of(&segs).into_iter().map(|t| t.turn).collect();
        assert_eq!(turns.len(), 6);
        let (e, reps) = exchange_of(&turns).unwrap();
        assert_eq!(reps, 3);
        assert_eq!(e.inline(), "client 275,24,292; server 100");
    }

    /// A resent segment across the 2^32 wrap is still a resend (RFC 9293 3.4: modulo 2^32).
    #[test]
    fn resends_are_found_across_the_sequence_wrap() {
        let start = u32::MAX - 99;
        let segs = [
            seg(0, true, start, 200, true),
            seg(1_000, true, start, 200, true),
            seg(2_000, true, start.wrapping_add(200), 50, true),
        ];
        let turns = turns_of(&segs);
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].turn.writes, vec![200, 50]);
    }

    /// A flow without data, and rounds that do not validate, are errors naming the file.
    #[test]
    fn no_data_and_bad_rounds_are_errors_naming_the_file() {
        use trace::{Endpoint, Event, EventKind, Evidence, Instant, TcpFlags};
        let ev = |t: u64, from: Endpoint, len: u32| Event {
            t: Instant(t),
            from,
            kind: EventKind::Segment(trace::testing::segment(1, 1, TcpFlags::ACK | TcpFlags::PSH, len)),
            evidence: Evidence::Frame(t),
        };
        let acks = [ev(1, Endpoint::A, 0), ev(2, Endpoint::B, 0)];
        let none = [Shown::default(), Shown::default()];
        let cap = |events, rtt| Capture { events, tcp_waits: &[], rtt, shown: &none };
        let e = derive("s.pcap", "a <-> b", cap(&acks, None), None).unwrap_err();
        assert_eq!(e.to_string(), "s.pcap: flow a <-> b carried no data to replay");
        let data = [ev(1, Endpoint::A, 10), ev(2, Endpoint::B, 10)];
        let d = derive("s.pcap", "a <-> b", cap(&data, Some((2_000_000, true))), None).unwrap();
        assert_eq!((d.exchange.inline().as_str(), d.link().as_deref()), ("client 10; server 10", Some("rtt=2000us")));
        let e = derive("s.pcap", "a <-> b", cap(&data, None), Some(0)).unwrap_err();
        assert!(matches!(e, DeriveError::Invalid(_)), "{e:?}");
    }

    /// A gap no TCP wait overlaps is think time (less the RTT, whole microseconds); a gap a
    /// wait overlaps, or under 1 ms, is not.
    #[test]
    fn think_time_is_a_gap_nobody_waited_for_tcp_in() {
        let segs = [
            seg(0, true, 1, 10, true),
            seg(5_000_000, false, 1, 10, true),
            seg(6_000_000, true, 11, 10, true),
            seg(50_000_000, false, 11, 10, true),
        ];
        let mut t = turns_of(&segs);
        set_think_times(&mut t, &[(7_000_000, 49_000_000)], 1_000_500);
        let thinks: Vec<u64> = t.iter().map(|t| t.turn.think_ns).collect();
        assert_eq!(thinks, vec![0, 3_999_000, 0, 0]);
        let (e, reps) = derive_exchange(&segs, &[], 0).unwrap();
        assert_eq!((e.turns.len(), reps), (2, 2));
        assert!(derive_exchange(&[], &[], 0).is_none());
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

    fn turn(side: Side, writes: &[u32], think_ns: u64) -> Turn {
        Turn { side, writes: writes.to_vec(), call: CallKind::Write, think_ns, peer_reads: true }
    }

    /// Issue 34: 25 POSTs with bodies of 175 or 176 bytes and varying think times are one
    /// request/response period repeated 25 times, not a 50-turn exchange; the think times are
    /// kept as a distribution (the replica waits the median) and the jitter is said dropped.
    #[test]
    fn jittered_sizes_and_think_times_still_give_one_period() {
        let mut turns = Vec::new();
        for r in 0..25u64 {
            let body = if r % 3 == 0 { 176 } else { 175 };
            turns.push(turn(Side::Client, &[150, body], (5 + (r * 7) % 40) * 1_000_000));
            turns.push(turn(Side::Server, &[if r % 2 == 0 { 200 } else { 201 }, 90], 0));
        }
        assert_eq!(period(&turns), 2);
        let p = period_of(&turns).unwrap();
        assert_eq!((p.reps, p.exchange.turns.len()), (25, 2));
        assert_eq!(p.exchange.inline().split(';').count(), 2, "{}", p.exchange.inline());
        let t = p.thinks[0];
        assert!(t.min_ns < t.median_ns && t.median_ns < t.max_ns && t.samples == 25, "{t:?}");
        assert_eq!(p.exchange.turns[0].think_ns, t.median_ns);
        let said = p.dropped.join("\n");
        assert!(said.contains("sizes 325..326 bytes"), "{said}");
        assert!(said.contains("the replica waits the median"), "{said}");
        assert!(said.contains("25 repetitions of 2 turn(s)"), "{said}");
        // Different enough sizes are different steps: 100 and 200 bytes do not repeat.
        let t = [turn(Side::Client, &[100], 0), turn(Side::Server, &[10], 0), turn(Side::Client, &[200], 0)];
        assert_eq!(period(&t), 3);
    }

    /// A capture stopped inside the last turn (tcpdump stopped while the server's reply was on
    /// its way: its header block captured, its body not) is still 25 repetitions of one
    /// request/response, not a 50-turn exchange; the cut turn is left out and said. A last turn
    /// larger than its place's is not a cut one.
    #[test]
    fn a_last_turn_cut_by_the_captures_end_keeps_the_period() {
        let mut turns = Vec::new();
        for _ in 0..25 {
            turns.push(turn(Side::Client, &[125, 176], 20_000_000));
            turns.push(turn(Side::Server, &[145, 172], 0));
        }
        turns.last_mut().unwrap().writes = vec![145];
        assert_eq!(period(&turns), 2);
        let p = period_of(&turns).unwrap();
        assert_eq!((p.reps, p.exchange.inline().as_str()), (24, "client 125,176 think=20ms; server 145,172"));
        let said = p.dropped.join("\n");
        assert!(
            said.contains("the capture's last turn (server, 145 bytes where its place in the period has 317)"),
            "{said}"
        );
        assert!(
            said.contains("24 repetitions of 2 turn(s) in the capture and 1 turn(s) of an unfinished one"),
            "{said}"
        );
        assert!(!said.contains("sizes"), "the cut turn's size is not among the repetitions': {said}");
        // Whole: nothing cut.
        turns.last_mut().unwrap().writes = vec![145, 172];
        assert!(!period_of(&turns).unwrap().dropped.join("\n").contains("last turn"));
        // A last turn larger than its place's is a turn of its own, not a cut one.
        let t = [turn(Side::Client, &[100], 0), turn(Side::Server, &[10], 0), turn(Side::Client, &[200], 0)];
        assert_eq!(period(&t), 3);
        let t = [
            turn(Side::Client, &[100], 0),
            turn(Side::Server, &[300], 0),
            turn(Side::Client, &[100], 0),
            turn(Side::Server, &[900], 0),
        ];
        assert_eq!(period(&t), 4);
    }

    /// Warm-up covers the receiver's 16 quick ACKs of a new connection (tcp_incr_quickack,
    /// TCP_MAX_QUICKACKS), not 20 copies of the capture.
    #[test]
    fn warmup_is_sized_by_the_quickack_budget() {
        let seed1 = Exchange::parse_inline("client 275,24,292; server 100").unwrap();
        assert_eq!(warmup_rounds(&seed1.turns), 17, "the client receives one segment a round");
        let both = Exchange::parse_inline("client 100,100,100,100; server 100,100,100,100").unwrap();
        assert_eq!(warmup_rounds(&both.turns), 5);
    }
}
