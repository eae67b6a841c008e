//! From what the two sides measured to one `RunResult`: wire cost from tcp_info deltas, latency
//! percentiles, stalls and the verdict.

use report::{Latency, Measured, PacketCapture, PacketSide, RunResult, TcpSides, TcpStats, Wire, WireSide};
use scenario::{Program, StrategyPair};
use sys::tcpinfo::TcpInfo;

use super::{ClientOut, PacketsOut, SideOut};
use crate::capture;
use crate::capture::rowstream::{RowStream, StreamCfg};
use crate::capture::KernelRecords;
use crate::measure;
use crate::verdict::{self, Corroboration, Records};
use crate::{LabOptions, Placement};

fn sub32(a: Option<u32>, b: Option<u32>) -> u64 {
    u64::from(a.unwrap_or(0).wrapping_sub(b.unwrap_or(0)))
}

fn wire_side(before: &TcpInfo, after: &TcpInfo, ipv6: bool) -> WireSide {
    let segs_out = sub32(after.segs_out, before.segs_out);
    let data_segs_out = sub32(after.data_segs_out, before.data_segs_out);
    let bytes_sent = after.bytes_sent.unwrap_or(0).saturating_sub(before.bytes_sent.unwrap_or(0));
    WireSide {
        segs_out,
        data_segs_out,
        non_data_segs_out: segs_out.saturating_sub(data_segs_out),
        bytes_sent,
        wire_bytes: bytes_sent + segs_out * measure::header_bytes(ipv6, after.timestamps()),
    }
}

fn stats(before: &TcpInfo, after: &TcpInfo) -> TcpStats {
    TcpStats {
        retransmits: u64::from(after.total_retrans.saturating_sub(before.total_retrans)),
        segs_in: after.segs_in.is_some().then(|| sub32(after.segs_in, before.segs_in)),
        snd_cwnd: after.snd_cwnd,
        rtt_us: after.rtt,
        ato_us: after.ato,
        snd_mss: after.snd_mss,
        rcv_mss: after.rcv_mss,
    }
}

/// A TcpExt counter summed over both sides ("client:X" and "server:X" when counted apart); None
/// when the run counted nothing.
fn sum_of(netstat: &std::collections::BTreeMap<String, i64>, name: &str) -> Option<i64> {
    if netstat.is_empty() {
        return None;
    }
    Some(netstat.iter().filter(|(k, _)| k.rsplit(':').next() == Some(name)).map(|(_, v)| *v).sum())
}

/// The row from what the two sides measured: wire cost from tcp_info deltas, the row's packets
/// as the one classifier read them ([`classified`]: every cause in the verdict is its), latency
/// and the verdict.
pub(crate) fn assemble(
    program: &Program,
    pair: &StrategyPair,
    place: &Placement,
    lab: &LabOptions,
    srv: SideOut,
    cli: ClientOut,
    (trace, no_packets): (Option<PacketTrace>, String),
) -> (RunResult, Option<analyze::Analysis>) {
    let ipv6 = place.server_ip.is_ipv6();
    let wire = Wire {
        client: wire_side(&cli.side.before, &cli.side.after, ipv6),
        server: wire_side(&srv.before, &srv.after, ipv6),
    };
    let tcp = TcpSides { client: stats(&cli.side.before, &cli.side.after), server: stats(&srv.before, &srv.after) };
    let mut netstat = srv.netstat.clone();
    netstat.extend(cli.side.netstat.clone());
    let wall_s = cli.wall.as_secs_f64();
    let margin = lab.stall_margin();
    let threshold = measure::threshold_ns(margin.as_nanos() as u64, cli.side.after.min_rtt.unwrap_or(0));
    let records: Vec<analyze::Stall> =
        trace.as_ref().map(|t| t.analysis.stalls().cloned().collect()).unwrap_or_default();
    let recs = match &trace {
        Some(t) => Records::Classified {
            records: &records,
            window: analyze::Window {
                from_ns: t.window.0,
                to_ns: t.window.1,
                warmed_up: matches!(program, Program::Rounds(p) if p.warmup_rounds > 0),
            },
        },
        None => Records::NotCaptured(&no_packets),
    };
    let corroboration = Corroboration {
        ato_us: cli.side.after.ato.max(srv.after.ato),
        delayed_acks: sum_of(&netstat, "DelayedACKs"),
        retransmits: tcp.client.retransmits + tcp.server.retransmits,
        timeouts: sum_of(&netstat, "TCPTimeouts"),
        client_held: cli.side.holds.as_deref().map(|h| verdict::Held::from_holds(h, threshold as f64 / 1000.0)),
        server_held: srv.holds.as_deref().map(|h| verdict::Held::from_holds(h, threshold as f64 / 1000.0)),
    };
    let judged = judge(program, &cli, (&wire, wall_s), threshold, recs, &corroboration);
    let classified = trace.is_some();
    let mut trace = trace;
    let m = Measured {
        strategy: pair.label.clone(),
        variant: String::new(),
        client: cli.side.applied,
        server: srv.applied,
        rounds: cli.rounds,
        latency_us: judged.latency,
        slow_samples: judged.slow,
        slow_sample_threshold_ns: threshold,
        classified,
        stall_summary: judged.summary,
        stall_records: records,
        window_ns: trace.as_ref().map_or((0, 0), |t| t.window),
        capture: trace.as_ref().map(|t| t.capture.clone()),
        wall_s,
        wire,
        cpu: match (cli.side.cpu_ns, srv.cpu_ns) {
            (Some(c), Some(s)) => Some(crate::cpu::cost(c, s, cli.rounds, cli.wall.as_nanos() as u64)),
            _ => None,
        },
        tcp: Some(tcp),
        netstat,
        verdict: judged.verdict.text,
        verdict_key: judged.verdict.key,
        latency_dist: Some(judged.dist),
        packets: trace.as_mut().map(|t| std::mem::take(&mut t.events)).unwrap_or_default(),
        samples_ns: cli.rec.samples,
    };
    (m.into(), trace.map(|t| t.analysis))
}

