//! Pure ranking tests with synthetic intervals: ties, the smallest-change order, busy-poll's
//! demotion, determinism.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::*;

/// A candidate from its label ("client:writev server:busy-poll", "default"), its stalls in 100
/// rounds, its p99 (est, lo, hi) in us and its segments per round.
fn s(label: &str, stalls: u64, p99: (f64, f64, f64), segs: f64) -> Scored {
    let mut client = Vec::new();
    let mut server = Vec::new();
    for part in label.split_whitespace().filter(|p| *p != "default") {
        let (side, list) = part.split_once(':').expect("side:opts");
        let opts: Vec<Opt> = list.split(',').map(|o| o.parse().expect("an Opt")).collect();
        match side {
            "client" => client = opts,
            _ => server = opts,
        }
    }
    let change = client.iter().chain(&server).map(|o| crate::change_size(*o)).sum();
    Scored {
        label: label.into(),
        client,
        server,
        stalls,
        rounds: 100,
        p99: Interval { est: p99.0, lo: p99.1, hi: p99.2 },
        segs_per_round: segs,
        bytes_per_round: segs * 100.0,
        cpu_us_per_round: None,
        change,
        impractical: false,
    }
}

/// Issue 34, mosquitto: the broker's writes are separate replies, so gathering them is not a
/// change it can make; even with a lower p99 it is not first: server nodelay (tied on stalls)
/// is, by rule practical.
#[test]
fn a_change_the_program_cannot_make_is_not_first() {
    let mut writev = s("server:writev", 0, (80.0, 70.0, 90.0), 2.0);
    writev.impractical = true;
    let c = vec![
        s("default", 100, (40_000.0, 39_000.0, 41_000.0), 3.0),
        writev,
        s("server:nodelay", 0, (3_000.0, 2_800.0, 3_200.0), 4.0),
    ];
    assert_eq!(order(&c), ["server:nodelay", "server:writev", "default"]);
    let (t, rule) = tie(&c);
    assert_eq!((t, rule), (vec!["server:nodelay", "server:writev"], Rule::Practical));
    assert!(decide(&c).reason(&c).contains("separate replies"));
    // A practical writev still wins its tie.
    let c = vec![s("server:writev", 0, (80.0, 70.0, 90.0), 2.0), s("server:nodelay", 0, (90.0, 70.0, 95.0), 4.0)];
    assert_eq!(order(&c)[0], "server:writev");
}

fn order(c: &[Scored]) -> Vec<&str> {
    rank(c).into_iter().map(|i| c[i].label.as_str()).collect()
}

fn tie(c: &[Scored]) -> (Vec<&str>, Rule) {
    let d = decide(c);
    (d.tie.iter().map(|&i| c[i].label.as_str()).collect(), d.rule)
}

/// Seed 001's shape: as written every round stalls 40 ms; writev, nodelay and cork remove the
/// stalls within each other's intervals (a tie), msg-more is distinguishably slower (by more than the 1 ms tie margin), server
/// quick-ACK leaves a few. Stalls first, then p99, then the smallest change.
#[test]
fn stalls_first_then_p99_then_the_smallest_change() {
    let c = vec![
        s("default", 100, (40_000.0, 39_000.0, 41_000.0), 3.0),
        s("client:nodelay", 0, (60.0, 50.0, 70.0), 4.0),
        s("client:cork", 0, (58.0, 50.0, 66.0), 2.0),
        s("client:writev", 0, (55.0, 50.0, 62.0), 2.0),
        s("server:quickack-each", 5, (40_000.0, 50.0, 41_000.0), 5.0),
        s("client:msg-more", 0, (2_500.0, 2_300.0, 2_700.0), 2.0),
    ];
    assert_eq!(
        order(&c),
        ["client:writev", "client:nodelay", "client:cork", "client:msg-more", "server:quickack-each", "default"]
    );
    assert_eq!(tie(&c), (vec!["client:writev", "client:nodelay", "client:cork"], Rule::GatheredWrite));
}

/// The run-to-run flip: writev, cork and MSG_MORE overlap; writev is chosen whichever of
/// them has the lowest estimate, and the sentence says so.
#[test]
fn overlapping_intervals_are_a_declared_tie_and_writev_is_the_smallest_portable_change() {
    for lowest in ["client:writev", "client:cork", "client:msg-more"] {
        let p = |l: &str| if l == lowest { (60.0, 40.0, 900.0) } else { (300.0, 50.0, 4000.0) };
        let c = vec![
            s("default", 100, (44_000.0, 43_000.0, 48_000.0), 2.5),
            s("client:cork", 0, p("client:cork"), 1.0),
            s("client:msg-more", 0, p("client:msg-more"), 1.0),
            s("client:writev", 0, p("client:writev"), 1.0),
        ];
        let d = decide(&c);
        assert_eq!(tie(&c), (vec!["client:writev", "client:msg-more", "client:cork"], Rule::GatheredWrite), "{lowest}");
        let why = d.reason(&c);
        assert!(why.starts_with("client:writev, client:msg-more and client:cork tie (no stalls"), "{why}");
        assert!(why.contains("client:writev is first by rule gathered-write"), "{why}");
        assert!(why.contains("smallest portable change"), "{why}");
        assert_eq!(why.matches(". ").count(), 0, "one sentence: {why}");
    }
}

