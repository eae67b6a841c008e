//! From a model run to the shared result schema: latency percentiles, slow samples (10 ms
//! above the no-stall baseline), wire cost per side, and the stall records and verdict from the
//! one classifier (`analyze`) reading the packets the model put on the wire. The model's own
//! release reasons are not used for the verdict: they are the oracle the classifier is tested
//! against (tests/oracle.rs).

use report::{Applied, Latency, Measured, Report, RunResult, TcpSides, TcpStats, Wire, WireSide};
use scenario::{Scenario, StrategyPair, Workload};
use std::collections::BTreeMap;
use trace::VerdictKey;

use crate::{simulate, ModelError, Outcome, Profile, SideEnd, SimConfig};

/// One simulate invocation: which profiles, which link.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// (client, server) profile pairs; one set of rows each.
    pub profiles: Vec<(Profile, Profile)>,
    pub link: scenario::LinkSpec,
    /// "loopback" or the link's spec, for the report.
    pub link_label: String,
    pub seed: u64,
    pub mss: Option<u32>,
    pub timestamps: Option<bool>,
    /// Per-call application cost (SimConfig::call_ns).
    pub call_ns: u64,
}

fn wire_side(s: &SideEnd) -> WireSide {
    WireSide {
        segs_out: s.counters.segs_out,
        data_segs_out: s.counters.data_segs_out,
        non_data_segs_out: s.counters.segs_out - s.counters.data_segs_out,
        bytes_sent: s.counters.bytes_sent,
        wire_bytes: s.counters.wire_bytes,
    }
}

fn applied(opts: &scenario::SideOpts, p: &Profile, s: &SideEnd) -> Applied {
    Applied {
        strategies: opts.opts().iter().map(|o| o.as_str().to_string()).collect(),
        nodelay: Some(s.nodelay),
        cork: p.sender.cork.then_some(s.cork),
        // Not read back in the model (the lab's getsockopt state has no model counterpart).
        quickack_state: None,
        mss: Some(s.mss),
        congestion: Some("reno (model)".into()),
        busy_poll_us: None,
    }
}

/// Turn a run into a result row.
pub fn run_result(out: &Outcome, pair: &StrategyPair, variant: &str, client: &Profile, server: &Profile) -> RunResult {
    // Like the lab: the measured rounds' wall time (prologue, warm-up and epilogue excluded),
    // and the payload sent in them.
    let wall_s = out.measured_to.saturating_sub(out.measured_from) as f64 / 1e9;
    let wire = Wire { client: wire_side(&out.sides[0]), server: wire_side(&out.sides[1]) };
    let tcp = TcpSides { client: tcp_stats(&out.sides[0]), server: tcp_stats(&out.sides[1]) };
    let mut netstat = BTreeMap::new();
    let both = |f: fn(&SideEnd) -> u64| f(&out.sides[0]) as i64 + f(&out.sides[1]) as i64;
    netstat.insert("DelayedACKs".to_string(), both(|s| s.counters.delayed_acks));
    netstat.insert("TCPOrigDataSent".to_string(), both(|s| s.counters.data_segs_out - s.counters.retransmits));
    netstat.insert("TcpOutSegs".to_string(), both(|s| s.counters.segs_out));
    netstat.insert("TcpRetransSegs".to_string(), both(|s| s.counters.retransmits));
    netstat.insert("TCPWinProbe".to_string(), both(|s| s.counters.probes));

    let records = classify(out, client, server);
    let window =
        analyze::Window { from_ns: out.measured_from, to_ns: out.measured_to, warmed_up: out.warmup_rounds > 0 };
    let unit = if out.sample_reads { "reads" } else { "rounds" };
    let (summary, key, text) = analyze::verdict(&records, window, out.sample_stats.count, unit);
    let (latency, slow_samples, threshold_ns, key, verdict) = if out.stream {
        let c = &out.sides[0].counters;
        let s = &out.sides[1].counters;
        let acks = s.segs_out - s.data_segs_out;
        let ratio = if acks > 0 { c.data_segs_out as f64 / acks as f64 } else { 0.0 };
        let verdict = format!(
            "stream: {:.1} MB/s, {} data segments, {} pure ACKs (1 ACK per {:.1} segments)",
            wire.throughput_bytes_per_s(wall_s) / 1e6,
            c.data_segs_out,
            acks,
            ratio
        );
        (Latency::default(), 0, 0, VerdictKey { stalls: false, cause: None }, verdict)
    } else {
        let (latency, slow, threshold) = latency_and_slow_samples(out);
        (latency, slow, threshold, key, text)
    };
    RunResult::from(Measured {
        strategy: pair.label.clone(),
        variant: variant.to_string(),
        client: applied(&pair.client, client, &out.sides[0]),
        server: applied(&pair.server, server, &out.sides[1]),
        rounds: if out.stream { out.writes } else { out.sample_stats.count },
        latency_us: latency,
        slow_samples,
        slow_sample_threshold_ns: threshold_ns,
        classified: true,
        stall_summary: summary,
        stall_records: records,
        window_ns: (out.measured_from, out.measured_to),
        capture: None,
        wall_s,
        wire,
        cpu: None,
        tcp: Some(tcp),
        netstat,
        verdict,
        verdict_key: key,
        // The samples behind latency_us, through the lab's HdrHistogram (the HTML report's CDF).
        latency_dist: (!out.stream).then(|| {
            if out.samples.is_empty() {
                report::LatencyDist::from_histogram_ns(&out.sample_stats.hist)
            } else {
                report::LatencyDist::from_samples_ns(out.samples.iter().map(|s| s.latency))
            }
        }),
        // simulate hands the report its Outcome::trace directly.
        packets: Vec::new(),
        samples_ns: if out.stream { Vec::new() } else { out.samples.iter().map(|s| s.latency).collect() },
    })
}

