//! The candidates advise runs: the workload as written, each fix alone on the side it applies
//! to, and the pairs that make sense (pure: from the scenario's exchange).

use scenario::{Opt, Scenario, Side, SideOpts, StrategyPair};

/// One candidate: a strategy pair and what it changes.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub pair: StrategyPair,
    pub change: u32,
}

/// Sides that send several writes per message (where gathering applies), from the exchange
/// form of the workload; both when the workload is not a conversation or no turn has several.
/// A side that runs with TCP_NODELAY as written (a capture showed its Nagle off) sends its
/// writes at once: Nagle holds none of them (RFC 9293 3.7.4, Linux `tcp_nagle_check`), so it is
/// no sender to fix, unless every multi-write side is.
fn senders(s: &Scenario) -> Vec<Side> {
    let nodelay = |side: Side| {
        s.matrix.first().is_some_and(|b| if side == Side::Client { &b.client } else { &b.server }.has(Opt::Nodelay))
    };
    match s.workload.as_exchange() {
        Some(e) if !e.multi_write_sides().is_empty() => {
            let all = e.multi_write_sides();
            let held: Vec<Side> = all.iter().copied().filter(|&side| !nodelay(side)).collect();
            if held.is_empty() {
                all
            } else {
                held
            }
        }
        _ => vec![Side::Client, Side::Server],
    }
}

fn on(side: Side, opts: &[Opt]) -> StrategyPair {
    let o = SideOpts::new(opts.to_vec()).unwrap_or_default();
    match side {
        Side::Client => StrategyPair::new(o, SideOpts::none()),
        Side::Server => StrategyPair::new(SideOpts::none(), o),
    }
}

/// The candidates: as written; on each sending side each sender fix alone (writev for the
/// gathered write: buffer is the same on the wire; cork; msg-more; nodelay); on each receiving
/// side quick-ACK (re-armed after every recv, and once); and the pairs seed 001 tried (the
/// sender's nodelay or cork with the receiver's quick-ACK). `only`: the side the user owns.
pub fn candidates(s: &Scenario, only: Option<Side>, lab: bool) -> Vec<Candidate> {
    let mut pairs = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    let send = senders(s);
    let both_send = send.len() == 2;
    if both_send && only.is_none() {
        // Both sides send messages of several writes (seed 000): a fix on one side leaves the
        // other direction's stall, so each strategy runs on both sides; the gathered write on
        // one side alone shows that half a fix is not one.
        for o in [Opt::Writev, Opt::Cork, Opt::MsgMore, Opt::Nodelay, Opt::QuickackEach, Opt::QuickackOnce] {
            let side = SideOpts::new(vec![o]).unwrap_or_default();
            pairs.push(StrategyPair::new(side.clone(), side));
        }
        if lab {
            // The wake-up, not a stall: only real sockets show what spinning buys and costs,
            // and only once the stall is gone (a spinning reader behind a stall burns the wait),
            // so on top of the gathered write.
            let side = SideOpts::new(vec![Opt::Writev, Opt::BusyPoll]).unwrap_or_default();
            pairs.push(StrategyPair::new(side.clone(), side));
        }
        for side in [Side::Client, Side::Server] {
            pairs.push(on(side, &[Opt::Writev]));
        }
    } else {
        let mut recv: Vec<Side> = send.iter().map(|s| s.peer()).collect();
        recv.dedup();
        let allowed = |side: Side| only.is_none() || only == Some(side);
        for &side in send.iter().filter(|&&s| allowed(s)) {
            for o in [Opt::Writev, Opt::Cork, Opt::MsgMore, Opt::Nodelay] {
                pairs.push(on(side, &[o]));
            }
        }
        for &side in recv.iter().filter(|&&s| allowed(s)) {
            for o in [Opt::QuickackEach, Opt::QuickackOnce] {
                pairs.push(on(side, &[o]));
            }
            if lab && only.is_none() {
                // The wake-up on top of the sender's gathered write (see above).
                let mut p = on(side, &[Opt::BusyPoll]);
                let w = SideOpts::new(vec![Opt::Writev]).unwrap_or_default();
                match side.peer() {
                    Side::Client => p.client = w,
                    Side::Server => p.server = w,
                }
                pairs.push(StrategyPair::new(p.client, p.server));
            } else if lab {
                pairs.push(on(side, &[Opt::BusyPoll]));
            }
        }
        if only.is_none() {
            for &side in &send {
                for o in [Opt::Nodelay, Opt::Cork] {
                    let mut p = on(side, &[o]);
                    let q = SideOpts::new(vec![Opt::QuickackEach]).unwrap_or_default();
                    match side {
                        Side::Client => p.server = q,
                        Side::Server => p.client = q,
                    }
                    pairs.push(StrategyPair::new(p.client, p.server));
                }
            }
        }
    }
    let cost = |p: &StrategyPair| -> u32 {
        p.client.opts().iter().chain(p.server.opts()).map(|o| crate::change_size(*o)).sum()
    };
    distinct_new(pairs, s.matrix.first()).into_iter().map(|pair| Candidate { change: cost(&pair), pair }).collect()
}

