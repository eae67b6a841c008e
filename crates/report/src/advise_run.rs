//! `tcpstall advise-run --format json`: the user's real programs measured as written and with
//! each fix applied from outside (crates/outside), ranked, with the winner's deployable form
//! and its measured cost (docs/json-schema.md, "Advise-run"). The table is the text the
//! command prints (crates/outside text.rs), carried as is.

use serde::Serialize;

use crate::Export;

/// The advise-run document.
#[derive(Debug, Clone, Serialize)]
pub struct AdviseRunDoc {
    pub tool: &'static str,
    pub version: &'static str,
    pub schema_version: u32,
    /// Always "advise-run".
    pub mode: &'static str,
    pub server_command: String,
    pub client_command: String,
    pub port: u16,
    /// `--server-addr`: an existing server (no server command; only the client's side
    /// changed); null otherwise.
    pub server_addr: Option<String>,
    /// `--link`: the emulated link between the namespaces; null on the direct veth path.
    pub link: Option<String>,
    /// Whether the runs' stalls were classified with kernel evidence: what was attached (eBPF
    /// on TCP tracepoints, only while a run records), or "stalls from the packets only: " and
    /// why.
    pub kernel_evidence: String,
    /// The delayed-ACK maximum the kernel took for the DELACK_MAX candidate (µs); null when it
    /// did not run.
    pub delack_max_us: Option<u64>,
    /// Passes of every candidate run, interleaved.
    pub passes: u64,
    /// Why the passes stopped (settled, budget, rounds, interrupted).
    pub stopped: String,
    pub elapsed_s: f64,
    /// Best first.
    pub ranking: Vec<AdviseRunRow>,
    /// Candidates left out, and why.
    pub left_out: Vec<LeftOut>,
    /// The first fix ranked in a better tier than as written; null when none is.
    pub winner: Option<AdviseRunWinner>,
    /// The text report, as printed.
    #[serde(skip)]
    pub text: String,
}

/// One candidate's pooled runs.
#[derive(Debug, Clone, Serialize)]
pub struct AdviseRunRow {
    pub rank: u64,
    /// "as written", "route quickack (client)", ...
    pub label: String,
    /// 0 as written; then the program's own setting, a route or cgroup program, a shim.
    pub change_size: u64,
    /// Tier by p50 (candidates within the tie margin share one), best 0.
    pub tier: u64,
    pub runs: u64,
    pub requests: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub stalls_per_request: f64,
    /// The classifier's causes, most frequent first.
    pub causes: Vec<CauseN>,
    pub data_segments_per_request: f64,
    pub packets_per_request: f64,
    pub pure_acks_per_request: f64,
    /// Both sides' CPU per request (ms; the client's alone with an existing server); null when
    /// not measured.
    pub cpu_ms_per_request: Option<f64>,
    /// The spawned programs: `a` the client's, `b` the server's (absent when not found, or
    /// not ours).
    pub owners: crate::owner::FlowOwners,
    /// The kernel evidence its runs' classifier read; null when no run recorded any.
    pub kernel: Option<AdviseRunKernel>,
}

/// The kernel evidence of a candidate's runs.
#[derive(Debug, Clone, Serialize)]
pub struct AdviseRunKernel {
    /// Runs that recorded it (of `runs`).
    pub runs: u64,
    /// Kernel events merged into the runs' traces; writes and resends among them.
    pub events: u64,
    pub writes: u64,
    pub resends: u64,
    /// Records lost on the way.
    pub lost: u64,
    /// Stall records whose evidence includes the kernel's.
    pub stalls_with_kernel: u64,
    /// The first such record of each cause, for people.
    pub examples: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CauseN {
    pub cause: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    pub label: String,
    pub reason: String,
}

/// The first choice and how to deploy it.
#[derive(Debug, Clone, Serialize)]
pub struct AdviseRunWinner {
    pub label: String,
    /// The deployable form: the commands or config lines, and how to remove it.
    pub deploy: String,
}

impl Export for AdviseRunDoc {
    const COMMAND: &'static str = "advise-run";

    fn table(&self) -> String {
        self.text.clone()
    }
}
