//! A row of `connection = "new"`: the workload ran once per connection, each connection its own
//! single-round run; this folds those runs into one row (pure). Counts and CPU are summed,
//! latency recomputed from every sample, the stall records of each connection put on one
//! timeline (each connection's times shifted past the previous one's end) and the verdict made
//! again by the classifier's verdict rule over all of them (`analyze::summary::verdict`).

use analyze::{verdict, Window};

use crate::{CpuCost, Latency, LatencyDist, PacketSide, RunResult, WireSide};

fn add_wire(a: &mut WireSide, b: &WireSide) {
    a.segs_out += b.segs_out;
    a.data_segs_out += b.data_segs_out;
    a.non_data_segs_out += b.non_data_segs_out;
    a.bytes_sent += b.bytes_sent;
    a.wire_bytes += b.wire_bytes;
}

fn add_packets(a: &mut PacketSide, b: &PacketSide) {
    a.packets += b.packets;
    a.data_segments += b.data_segments;
    a.pure_acks += b.pure_acks;
    a.payload_bytes += b.payload_bytes;
    a.wire_bytes += b.wire_bytes;
}

/// One row from the runs of one connection each (in order). None when there are none. On the
/// merged timeline 1 ms separates two connections.
pub fn merge_connections(runs: &[RunResult]) -> Option<RunResult> {
    const GAP_NS: u64 = 1_000_000;
    let first = runs.first()?;
    let mut row = first.clone();
    row.rounds = 0;
    row.samples_ns.clear();
    row.stall_records.clear();
    row.slow_samples = 0;
    row.wall_s = 0.0;
    row.wire = Default::default();
    row.netstat.clear();
    // The first connection's packets stay (the report's ladders and graphs of it); its records
    // keep their times, each later connection's are moved past the previous one's end.
    let mut offset = first.measured_from_ns;
    let (mut cpu_c, mut cpu_s, mut have_cpu) = (0.0, 0.0, true);
    for r in runs {
        row.rounds += r.rounds;
        row.samples_ns.extend_from_slice(&r.samples_ns);
        row.slow_samples += r.slow_samples;
        row.wall_s += r.wall_s;
        add_wire(&mut row.wire.client, &r.wire.client);
        add_wire(&mut row.wire.server, &r.wire.server);
        for (k, v) in &r.netstat {
            *row.netstat.entry(k.clone()).or_default() += v;
        }
        // Only the measured rounds' records: each connection's prologue is its handshake.
        let w = Window { from_ns: r.measured_from_ns, to_ns: r.measured_to_ns, warmed_up: false };
        let shift = |t: u64| (t + offset).saturating_sub(r.measured_from_ns);
        for s in r.stall_records.iter().filter(|s| w.contains(s)) {
            let mut s = s.clone();
            s.start = trace::Instant(shift(s.start.0));
            for e in &mut s.evidence {
                e.t = trace::Instant(shift(e.t.0));
            }
            row.stall_records.push(s);
        }
        offset += r.measured_to_ns.saturating_sub(r.measured_from_ns) + GAP_NS;
        match &r.cpu {
            Some(c) => {
                cpu_c += c.client_cpu_us;
                cpu_s += c.server_cpu_us;
            }
            None => have_cpu = false,
        }
    }
    add_captures(&mut row, &runs[1..]);
    row.measured_from_ns = first.measured_from_ns;
    row.measured_to_ns = offset.saturating_sub(GAP_NS);
    derive_rates(&mut row, have_cpu.then_some((cpu_c, cpu_s)));
    let w = Window { from_ns: row.measured_from_ns, to_ns: row.measured_to_ns, warmed_up: true };
    let (summary, key, text) = verdict(&row.stall_records, w, runs.len() as u64, "new connections");
    row.stall_count = runs.iter().all(|r| r.stall_count.is_some()).then_some(summary.stall_count);
    row.stall_summary = summary;
    row.verdict_key = key;
    row.verdict = text;
    Some(row)
}

/// The first connection's capture is the row's already; add the others'.
fn add_captures(row: &mut RunResult, later: &[RunResult]) {
    for r in later {
        if let (Some(a), Some(b)) = (row.capture.as_mut(), r.capture.as_ref()) {
            a.frames += b.frames;
            a.tcp_packets += b.tcp_packets;
            a.kernel_drops += b.kernel_drops;
            a.reader_cpu_us = a.reader_cpu_us.zip(b.reader_cpu_us).map(|(x, y)| x + y);
            a.reader_wakeups += b.reader_wakeups;
            a.latency_unrecorded |= b.latency_unrecorded;
            add_packets(&mut a.client, &b.client);
            add_packets(&mut a.server, &b.server);
        }
    }
}

