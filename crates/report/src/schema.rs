//! The JSON contract. Field names here are the names in the JSON; change them only with a
//! schema version bump (docs/json-schema.md).

use serde::{Deserialize, Serialize};
use trace::VerdictKey;

/// Version of the JSON layout below.
/// 2: stall records from the one classifier (`stall_records`, `stall_count`, `stall_summary`),
/// `slow_samples` for latency samples above the threshold (was `stalls`), units in names
/// (`throughput_bytes_per_s`, was `throughput_bps`), `non_data_segs_out` (was `pure_acks_out`:
/// it counts SYN/FIN/RST too), `quickack_state`, `kernel` only for real kernels and
/// `profile` for the model, `schema_version` (was `schema`).
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always "tcpstall".
    pub tool: String,
    /// tcpstall's version.
    pub version: String,
    pub schema_version: u32,
    /// `uname -r` of the kernel the lab ran on; absent for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The model's stack profile(s) ("linux", "linux:rfc-classic"); absent for the lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// "lab" or "simulate".
    pub mode: String,
    pub scenario: String,
    /// The workload parameters as run (after --set).
    pub params: serde_json::Value,
    /// The link the run used ("loopback" or the emulated link's spec).
    pub link: String,
    pub results: Vec<RunResult>,
    /// Errors met after some results were measured (the results above are still valid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One row: one strategy (and one variant of the workload, for sweeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Strategy label ("default", "nodelay", "client:cork server:quickack-each").
    pub strategy: String,
    /// Workload variant ("size=99912 depth=1"), empty when the scenario has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub variant: String,
    /// The options the client side really had (read back with getsockopt in the lab).
    pub client: Applied,
    pub server: Applied,
    /// Rounds measured (excluding warm-up).
    pub rounds: u64,
    pub latency_us: Latency,
    /// Latency samples above `slow_sample_threshold_us` (a slow sample can hold several
    /// stalls, or none: a scheduling delay is slow without being a TCP stall).
    pub slow_samples: u64,
    pub slow_sample_threshold_us: f64,
    /// Stall records with a TCP cause in the measured rounds (application gaps excluded), from
    /// the classifier; `None` (JSON null) when the row has no packets to classify (the lab
    /// without capture): not measured, which is not zero.
    pub stall_count: Option<u64>,
    /// Counts of the measured rounds' stall records by cause.
    pub stall_summary: analyze::StallSummary,
    /// Every stall record of the connection (prologue and epilogue included: compare `start_ns`
    /// with `measured_from_ns`/`measured_to_ns`), application gaps included.
    pub stall_records: Vec<analyze::Stall>,
    /// The measured rounds' window on the trace's clock (ns).
    pub measured_from_ns: u64,
    pub measured_to_ns: u64,
    /// The packets the stall records come from (lab: the row's own capture), when captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<PacketCapture>,
    pub wall_s: f64,
    /// Application payload delivered per second, both directions added (bytes/s).
    pub throughput_bytes_per_s: f64,
    pub wire: Wire,
    /// CPU time of the two sides' threads over the measured rounds (lab only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuCost>,
    /// Kernel-side figures when known (lab: tcp_info; model: its own state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSides>,
    /// TcpExt counter deltas over the run, when the run owned its network namespace.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub netstat: std::collections::BTreeMap<String, i64>,
    /// One line for people.
    pub verdict: String,
    /// The comparable verdict (stall or not, and why).
    pub verdict_key: VerdictKey,
    /// The HdrHistogram behind `latency_us`, for the HTML report (not in the JSON).
    #[serde(skip)]
    pub latency_dist: Option<crate::LatencyDist>,
    /// The row's packets for the HTML report's ladders and graphs (lab: its own capture, kept
    /// with `LabOptions::keep_packets`); empty when not kept. Not in the JSON.
    #[serde(skip)]
    pub packets: Vec<trace::Event>,
    /// Every latency sample of the measured rounds (ns), for statistics over runs (`tcpstall
    /// advise` bootstraps its confidence intervals from them). Not in the JSON: the quantiles are.
    #[serde(skip)]
    pub samples_ns: Vec<u64>,
    /// The processes that ran the client (`a`) and the server (`b`) sockets, as every command
    /// names an owner (docs/json-schema.md "Owner"): the lab's own process for a local row
    /// (source `lab`); absent where not known (the far host's side of a remote row, the model).
    #[serde(default, skip_serializing_if = "crate::owner::FlowOwners::is_empty")]
    pub owners: crate::owner::FlowOwners,
}