#[test]
fn one_side_before_both_and_portable_before_linux_only() {
    let c = vec![
        s("client:writev server:writev", 0, (50.0, 40.0, 60.0), 2.0),
        s("client:writev", 0, (70.0, 45.0, 90.0), 2.0),
    ];
    assert_eq!(tie(&c), (vec!["client:writev", "client:writev server:writev"], Rule::FewestSides));
    assert!(decide(&c).reason(&c).contains("one side, not both"));
    // No gathered write among them: TCP_NODELAY (portable), MSG_MORE (Linux, FreeBSD), TCP_CORK.
    let c = vec![
        s("client:cork", 0, (50.0, 40.0, 60.0), 1.0),
        s("client:msg-more", 0, (52.0, 40.0, 60.0), 1.0),
        s("client:nodelay", 0, (55.0, 40.0, 60.0), 2.5),
    ];
    assert_eq!(tie(&c), (vec!["client:nodelay", "client:msg-more", "client:cork"], Rule::Portable));
    assert!(decide(&c).reason(&c).contains("smallest portable change"));
    let c = vec![s("client:cork", 0, (50.0, 40.0, 60.0), 1.0), s("client:msg-more", 0, (52.0, 40.0, 60.0), 1.0)];
    assert_eq!(tie(&c), (vec!["client:msg-more", "client:cork"], Rule::Portable));
    assert!(decide(&c).reason(&c).contains("most portable change"));
}

/// Seed 000 (`advise chunked`): spinning on both sides has the lowest p99, far below the
/// gathered write's, yet the gathered write is recommended; busy-poll is first only when it
/// alone removes the wait.
#[test]
fn busy_poll_is_demoted_unless_it_alone_removes_the_wait() {
    let c = vec![
        s("default", 200, (90_000.0, 88_000.0, 92_000.0), 9.0),
        s("client:busy-poll,writev server:busy-poll,writev", 0, (20.0, 18.0, 22.0), 2.0),
        s("client:writev server:writev", 0, (600.0, 500.0, 700.0), 2.0),
        s("client:nodelay server:nodelay", 0, (2_950.0, 2_800.0, 3_100.0), 130.0),
    ];
    let o = order(&c);
    assert_eq!(o[0], "client:writev server:writev", "{o:?}");
    assert_eq!(o[1], "client:busy-poll,writev server:busy-poll,writev", "{o:?}");
    assert_eq!(o[3], "default");
    let d = decide(&c);
    assert_eq!(d.rule, Rule::NoBusyPoll);
    assert_eq!(d.tie.len(), 2, "the spinning candidate with the lower p99 is in the declared tie");
    assert!(d.reason(&c).contains("does not spin a CPU"), "{}", d.reason(&c));
    // Only the spinning candidate removes the stalls: it comes first.
    let c = vec![
        s("client:writev", 30, (44_000.0, 40_000.0, 48_000.0), 2.0),
        s("client:writev server:busy-poll", 0, (40.0, 30.0, 50.0), 2.0),
    ];
    assert_eq!(tie(&c), (vec!["client:writev server:busy-poll"], Rule::Alone));
    assert!(decide(&c).reason(&c).starts_with("client:writev server:busy-poll ranks first alone"));
}

/// After the change's shape, CPU per round decides (in 1.5x buckets), then the wire.
#[test]
fn cpu_then_segments_break_the_remaining_ties() {
    let mut a = s("client:nodelay server:quickack-each", 0, (50.0, 40.0, 60.0), 3.0);
    let mut b = s("client:cork server:quickack-each", 0, (52.0, 40.0, 60.0), 1.5);
    a.cpu_us_per_round = Some(10.0);
    b.cpu_us_per_round = Some(40.0);
    let c = vec![b.clone(), a.clone()];
    assert_eq!(tie(&c), (vec!["client:nodelay server:quickack-each", "client:cork server:quickack-each"], Rule::Cpu));
    // 10 against 11 us is noise: the segments decide.
    b.cpu_us_per_round = Some(11.0);
    let c = vec![a, b];
    assert_eq!(
        tie(&c),
        (vec!["client:cork server:quickack-each", "client:nodelay server:quickack-each"], Rule::Segments)
    );
}