/// `pairs` without repeats, and without a change the workload already runs with as written
/// (`base`: what a capture showed).
fn distinct_new(pairs: Vec<StrategyPair>, base: Option<&StrategyPair>) -> Vec<StrategyPair> {
    let base = base.filter(|b| !(b.client.is_empty() && b.server.is_empty()));
    let already = |p: &StrategyPair| {
        base.is_some_and(|b| {
            !(p.client.is_empty() && p.server.is_empty())
                && p.client.opts().iter().all(|o| b.client.has(*o))
                && p.server.opts().iter().all(|o| b.server.has(*o))
        })
    };
    let mut seen = Vec::new();
    pairs
        .into_iter()
        .filter(|p| !already(p))
        .filter(|p| {
            let new = !seen.contains(&p.label);
            seen.push(p.label.clone());
            new
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_001_candidates_fix_the_client_and_quickack_the_server() {
        let s = Scenario::from_exchange(
            "exchange",
            "",
            scenario::Exchange::parse_inline("client 275,24,292; server 100").unwrap(),
        );
        let labels: Vec<String> = candidates(&s, None, true).into_iter().map(|c| c.pair.label).collect();
        assert_eq!(labels[0], "default");
        assert!(labels.iter().any(|l| l == "client:writev server:busy-poll"), "{labels:?}");
        for want in [
            "client:writev",
            "client:cork",
            "client:msg-more",
            "client:nodelay",
            "server:quickack-each",
            "server:quickack-once",
            "client:nodelay server:quickack-each",
            "client:cork server:quickack-each",
        ] {
            assert!(labels.iter().any(|l| l == want), "{want}: {labels:?}");
        }
        assert!(!labels.iter().any(|l| l.starts_with("server:writev")), "{labels:?}");
        // With a peer the user does not own, only the own side's fixes.
        let mine: Vec<String> = candidates(&s, Some(Side::Server), false).into_iter().map(|c| c.pair.label).collect();
        assert_eq!(mine, ["default", "server:quickack-each", "server:quickack-once"]);
    }

    /// Seed 000: both sides send 100 writes, so every strategy runs on both sides.
    #[test]
    fn seed_000_candidates_fix_both_sides() {
        let s = Scenario::builtin("chunked").unwrap();
        let labels: Vec<String> = candidates(&s, None, false).into_iter().map(|c| c.pair.label).collect();
        assert!(labels.contains(&"client:writev server:writev".to_string()), "{labels:?}");
        assert!(labels.contains(&"client:quickack-each server:quickack-each".to_string()), "{labels:?}");
        assert!(labels.contains(&"client:writev".to_string()), "{labels:?}");
        assert_eq!(labels.len(), 9, "{labels:?}");
    }

    /// Issue 34: a client the capture showed with Nagle off runs with TCP_NODELAY as written,
    /// so client nodelay is no candidate; the server's fixes are.
    #[test]
    fn a_change_already_shown_is_no_candidate() {
        let mut s = Scenario::from_exchange(
            "replay",
            "",
            scenario::Exchange::parse_inline("client 150,175; server 200,90").unwrap(),
        );
        s.matrix = vec![StrategyPair::new(SideOpts::new(vec![Opt::Nodelay]).unwrap(), SideOpts::none())];
        let labels: Vec<String> = candidates(&s, None, false).into_iter().map(|c| c.pair.label).collect();
        assert!(!labels.iter().any(|l| l == "client:nodelay"), "{labels:?}");
        assert!(
            labels.iter().any(|l| l == "server:nodelay") && labels.iter().any(|l| l == "server:writev"),
            "{labels:?}"
        );
        assert!(!labels.iter().any(|l| l.contains("client:writev") || l.contains("client:cork")), "{labels:?}");
        let merged = crate::session::on_top_of(
            &StrategyPair::new(SideOpts::none(), SideOpts::new(vec![Opt::Writev]).unwrap()),
            s.matrix.first(),
        );
        assert_eq!(merged.label, "client:nodelay server:writev");
    }
}
