//! Deterministic model of TCP stacks producing traces (pure).
//!
//! Two endpoints (A = client, B = server) run a scenario's Step programs through the exact
//! socket-operation plans of their strategies (`scenario::SideOpts`), each endpoint following a
//! stack [`Profile`] (Nagle variant, delayed-ACK machinery, cork, probe timer, cwnd), over a
//! link with delay, rate and loss. Time and randomness are inputs (`SimConfig::seed`), nothing
//! reads a clock or the OS, so the same input gives the same output to the nanosecond.
//!
//! Output is the shared trace ([`trace::Event`]) and result schema ([`report::RunResult`]), with
//! each stall's cause taken from ground truth: the model knows which timer released which held
//! data.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
mod app;
pub mod fingerprint;
pub mod pcap;
pub mod profile;
pub mod request;
mod sim;
mod sim_link;
pub mod story;
mod summary;
mod tcp;

pub use profile::{AckPolicy, NagleRule, Profile};
pub use request::{CallCost, LinkRequest, LoadProfileError, ProfileRef, ProfileSpec, RequestError, RunRequest};
pub use sim::TRACE_LIMIT;
pub use summary::{classify, report, report_kept, run_result, Keep, RunSpec};
pub use tcp::Counters;

use scenario::{LinkSpec, StrategyPair, Workload};
use trace::{Cause, Endpoint, Event};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("unknown profile '{name}' (known: {known}, or all)")]
    UnknownProfile { name: String, known: String },
    #[error("profile {file}: {msg}")]
    Profile { file: String, msg: String },
    #[error("the model got stuck at {at_ms:.3} ms: {why}; client: {client}; server: {server}")]
    Stuck { at_ms: f64, why: String, client: String, server: String },
}

/// Everything a run depends on besides the workload and strategies.
#[derive(Debug, Clone)]
pub struct SimConfig<'a> {
    pub client: &'a Profile,
    pub server: &'a Profile,
    pub link: LinkSpec,
    /// Seed of the link's loss/jitter RNG.
    pub seed: u64,
    /// Force the sender MSS (e.g. 1460 or 1448 on an MTU 1500 link).
    pub mss: Option<u32>,
    /// Force the TCP timestamps option on or off for both sides (default: the profiles').
    pub timestamps: Option<bool>,
    /// Keep the event-by-event trace (costs memory; off for benchmarks).
    pub record_trace: bool,
    /// Classify the segments as the run puts them on the wire (`analyze::FlowAnalyzer`, fed
    /// one event at a time: memory independent of the rounds), into `Outcome::stalls`.
    pub classify: Option<analyze::Config>,
    /// Keep every sample (`Outcome::samples`) and every timer release (`Outcome::releases`).
    /// Off, a run keeps only `Outcome::sample_stats` and the releases of the round in progress:
    /// memory flat in rounds.
    pub keep_samples: bool,
    /// Give up (with an error) past this much simulated time.
    pub max_time_ns: u64,
    /// Give up past this many events.
    pub max_events: u64,
    /// Time an application call (send, recv, setsockopt) takes before the next call of the
    /// same step starts: on loopback the application is about as fast as the network.
    pub call_ns: u64,
}

impl<'a> SimConfig<'a> {
    pub fn new(client: &'a Profile, server: &'a Profile, link: LinkSpec) -> Self {
        SimConfig {
            client,
            server,
            link,
            seed: 0,
            mss: None,
            timestamps: None,
            record_trace: false,
            classify: None,
            keep_samples: true,
            max_time_ns: 24 * 3600 * 1_000_000_000,
            max_events: 2_000_000_000,
            call_ns: 0,
        }
    }
}

/// The link tcpstall's lab uses by default: loopback (MTU 65536, a few microseconds each way).
/// The rate stands for the copy cost of the loopback path so that bulk transfers take time.
pub fn loopback_link() -> LinkSpec {
    LinkSpec {
        delay_up_ns: 5_000,
        delay_down_ns: 5_000,
        rate_bps: Some(40_000_000_000),
        mtu: 65_536,
        ..Default::default()
    }
}

/// A held-data release caused by a timer: the ground truth behind a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// When the held data left.
    pub t: u64,
    /// Since when it was held.
    pub since: u64,
    pub cause: Cause,
    /// The endpoint whose data was held.
    pub side: Endpoint,
}

/// One latency sample (a client round, or a client recv).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundSample {
    pub start: u64,
    pub end: u64,
    /// end - start minus sleeps.
    pub latency: u64,
    /// The sample's events: `Outcome::trace[trace.0..trace.1]` (empty without a trace).
    pub trace: (usize, usize),
}

/// The samples of a run, summarised as they come: what the report needs of them when they are
/// not kept.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleStats {
    pub count: u64,
    /// Latencies (ns), the lab's histogram (1 ns to 1 h, 3 significant digits).
    pub hist: hdrhistogram::Histogram<u64>,
    /// The smallest latency once the model's timer waits in its round are taken out (the no-stall
    /// baseline of slow samples).
    pub min_unwaited: Option<u64>,
}

impl Default for SampleStats {
    fn default() -> Self {
        SampleStats { count: 0, hist: report::histogram_ns(), min_unwaited: None }
    }
}

/// One endpoint's state at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SideEnd {
    pub counters: Counters,
    pub cwnd: u32,
    pub srtt_ns: u64,
    pub ato_ns: u64,
    pub mss: u32,
    pub rcv_mss: u32,
    pub nodelay: bool,
    pub cork: bool,
    pub bytes_read: u64,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// When the run ended: both applications done, epilogue included.
    pub end_ns: u64,
    /// Start of the measured part: the client's first measured round, after its prologue
    /// (bulk-ack's messages sent ahead) and warm-up rounds.
    pub measured_from: u64,
    /// End of the measured part: the client's last measured round is over (for a stream, the
    /// end of the run). What comes later is the epilogue (bulk-ack at depth D drains its D - 1
    /// outstanding messages), which the lab does not time or count either.
    pub measured_to: u64,
    /// Warm-up rounds run before `measured_from`.
    pub warmup_rounds: u64,
    /// Every sample (empty unless `SimConfig::keep_samples`).
    pub samples: Vec<RoundSample>,
    /// Every sample, summarised (always).
    pub sample_stats: SampleStats,
    pub releases: Vec<Release>,
    /// Empty unless `SimConfig::record_trace`.
    pub trace: Vec<Event>,
    /// The classifier's stall records, classified as the run went (`SimConfig::classify`).
    pub stalls: Option<Vec<analyze::Stall>>,
    pub sides: [SideEnd; 2],
    pub writes: u64,
    pub dropped: u64,
    pub events: u64,
    pub stream: bool,
    /// Samples are client reads (Sample::ClientRecv) rather than rounds.
    pub sample_reads: bool,
}

impl Outcome {
    /// Segments put on the wire by both sides in the measured part.
    pub fn segments(&self) -> u64 {
        self.sides[0].counters.segs_out + self.sides[1].counters.segs_out
    }
}

/// Run one workload with one strategy pair.
pub fn simulate(workload: &Workload, pair: &StrategyPair, cfg: &SimConfig) -> Result<Outcome, ModelError> {
    let mut sim = sim::Sim::new(workload, pair, cfg);
    sim.setup();
    sim.run()
}

#[cfg(test)]
mod rules_tests;
mod script;
