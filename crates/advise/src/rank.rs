//! The ranking of candidate fixes: stalls removed first, then p99, then wire cost, then the
//! size of the code change.
//!
//! - Stalls: a candidate's stall rate (stalls per measured round) puts it in a tier: none, rare
//!   (at most 2% of rounds: what a scheduling hiccup or one late timer makes), or stalling (ordered
//!   by rate). A fix that removes the stalls always ranks above one that does not.
//! - p99: within a tier, the candidate with the lowest p99 and every candidate whose 95%
//!   interval overlaps its interval, or whose p99 is within [`P99_TIE_US`] or [`P99_TIE_RATIO`]
//!   of it, are equal on p99 (a wake-up on loopback costs ~20 us; what advise ranks is whether
//!   the tens of milliseconds are gone); among those the wire cost
//!   decides (segments per round, then bytes), then the change size, then the p99 estimate.
//!   The group is emitted and the rest ranked the same way, so the order is total.

use serde::Serialize;

use crate::stats::Interval;

/// p99s closer than this (us) are equal for the ranking.
pub const P99_TIE_US: f64 = 100.0;
/// p99s within this factor of each other are equal for the ranking.
pub const P99_TIE_RATIO: f64 = 1.25;

fn p99_tied(a: &Scored, b: &Scored) -> bool {
    let (lo, hi) = if a.p99.est <= b.p99.est { (a.p99.est, b.p99.est) } else { (b.p99.est, a.p99.est) };
    a.p99.overlaps(&b.p99) || hi - lo <= P99_TIE_US || hi <= lo * P99_TIE_RATIO
}

/// A stall rate up to this is rare: one slow round in 50 is what a scheduling hiccup makes on
/// a busy host (the lab's slow samples cannot tell it from TCP).
pub const RARE: f64 = 0.02;

/// What the ranking needs of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scored {
    pub label: String,
    pub stalls: u64,
    pub rounds: u64,
    pub p99: Interval,
    /// Segments both sides sent per measured round (data and pure ACKs).
    pub segs_per_round: f64,
    pub bytes_per_round: f64,
    /// The size of the code change (crate::code::change_size); 0 for the workload as written.
    pub change: u32,
}

impl Scored {
    pub fn stall_rate(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            self.stalls as f64 / self.rounds as f64
        }
    }
    /// 0 = no stall, 1 = rare (at most 2% of rounds), 2 = stalls.
    pub fn tier(&self) -> u8 {
        let r = self.stall_rate();
        if self.stalls == 0 {
            0
        } else if r <= RARE {
            1
        } else {
            2
        }
    }
}

/// A wire cost on a 5% logarithmic scale: costs within about 5% of each other (one ACK more
/// or less in a hundred rounds) fall in the same bucket, so the change size decides between
/// them; a bucket is a total order, unlike "within 5%".
fn bucket(cost: f64) -> i64 {
    if cost <= 0.0 {
        return i64::MIN;
    }
    (cost.ln() / 1.05f64.ln()).round() as i64
}