/// Options a side asked for and what held when read back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// Strategies requested ("nodelay", "cork", ...).
    pub strategies: Vec<String>,
    /// TCP_NODELAY read back after setup.
    pub nodelay: Option<bool>,
    /// TCP_CORK read back after setup.
    pub cork: Option<bool>,
    /// TCP_QUICKACK read back with getsockopt: the socket's ACK mode at that moment (on = not
    /// in pingpong mode), not whether the option was set. Absent where not read (the model).
    pub quickack_state: Option<bool>,
    /// TCP_MAXSEG read back.
    pub mss: Option<u32>,
    /// TCP_CONGESTION read back.
    pub congestion: Option<String>,
    /// SO_BUSY_POLL read back (µs; 0 = off), lab only: the busy-poll strategy asks for 50 µs
    /// where permitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll_us: Option<u32>,
}

/// CPU time the two sides' threads used in the measured rounds (CLOCK_THREAD_CPUTIME_ID,
/// user + system), lab only: what a strategy such as busy-poll costs besides its latency.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    pub client_cpu_us: f64,
    pub server_cpu_us: f64,
    /// Both sides' CPU time per measured round (µs).
    pub cpu_us_per_round: f64,
    /// Both sides' CPU time as a share of the measured wall time (1.0 = one CPU kept busy).
    pub cpu_share_of_wall: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Wire {
    pub client: WireSide,
    pub server: WireSide,
}

/// The row's own packets (lab: AF_PACKET on the loopback the row ran on).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PacketCapture {
    /// Where the packets were seen.
    pub point: String,
    /// Frames read from the capture socket.
    pub frames: u64,
    /// Of those, TCP packets of the row's connection: the trace the classifier read.
    pub tcp_packets: u64,
    /// Packets the kernel dropped because the capture socket's queue was full
    /// (PACKET_STATISTICS `tp_drops`).
    pub kernel_drops: u64,
    /// What recording cost the row in user space: CPU time of the capture's reader thread over
    /// the row (µs; None when not read, or for the link's tap, which the forwarder feeds).
    #[serde(default)]
    pub reader_cpu_us: Option<f64>,
    /// Times the reader woke up to read the ring (blocks full or retired).
    #[serde(default)]
    pub reader_wakeups: u64,
    /// The row's latency, wall time and CPU come from a second, unrecorded run of the same
    /// rounds right after the recorded one (lab, CPU-bound rows): the record costs measurable
    /// time in rounds of microseconds. The stall records and packets are the recorded run's.
    #[serde(default)]
    pub latency_unrecorded: bool,
    /// With `--pin`: the CPUs the capture's reader and the kernel-evidence reader ran on, as
    /// each read its own back (sched_getaffinity(2)); None without `--pin`, or without that
    /// reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_cpus: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_reader_cpus: Option<Vec<u32>>,
    /// What each side put on the wire, counted from the packets (the whole connection).
    pub client: PacketSide,
    pub server: PacketSide,
    /// Kernel evidence added to the packets before the classifier read them (eBPF on TCP
    /// tracepoints); None when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelCounts>,
}

