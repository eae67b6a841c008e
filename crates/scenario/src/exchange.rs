//! The exchange workload: an application conversation as a list of turns, each by one side,
//! repeated `rounds` times on one connection after `warmup` rounds. It compiles into the same
//! step programs (`Program::Rounds`) the lab and the model already execute, so a user's own
//! traffic runs exactly like the built-in scenarios.
//!
//! In a scenario file:
//!
//! ```toml
//! [workload.exchange]
//! rounds = 50
//! warmup = 20
//! [[workload.exchange.turn]]
//! side = "client"
//! writes = [275, 24, 292]
//! [[workload.exchange.turn]]
//! side = "server"
//! writes = [100]
//! think = "1ms"
//! ```
//!
//! Validation runs while the file is deserialised (serde `try_from`), so toml reports a bad
//! turn with the line it is on.

use serde::{Deserialize, Serialize};

use crate::limits::{at_most, check, MAX_BURST_BYTES, MAX_BYTES, MAX_INTERVAL_MS, MAX_WRITES};
use crate::link_spec::parse_duration_ns;
use crate::program::{Program, RoundProgram, Sample, SideProgram, Step};
use crate::ScenarioError;

/// Which end of the connection takes a turn. The client is the side that connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// How the application hands a turn's writes to TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// One write(2) per element of `writes`.
    #[default]
    Write,
    /// One send(2) per element (flags 0: the same as write(2) for TCP, tcp_sendmsg).
    Send,
    /// All of the turn's writes in one sendmsg(2) with one iovec each: TCP copies every iovec
    /// into the same queue in one call (tcp_sendmsg_locked), so it is run as one call of the
    /// turn's total.
    SendmsgGathered,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TurnFile", into = "TurnFile")]
pub struct Turn {
    pub side: Side,
    /// Bytes of each write, in order.
    pub writes: Vec<u32>,
    pub call: CallKind,
    /// The side's think time before its writes (not counted in the client's round time).
    pub think_ns: u64,
    /// The other side reads the turn's bytes before its next step (default). When false it
    /// reads them at the end of the round, so it can answer without reading first (pipelining).
    pub peer_reads: bool,
}

impl Turn {
    pub fn total(&self) -> u64 {
        self.writes.iter().map(|&w| u64::from(w)).sum()
    }
}

/// A turn as written in the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnFile {
    side: Side,
    writes: Writes,
    #[serde(default)]
    call: CallKind,
    /// Think time with its unit: "0ms", "250us", "1.5ms".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    think: Option<Think>,
    #[serde(default = "yes")]
    peer_reads: bool,
}

/// A turn's write sizes, checked as they are read so toml's error points at their line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "Vec<u32>", into = "Vec<u32>")]
struct Writes(Vec<u32>);

impl TryFrom<Vec<u32>> for Writes {
    type Error = String;
    fn try_from(writes: Vec<u32>) -> Result<Writes, String> {
        let probe = Turn { side: Side::Client, writes, call: CallKind::Write, think_ns: 0, peer_reads: true };
        probe.validate().map_err(|e| e.to_string())?;
        Ok(Writes(probe.writes))
    }
}

impl From<Writes> for Vec<u32> {
    fn from(w: Writes) -> Vec<u32> {
        w.0
    }
}

/// A think time, read from its text ("1ms") as it is read, so errors point at its line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
struct Think(u64);

impl TryFrom<String> for Think {
    type Error = String;
    fn try_from(v: String) -> Result<Think, String> {
        parse_duration_ns(&v, MAX_THINK_NS).map(Think).map_err(|e| format!("think '{v}' {e}"))
    }
}

impl From<Think> for String {
    fn from(t: Think) -> String {
        format_duration(t.0)
    }
}

fn yes() -> bool {
    true
}

/// Longest think time of a turn (the burst's longest pause, one minute).
const MAX_THINK_NS: u64 = MAX_INTERVAL_MS * 1_000_000;

impl TryFrom<TurnFile> for Turn {
    type Error = String;
    fn try_from(t: TurnFile) -> Result<Turn, String> {
        let think_ns = t.think.map_or(0, |t| t.0);
        let turn = Turn { side: t.side, writes: t.writes.0, call: t.call, think_ns, peer_reads: t.peer_reads };
        turn.validate().map_err(|e| format!("{} turn: {e}", turn.side.as_str()))?;
        Ok(turn)
    }
}