/// The row's packets decoded and classified, or why there are none.
pub(crate) fn classified(
    packets: PacketsOut,
    margin: std::time::Duration,
    window_real: (u64, u64),
    keep: bool,
) -> (Option<PacketTrace>, String) {
    match packets {
        PacketsOut::Captured { cap, linktype, point, origin_ns, server_port, frame_base, kernel } => (
            Some(packet_trace(
                (cap, kernel),
                linktype,
                point,
                (origin_ns, server_port, frame_base),
                margin,
                window_real,
                keep,
            )),
            String::new(),
        ),
        PacketsOut::Off => (None, "packet capture off (--no-capture, or --path veth)".to_string()),
        PacketsOut::Failed(why) => (None, format!("no packets captured: {why}")),
    }
}

/// A row's latency figures and verdict.
struct Judged {
    latency: Latency,
    slow: u64,
    /// The histogram behind `latency`, for the HTML report (not in the JSON).
    dist: report::LatencyDist,
    summary: analyze::StallSummary,
    verdict: verdict::Verdict,
}

/// Latency, slow samples and the verdict: a stream's from its throughput and ACK pattern, a
/// round program's from its rounds (`threshold` ns above which a round is slow).
fn judge(
    program: &Program,
    cli: &ClientOut,
    (wire, wall_s): (&Wire, f64),
    threshold: u64,
    recs: Records<'_>,
    corroboration: &Corroboration,
) -> Judged {
    match program {
        Program::Stream { .. } => {
            let h = cli.stream.as_ref();
            let facts = verdict::StreamFacts {
                bytes: wire.client.bytes_sent,
                wall_s,
                data_segs: wire.client.data_segs_out,
                pure_acks: wire.server.non_data_segs_out,
            };
            let (summary, verdict) = verdict::stream(recs, &facts, corroboration);
            Judged {
                latency: h.map(report::Latency::of_histogram_ns).unwrap_or_default(),
                slow: h.map_or(0, |h| h.count_between(threshold.max(1), u64::MAX)),
                dist: h.map(report::LatencyDist::from_histogram_ns).unwrap_or_default(),
                summary,
                verdict,
            }
        }
        Program::Rounds(p) => {
            let waits = measure::stalls(&cli.rec.waits, threshold);
            let slow: Vec<u64> = waits.iter().map(|w| w.ns).collect();
            // Stalls are counted against measured rounds (seed 002 stalls once per round of
            // three reads), as the key's one-in-ten rule reads.
            let reads = p.sample == scenario::Sample::ClientRecv;
            // Reads per round: where in the round the slow samples fall (seed 002: the third).
            let k = p.client.round.iter().filter(|s| matches!(s, scenario::Step::Recv(_))).count() as u32;
            let slow_at = match waits.first() {
                Some(w0) if reads && k > 1 && waits.iter().all(|w| w.sample % k == w0.sample % k) => {
                    Some(format!("read {} of {k}", w0.sample % k + 1))
                }
                _ => None,
            };
            let (summary, verdict) = verdict::rounds(recs, cli.rounds, "rounds", &slow, slow_at, corroboration);
            let samples = &cli.rec.samples;
            Judged {
                latency: report::Latency::of_samples_ns(samples),
                slow: slow.len() as u64,
                dist: report::LatencyDist::from_samples_ns(samples.iter().copied()),
                summary,
                verdict,
            }
        }
    }
}

/// A row's packets, decoded and classified.
pub(crate) struct PacketTrace {
    analysis: analyze::Analysis,
    capture: PacketCapture,
    /// The measured rounds on the trace's clock (ns since `origin_ns`).
    window: (u64, u64),
    /// The decoded packets, when `LabOptions::keep_packets` (for the HTML report).
    events: Vec<trace::Event>,
    /// Events classified out of time order (`RowStream`: the reader fell behind its margin).
    pub late: u64,
}

