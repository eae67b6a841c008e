//! Workloads: what the two applications do, as parameters, and the per-side step programs they
//! compile to. Lab and model both run these programs.

use serde::{Deserialize, Serialize};

use crate::exchange::Exchange;
use crate::limits::{at_most, check, MAX_BURST_BYTES, MAX_BYTES, MAX_SAMPLES, MAX_VARIANTS, MAX_WRITES};
use crate::program::{Program, RoundProgram, Sample, SideProgram, Step};
use crate::ScenarioError;

fn d_send() -> u32 {
    1000
}
fn d_n_chunk() -> u32 {
    100
}
fn d_round() -> u32 {
    100
}

/// Seed 000: both sides send `send` bytes as `n_chunk` writes, in turn, `round` times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunked {
    #[serde(default = "d_send")]
    pub send: u32,
    #[serde(default = "d_n_chunk")]
    pub n_chunk: u32,
    #[serde(default = "d_round")]
    pub round: u32,
}

/// Seed 001: a request made of several writes, a response, on a connection warmed up first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiWrite {
    pub writes: Vec<u32>,
    pub response: u32,
    /// Request/response exchanges before measuring, so the connection is past the kernel's
    /// initial quick-ACK budget (TCP_MAX_QUICKACKS = 16, include/net/tcp.h) and in pingpong mode.
    pub warmup: u32,
    pub requests: u32,
}

/// Seed 002: `n` messages of `size` bytes, then `n` replies read one by one; repeated `rounds`
/// times with `interval_ms` of sleep between rounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    pub n: u32,
    pub size: u32,
    pub interval_ms: u32,
    pub rounds: u32,
}

/// Seed 004: `size` bytes in one write, then a 1-byte application ack; `depth` messages in
/// flight (1 = stop and wait, 2 = double buffering). `sweep`, when not empty, runs every size
/// listed instead of `size`; `depths`, when not empty, every depth listed instead of `depth`
/// (`--set depth=1,2` fills it), each size at each depth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkAck {
    pub size: u32,
    pub depth: u32,
    pub rounds: u32,
    #[serde(default)]
    pub sweep: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depths: Vec<u32>,
}

/// Seed 003: one-way bulk transfer for `duration_ms`, in writes of `write_size`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    pub duration_ms: u32,
    pub write_size: u32,
}

/// Request/response of `size` bytes each way: the benchmark baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rr {
    pub size: u32,
    pub rounds: u32,
}

/// A workload: externally tagged, so a scenario file says `[workload.chunked]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Workload {
    Chunked(Chunked),
    MultiWrite(MultiWrite),
    Burst(Burst),
    BulkAck(BulkAck),
    Stream(Stream),
    Rr(Rr),
    /// A user's own conversation: turns by either side (crate::exchange).
    Exchange(Exchange),
}

/// Check a parameter against its bounds (crate::limits).
fn param(name: &str, v: u32) -> Result<(), ScenarioError> {
    check(name, i128::from(v))
}