/// What the kernel reported about a row's connection (kernel evidence).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounts {
    /// Kernel events added to the trace (all kinds).
    pub events: u64,
    /// Writes (`tcp:tcp_sendmsg_locked`, one per call).
    pub writes: u64,
    /// Resends (`tcp:tcp_retransmit_skb`).
    pub resends: u64,
    /// Window states (`tcp:tcp_probe`, one per segment received).
    pub windows: u64,
    /// Records lost on the way (ring buffer full, unparsed, not kept); above 0 the trace may
    /// miss writes or resends.
    pub lost: u64,
}

/// One side's packets, as captured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PacketSide {
    pub packets: u64,
    pub data_segments: u64,
    pub pure_acks: u64,
    pub payload_bytes: u64,
    /// Bytes on the wire (original frame lengths).
    pub wire_bytes: u64,
}

/// What one side put on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WireSide {
    pub segs_out: u64,
    pub data_segs_out: u64,
    /// segs_out - data_segs_out: segments without data: pure ACKs plus SYN/FIN/RST.
    pub non_data_segs_out: u64,
    /// Payload bytes sent, retransmissions included (tcpi_bytes_sent).
    pub bytes_sent: u64,
    /// Estimated bytes on the wire: payload plus headers per segment.
    pub wire_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSides {
    pub client: TcpStats,
    pub server: TcpStats,
}

/// Selected tcp_info fields at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpStats {
    pub retransmits: u64,
    /// Segments this side's TCP received over the run (tcpi_segs_in delta): what got past
    /// any filter on the way in (a sender's count of the pure ACKs it processed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segs_in: Option<u64>,
    pub snd_cwnd: u32,
    pub rtt_us: u32,
    pub ato_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
}

impl RunResult {
    pub fn key(&self) -> VerdictKey {
        self.verdict_key
    }
}

/// What one run measured, as the lab (`lab::result`) and the model (`model::summary`) fill it;
/// [`RunResult::from`] derives the rest of the row in one place: throughput from the payload
/// both sides sent over the wall time, the threshold in µs, and the stall count, which is null
/// when the run had no packets to classify (not measured, which is not zero).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub strategy: String,
    pub variant: String,
    pub client: Applied,
    pub server: Applied,
    pub rounds: u64,
    pub latency_us: Latency,
    pub slow_samples: u64,
    pub slow_sample_threshold_ns: u64,
    /// The classifier read the run's packets: `stall_summary.stall_count` is measured.
    pub classified: bool,
    pub stall_summary: analyze::StallSummary,
    pub stall_records: Vec<analyze::Stall>,
    /// The measured rounds' window on the trace's clock (ns).
    pub window_ns: (u64, u64),
    pub capture: Option<PacketCapture>,
    pub wall_s: f64,
    pub wire: Wire,
    pub cpu: Option<CpuCost>,
    pub tcp: Option<TcpSides>,
    pub netstat: std::collections::BTreeMap<String, i64>,
    pub verdict: String,
    pub verdict_key: VerdictKey,
    pub latency_dist: Option<crate::LatencyDist>,
    pub packets: Vec<trace::Event>,
    pub samples_ns: Vec<u64>,
}

impl Wire {
    /// Application payload both sides sent per second of `wall_s` (0 without time).
    pub fn throughput_bytes_per_s(&self, wall_s: f64) -> f64 {
        let payload = self.client.bytes_sent + self.server.bytes_sent;
        if wall_s > 0.0 {
            payload as f64 / wall_s
        } else {
            0.0
        }
    }
}

