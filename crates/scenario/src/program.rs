//! The step programs the executors run (the lab's sockets and the model's endpoints): what each
//! side sends, receives and sleeps, round by round. Workloads and exchanges compile to these.

use serde::{Deserialize, Serialize};

/// One thing a side does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send one application message made of these writes (sizes in bytes); the side's
    /// strategy decides how (see [`crate::SideOpts::plan_message`]).
    Send(Vec<u32>),
    /// Receive exactly this many bytes (as many recv calls as it takes).
    Recv(u32),
    /// Sleep (think time); excluded from round latency.
    Sleep { ns: u64 },
}

/// Which time a latency sample measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sample {
    /// One sample per round: the client's time for the round, sleeps excluded.
    ClientRound,
    /// One sample per client `Recv` step: the time the client waited in it.
    ClientRecv,
}

/// The steps of one side: `prologue` once, `round` repeated, `epilogue` once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SideProgram {
    pub prologue: Vec<Step>,
    pub round: Vec<Step>,
    pub epilogue: Vec<Step>,
}

/// A round-based program for both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundProgram {
    pub client: SideProgram,
    pub server: SideProgram,
    /// Rounds run before measuring (not sampled, not counted in wire cost deltas where the
    /// executor can separate them).
    pub warmup_rounds: u32,
    pub rounds: u32,
    pub sample: Sample,
}

/// What the executors run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    Rounds(RoundProgram),
    /// Client writes `write_size` bytes for `duration_ns`; the server reads and discards.
    Stream {
        duration_ns: u64,
        write_size: u32,
    },
}
