//! Ranking the candidates from their runs. Pure.
//!
//! Each candidate's runs are pooled: request latencies (p50, p99), stalls per request, and the
//! cost per request (data segments, packets, pure ACKs, CPU). Candidates whose p50 lie within a
//! tie margin of each other (the larger of 1 ms and 20% of the smaller) form a tier, best tier
//! first; within a tier the smaller change comes first ([`Candidate::change_size`]: the
//! program's own setting, then a route or a cgroup program, then a shim), then the lower p50.
//! The winner is the first candidate that is a fix and ranks in a better tier than "as written".

use crate::requests::quantile;
use crate::run::{Candidate, Trial};

/// One candidate's pooled result.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub candidate: Candidate,
    pub runs: usize,
    pub requests: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Each run's p50, to see the spread.
    pub run_p50s_ns: Vec<u64>,
    pub stalls_per_request: f64,
    /// The classifier's causes, most frequent first, with their counts.
    pub causes: Vec<(String, usize)>,
    pub data_segments_per_request: f64,
    pub packets_per_request: f64,
    pub pure_acks_per_request: f64,
    /// Both sides' CPU time per request (µs).
    pub cpu_us_per_request: Option<f64>,
    pub tier: usize,
    /// The spawned programs (client `a`, server `b`), from the first run that found each.
    pub owners: report::owner::FlowOwners,
    /// The kernel evidence its runs' classifier read; None when no run recorded any.
    pub kernel: Option<RowKernel>,
}

/// The kernel evidence of a candidate's runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowKernel {
    /// Runs that recorded kernel evidence (of [`Row::runs`]).
    pub runs: usize,
    /// Kernel events merged into the runs' traces, writes and resends among them, records lost.
    pub events: u64,
    pub writes: u64,
    pub resends: u64,
    pub lost: u64,
    /// Stall records whose evidence includes the kernel's.
    pub stalls_with_kernel: usize,
    /// The first such record of each cause, in the order first seen: cause, length, whose
    /// bytes, and the kernel's part of its evidence ("nagle-delayed-ack 40.9 ms, the server's
    /// bytes: kernel: sendmsg 330 bytes").
    pub examples: Vec<String>,
}

/// The kernel evidence of `trials` (None when none recorded any). Pure.
pub fn row_kernel(trials: &[Trial]) -> Option<RowKernel> {
    let mut k = RowKernel::default();
    let mut seen: Vec<&str> = Vec::new();
    for m in trials.iter().map(|t| &t.measure) {
        let Some(c) = m.kernel else { continue };
        k.runs += 1;
        (k.events, k.writes, k.resends, k.lost) =
            (k.events + c.events, k.writes + c.writes, k.resends + c.resends, k.lost + c.lost);
        for s in m.stalls.iter().filter(|s| !s.kernel.is_empty()) {
            k.stalls_with_kernel += 1;
            if !seen.contains(&s.cause.as_str()) {
                seen.push(&s.cause);
                let ms = s.length_ns as f64 / 1e6;
                k.examples.push(format!("{} {ms:.1} ms, the {}'s bytes: {}", s.cause, s.held, s.kernel.join("; ")));
            }
        }
    }
    (k.runs > 0).then_some(k)
}

/// Pool one candidate's runs (None when none answered a request).
pub fn pool(candidate: &Candidate, trials: &[Trial]) -> Option<Row> {
    let lat: Vec<u64> = trials.iter().flat_map(|t| t.measure.latencies_ns.iter().copied()).collect();
    let n = lat.len();
    if n == 0 {
        return None;
    }
    let sum = |f: &dyn Fn(&Trial) -> u64| trials.iter().map(f).sum::<u64>() as f64 / n as f64;
    let mut causes: Vec<(String, usize)> = Vec::new();
    for s in trials.iter().flat_map(|t| &t.measure.stalls) {
        match causes.iter_mut().find(|c| c.0 == s.cause) {
            Some(c) => c.1 += 1,
            None => causes.push((s.cause.clone(), 1)),
        }
    }
    causes.sort_by_key(|c| std::cmp::Reverse(c.1));
    // Both programs' CPU; the client's alone with an existing server (not ours to measure).
    let cpu = trials.iter().map(|t| Some(t.server_cpu_us.unwrap_or(0) + t.client_cpu_us?)).sum::<Option<u64>>();
    Some(Row {
        candidate: candidate.clone(),
        runs: trials.len(),
        requests: n,
        p50_ns: quantile(&lat, 0.5)?,
        p99_ns: quantile(&lat, 0.99)?,
        run_p50s_ns: trials.iter().filter_map(|t| quantile(&t.measure.latencies_ns, 0.5)).collect(),
        stalls_per_request: sum(&|t| t.measure.stalls.len() as u64),
        causes,
        data_segments_per_request: sum(&|t| t.measure.data_segments),
        packets_per_request: sum(&|t| t.measure.packets),
        pure_acks_per_request: sum(&|t| t.measure.pure_acks),
        cpu_us_per_request: cpu.map(|c| c as f64 / n as f64),
        tier: 0,
        owners: report::owner::FlowOwners {
            a: trials.iter().find_map(|t| t.owners.a.clone()),
            b: trials.iter().find_map(|t| t.owners.b.clone()),
        },
        kernel: row_kernel(trials),
    })
}

/// Two p50s tie when within the larger of 1 ms and 20% of the smaller.
pub fn ties(a_ns: u64, b_ns: u64) -> bool {
    let (lo, hi) = (a_ns.min(b_ns), a_ns.max(b_ns));
    hi - lo <= (lo / 5).max(1_000_000)
}