/// Split `total` bytes into `n` writes as evenly as possible (the first ones one byte larger).
pub fn split(total: u32, n: u32) -> Vec<u32> {
    let base = total / n;
    let extra = total % n;
    (0..n).map(|i| base + u32::from(i < extra)).collect()
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Chunked(_) => "chunked",
            Workload::MultiWrite(_) => "multi-write",
            Workload::Burst(_) => "burst",
            Workload::BulkAck(_) => "bulk-ack",
            Workload::Stream(_) => "stream",
            Workload::Rr(_) => "rr",
            Workload::Exchange(_) => "exchange",
        }
    }

    /// Reject zero and out-of-bounds values (crate::limits) with one line naming the parameter
    /// and the limit.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        match self {
            Workload::Chunked(c) => {
                param("send", c.send)?;
                param("n_chunk", c.n_chunk)?;
                param("round", c.round)?;
                if c.n_chunk > c.send {
                    return Err(ScenarioError::Invalid(format!(
                        "n_chunk = {} is more than send = {} bytes: chunks would be empty",
                        c.n_chunk, c.send
                    )));
                }
            }
            Workload::MultiWrite(m) => {
                if m.writes.is_empty() {
                    return Err(ScenarioError::Invalid("writes must list at least one size".into()));
                }
                at_most(
                    "the number of writes",
                    m.writes.len() as u64,
                    MAX_WRITES,
                    "UIO_MAXIOV, the most writev can gather",
                )?;
                for w in &m.writes {
                    param("writes", *w)?;
                }
                let total: u64 = m.writes.iter().map(|&w| u64::from(w)).sum();
                at_most("the request (sum of writes)", total, u64::from(MAX_BYTES), "bytes in one message")?;
                param("response", m.response)?;
                param("warmup", m.warmup)?;
                param("requests", m.requests)?;
            }
            Workload::Burst(b) => {
                param("n", b.n)?;
                param("size", b.size)?;
                param("interval_ms", b.interval_ms)?;
                param("rounds", b.rounds)?;
                at_most(
                    "n x size",
                    u64::from(b.n) * u64::from(b.size),
                    MAX_BURST_BYTES,
                    "bytes: the client sends all n messages before reading a reply, so beyond what the \
                     socket buffers hold both sides block in send, a deadlock, not a stall",
                )?;
                at_most(
                    "n x rounds",
                    u64::from(b.n) * u64::from(b.rounds),
                    MAX_SAMPLES,
                    "every reply is a latency sample kept in memory",
                )?;
            }
            Workload::BulkAck(b) => {
                param("size", b.size)?;
                param("depth", b.depth)?;
                param("rounds", b.rounds)?;
                for s in &b.sweep {
                    param("sweep", *s)?;
                }
                for d in &b.depths {
                    param("depths", *d)?;
                }
                let variants = (b.sweep.len().max(1) * b.depths.len().max(1)) as u64;
                at_most("the sweep's variants", variants, MAX_VARIANTS, "each is a full run")?;
            }
            Workload::Stream(s) => {
                param("duration_ms", s.duration_ms)?;
                param("write_size", s.write_size)?;
            }
            Workload::Rr(r) => {
                param("size", r.size)?;
                param("rounds", r.rounds)?;
            }
            Workload::Exchange(e) => e.validate()?,
        }
        Ok(())
    }

    /// The concrete workloads to run: one, or for a bulk-ack sweep one per size and depth
    /// (sizes outer, depths inner). Each comes with a short label ("" when there is one).
    pub fn variants(&self) -> Vec<(String, Workload)> {
        match self {
            Workload::BulkAck(b) if !b.sweep.is_empty() || !b.depths.is_empty() => {
                let sizes = if b.sweep.is_empty() { vec![b.size] } else { b.sweep.clone() };
                let depths = if b.depths.is_empty() { vec![b.depth] } else { b.depths.clone() };
                sizes
                    .iter()
                    .flat_map(|&size| depths.iter().map(move |&depth| (size, depth)))
                    .map(|(size, depth)| {
                        let w = Workload::BulkAck(BulkAck {
                            size,
                            depth,
                            rounds: b.rounds,
                            sweep: Vec::new(),
                            depths: Vec::new(),
                        });
                        (format!("size={size} depth={depth}"), w)
                    })
                    .collect()
            }
            _ => vec![(String::new(), self.clone())],
        }
    }

    /// Compile to per-side steps. Client is the side that connects.
    pub fn program(&self) -> Program {
        match self {
            Workload::Chunked(c) => Program::Rounds(chunked_program(c)),
            Workload::MultiWrite(m) => Program::Rounds(multi_write_program(m)),
            Workload::Burst(b) => Program::Rounds(burst_program(b)),
            Workload::BulkAck(b) => Program::Rounds(bulk_ack_program(b)),
            Workload::Stream(s) => {
                Program::Stream { duration_ns: u64::from(s.duration_ms) * 1_000_000, write_size: s.write_size }
            }
            Workload::Exchange(e) => e.program(),
            Workload::Rr(r) => Program::Rounds(RoundProgram {
                client: SideProgram { round: vec![Step::Send(vec![r.size]), Step::Recv(r.size)], ..Default::default() },
                server: SideProgram { round: vec![Step::Recv(r.size), Step::Send(vec![r.size])], ..Default::default() },
                warmup_rounds: 0,
                rounds: r.rounds,
                sample: Sample::ClientRound,
            }),
        }
    }

    /// Parameters as a JSON object (for reports).
    pub fn params_json(&self) -> serde_json::Value {
        if let Workload::Exchange(e) = self {
            // The turns in their inline form, so a report's params read like `--exchange`.
            if e.connection == crate::Connection::New {
                // Warm-up rounds do not apply to a new connection per round.
                return serde_json::json!({ "turns": e.inline(), "rounds": e.rounds, "connection": "new" });
            }
            return serde_json::json!({ "turns": e.inline(), "rounds": e.rounds, "warmup": e.warmup });
        }
        let v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        match v {
            serde_json::Value::Object(mut m) => m.remove(self.kind()).unwrap_or(serde_json::Value::Null),
            other => other,
        }
    }
}