impl From<Measured> for RunResult {
    fn from(m: Measured) -> RunResult {
        RunResult {
            strategy: m.strategy,
            variant: m.variant,
            client: m.client,
            server: m.server,
            rounds: m.rounds,
            latency_us: m.latency_us,
            slow_samples: m.slow_samples,
            slow_sample_threshold_us: m.slow_sample_threshold_ns as f64 / 1e3,
            stall_count: m.classified.then_some(m.stall_summary.stall_count),
            stall_summary: m.stall_summary,
            stall_records: m.stall_records,
            measured_from_ns: m.window_ns.0,
            measured_to_ns: m.window_ns.1,
            capture: m.capture,
            wall_s: m.wall_s,
            throughput_bytes_per_s: m.wire.throughput_bytes_per_s(m.wall_s),
            wire: m.wire,
            cpu: m.cpu,
            tcp: m.tcp,
            netstat: m.netstat,
            verdict: m.verdict,
            verdict_key: m.verdict_key,
            latency_dist: m.latency_dist,
            packets: m.packets,
            samples_ns: m.samples_ns,
            owners: crate::owner::FlowOwners::default(),
        }
    }
}

impl Report {
    /// Marks every row's verdict as not trustworthy, saying `why`: for what spoils the whole run
    /// rather than one row (an emulated link that dropped packets it was not asked to drop
    /// summarises the run, not each row).
    pub fn mark_untrusted(&mut self, why: &str) {
        for r in &mut self.results {
            r.verdict.push_str(&format!(" [not trustworthy: {why}]"));
        }
    }

    /// A report with no rows yet: `mode` "lab" (with the kernel it ran on) or "simulate" (with
    /// the model's profiles).
    pub fn new(mode: &str, scenario: &str, params: serde_json::Value, link: &str) -> Report {
        Report {
            tool: "tcpstall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            schema_version: SCHEMA_VERSION,
            kernel: None,
            profile: None,
            mode: mode.into(),
            scenario: scenario.into(),
            params,
            link: link.into(),
            results: Vec::new(),
            errors: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measured run: 10 rounds of `default`, 300 bytes one way and 100 the other in 2 s.
    fn measured() -> Measured {
        let side = |b| WireSide { bytes_sent: b, ..WireSide::default() };
        Measured {
            strategy: "default".into(),
            variant: String::new(),
            client: Applied::default(),
            server: Applied::default(),
            rounds: 10,
            latency_us: Latency::default(),
            slow_samples: 1,
            slow_sample_threshold_ns: 10_500_000,
            classified: false,
            stall_summary: analyze::StallSummary { stall_count: 3, ..Default::default() },
            stall_records: Vec::new(),
            window_ns: (1, 2),
            capture: None,
            wall_s: 2.0,
            wire: Wire { client: side(300), server: side(100) },
            cpu: None,
            tcp: None,
            netstat: Default::default(),
            verdict: "v".into(),
            verdict_key: VerdictKey { stalls: false, cause: None },
            latency_dist: None,
            packets: Vec::new(),
            samples_ns: Vec::new(),
        }
    }

    /// Throughput is both sides' payload over the wall time; the stall count is null when
    /// nothing was classified and the summary's count when something was.
    #[test]
    fn a_measured_run_becomes_its_row() {
        let m = measured();
        let row = RunResult::from(m.clone());
        assert_eq!(row.throughput_bytes_per_s, 200.0);
        assert_eq!(row.slow_sample_threshold_us, 10_500.0);
        assert_eq!((row.stall_count, row.measured_from_ns, row.measured_to_ns), (None, 1, 2));
        let row = RunResult::from(Measured { classified: true, wall_s: 0.0, ..m });
        assert_eq!((row.stall_count, row.throughput_bytes_per_s), (Some(3), 0.0));
    }

    /// What spoils the whole run marks every row, after its verdict (lab: an emulated link that
    /// dropped packets it was not asked to drop, link::LinkReport::unasked_drops_warning).
    #[test]
    fn an_untrusted_run_marks_every_row() {
        let mut r = Report::new("lab", "chunked", serde_json::Value::Null, "loopback");
        let m = Measured { verdict: "no stalls".into(), ..measured() };
        r.results = vec![RunResult::from(m.clone()), RunResult::from(m)];
        r.mark_untrusted("the link dropped");
        for row in &r.results {
            assert_eq!(row.verdict, "no stalls [not trustworthy: the link dropped]");
        }
    }
}