/// The classifier's settings for a row (stalls from `margin`; `keep`: the ordered events kept),
/// and where its packets are: `linktype` frames, time 0 at `origin_ns`, sides told apart by
/// `server_port`, evidence numbers from `frame_base`; `kernel` the row's clock map when it
/// records kernel evidence.
pub(crate) fn stream_cfg(
    (margin, keep): (std::time::Duration, bool),
    linktype: u32,
    (origin_ns, server_port, frame_base): (u64, u16, u64),
    kernel: Option<kevidence::ClockMap>,
) -> StreamCfg {
    StreamCfg {
        linktype,
        server_port,
        origin_ns,
        frame_base,
        kernel,
        margin_ns: capture::REORDER_MARGIN.as_nanos() as u64,
        keep,
        // The timer bands at this kernel's HZ: the lab runs on the kernel it measures.
        analyze: analyze::Config {
            min_gap: trace::Duration::from_nanos(margin.as_nanos() as u64),
            timers: crate::kernel_timers(),
        },
    }
}

/// `cap`: the row's packets, with the kernel's records of its connection when there were any.
/// A streamed capture has classified its frames already and takes the kernel's last records;
/// kept frames (`--capture FILE`, a link's tap) go through the same stream now, numbered from
/// `frame_base`.
fn packet_trace(
    (cap, kernel): (capture::Captured, Option<KernelRecords>),
    linktype: u32,
    point: String,
    (origin_ns, server_port, frame_base): (u64, u16, u64),
    margin: std::time::Duration,
    window_real: (u64, u64),
    keep: bool,
) -> PacketTrace {
    let clock = kernel.as_ref().and_then(|k| k.clock);
    let mut stream = cap.stream.unwrap_or_else(|| {
        let mut s = RowStream::new(stream_cfg((margin, keep), linktype, (origin_ns, server_port, frame_base), clock));
        for f in cap.frames.iter() {
            s.frame(f.ts_ns, f.orig_len, f.data);
        }
        s
    });
    let lost = kernel.as_ref().map_or(0, |k| k.counts.lost());
    let kernel_cpus = kernel.as_ref().and_then(|k| k.reader_cpus.clone());
    if let Some(k) = kernel {
        stream.records(k.records);
    }
    let out = stream.finish();
    let side = |w: analyze::WireCost| PacketSide {
        packets: w.packets,
        data_segments: w.data_segments,
        pure_acks: w.pure_acks,
        payload_bytes: w.payload_bytes,
        wire_bytes: w.wire_bytes,
    };
    let [a, b] = out.analysis.wire_cost();
    let capture = PacketCapture {
        point,
        frames: out.counts.frames,
        tcp_packets: out.counts.tcp_packets,
        kernel_drops: cap.stats.drops,
        reader_cpu_us: cap.reader_cpu_ns.map(|ns| ns as f64 / 1e3),
        reader_wakeups: cap.reader_wakeups,
        latency_unrecorded: false,
        reader_cpus: cap.reader_cpus.as_deref().map(cpu_ids),
        kernel_reader_cpus: kernel_cpus.as_deref().map(cpu_ids),
        client: side(a),
        server: side(b),
        kernel: out.kernel.map(|k| report::KernelCounts { lost, ..k }),
    };
    let window = (window_real.0.saturating_sub(origin_ns), window_real.1.saturating_sub(origin_ns));
    PacketTrace { analysis: out.analysis, capture, window, events: out.events, late: out.counts.late }
}

/// CPU numbers as the report writes them.
fn cpu_ids(cpus: &[usize]) -> Vec<u32> {
    cpus.iter().map(|&c| c as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::tcpinfo::TCPI_OPT_TIMESTAMPS;

    #[test]
    fn wire_side_is_a_tcp_info_delta_plus_headers() {
        // tcpi_segs_out is a u32 (RFC 4898 tcpEStatsPerfSegsOut) and wraps: deltas wrap too.
        let before = TcpInfo {
            segs_out: Some(u32::MAX - 1),
            data_segs_out: Some(7),
            bytes_sent: Some(1000),
            options: TCPI_OPT_TIMESTAMPS,
            ..Default::default()
        };
        let after = TcpInfo {
            segs_out: Some(10),
            data_segs_out: Some(15),
            bytes_sent: Some(1080),
            options: TCPI_OPT_TIMESTAMPS,
            ..Default::default()
        };
        let w = wire_side(&before, &after, false);
        assert_eq!(
            w,
            WireSide { segs_out: 12, data_segs_out: 8, non_data_segs_out: 4, bytes_sent: 80, wire_bytes: 80 + 12 * 66 }
        );
    }
}
