//! The A/B loop: every candidate once per round, in an order rotated each round (interleaved,
//! as advise does, so a drift of the machine spreads over all of them), rounds until the
//! ranking is settled ([`crate::rank::settled`], at least two rounds), the budget would be
//! passed by another round, or the caller cancels. A candidate that fails to apply is dropped
//! with its reason.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::rank::{pool, rank, settled, Row};
use crate::run::{trial, Candidate, Lab, Side, Spec, Trial};
use crate::shim::{Fit, Shim};

/// How long to spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub total: Duration,
    pub max_rounds: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { total: Duration::from_secs(60), max_rounds: 5 }
    }
}

/// The outcome.
#[derive(Debug, Default)]
pub struct Outcome {
    pub ranked: Vec<Row>,
    /// Candidates left out, and why (not applicable, failed to apply).
    pub skipped: Vec<(Candidate, String)>,
    pub rounds: usize,
    pub elapsed: Duration,
    /// Why it stopped: settled, budget, rounds, interrupted.
    pub stopped: String,
    /// Sockets the sock_ops program changed, per candidate (its own count).
    pub sockops_applied: Vec<(Candidate, u64)>,
    /// The delayed-ACK maximum the kernel took (µs), when the DELACK_MAX candidate ran.
    pub delack_max_us: Option<u64>,
    /// The command of the process listening on the server's port (ss), from the first run
    /// that named it.
    pub server_listener: Option<String>,
    /// The emulated link between the namespaces (`--link`), when there was one.
    pub link: Option<String>,
    /// Whether the runs' stalls were classified with kernel evidence, one line
    /// ([`crate::kernel::Kernel::status`]).
    pub kernel: String,
    /// Why some runs recorded none though the source was open (each reason once).
    pub kernel_notes: Vec<String>,
}

/// The causes whose wait is the peer's delayed-ACK timer (the classifier's release rule,
/// analyze/src/classify/release.rs: an ACK delayed by the peer, net/ipv4/tcp_timer.c
/// tcp_delack_timer, released the held data).
pub const DELAYED_ACK_CAUSES: [trace::Cause; 2] = [trace::Cause::NagleDelayedAck, trace::Cause::DelayedAck];

/// The side whose delayed ACK a shorter maximum (TCP_BPF_DELACK_MAX) would shorten: the peer
/// of the side whose writes the classifier found held for a delayed ACK most often; `Err` with
/// the reason when none was. Pure.
pub fn delack_side(stalls: &[crate::requests::StallNote]) -> Result<Side, String> {
    let held = |side: &str| {
        stalls.iter().filter(|s| s.held == side && DELAYED_ACK_CAUSES.iter().any(|c| c.as_str() == s.cause)).count()
    };
    let (client, server) = (held("client"), held("server"));
    if client + server == 0 {
        return Err("as written, no write waited for a delayed ACK (the classifier's nagle-delayed-ack or \
                    delayed-ack): no delayed ACK to shorten"
            .into());
    }
    // The server's writes held: the client delays its ACKs.
    Ok(if server >= client { Side::Client } else { Side::Server })
}

/// Why the server's candidates are left out with an existing server.
pub const NOT_OURS: &str =
    "an existing server (--server-addr): the server and its host are not ours to change; only the client's side is measured";

/// The candidates for a spec: as written, route quickack on either side, sock_ops NODELAY on
/// either side, the shim on a side whose program it can reach, the settings named.
pub fn candidates(spec: &Spec) -> (Vec<Candidate>, Vec<(Candidate, String)>) {
    let mut v = vec![Candidate::AsWritten];
    let mut skipped = Vec::new();
    for side in [Side::Server, Side::Client] {
        if side == Side::Server && spec.server_addr.is_some() {
            for c in [Candidate::RouteQuickack(side), Candidate::SockOpsNodelay(side), Candidate::Shim(side)] {
                skipped.push((c, NOT_OURS.into()));
            }
            continue;
        }
        v.push(Candidate::RouteQuickack(side));
        v.push(Candidate::SockOpsNodelay(side));
        let cmd = if side == Side::Client { &spec.client } else { &spec.server };
        match crate::shim::fit_command(cmd) {
            (Fit::Applies, _) => v.push(Candidate::Shim(side)),
            (f, p) => {
                let what = p.map_or("its program was not found".to_string(), |p| p.display().to_string());
                let why = match f {
                    Fit::Static => "statically linked (no PT_INTERP): LD_PRELOAD is never read",
                    Fit::Go => "a Go program: its runtime makes the socket calls itself",
                    _ => "not a dynamically linked ELF program",
                };
                skipped.push((Candidate::Shim(side), format!("{what}: {why}")));
            }
        }
        let named = if side == Side::Client { &spec.client_setting } else { &spec.server_setting };
        if named.is_some() {
            v.push(Candidate::Setting(side));
        }
    }
    (v, skipped)
}

/// Each candidate's runs' p50s.
fn run_p50s(live: &[(Candidate, Vec<Trial>)]) -> Vec<(Candidate, Vec<u64>)> {
    live.iter()
        .map(|(c, ts)| {
            (c.clone(), ts.iter().filter_map(|t| crate::requests::quantile(&t.measure.latencies_ns, 0.5)).collect())
        })
        .collect()
}