/// Latency from the merged samples, throughput and CPU per round from the merged sums (`cpu`:
/// client and server CPU in us, None when a connection had none).
fn derive_rates(row: &mut RunResult, cpu: Option<(f64, f64)>) {
    row.latency_us = Latency::of_samples_ns(&row.samples_ns);
    row.latency_dist = Some(LatencyDist::from_samples_ns(row.samples_ns.iter().copied()));
    let payload = row.wire.client.bytes_sent + row.wire.server.bytes_sent;
    row.throughput_bytes_per_s = if row.wall_s > 0.0 { payload as f64 / row.wall_s } else { 0.0 };
    let (rounds, wall_ns) = (row.rounds, row.wall_s * 1e9);
    row.cpu = cpu.map(|(cpu_c, cpu_s)| CpuCost {
        client_cpu_us: cpu_c,
        server_cpu_us: cpu_s,
        cpu_us_per_round: if rounds > 0 { (cpu_c + cpu_s) / rounds as f64 } else { 0.0 },
        cpu_share_of_wall: if wall_ns > 0.0 { (cpu_c + cpu_s) * 1e3 / wall_ns } else { 0.0 },
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use analyze::{EvidenceItem, Stall};
    use trace::{Cause, Duration, Endpoint, Evidence, Instant};

    fn run(stall_ms: Option<u64>, sample_ns: u64) -> RunResult {
        let mut r: RunResult = serde_json::from_value(serde_json::json!({
            "strategy": "default", "client": {"strategies": []}, "server": {"strategies": []},
            "rounds": 1, "latency_us": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0, "mean": 0.0},
            "slow_samples": 0, "slow_sample_threshold_us": 10000.0, "stall_count": 0,
            "stall_summary": {"stall_count": 0, "application_gap_count": 0, "by_cause": []},
            "stall_records": [], "measured_from_ns": 5_000_000u64, "measured_to_ns": 60_000_000u64,
            "wall_s": 0.05, "throughput_bytes_per_s": 0.0,
            "wire": {"client": {"segs_out": 3, "data_segs_out": 2, "non_data_segs_out": 1, "bytes_sent": 100, "wire_bytes": 300},
                     "server": {"segs_out": 2, "data_segs_out": 1, "non_data_segs_out": 1, "bytes_sent": 50, "wire_bytes": 180}},
            "verdict": "", "verdict_key": {"stalls": false, "cause": null}
        }))
        .expect("row");
        r.samples_ns = vec![sample_ns];
        if let Some(ms) = stall_ms {
            r.stall_records.push(Stall {
                start: Instant(10_000_000),
                length: Duration::from_millis(ms),
                waited: Endpoint::B,
                held: Endpoint::A,
                bytes_held: 24,
                cause: Cause::NagleDelayedAck,
                confidence: 0.95,
                evidence: vec![EvidenceItem { t: Instant(10_000_000), source: Evidence::Frame(4), what: "x".into() }],
                ack_delay: None,
                detail: String::new(),
                kind: analyze::RecordKind::Stall,
                alternatives: Vec::new(),
                settle: None,
            });
        }
        r
    }

    /// Counts add up, latency comes from every sample, each connection's records follow the
    /// previous connection's on one timeline, and the verdict is made again over all of them.
    #[test]
    fn connections_fold_into_one_row() {
        let runs = [run(Some(40), 44_000_000), run(None, 50_000), run(Some(40), 44_000_000)];
        let m = merge_connections(&runs).unwrap();
        assert_eq!(m.rounds, 3);
        assert_eq!(m.wire.client.segs_out, 9);
        assert_eq!(m.wire.server.wire_bytes, 540);
        assert_eq!(m.samples_ns.len(), 3);
        assert!(m.latency_us.max >= 43_000.0 && m.latency_us.p50 >= 43_000.0);
        assert_eq!(m.stall_records.len(), 2);
        assert_eq!(m.stall_records[0].start.0, 10_000_000, "the first connection keeps its clock");
        // Connection 3 starts two windows (55 ms each) and two 1 ms gaps later.
        assert_eq!(m.stall_records[1].start.0, 10_000_000 + 2 * 56_000_000);
        assert!(m.stall_records.iter().all(|s| (m.measured_from_ns..=m.measured_to_ns).contains(&s.start.0)));
        assert_eq!(m.stall_count, Some(2));
        assert!(m.verdict.contains("new connections"), "{}", m.verdict);
        assert!(merge_connections(&[]).is_none());
    }
}