/// Indices of `c` best first.
pub fn rank(c: &[Scored]) -> Vec<usize> {
    let mut left: Vec<usize> = (0..c.len()).collect();
    // Tier, then (in the stalling tier) the stall rate.
    left.sort_by(|&a, &b| {
        c[a].tier().cmp(&c[b].tier()).then_with(|| {
            if c[a].tier() == 2 {
                c[a].stall_rate().total_cmp(&c[b].stall_rate())
            } else {
                std::cmp::Ordering::Equal
            }
        })
    });
    let mut out = Vec::with_capacity(c.len());
    while let Some(&first) = left.first() {
        // The block of equal stall standing.
        let same = |i: usize| {
            c[i].tier() == c[first].tier() && (c[i].tier() != 2 || c[i].stall_rate() == c[first].stall_rate())
        };
        let block: Vec<usize> = left.iter().copied().take_while(|&i| same(i)).collect();
        left.drain(..block.len());
        let mut block = block;
        while !block.is_empty() {
            let best = *block.iter().min_by(|&&a, &&b| c[a].p99.est.total_cmp(&c[b].p99.est)).expect("not empty");
            let (mut tied, rest): (Vec<usize>, Vec<usize>) = block.iter().partition(|&&i| p99_tied(&c[i], &c[best]));
            tied.sort_by(|&a, &b| {
                bucket(c[a].segs_per_round)
                    .cmp(&bucket(c[b].segs_per_round))
                    .then(bucket(c[a].bytes_per_round).cmp(&bucket(c[b].bytes_per_round)))
                    .then(c[a].change.cmp(&c[b].change))
                    .then(c[a].p99.est.total_cmp(&c[b].p99.est))
                    .then(c[a].label.cmp(&c[b].label))
            });
            out.extend(tied);
            block = rest;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(label: &str, stalls: u64, p99: (f64, f64, f64), segs: f64, change: u32) -> Scored {
        Scored {
            label: label.into(),
            stalls,
            rounds: 100,
            p99: Interval { est: p99.0, lo: p99.1, hi: p99.2 },
            segs_per_round: segs,
            bytes_per_round: segs * 100.0,
            change,
        }
    }

    fn order(c: &[Scored]) -> Vec<&str> {
        rank(c).into_iter().map(|i| c[i].label.as_str()).collect()
    }

    /// Seed 001's shape: as written every round stalls 40 ms; writev and cork remove the
    /// stalls with 2 segments a round, nodelay removes them at 4, server quick-ACK leaves a
    /// few. Stalls first, then (equal p99) the wire, then the change.
    #[test]
    fn stalls_first_then_p99_then_wire_then_change() {
        let c = vec![
            s("default", 100, (40_000.0, 39_000.0, 41_000.0), 3.0, 0),
            s("client:nodelay", 0, (60.0, 50.0, 70.0), 4.0, 1),
            s("client:cork", 0, (58.0, 50.0, 66.0), 2.0, 2),
            s("client:writev", 0, (55.0, 50.0, 62.0), 2.0, 1),
            s("server:quickack-each", 5, (40_000.0, 50.0, 41_000.0), 5.0, 2),
            s("client:msg-more", 0, (500.0, 450.0, 560.0), 2.0, 1),
        ];
        assert_eq!(
            order(&c),
            ["client:writev", "client:cork", "client:nodelay", "client:msg-more", "server:quickack-each", "default"]
        );
    }

    /// 1.03 against 1.04 segments per round is noise: the smaller change wins.
    #[test]
    fn near_equal_wire_costs_leave_it_to_the_change() {
        let c = vec![s("cork", 0, (60.0, 50.0, 70.0), 1.03, 3), s("writev", 0, (60.0, 50.0, 70.0), 1.04, 2)];
        assert_eq!(order(&c), ["writev", "cork"]);
        assert!(bucket(1.0) < bucket(1.2) && bucket(0.0) < bucket(0.001));
    }

    #[test]
    fn a_rare_stall_ranks_below_none_and_above_many() {
        let c = vec![
            s("many", 50, (100.0, 90.0, 110.0), 1.0, 0),
            s("rare", 0, (100.0, 90.0, 110.0), 1.0, 0),
            s("none", 0, (100.0, 90.0, 110.0), 9.0, 5),
        ];
        let mut c = c;
        c[1].stalls = 0;
        c[1].rounds = 1000;
        c[1].stalls = 3;
        assert_eq!(order(&c), ["none", "rare", "many"]);
        assert_eq!(c[1].tier(), 1);
    }

    /// Microseconds apart with zero-width intervals (the deterministic model): still equal.
    #[test]
    fn tiny_p99_differences_do_not_outrank_the_wire() {
        let c = vec![s("nodelay", 0, (10.0, 10.0, 10.0), 2.5, 1), s("writev", 0, (20.0, 20.0, 20.0), 1.0, 2)];
        assert_eq!(order(&c), ["writev", "nodelay"]);
        let c = vec![s("a", 0, (5000.0, 5000.0, 5000.0), 2.5, 1), s("b", 0, (6000.0, 6000.0, 6000.0), 1.0, 2)];
        assert_eq!(order(&c), ["b", "a"], "within 25%");
        let c = vec![s("a", 0, (5000.0, 5000.0, 5000.0), 2.5, 1), s("b", 0, (9000.0, 9000.0, 9000.0), 1.0, 2)];
        assert_eq!(order(&c), ["a", "b"], "1.8x apart and distinguishable");
    }

    #[test]
    fn a_distinguishably_better_p99_beats_a_cheaper_wire() {
        let c = vec![s("cheap", 0, (900.0, 850.0, 950.0), 2.0, 1), s("fast", 0, (60.0, 50.0, 70.0), 6.0, 3)];
        assert_eq!(order(&c), ["fast", "cheap"]);
        assert!(rank(&[]).is_empty());
    }
}