impl From<Turn> for TurnFile {
    fn from(t: Turn) -> TurnFile {
        TurnFile {
            side: t.side,
            writes: Writes(t.writes),
            call: t.call,
            think: (t.think_ns > 0).then_some(Think(t.think_ns)),
            peer_reads: t.peer_reads,
        }
    }
}

/// A duration in the largest unit that keeps it whole ("5ms", "250us", "17ns").
pub fn format_duration(ns: u64) -> String {
    match (ns % 1_000_000, ns % 1_000) {
        (0, _) => format!("{}ms", ns / 1_000_000),
        (_, 0) => format!("{}us", ns / 1_000),
        _ => format!("{ns}ns"),
    }
}

impl Turn {
    fn validate(&self) -> Result<(), ScenarioError> {
        if self.writes.is_empty() {
            return Err(ScenarioError::Invalid("writes must list at least one size".into()));
        }
        at_most(
            "the number of writes",
            self.writes.len() as u64,
            MAX_WRITES,
            "UIO_MAXIOV, the most writev can gather",
        )?;
        for &w in &self.writes {
            check("writes", i128::from(w))?;
        }
        at_most("the turn (sum of writes)", self.total(), u64::from(MAX_BYTES), "bytes in one message")
    }
}

/// Whether each round runs on the same connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    /// All rounds on one connection (after the warm-up rounds).
    #[default]
    Reuse,
    /// A new connection per round: each round is a connection of its own (connect, the turns,
    /// close); warm-up rounds do not apply (every connection starts cold, which is the point:
    /// the kernel's quick-ACK mode at a connection's start, `tcp_incr_quickack`). The lab and
    /// the model run one single-round connection per round and fold them into one row
    /// (`report::merge_connections`): the handshake is not part of a round's latency.
    New,
}

/// The exchange workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ExchangeFile", into = "ExchangeFile")]
pub struct Exchange {
    pub turns: Vec<Turn>,
    pub rounds: u32,
    /// Rounds run before measuring: 20 by default, past the kernel's initial quick-ACK budget
    /// (TCP_MAX_QUICKACKS = 16, include/net/tcp.h), so the connection is a reused one.
    pub warmup: u32,
    pub connection: Connection,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExchangeFile {
    #[serde(default = "d_rounds")]
    rounds: u32,
    #[serde(default = "d_warmup")]
    warmup: u32,
    #[serde(default)]
    connection: Connection,
    turn: Vec<Turn>,
}

fn d_rounds() -> u32 {
    100
}
fn d_warmup() -> u32 {
    20
}

impl TryFrom<ExchangeFile> for Exchange {
    type Error = String;
    fn try_from(f: ExchangeFile) -> Result<Exchange, String> {
        let e = Exchange { turns: f.turn, rounds: f.rounds, warmup: f.warmup, connection: f.connection };
        e.validate().map_err(|e| e.to_string())?;
        Ok(e)
    }
}

impl From<Exchange> for ExchangeFile {
    fn from(e: Exchange) -> ExchangeFile {
        ExchangeFile { rounds: e.rounds, warmup: e.warmup, connection: e.connection, turn: e.turns }
    }
}

impl Exchange {
    pub fn new(turns: Vec<Turn>) -> Exchange {
        Exchange { turns, rounds: d_rounds(), warmup: d_warmup(), connection: Connection::Reuse }
    }

    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.turns.is_empty() {
            return Err(ScenarioError::Invalid("an exchange needs at least one [[workload.exchange.turn]]".into()));
        }
        for t in &self.turns {
            t.validate().map_err(|e| ScenarioError::Invalid(format!("{} turn: {e}", t.side.as_str())))?;
        }
        check("rounds", i128::from(self.rounds))?;
        check("warmup", i128::from(self.warmup))?;
        // Bytes a side sends that the peer does not read until the end of the round wait in the
        // socket buffers; past what they hold both sides block in send (see MAX_BURST_BYTES).
        for side in [Side::Client, Side::Server] {
            let unread: u64 = self.turns.iter().filter(|t| t.side == side && !t.peer_reads).map(Turn::total).sum();
            at_most(
                &format!("the {} bytes read only at the end of a round (peer_reads = false)", side.as_str()),
                unread,
                MAX_BURST_BYTES,
                "bytes the socket buffers hold before both sides block in send",
            )?;
        }
        Ok(())
    }