/// Seed 000 (tcp_test): the message crosses in n_chunk writes each way, in turn. The seed's
/// server speaks first; here the client does, which is the same exchange seen from the other
/// end and lets the client time each round.
fn chunked_program(c: &Chunked) -> RoundProgram {
    let msg = split(c.send, c.n_chunk);
    RoundProgram {
        client: SideProgram { round: vec![Step::Send(msg.clone()), Step::Recv(c.send)], ..Default::default() },
        server: SideProgram { round: vec![Step::Recv(c.send), Step::Send(msg)], ..Default::default() },
        warmup_rounds: 0,
        rounds: c.round,
        sample: Sample::ClientRound,
    }
}

fn multi_write_program(m: &MultiWrite) -> RoundProgram {
    let total = m.writes.iter().sum();
    RoundProgram {
        client: SideProgram { round: vec![Step::Send(m.writes.clone()), Step::Recv(m.response)], ..Default::default() },
        server: SideProgram { round: vec![Step::Recv(total), Step::Send(vec![m.response])], ..Default::default() },
        warmup_rounds: m.warmup,
        rounds: m.requests,
        sample: Sample::ClientRound,
    }
}

fn burst_program(b: &Burst) -> RoundProgram {
    let mut client = Vec::new();
    for _ in 0..b.n {
        client.push(Step::Send(vec![b.size]));
    }
    for _ in 0..b.n {
        client.push(Step::Recv(b.size));
    }
    if b.interval_ms > 0 {
        client.push(Step::Sleep { ns: u64::from(b.interval_ms) * 1_000_000 });
    }
    let mut server = Vec::new();
    for _ in 0..b.n {
        server.push(Step::Recv(b.size));
        server.push(Step::Send(vec![b.size]));
    }
    RoundProgram {
        client: SideProgram { round: client, ..Default::default() },
        server: SideProgram { round: server, ..Default::default() },
        warmup_rounds: 0,
        rounds: b.rounds,
        sample: Sample::ClientRecv,
    }
}