/// The workload as written does not stall and ties with the fixes: keep it.
#[test]
fn as_written_wins_a_tie_it_is_in() {
    let c = vec![s("client:writev", 0, (50.0, 40.0, 60.0), 1.0), s("default", 0, (55.0, 45.0, 65.0), 1.0)];
    assert_eq!(tie(&c), (vec!["default", "client:writev"], Rule::FewestSides));
    assert!(decide(&c).reason(&c).contains("it changes no code"));
}

/// The same input in any order gives the same ranking; re-measured inputs whose estimates move
/// inside their intervals (5 runs of 5) give the same recommendation, chosen by the same rule,
/// from a tie that always holds the overlapping fixes (its edge may move with the estimates:
/// the output declares it each time).
#[test]
fn the_decision_is_deterministic_and_stable_under_noise() {
    let base = vec![
        s("default", 100, (44_000.0, 43_000.0, 48_000.0), 2.5),
        s("client:writev", 0, (60.0, 40.0, 1_600.0), 1.0),
        s("client:cork", 0, (4_000.0, 80.0, 4_000.0), 1.0),
        s("client:msg-more", 0, (990.0, 80.0, 1_640.0), 1.0),
        s("client:nodelay", 0, (3_670.0, 150.0, 4_770.0), 2.5),
        s("server:quickack-each", 0, (1_590.0, 120.0, 2_470.0), 2.8),
        s("server:quickack-once", 100, (48_000.0, 47_000.0, 52_000.0), 2.5),
        s("client:nodelay server:quickack-each", 0, (130.0, 110.0, 130.0), 3.1),
        s("client:cork server:quickack-each", 0, (4_680.0, 110.0, 5_450.0), 1.5),
        s("client:writev server:busy-poll", 0, (30.0, 25.0, 40.0), 1.0),
    ];
    let names = |c: &[Scored], v: &[usize]| v.iter().map(|&i| c[i].label.clone()).collect::<Vec<_>>();
    let want = decide(&base);
    let want_order = names(&base, &want.order);
    assert_eq!(want_order[0], "client:writev");
    assert_eq!(want.rule, Rule::GatheredWrite);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(26);
    for run in 0..25 {
        let mut c = base.clone();
        c.shuffle(&mut rng);
        assert_eq!(names(&c, &decide(&c).order), want_order, "run {run}: the order does not depend on the input's");
        // Noise: each estimate moves within its interval.
        for x in c.iter_mut() {
            x.p99.est = rng.gen_range(x.p99.lo..=x.p99.hi);
        }
        let d = decide(&c);
        let tie = names(&c, &d.tie);
        assert_eq!(tie[0], "client:writev", "run {run}: {tie:?}");
        assert_eq!(d.rule, Rule::GatheredWrite, "run {run}: {tie:?}");
        for core in ["client:cork", "client:msg-more", "client:writev server:busy-poll"] {
            assert!(tie.iter().any(|l| l == core), "run {run}: {core} not in {tie:?}");
        }
    }
    assert!(rank(&[]).is_empty());
    assert_eq!(decide(&[]).rule, Rule::Alone);
}

#[test]
fn a_rare_stall_ranks_below_none_and_above_many() {
    let mut c = vec![
        s("client:writev", 50, (100.0, 90.0, 110.0), 1.0),
        s("client:cork", 3, (100.0, 90.0, 110.0), 1.0),
        s("client:nodelay", 0, (100.0, 90.0, 110.0), 9.0),
    ];
    c[1].rounds = 1000;
    assert_eq!(order(&c), ["client:nodelay", "client:cork", "client:writev"]);
    assert_eq!(c[1].tier(), 1);
}

/// Microseconds apart with zero-width intervals (the deterministic model): still a tie.
#[test]
fn tiny_p99_differences_tie_and_distinguishable_ones_do_not() {
    let c = vec![s("client:nodelay", 0, (10.0, 10.0, 10.0), 2.5), s("client:writev", 0, (20.0, 20.0, 20.0), 1.0)];
    assert_eq!(order(&c), ["client:writev", "client:nodelay"]);
    let c = vec![
        s("client:nodelay", 0, (5000.0, 5000.0, 5000.0), 2.5),
        s("client:writev", 0, (6000.0, 6000.0, 6000.0), 1.0),
    ];
    assert_eq!(order(&c), ["client:writev", "client:nodelay"], "within 25%");
    let c = vec![
        s("client:nodelay", 0, (5000.0, 5000.0, 5000.0), 2.5),
        s("client:writev", 0, (9000.0, 9000.0, 9000.0), 1.0),
    ];
    assert_eq!(order(&c), ["client:nodelay", "client:writev"], "1.8x apart and distinguishable");
    assert_eq!(tie(&c).1, Rule::Alone);
    assert!(bucket(1.0, 1.05) < bucket(1.2, 1.05) && bucket(0.0, 1.05) < bucket(0.001, 1.05));
}