fn tcp_stats(s: &SideEnd) -> TcpStats {
    TcpStats {
        retransmits: s.counters.retransmits,
        segs_in: None,
        snd_cwnd: s.cwnd,
        rtt_us: (s.srtt_ns / 1000) as u32,
        ato_us: (s.ato_ns / 1000) as u32,
        snd_mss: s.mss,
        rcv_mss: s.rcv_mss,
    }
}

/// The classifier on the packets the model put on the wire (the trace holds them when
/// `SimConfig::record_trace`): the same stall records a capture of this run would get. The
/// timers match the profiles' HZ (the coarser of the two sides).
pub fn classify(out: &Outcome, client: &Profile, server: &Profile) -> Vec<analyze::Stall> {
    if let Some(stalls) = &out.stalls {
        return stalls.clone();
    }
    if out.trace.is_empty() {
        return Vec::new();
    }
    let cfg = classifier_config(client, server);
    let segments = out.trace.iter().filter(|e| matches!(e.kind, trace::EventKind::Segment(_))).cloned();
    analyze::analyze_events(segments, cfg).flows.into_iter().flat_map(|f| f.stalls).collect()
}

/// The classifier's configuration for a run between these profiles: their HZ (the coarser).
pub(crate) fn classifier_config(client: &Profile, server: &Profile) -> analyze::Config {
    let hz = u64::from(client.timer_hz.min(server.timer_hz).max(1));
    analyze::Config { min_gap: analyze::DEFAULT_MIN_GAP, timers: analyze::Timers::linux(hz) }
}

/// How long the model's timers held sample `s`: the longest timer release inside it (pure;
/// `releases` in time order).
pub(crate) fn waited(releases: &[crate::Release], s: &crate::RoundSample) -> u64 {
    let lo = releases.partition_point(|r| r.t < s.start);
    releases[lo..].iter().take_while(|r| r.t <= s.end).map(|r| r.t - r.since.max(s.start)).max().unwrap_or(0)
}

/// Latency percentiles and slow samples (more than the stall margin,
/// [`analyze::DEFAULT_MIN_GAP`] as in the lab, above the no-stall baseline: the smallest sample
/// once the timer waits the model knows about are taken out). From every sample when the run
/// kept them (`Latency::of_samples_ns`); else from `Outcome::sample_stats` (the lab's
/// HdrHistogram, 3 significant digits: `Latency::of_histogram_ns`).
fn latency_and_slow_samples(out: &Outcome) -> (Latency, u64, u64) {
    if (out.samples.len() as u64) < out.sample_stats.count {
        let st = &out.sample_stats;
        let threshold = st.min_unwaited.unwrap_or(0) + analyze::DEFAULT_MIN_GAP.0;
        let slow =
            st.hist.iter_recorded().filter(|v| v.value_iterated_to() > threshold).map(|v| v.count_at_value()).sum();
        return (Latency::of_histogram_ns(&st.hist), slow, threshold);
    }
    let samples: Vec<u64> = out.samples.iter().map(|s| s.latency).collect();
    let latency = Latency::of_samples_ns(&samples);
    let baseline = out.samples.iter().map(|s| s.latency.saturating_sub(waited(&out.releases, s))).min().unwrap_or(0);
    let threshold = baseline + analyze::DEFAULT_MIN_GAP.0;
    let slow = out.samples.iter().filter(|s| s.latency > threshold).count() as u64;
    (latency, slow, threshold)
}