/// After the first run as written (`first`, None when it failed): the DELACK_MAX candidate
/// on the side [`delack_side`] names joins the list, or is left out with the reason.
fn place_delack(first: Option<&Trial>, spec: &Spec, live: &mut Vec<(Candidate, Vec<Trial>)>, out: &mut Outcome) {
    let side = first.map_or_else(
        || Err("the first run as written failed: which side delays its ACKs is not known".to_string()),
        |t| delack_side(&t.measure.stalls),
    );
    match side {
        Ok(Side::Server) if spec.server_addr.is_some() => {
            out.skipped.push((Candidate::SockOpsDelackMax(Side::Server), NOT_OURS.into()))
        }
        Ok(side) => live.push((Candidate::SockOpsDelackMax(side), Vec::new())),
        Err(why) => out.skipped.push((Candidate::SockOpsDelackMax(Side::Client), why)),
    }
}

/// Measure `cands` on the real programs. `progress(done, total_estimate, eta)` after each run.
pub fn run(
    lab: &Lab,
    spec: &Spec,
    cands: Vec<Candidate>,
    budget: Budget,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, Duration),
) -> Outcome {
    let start = Instant::now();
    let shim = Shim::install().ok();
    let mut out = Outcome { link: lab.link(), ..Outcome::default() };
    let mut live: Vec<(Candidate, Vec<Trial>)> = cands.into_iter().map(|c| (c, Vec::new())).collect();
    let mut done = 0usize;
    // The DELACK_MAX candidate's side comes from the first run as written (round 0 runs in
    // list order, "as written" first): it joins the end of round 0's list.
    let mut delack_pending = live.iter().any(|(c, _)| *c == Candidate::AsWritten);
    for round in 0..budget.max_rounds {
        let mut k = 0;
        while k < live.len() {
            let n = live.len();
            if cancel.load(Ordering::Relaxed) {
                break;
            }
            let i = (k + round) % n;
            let c = live[i].0.clone();
            let res = trial(lab, spec, &c, shim.as_ref(), cancel);
            if delack_pending && c == Candidate::AsWritten {
                delack_pending = false;
                place_delack(res.as_ref().ok(), spec, &mut live, &mut out);
            }
            match res {
                Ok(t) => {
                    if let Some(a) = t.sockops_applied {
                        out.sockops_applied.push((c.clone(), a));
                    }
                    out.delack_max_us = out.delack_max_us.or(t.delack_max_us);
                    if out.server_listener.is_none() {
                        out.server_listener = t.listener.as_ref().map(|l| l.1.clone());
                    }
                    if let Some(w) = t.kernel_why.as_ref().filter(|w| !out.kernel_notes.contains(w)) {
                        out.kernel_notes.push(w.clone());
                    }
                    live[i].1.push(t);
                }
                Err(e) if !cancel.load(Ordering::Relaxed) => out.skipped.push((c.clone(), e.to_string())),
                Err(_) => {}
            }
            done += 1;
            let per = start.elapsed() / done as u32;
            let n = live.len();
            progress(done, n * budget.max_rounds.min(round + 2), per * (n - k - 1) as u32);
            k += 1;
        }
        live.retain(|(c, t)| !t.is_empty() || !out.skipped.iter().any(|(s, _)| s == c));
        out.rounds = round + 1;
        let p50s = run_p50s(&live);
        let per_round = start.elapsed() / out.rounds as u32;
        if cancel.load(Ordering::Relaxed) {
            out.stopped = "interrupted: ranked what finished".into();
            break;
        }
        if settled(&p50s) {
            out.stopped = format!("settled after {} rounds", out.rounds);
            break;
        }
        if start.elapsed() + per_round > budget.total {
            out.stopped = format!("budget: another round would pass {:?}", budget.total);
            break;
        }
        out.stopped = format!("{} rounds", out.rounds);
    }
    out.ranked = rank(live.iter().filter_map(|(c, t)| pool(c, t)).collect());
    out.elapsed = start.elapsed();
    out.kernel = lab.kernel.status(cancel, lab.capture_side());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::StallNote;

    fn stall(cause: &str, held: &'static str) -> StallNote {
        StallNote { cause: cause.into(), length_ns: 40_000_000, held, detail: String::new(), kernel: Vec::new() }
    }

    /// The held writes' peer delays its ACKs (net/ipv4/tcp_timer.c tcp_delack_timer): the
    /// server's writes held for nagle-delayed-ack -> the client's delayed ACK is capped.
    #[test]
    fn delack_goes_to_the_peer_of_the_held_writes() {
        let s = [stall("nagle-delayed-ack", "server"), stall("nagle-delayed-ack", "server")];
        assert_eq!(delack_side(&s), Ok(Side::Client));
        let s = [stall("delayed-ack", "client"), stall("retransmission-timeout", "server")];
        assert_eq!(delack_side(&s), Ok(Side::Server));
        assert!(delack_side(&[stall("retransmission-timeout", "server")]).unwrap_err().contains("no delayed ACK"));
        assert!(delack_side(&[]).is_err());
    }
}