/// Rank pooled rows: tiers by p50, the smaller change first within a tier.
pub fn rank(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by_key(|r| r.p50_ns);
    let mut tier = 0;
    let mut lead = rows.first().map_or(0, |r| r.p50_ns);
    for r in rows.iter_mut() {
        if !ties(lead, r.p50_ns) {
            tier += 1;
            lead = r.p50_ns;
        }
        r.tier = tier;
    }
    rows.sort_by_key(|r| (r.tier, r.candidate.change_size(), r.p50_ns));
    rows
}

/// The fix to recommend: the first ranked fix in a better tier than "as written".
pub fn winner(ranked: &[Row]) -> Option<&Row> {
    let base = ranked.iter().find(|r| r.candidate == Candidate::AsWritten)?;
    ranked.iter().find(|r| r.candidate != Candidate::AsWritten && r.tier < base.tier)
}

/// Whether more runs could change the answer: false once every candidate's runs agree with
/// the baseline's on whether they are apart (each run's p50 of a fix in a better tier than
/// every run's p50 of "as written", or none).
pub fn settled(per_candidate: &[(Candidate, Vec<u64>)]) -> bool {
    let Some((_, base)) = per_candidate.iter().find(|(c, _)| *c == Candidate::AsWritten) else { return false };
    let Some(&base_min) = base.iter().min() else { return false };
    per_candidate.iter().filter(|(c, _)| *c != Candidate::AsWritten).all(|(_, p50s)| {
        let apart = |p: &u64| *p < base_min && !ties(*p, base_min);
        p50s.len() >= 2 && (p50s.iter().all(apart) || !p50s.iter().any(apart))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::Measure;
    use crate::run::Side;

    fn trial(lat_ms: &[u64], stalls: usize) -> Trial {
        let m = Measure {
            latencies_ns: lat_ms.iter().map(|m| m * 1_000_000).collect(),
            connections: 1,
            packets: 4 * lat_ms.len() as u64,
            data_segments: 3 * lat_ms.len() as u64,
            pure_acks: lat_ms.len() as u64,
            stalls: vec![
                crate::requests::StallNote {
                    cause: "nagle-delayed-ack".into(),
                    length_ns: 40_000_000,
                    held: "server",
                    detail: String::new(),
                    kernel: vec!["kernel: sendmsg 330 bytes".into()],
                };
                stalls
            ],
            kernel: Some(crate::requests::KernelCounts { events: 20, writes: 20, resends: 0, lost: 0 }),
        };
        Trial { measure: m, server_cpu_us: Some(100), client_cpu_us: Some(50), ..Trial::default() }
    }

    #[test]
    fn a_tie_goes_to_the_smaller_change() {
        let rows = vec![
            pool(&Candidate::AsWritten, &[trial(&[41, 42, 40], 3)]).unwrap(),
            pool(&Candidate::Shim(Side::Server), &[trial(&[1, 1, 1], 0)]).unwrap(),
            pool(&Candidate::RouteQuickack(Side::Client), &[trial(&[2, 1, 2], 0)]).unwrap(),
            pool(&Candidate::Setting(Side::Server), &[trial(&[1, 2, 1], 0)]).unwrap(),
        ];
        let r = rank(rows);
        let order: Vec<_> = r.iter().map(|r| r.candidate.clone()).collect();
        assert_eq!(order[0], Candidate::Setting(Side::Server));
        assert_eq!(order[1], Candidate::RouteQuickack(Side::Client));
        assert_eq!(order[2], Candidate::Shim(Side::Server));
        assert_eq!(order[3], Candidate::AsWritten);
        assert_eq!(winner(&r).unwrap().candidate, Candidate::Setting(Side::Server));
        assert_eq!(r[3].stalls_per_request, 1.0);
        assert_eq!(r[0].cpu_us_per_request, Some(50.0));
        assert_eq!(r[0].packets_per_request, 4.0);
        let k = r[3].kernel.as_ref().expect("kernel evidence");
        assert_eq!((k.runs, k.events, k.writes, k.stalls_with_kernel), (1, 20, 20, 3));
        assert_eq!(k.examples, ["nagle-delayed-ack 40.0 ms, the server's bytes: kernel: sendmsg 330 bytes"]);
        let mut off = trial(&[41], 1);
        off.measure.kernel = None;
        assert_eq!(pool(&Candidate::AsWritten, &[off]).unwrap().kernel, None, "no run recorded any");
    }

    #[test]
    fn no_winner_when_nothing_beats_as_written() {
        let rows = vec![
            pool(&Candidate::AsWritten, &[trial(&[2, 2], 0)]).unwrap(),
            pool(&Candidate::Shim(Side::Server), &[trial(&[2, 2], 0)]).unwrap(),
        ];
        assert!(winner(&rank(rows)).is_none());
    }

    #[test]
    fn settles_once_runs_agree() {
        let ms = |v: &[u64]| v.iter().map(|m| m * 1_000_000).collect::<Vec<_>>();
        let base = (Candidate::AsWritten, ms(&[40, 41]));
        assert!(settled(&[base.clone(), (Candidate::Shim(Side::Server), ms(&[1, 1]))]));
        assert!(settled(&[base.clone(), (Candidate::Shim(Side::Client), ms(&[40, 39]))]));
        assert!(!settled(&[base.clone(), (Candidate::Shim(Side::Client), ms(&[1, 40]))]));
        assert!(!settled(&[base, (Candidate::Shim(Side::Client), ms(&[1]))]));
    }
}