    /// Parse the inline form: turns separated by `;`, each `SIDE SIZES [OPTIONS]`, sizes a comma
    /// list; options `think=DURATION`, `gather` (one sendmsg), `send`, `noread` (the peer
    /// reads at the end of the round). Example: `client 275,24,292; server 100 think=1ms`.
    pub fn parse_inline(s: &str) -> Result<Exchange, ScenarioError> {
        let bad = |msg: String| ScenarioError::Invalid(format!("--exchange: {msg}"));
        let mut turns = Vec::new();
        for (i, part) in s.split(';').map(str::trim).enumerate() {
            if part.is_empty() {
                return Err(bad(format!("turn {} is empty (turns are separated by single ';')", i + 1)));
            }
            let mut words = part.split_whitespace();
            let side = match words.next() {
                Some("client" | "c") => Side::Client,
                Some("server" | "s") => Side::Server,
                Some(w) => return Err(bad(format!("turn {}: '{w}' is not a side (client or server)", i + 1))),
                None => unreachable!("part is not empty"),
            };
            let sizes =
                words.next().ok_or_else(|| bad(format!("turn {}: no sizes after '{}'", i + 1, side.as_str())))?;
            let writes = sizes
                .split(',')
                .map(|w| w.trim().replace('_', "").parse::<u32>())
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|_| bad(format!("turn {}: '{sizes}' is not a comma list of byte counts", i + 1)))?;
            let mut turn = Turn { side, writes, call: CallKind::Write, think_ns: 0, peer_reads: true };
            for w in words {
                match w {
                    "gather" | "sendmsg" | "sendmsg-gathered" => turn.call = CallKind::SendmsgGathered,
                    "send" => turn.call = CallKind::Send,
                    "write" => turn.call = CallKind::Write,
                    "noread" => turn.peer_reads = false,
                    _ => match w.strip_prefix("think=") {
                        Some(v) => {
                            turn.think_ns = parse_duration_ns(v, MAX_THINK_NS)
                                .map_err(|e| bad(format!("turn {}: think '{v}' {e}", i + 1)))?
                        }
                        None => {
                            return Err(bad(format!(
                                "turn {}: unknown word '{w}' (expected think=DURATION, gather, send, write or noread)",
                                i + 1
                            )))
                        }
                    },
                }
            }
            turn.validate().map_err(|e| bad(format!("turn {}: {e}", i + 1)))?;
            turns.push(turn);
        }
        let e = Exchange::new(turns);
        e.validate().map_err(|e| bad(e.to_string()))?;
        Ok(e)
    }

    /// The inline form of this exchange (what `--exchange` takes).
    pub fn inline(&self) -> String {
        self.turns
            .iter()
            .map(|t| {
                let sizes: Vec<String> = t.writes.iter().map(u32::to_string).collect();
                let mut s = format!("{} {}", t.side.as_str(), sizes.join(","));
                if t.think_ns > 0 {
                    s += &format!(" think={}", format_duration(t.think_ns));
                }
                match t.call {
                    CallKind::SendmsgGathered => s += " gather",
                    CallKind::Send => s += " send",
                    CallKind::Write => {}
                }
                if !t.peer_reads {
                    s += " noread";
                }
                s
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The side that sends more separate writes in one turn (where a gathering fix applies).
    pub fn multi_write_sides(&self) -> Vec<Side> {
        let mut v = Vec::new();
        for side in [Side::Client, Side::Server] {
            if self.turns.iter().any(|t| t.side == side && t.call != CallKind::SendmsgGathered && t.writes.len() > 1) {
                v.push(side);
            }
        }
        v
    }

    /// Compile into both sides' step programs. Per turn: the taking side sleeps its think time
    /// and sends the turn as one message (its writes, or one call when gathered); the peer reads
    /// the turn's bytes as its next step, or at the end of the round when `peer_reads` is false.
    /// One latency sample per round: the client's time for the round, its sleeps excluded.
    pub fn program(&self) -> Program {
        let mut client = Vec::new();
        let mut server = Vec::new();
        let mut deferred = [0u64; 2];
        for t in &self.turns {
            let (own, peer) = match t.side {
                Side::Client => (&mut client, &mut server),
                Side::Server => (&mut server, &mut client),
            };
            if t.think_ns > 0 {
                own.push(Step::Sleep { ns: t.think_ns });
            }
            let msg = match t.call {
                CallKind::SendmsgGathered => vec![t.total() as u32],
                CallKind::Write | CallKind::Send => t.writes.clone(),
            };
            own.push(Step::Send(msg));
            if t.peer_reads {
                peer.push(Step::Recv(t.total() as u32));
            } else {
                deferred[t.side.peer() as usize] += t.total();
            }
        }
        for (side, steps) in [(Side::Client, &mut client), (Side::Server, &mut server)] {
            let n = deferred[side as usize];
            if n > 0 {
                // Bounded by MAX_BURST_BYTES in validate, so it fits a u32.
                steps.push(Step::Recv(n as u32));
            }
        }
        Program::Rounds(RoundProgram {
            client: SideProgram { round: client, ..Default::default() },
            server: SideProgram { round: server, ..Default::default() },
            warmup_rounds: self.warmup,
            rounds: self.rounds,
            sample: Sample::ClientRound,
        })
    }
}

impl crate::Workload {
    /// The built-in workloads that are conversations (chunked, multi-write, rr) as an exchange
    /// compiling to the same step programs; None for those that are not (burst reads every
    /// reply separately, bulk-ack pipelines, stream has no rounds).
    /// With `connection = "new"`: the workload of one connection (one round, no warm-up) and
    /// how many connections to run. None for every other workload.
    pub fn per_connection(&self) -> Option<(crate::Workload, u32)> {
        match self {
            crate::Workload::Exchange(e) if e.connection == Connection::New => {
                let one = Exchange { rounds: 1, warmup: 0, connection: Connection::Reuse, ..e.clone() };
                Some((crate::Workload::Exchange(one), e.rounds))
            }
            _ => None,
        }
    }

    pub fn as_exchange(&self) -> Option<Exchange> {
        use crate::Workload as W;
        let turn = |side, writes: Vec<u32>| Turn { side, writes, call: CallKind::Write, think_ns: 0, peer_reads: true };
        let (turns, rounds, warmup) = match self {
            W::Chunked(c) => {
                let msg = crate::split(c.send, c.n_chunk);
                (vec![turn(Side::Client, msg.clone()), turn(Side::Server, msg)], c.round, 0)
            }
            W::MultiWrite(m) => {
                (vec![turn(Side::Client, m.writes.clone()), turn(Side::Server, vec![m.response])], m.requests, m.warmup)
            }
            W::Rr(r) => (vec![turn(Side::Client, vec![r.size]), turn(Side::Server, vec![r.size])], r.rounds, 0),
            W::Exchange(e) => return Some(e.clone()),
            _ => return None,
        };
        Some(Exchange { turns, rounds, warmup, connection: Connection::Reuse })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn conversation_built_ins_are_exchanges_with_the_same_programs() {
        for s in Scenario::catalogue() {
            match s.workload.as_exchange() {
                Some(e) => {
                    assert_eq!(e.program(), s.workload.program(), "{}", s.name);
                    let mut as_file = s.clone();
                    as_file.workload = crate::Workload::Exchange(e);
                    let text = as_file.to_toml().unwrap();
                    let back = Scenario::from_toml("x.toml", &text).unwrap();
                    assert_eq!(back, as_file, "{text}");
                }
                None => assert!(["burst", "bulk-ack", "stream"].contains(&s.name.as_str()), "{}", s.name),
            }
        }
    }

    #[test]
    fn inline_seed_001_compiles_to_the_multi_write_program() {
        let e = Exchange::parse_inline("client 275,24,292; server 100").unwrap();
        let Program::Rounds(p) = e.program() else { panic!() };
        assert_eq!(p.client.round, vec![Step::Send(vec![275, 24, 292]), Step::Recv(100)]);
        assert_eq!(p.server.round, vec![Step::Recv(591), Step::Send(vec![100])]);
        assert_eq!((p.warmup_rounds, p.rounds), (20, 100));
        // The same program the multi-write built-in compiles to.
        let mw = Scenario::builtin("multi-write").unwrap();
        let Program::Rounds(m) = mw.workload.program() else { panic!() };
        assert_eq!((m.client.round, m.server.round), (p.client.round, p.server.round));
    }

    #[test]
    fn think_gather_and_noread() {
        let e = Exchange::parse_inline("client 10,20 gather think=2ms; server 5 noread; server 7").unwrap();
        let Program::Rounds(p) = e.program() else { panic!() };
        assert_eq!(
            p.client.round,
            vec![Step::Sleep { ns: 2_000_000 }, Step::Send(vec![30]), Step::Recv(7), Step::Recv(5)]
        );
        assert_eq!(p.server.round, vec![Step::Recv(30), Step::Send(vec![5]), Step::Send(vec![7])]);
        assert_eq!(e.inline(), "client 10,20 think=2ms gather; server 5 noread; server 7");
        assert_eq!(Exchange::parse_inline(&e.inline()).unwrap(), e);
    }

    #[test]
    fn inline_errors_are_one_line_and_name_the_turn() {
        for (s, want) in [
            ("client 275,x", "turn 1: '275,x' is not a comma list"),
            ("client 1; ; server 1", "turn 2 is empty"),
            ("peer 1", "turn 1: 'peer' is not a side"),
            ("client 0", "turn 1: each of writes must be at least 1"),
            ("client 1 think=5", "turn 1: think '5'"),
            ("client 1 fast", "unknown word 'fast'"),
            ("server", "turn 1: no sizes"),
        ] {
            let e = Exchange::parse_inline(s).unwrap_err().to_string();
            assert!(e.starts_with("--exchange: ") && e.contains(want), "{s}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    const FILE: &str = r#"name = "mine"
summary = "a header then a body"

[workload.exchange]
rounds = 30
warmup = 20

[[workload.exchange.turn]]
side = "client"
writes = [40]
think = "1ms"

[[workload.exchange.turn]]
side = "server"
writes = [60, 900]
"#;

    #[test]
    fn a_file_parses_with_a_default_matrix_and_round_trips_through_set() {
        let mut s = Scenario::from_toml("mine.toml", FILE).unwrap();
        assert_eq!(s.matrix.len(), 1);
        assert_eq!(s.matrix[0].label, "default");
        let crate::Workload::Exchange(e) = &s.workload else { panic!() };
        assert_eq!(e.turns[0].think_ns, 1_000_000);
        assert_eq!(e.turns[1].writes, vec![60, 900]);
        s.apply_sets(&["rounds=7", "warmup=0"]).unwrap();
        let crate::Workload::Exchange(e) = &s.workload else { panic!() };
        assert_eq!((e.rounds, e.warmup, e.turns.len()), (7, 0, 2));
    }

    /// connection = "new": one single-round connection per round, no warm-up.
    #[test]
    fn a_new_connection_per_round_is_one_round_runs() {
        let s = Scenario::from_toml("mine.toml", &FILE.replace("warmup = 20", "connection = \"new\"")).unwrap();
        let (one, n) = s.workload.per_connection().expect("per connection");
        assert_eq!(n, 30);
        let crate::Workload::Exchange(e) = one else { panic!() };
        assert_eq!((e.rounds, e.warmup, e.connection), (1, 0, Connection::Reuse));
        assert!(Scenario::from_toml("mine.toml", FILE).unwrap().workload.per_connection().is_none());
    }

    /// Errors name the file and the line of the bad value (toml's span), in one line.
    #[test]
    fn file_errors_name_the_line() {
        let cases = [
            (FILE.replace("writes = [60, 900]", "writes = [60, 0]"), "line 15", "each of writes must be at least 1"),
            (FILE.replace("think = \"1ms\"", "think = \"1\""), "line 11", "think '1'"),
            (FILE.replace("side = \"server\"", "side = \"peer\""), "line 14", "unknown variant `peer`"),
            (FILE.replace("think = \"1ms\"", "thinks = \"1ms\""), "line 11", "unknown field `thinks`"),
            (FILE.replace("rounds = 30", "rounds = 0"), "line 4", "rounds must be at least 1"),
            (FILE.replace("warmup = 20", "connection = \"fresh\""), "line 6", "unknown variant `fresh`"),
        ];
        for (text, line, want) in cases {
            let e = Scenario::from_toml("mine.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with("scenario file mine.toml: "), "{e}");
            assert!(e.contains(line) && e.contains(want), "want {line} / {want}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