/// Depth D: D - 1 messages are sent ahead, then each round sends one and reads one ack, so D
/// messages are outstanding (seed 004's double buffering at D = 2).
fn bulk_ack_program(b: &BulkAck) -> RoundProgram {
    let size = b.sweep.first().copied().unwrap_or(b.size);
    let depth = b.depths.first().copied().unwrap_or(b.depth);
    let ahead = depth.saturating_sub(1) as usize;
    RoundProgram {
        client: SideProgram {
            prologue: vec![Step::Send(vec![size]); ahead],
            round: vec![Step::Send(vec![size]), Step::Recv(1)],
            epilogue: vec![Step::Recv(1); ahead],
        },
        server: SideProgram {
            prologue: Vec::new(),
            round: vec![Step::Recv(size), Step::Send(vec![1])],
            epilogue: (0..ahead).flat_map(|_| [Step::Recv(size), Step::Send(vec![1])]).collect(),
        },
        warmup_rounds: 0,
        rounds: b.rounds,
        sample: Sample::ClientRound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(1000, 100).iter().sum::<u32>(), 1000);
    }

    #[test]
    fn bulk_ack_depth_two_sends_one_ahead() {
        let w = Workload::BulkAck(BulkAck { size: 100_000, depth: 2, rounds: 3, sweep: vec![], depths: vec![] });
        let Program::Rounds(p) = w.program() else { panic!("round program") };
        assert_eq!(p.client.prologue, vec![Step::Send(vec![100_000])]);
        assert_eq!(p.client.epilogue, vec![Step::Recv(1)]);
        assert_eq!(p.server.epilogue.len(), 2);
    }

    #[test]
    fn sweep_expands_into_variants() {
        let w =
            Workload::BulkAck(BulkAck { size: 1, depth: 1, rounds: 3, sweep: vec![99_912, 100_000], depths: vec![] });
        let v = w.variants();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, "size=100000 depth=1");
    }

    /// QA finding 4: `burst --set n=30000` (size 132) deadlocked both sides in send().
    #[test]
    fn a_burst_larger_than_the_socket_buffers_is_rejected_as_a_deadlock() {
        let w = Workload::Burst(Burst { n: 8000, size: 1448, interval_ms: 0, rounds: 1 });
        let e = w.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("n x size = 11584000 is above the limit of 1048576 (bytes: the client sends all n"),
            "{e}"
        );
        assert!(e.contains("a deadlock, not a stall"), "{e}");
        assert_eq!(e.lines().count(), 1);
        let w = Workload::Burst(Burst { n: 8, size: 131_072, interval_ms: 0, rounds: 1 });
        assert!(w.validate().is_ok(), "exactly 1 MiB fits");
        let w = Workload::Burst(Burst { n: 3, size: 132, interval_ms: 50, rounds: 20 });
        assert!(w.validate().is_ok(), "seed 002");
    }

    #[test]
    fn a_message_is_bounded_in_writes_and_bytes() {
        let mw = |writes: Vec<u32>| Workload::MultiWrite(MultiWrite { writes, response: 1, warmup: 0, requests: 1 });
        // Four maximal writes would overflow a u32 sum; the total is checked in u64.
        let e = mw(vec![MAX_BYTES; 64]).validate().unwrap_err().to_string();
        assert!(e.starts_with("the request (sum of writes) = 4294967296 is above the limit of 67108864"), "{e}");
        let e = mw(vec![1; 1025]).validate().unwrap_err().to_string();
        assert!(e.starts_with("the number of writes = 1025 is above the limit of 1024 (UIO_MAXIOV"), "{e}");
        assert!(mw(vec![1; 1024]).validate().is_ok());
    }

    #[test]
    fn a_sweep_is_bounded() {
        let b = |sweep: Vec<u32>, depths: Vec<u32>| {
            Workload::BulkAck(BulkAck { size: 1, depth: 1, rounds: 1, sweep, depths })
        };
        assert!(b((1..=4096).collect(), vec![]).validate().is_ok());
        let e = b((1..=4096).collect(), vec![1, 2]).validate().unwrap_err().to_string();
        assert_eq!(e, "the sweep's variants = 8192 is above the limit of 4096 (each is a full run)");
        assert_eq!(b(vec![], vec![1, 2]).variants().len(), 2);
    }

    #[test]
    fn zero_and_absurd_sizes_are_rejected() {
        let w = Workload::Rr(Rr { size: 0, rounds: 1 });
        assert!(w.validate().unwrap_err().to_string().contains("size must be at least 1"));
        let w = Workload::Rr(Rr { size: u32::MAX, rounds: 1 });
        assert!(w.validate().is_err());
    }
}
