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
//! period is the shortest repeating sequence of (side, bytes) turns.

use crate::{CallKind, Connection, Exchange, Scenario, ScenarioError, Side, Turn};
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
}

impl Derived {
    /// The emulated link to run it behind: the capture's RTT when it is above 1 ms.
    pub fn link(&self) -> Option<String> {
        self.rtt.map(|(ns, _)| ns).filter(|&ns| ns > 1_000_000).map(|ns| format!("rtt={}us", ns / 1000))
    }
}

/// The exchange of the flow `key` of the capture `file` as a scenario named "replay", run
/// `rounds` times when given (else the capture's count): from its packets `events`, the spans
/// in which its records show someone waited for TCP (`tcp_waits`, ns) and its path RTT (ns, and
/// whether from the handshake).
pub fn derive(
    file: &str,
    key: &str,
    events: &[trace::Event],
    tcp_waits: &[(u64, u64)],
    rtt: Option<(u64, bool)>,
    rounds: Option<u32>,
) -> Result<Derived, DeriveError> {
    let rtt_ns = rtt.map_or(0, |(ns, _)| ns);
    let Some((mut e, reps)) = derive_exchange(&segments(events), tcp_waits, rtt_ns) else {
        return Err(DeriveError::NoData { file: file.to_string(), key: key.to_string() });
    };
    if let Some(r) = rounds {
        e.rounds = r;
    }
    e.validate()?;
    let mut s = Scenario::from_exchange("replay", &format!("replayed from {file} ({key})"), e.clone());
    s.finding = format!("derived by tcpstall replay: {reps} repetitions of {} turn(s)", e.turns.len());
    Ok(Derived { key: key.to_string(), scenario: s, exchange: e, reps, rtt })
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
    use trace::{Endpoint, EventKind};
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

/// The shortest period P such that the turns repeat by (side, bytes); the whole list when none.
pub fn period(turns: &[Turn]) -> usize {
    let key = |t: &Turn| (t.side, t.total());
    (1..=turns.len() / 2)
        .find(|&p| (p..turns.len()).all(|i| key(&turns[i]) == key(&turns[i - p])))
        .unwrap_or(turns.len().max(1))
}

/// The exchange of one period and how many times it repeats: per position, the repetition
/// with the most write boundaries (TCP only merges writes, so the finest split seen is closest
/// to the application's), and the median think time. None without turns.
pub fn exchange_of(turns: &[Turn]) -> Option<(Exchange, usize)> {
    let p = period(turns);
    let reps = turns.len() / p;
    let template: Vec<Turn> = (0..p)
        .map(|k| {
            let same: Vec<&Turn> = turns.iter().skip(k).step_by(p).collect();
            let mut best = (*same.iter().max_by_key(|t| t.writes.len())?).clone();
            let mut thinks: Vec<u64> = same.iter().map(|t| t.think_ns).collect();
            thinks.sort_unstable();
            best.think_ns = thinks[thinks.len() / 2];
            Some(best)
        })
        .collect::<Option<_>>()?;
    if template.is_empty() {
        return None;
    }
    let e = Exchange { turns: template, rounds: reps.clamp(1, 100) as u32, warmup: 20, connection: Connection::Reuse };
    Some((e, reps))
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
        let e = derive("s.pcap", "a <-> b", &acks, &[], None, None).unwrap_err();
        assert_eq!(e.to_string(), "s.pcap: flow a <-> b carried no data to replay");
        let data = [ev(1, Endpoint::A, 10), ev(2, Endpoint::B, 10)];
        let d = derive("s.pcap", "a <-> b", &data, &[], Some((2_000_000, true)), None).unwrap();
        assert_eq!((d.exchange.inline().as_str(), d.link().as_deref()), ("client 10; server 10", Some("rtt=2000us")));
        let e = derive("s.pcap", "a <-> b", &data, &[], None, Some(0)).unwrap_err();
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
}