/// Run a scenario's strategy pairs (and sweep variants) for every profile pair: one report.
/// Rows are labelled with their profiles in `variant` when more than one pair runs. Errors of
/// single rows are collected in `Report::errors`, the other rows still count.
pub fn report(
    scenario: &Scenario,
    pairs: &[StrategyPair],
    spec: &RunSpec,
    record_trace: bool,
) -> (Report, Vec<Outcome>) {
    report_kept(scenario, pairs, spec, Keep { trace: record_trace, samples: true })
}

/// What [`report_kept`] keeps of each run beyond the report's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The event-by-event trace, and the outcome's per-round samples (`--trace`, `--pcap`,
    /// `--report`).
    pub trace: bool,
    /// Every latency sample in the rows (`RunResult::samples_ns`: advise's bootstrap, the HTML
    /// report's CDF). Off, memory stays flat in rounds.
    pub samples: bool,
}

/// Like [`report()`], keeping only what `keep` asks for: without the trace and the samples a
/// run's memory does not grow with its rounds (the classifier reads the segments as the model
/// sends them), except for one round's latency (8 bytes) while its row is summarised.
pub fn report_kept(scenario: &Scenario, pairs: &[StrategyPair], spec: &RunSpec, keep: Keep) -> (Report, Vec<Outcome>) {
    let profile = spec.profiles.iter().map(|(c, s)| profile_label(c, s)).collect::<Vec<_>>().join(",");
    let mut report = Report::new("simulate", &scenario.name, scenario.workload.params_json(), &spec.link_label);
    report.profile = Some(profile);
    let mut outcomes = Vec::new();
    let many = spec.profiles.len() > 1;
    for (client, server) in &spec.profiles {
        let pname = profile_label(client, server);
        for (variant, workload) in scenario.workload.variants() {
            let cfg = sim_config(client, server, spec, &workload, keep);
            let label = match (many, variant.is_empty()) {
                (true, true) => format!("profile={pname}"),
                (true, false) => format!("profile={pname} {variant}"),
                (false, _) => variant.clone(),
            };
            for pair in pairs {
                let row = Row { workload: &workload, pair, label: &label, profiles: (client, server), keep };
                let (done, error) = row.run(&cfg);
                if let Some((r, out)) = done {
                    report.results.push(r);
                    outcomes.push(out);
                }
                report.errors.extend(error);
            }
        }
    }
    (report, outcomes)
}

/// The model's configuration for one profile pair and workload.
fn sim_config<'a>(
    client: &'a Profile,
    server: &'a Profile,
    spec: &RunSpec,
    workload: &Workload,
    keep: Keep,
) -> SimConfig<'a> {
    let mut cfg = SimConfig::new(client, server, spec.link.clone());
    cfg.seed = spec.seed;
    cfg.mss = spec.mss;
    cfg.timestamps = spec.timestamps;
    // The classifier reads the packets as the run sends them (memory flat in rounds); a stream
    // has no stall verdict and millions of segments. The trace is kept only for the caller's
    // --trace/--pcap/--report.
    cfg.record_trace = keep.trace;
    cfg.keep_samples = keep.trace || keep.samples;
    if !matches!(workload, Workload::Stream(_)) {
        cfg.classify = Some(classifier_config(client, server));
    }
    cfg.call_ns = spec.call_ns;
    cfg
}

/// One row of the report: one strategy pair on one workload variant and profile pair.
struct Row<'a> {
    workload: &'a Workload,
    pair: &'a StrategyPair,
    label: &'a str,
    profiles: (&'a Profile, &'a Profile),
    keep: Keep,
}

