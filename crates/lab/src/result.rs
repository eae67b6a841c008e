//! From what the two sides measured to one `RunResult`: wire cost from tcp_info deltas, latency
//! percentiles, stalls and the verdict.

use report::{RunResult, TcpSides, TcpStats, Wire, WireSide};
use scenario::{Opt, Program, Sample, SideOpts, SideProgram, Step, StrategyPair};
use sys::tcpinfo::TcpInfo;

use crate::measure;
use crate::outside::{self, Span, SpanSide};
use crate::pair::{ClientOut, SideOut};
use crate::verdict::{self, Facts, SideFacts};
use crate::{LabOptions, Placement, DEFAULT_STALL_MARGIN};

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
        snd_cwnd: after.snd_cwnd,
        rtt_us: after.rtt,
        ato_us: after.ato,
        snd_mss: after.snd_mss,
        rcv_mss: after.rcv_mss,
    }
}

fn side_facts(opts: &SideOpts, prog: &SideProgram, out: &SideOut, threshold_us: f64) -> SideFacts {
    let (applied, t) = (&out.applied, &out.after);
    // A side "sends" when its measured round has a Send step.
    let sends = prog.round.iter().any(|s| matches!(s, Step::Send(_)));
    SideFacts {
        sends,
        // What held after setup, read back: TCP_NODELAY off means Nagle applies (tcp_nagle_check).
        nagle: !applied.nodelay.unwrap_or(opts.nodelay_at_connect()),
        corks: opts.has(Opt::Cork) || opts.has(Opt::MsgMore) || opts.has(Opt::NodelayThenCork),
        quickack_each: opts.has(Opt::QuickackEach),
        ato_us: t.ato,
        snd_cwnd: t.snd_cwnd,
        held: out.holds.as_deref().map(|h| verdict::Held::from_holds(h, threshold_us)),
    }
}

/// One side in the prologue or epilogue, for `outside::note`. Data this side could have had
/// queued there: what it sends in the span, and in the epilogue also the last measured round's.
fn span_side(span: Span, opts: &SideOpts, prog: &SideProgram, out: &SideOut) -> SpanSide {
    let sends = |steps: &[Step]| steps.iter().any(|s| matches!(s, Step::Send(_)));
    let (queued, waits) = match span {
        Span::Prologue => (sends(&prog.prologue), &out.outside.prologue),
        Span::Epilogue => (sends(&prog.epilogue) || sends(&prog.round), &out.outside.epilogue),
    };
    SpanSide {
        waits_ns: waits.clone(),
        nagle: queued && !out.applied.nodelay.unwrap_or(opts.nodelay_at_connect()),
        corks: queued && (opts.has(Opt::Cork) || opts.has(Opt::MsgMore) || opts.has(Opt::NodelayThenCork)),
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

pub(crate) fn assemble(
    program: &Program,
    pair: &StrategyPair,
    place: &Placement,
    lab: &LabOptions,
    srv: SideOut,
    cli: ClientOut,
) -> RunResult {
    let ipv6 = place.server_ip.is_ipv6();
    let wire = Wire {
        client: wire_side(&cli.side.before, &cli.side.after, ipv6),
        server: wire_side(&srv.before, &srv.after, ipv6),
    };
    let tcp = TcpSides { client: stats(&cli.side.before, &cli.side.after), server: stats(&srv.before, &srv.after) };
    let mut netstat = srv.netstat.clone();
    netstat.extend(cli.side.netstat.clone());
    let wall_s = cli.wall.as_secs_f64();
    let payload = wire.client.bytes_sent + wire.server.bytes_sent;
    let throughput_bytes_per_s = if wall_s > 0.0 { payload as f64 / wall_s } else { 0.0 };
    let margin = lab.stall_threshold.unwrap_or(DEFAULT_STALL_MARGIN);
    let threshold = measure::threshold_ns(margin.as_nanos() as u64, cli.side.after.min_rtt.unwrap_or(0));
    let delayed_acks = sum_of(&netstat, "DelayedACKs");

    let (latency_us, stalls, verdict) = match program {
        Program::Stream { .. } => {
            let h = cli.stream.as_ref();
            let us = |ns: u64| ns as f64 / 1000.0;
            let facts = verdict::StreamFacts {
                bytes: wire.client.bytes_sent,
                wall_s,
                data_segs: wire.client.data_segs_out,
                pure_acks: wire.server.non_data_segs_out,
                writes: cli.rounds,
                waits_over: h.map_or(0, |h| h.count_between(threshold.max(1), u64::MAX)),
                threshold_us: threshold as f64 / 1000.0,
                max_wait_us: h.map_or(0.0, |h| us(h.max())),
                p99_wait_us: h.map_or(0.0, |h| us(h.value_at_quantile(0.99))),
                retransmits: tcp.client.retransmits + tcp.server.retransmits,
                timeouts: sum_of(&netstat, "TCPTimeouts"),
            };
            let latency = h.map(measure::latency).unwrap_or_default();
            (latency, facts.waits_over, verdict::infer_stream(&facts))
        }
        Program::Rounds(p) => {
            let st = measure::stalls(&cli.rec.waits, threshold);
            let per_round = p.client.round.iter().filter(|s| matches!(s, Step::Recv(_))).count() as u32;
            let reads = (p.sample == Sample::ClientRecv).then_some(per_round);
            let facts = Facts {
                rounds: cli.rounds,
                stalls_us: st.iter().map(|w| w.ns as f64 / 1000.0).collect(),
                stall_rounds: {
                    let k = u64::from(reads.unwrap_or(1).max(1));
                    let mut r: Vec<u64> = st.iter().map(|w| u64::from(w.sample) / k).collect();
                    r.dedup();
                    r.len() as u64
                },
                threshold_us: threshold as f64 / 1000.0,
                reads_per_round: reads,
                stall_positions: match reads {
                    Some(k) if k > 0 => st.iter().map(|w| w.sample % k).collect(),
                    _ => Vec::new(),
                },
                client: side_facts(&pair.client, &p.client, &cli.side, threshold as f64 / 1000.0),
                server: side_facts(&pair.server, &p.server, &srv, threshold as f64 / 1000.0),
                delayed_acks,
                retransmits: tcp.client.retransmits + tcp.server.retransmits,
                min_rtt_us: cli.side.after.min_rtt.unwrap_or(0),
            };
            let mut v = verdict::infer(&facts);
            // Named, not counted: the key (and the stalls, samples and ms/round) stay those of
            // the measured rounds.
            for span in [Span::Prologue, Span::Epilogue] {
                let c = span_side(span, &pair.client, &p.client, &cli.side);
                let s = span_side(span, &pair.server, &p.server, &srv);
                if let Some(note) = outside::note(span, &c, &s, threshold) {
                    v.text = format!("{}; {note}", v.text);
                }
            }
            (measure::latency_of(&cli.rec.samples), st.len() as u64, v)
        }
    };
    RunResult {
        strategy: pair.label.clone(),
        variant: String::new(),
        client: cli.side.applied,
        server: srv.applied,
        rounds: cli.rounds,
        latency_us,
        slow_samples: stalls,
        slow_sample_threshold_us: threshold as f64 / 1000.0,
        stall_count: stalls,
        stall_summary: Default::default(),
        stall_records: Vec::new(),
        measured_from_ns: 0,
        measured_to_ns: 0,
        wall_s,
        throughput_bytes_per_s,
        wire,
        tcp: Some(tcp),
        netstat,
        verdict: verdict.text,
        verdict_key: verdict.key,
        samples_ns: cli.rec.samples.clone(),
    }
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