impl Row<'_> {
    /// The row and the outcome kept for it, and the error line that stopped it: with
    /// connection = "new" the connections before an error still make a row.
    fn run(&self, cfg: &SimConfig<'_>) -> (Option<(RunResult, Outcome)>, Option<String>) {
        let Some((one, n)) = self.workload.per_connection() else {
            return match self.one(self.workload, cfg) {
                Ok(done) => (Some(done), None),
                Err(e) => (None, Some(format!("{} {}: {e}", self.pair.label, self.label))),
            };
        };
        // connection = "new": one single-round connection per round (seeded apart, so a lossy
        // link differs between them), folded into one row; the outcome kept is the first
        // connection's (its trace for --trace/--pcap/--report).
        let mut rows = Vec::new();
        let mut first = None;
        let mut error = None;
        for k in 0..n {
            let c = SimConfig { seed: cfg.seed.wrapping_add(u64::from(k)), ..cfg.clone() };
            match self.one(&one, &c) {
                Ok((row, out)) => {
                    rows.push(row);
                    first.get_or_insert(out);
                }
                Err(e) => {
                    error = Some(format!("{} {} (connection {}): {e}", self.pair.label, self.label, k + 1));
                    break;
                }
            }
        }
        let done = match (report::merge_connections(&rows), first) {
            (Some(row), Some(out)) => Some((row, out)),
            _ => None,
        };
        (done, error)
    }

    /// One connection's run and row, slimmed to what `keep` asks for.
    fn one(&self, w: &Workload, cfg: &SimConfig<'_>) -> Result<(RunResult, Outcome), ModelError> {
        let (client, server) = self.profiles;
        let mut out = run_one(w, self.pair, cfg)?;
        let mut row = run_result(&out, self.pair, self.label, client, server);
        if !self.keep.samples {
            row.samples_ns = Vec::new();
        }
        if !self.keep.trace {
            out.samples = Vec::new();
        }
        Ok((row, out))
    }
}

fn run_one(w: &Workload, pair: &StrategyPair, cfg: &SimConfig) -> Result<Outcome, ModelError> {
    simulate(w, pair, cfg)
}

/// "linux", or "linux:macos" when the client and server profiles differ.
pub(crate) fn profile_label(client: &Profile, server: &Profile) -> String {
    if client.name == server.name {
        client.name.clone()
    } else {
        format!("{}:{}", client.name, server.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counters, Release, RoundSample};
    use trace::{Cause, Endpoint};

    fn side() -> SideEnd {
        SideEnd {
            counters: Counters::default(),
            cwnd: 10,
            srtt_ns: 0,
            ato_ns: 0,
            mss: 1448,
            rcv_mss: 536,
            nodelay: false,
            cork: false,
            bytes_read: 0,
        }
    }

    fn outcome(lat_ms: &[f64], releases: Vec<Release>) -> Outcome {
        let mut t = 0;
        let samples = lat_ms
            .iter()
            .map(|&l| {
                let ns = (l * 1e6) as u64;
                let s = RoundSample { start: t, end: t + ns, latency: ns, trace: (0, 0) };
                t += ns + 1_000_000;
                s
            })
            .collect::<Vec<_>>();
        let sample_stats = crate::SampleStats { count: samples.len() as u64, ..Default::default() };
        Outcome {
            end_ns: t,
            measured_from: 0,
            measured_to: t,
            warmup_rounds: 0,
            samples,
            sample_stats,
            releases,
            trace: Vec::new(),
            stalls: None,
            sides: [side(), side()],
            writes: 0,
            dropped: 0,
            events: 0,
            stream: false,
            sample_reads: false,
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).rev().map(|i| i * 1000).collect();
        let l = Latency::of_samples_ns(&v);
        assert_eq!((l.p50, l.p99, l.max), (50.0, 99.0, 100.0));
        assert_eq!(Latency::of_samples_ns(&[]), Latency::default());
    }

    /// Slow samples are samples over the baseline + 10 ms (the 30 ms one has no timer wait
    /// inside and still counts as slow: slow is not a stall).
    #[test]
    fn slow_samples_are_over_the_baseline_plus_the_margin() {
        let start2 = 2_000_000;
        let rel = Release {
            t: start2 + 40_500_000,
            since: start2 + 500_000,
            cause: Cause::NagleDelayedAck,
            side: Endpoint::A,
        };
        let out = outcome(&[1.0, 41.0, 30.0], vec![rel]);
        let (_, slow, threshold) = latency_and_slow_samples(&out);
        assert_eq!((slow, threshold), (2, 11_000_000));
    }
}
