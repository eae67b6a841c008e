//! The seed reports reproduced by the model (issue 5's acceptance table).
//!
//! Robust signals only: a stall is a sample >= 30 ms above the run's fastest, no stall means
//! every sample < 5 ms above it.

use model::{report, simulate, Profile, RunSpec, SimConfig};
use scenario::{LinkSpec, Scenario};
use tcpstall_model as model;
use trace::{Cause, Endpoint, EventKind};

fn run(scenario: &str, sets: &[&str], profile: &str, link: LinkSpec, mss: Option<u32>) -> report::Report {
    let mut s = Scenario::builtin(scenario).unwrap();
    s.apply_sets(sets).unwrap();
    let p = Profile::builtin(profile).unwrap();
    let spec = RunSpec {
        profiles: vec![(p.clone(), p)],
        link_label: link.to_string(),
        link,
        seed: 1,
        mss,
        // A forced MSS here is seed 004's Windows peer: 1460 bytes of data in a 1500-byte MTU
        // leaves no room for timestamps (RFC 6691 2).
        timestamps: mss.map(|_| false),
        call_ns: 0,
    };
    let pairs = s.matrix.clone();
    let (r, _) = report(&s, &pairs, &spec, false);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for row in &r.results {
        eprintln!(
            "{profile} {scenario} {:?} [{}] {}: p50 {:.2} ms max {:.2} ms stalls {}/{} {:?} wire c{}/s{}",
            sets,
            row.variant,
            row.strategy,
            row.latency_us.p50 / 1e3,
            row.latency_us.max / 1e3,
            row.stall_count.unwrap_or(0),
            row.rounds,
            row.verdict_key,
            row.wire.client.segs_out,
            row.wire.server.segs_out
        );
    }
    r
}

fn row<'a>(r: &'a report::Report, strategy: &str) -> &'a report::RunResult {
    r.results.iter().find(|x| x.strategy == strategy).unwrap_or_else(|| panic!("no row {strategy}"))
}

fn mtu1500() -> LinkSpec {
    "mtu=1500,rtt=100us".parse().unwrap()
}

/// Seed 004 on the textbook stack (RFC 896 Nagle + RFC 1122 delayed ACK), MSS 1448:
/// 100,000 B = 69 full segments + 88 B: the odd 69th segment waits for the 200 ms delayed ACK
/// and Nagle holds the 88-byte tail behind it.
#[test]
fn seed_004_rfc_classic_stalls_at_100000_not_at_99900() {
    let r = run("bulk-ack", &["size=100000", "rounds=5"], "rfc-classic", mtu1500(), None);
    let d = row(&r, "default");
    assert!(d.latency_us.p50 >= 150_000.0, "100,000 B should stall ~200 ms: {}", d.verdict);
    assert_eq!(d.verdict_key.cause, Some(Cause::NagleDelayedAck));
    let r = run("bulk-ack", &["size=99900", "rounds=5"], "rfc-classic", mtu1500(), None);
    let d = row(&r, "default");
    assert!(d.latency_us.max < 30_000.0, "99,900 B = 68 full + 1436 B: no stall: {}", d.verdict);
    assert!(!d.verdict_key.stalls);
}

/// Seed 004: at MSS 1460 (no timestamps, Windows) 100,000 B = 68 full + 720 B: even, no stall;
/// the parity flips.
#[test]
fn seed_004_mss_1460_flips_the_parity() {
    let r = run("bulk-ack", &["size=100000", "rounds=5"], "rfc-classic", mtu1500(), Some(1460));
    assert!(!row(&r, "default").verdict_key.stalls, "{}", row(&r, "default").verdict);
    let r = run("bulk-ack", &["size=99900", "rounds=5"], "rfc-classic", mtu1500(), Some(1460));
    // 99,900 = 68 * 1460 + 620: also even, no stall.
    assert!(!row(&r, "default").verdict_key.stalls);
    // An odd count at 1460: 69 * 1460 + 100 = 100,840 B.
    let r = run("bulk-ack", &["size=100840", "rounds=5"], "rfc-classic", mtu1500(), Some(1460));
    assert!(row(&r, "default").verdict_key.stalls);
}

/// Seed 004: double buffering (depth 2) keeps data behind the tail, so the odd segment is
/// always followed by another and the delayed ACK never holds the pipe in the measured rounds.
#[test]
fn seed_004_double_buffering_removes_the_stall() {
    let r = run("bulk-ack", &["size=100000", "rounds=6", "depth=2"], "rfc-classic", mtu1500(), None);
    let d = row(&r, "default");
    assert!(d.latency_us.p50 < 30_000.0, "{}", d.verdict);
}

/// Seed 004 at depth 2 on the classic stack (RFC 896 Nagle, RFC 1122 4.2.3.2 delayed ACK: an
/// ACK for at least every second full-sized segment), as the lab measures it (Sample::
/// ClientRound, clock and counters from the first to the last measured round, prologue and
/// epilogue outside): no measured round stalls, whatever the number of rounds. Only the LAST
/// message has no successor to push its tail out: while the pipeline drains (the epilogue,
/// the client reading the last 1-byte ack), Nagle holds the tail until the receiver's delayed
/// ACK when the full segments it got since its last ACK (its previous 1-byte app ack, which
/// carried one) are odd in number. That parity moves with the rounds: 100,000 B = 69 * 1448 +
/// 88 and the messages coalesce into one stream, so the boundary falls elsewhere each round
/// (rounds = 4, 6 and 8: odd, a 200 ms epilogue wait; 9, 11 and 12: even, none; the link
/// counts IP bytes at its rate, as the emulated link does, since issue 36). The report must say
/// so instead of folding the wait into ms/round (QA finding 7: 10 ms/round at p50 0.02 ms).
#[test]
fn seed_004_depth_2_epilogue_wait_follows_the_parity_and_is_not_measured() {
    let p = Profile::builtin("rfc-classic").unwrap();
    let mut seen = [false; 2];
    for rounds in 1..=12u32 {
        let mut s = Scenario::builtin("bulk-ack").unwrap();
        s.apply_sets(&["size=100000", "depth=2", &format!("rounds={rounds}")]).unwrap();
        let mut cfg = SimConfig::new(&p, &p, LinkSpec { mtu: 1500, ..model::loopback_link() });
        cfg.record_trace = true;
        cfg.call_ns = 2_000;
        let pair = s.matrix.iter().find(|x| x.label == "default").unwrap().clone();
        let out = simulate(&s.workload, &pair, &cfg).unwrap();
        let mss = out.sides[0].mss;
        // The receiver's last ACK before the drain: its 1-byte app ack of the last measured
        // message. Full segments not covered by it arrive after it and are counted afresh.
        let last_ack = out
            .trace
            .iter()
            .rev()
            .filter(|e| e.t.0 <= out.measured_to && e.from == Endpoint::B)
            .filter_map(|e| match &e.kind {
                EventKind::Segment(sg) if sg.len == 1 => Some(sg.ack),
                _ => None,
            })
            .next()
            .expect("an app ack");
        let full_after = out
            .trace
            .iter()
            .filter(|e| e.from == Endpoint::A)
            .filter(|e| matches!(&e.kind, EventKind::Segment(sg) if sg.len == mss && sg.seq >= last_ack))
            .count();
        let drain_wait = out.releases.iter().filter(|r| r.t > out.measured_to && r.t - r.since > 150_000_000).count();
        let r = model::run_result(&out, &pair, "", &p, &p);
        eprintln!(
            "rounds={rounds}: {full_after} full segments after the last ack, epilogue waits {drain_wait}, \
             {:.3} ms/round, max {:.3} ms: {}",
            r.wall_s * 1e3 / f64::from(rounds),
            r.latency_us.max / 1e3,
            r.verdict
        );
        assert_eq!(drain_wait, full_after % 2, "rounds={rounds}: the odd segment waits, an even count does not");
        seen[full_after % 2] = true;
        // The measured rounds: no stall, and the wall time per round agrees with the samples.
        assert_eq!(r.rounds, u64::from(rounds));
        assert!(!r.verdict_key.stalls && r.stall_count == Some(0), "rounds={rounds}: {}", r.verdict);
        assert!(r.latency_us.max < 5_000.0, "rounds={rounds}: {}", r.verdict);
        assert!(r.wall_s * 1e3 / f64::from(rounds) < 5.0, "rounds={rounds}: wall {} s", r.wall_s);
        // The wait outside them is reported, not hidden.
        assert_eq!(r.verdict.contains("epilogue"), drain_wait == 1, "rounds={rounds}: {}", r.verdict);
        if drain_wait == 1 {
            assert!(r.verdict.contains("nagle-delayed-ack"), "{}", r.verdict);
        }
    }
    assert_eq!(seen, [true, true], "both parities occur between 1 and 12 rounds");
}

/// Seed 004: Minshall's rule (Linux tcp_minshall_check) and XNU's TF_MAXSEGSNT rule let the
/// small tail go after full-size segments: no stall on linux or macos.
#[test]
fn seed_004_linux_and_macos_do_not_stall() {
    for p in ["linux", "macos"] {
        let r = run("bulk-ack", &["size=100000", "rounds=5"], p, mtu1500(), None);
        let d = row(&r, "default");
        assert!(!d.verdict_key.stalls, "{p}: {}", d.verdict);
        assert!(d.latency_us.max < 5_000.0, "{p}: {}", d.verdict);
    }
}

/// Seed 000 on Linux loopback: default options stall ~40 ms twice per round
/// (STACK-FACTS: ~83 ms per round); NODELAY, quickack-each, cork, msg-more, writev and buffer
/// do not; quickack-once does not help.
#[test]
fn seed_000_linux_loopback() {
    let r = run("chunked", &["round=10"], "linux", model::loopback_link(), None);
    let d = row(&r, "default");
    assert!(d.latency_us.p50 >= 70_000.0 && d.latency_us.p50 <= 100_000.0, "{}", d.verdict);
    assert_eq!(d.verdict_key.cause, Some(Cause::NagleDelayedAck));
    // Two ~40 ms waits per round once both sides are interactive (round 1 has quick ACKs).
    assert_eq!(d.stall_count, Some(18), "{}", d.verdict);
    assert!(row(&r, "quickack-once").verdict_key.stalls);
    for ok in ["nodelay", "quickack-each", "cork", "msg-more", "writev", "buffer"] {
        let x = row(&r, ok);
        assert!(!x.verdict_key.stalls, "{ok}: {}", x.verdict);
        assert!(x.latency_us.p50 < 5_000.0, "{ok}: {}", x.verdict);
    }
    // NODELAY costs segments: every 10-byte write is its own segment.
    assert!(row(&r, "nodelay").wire.client.data_segs_out > 5 * row(&r, "default").wire.client.data_segs_out);
}

/// Seed 001 on Linux loopback: the request waits ~40 ms once the connection is interactive;
/// every fix in STACK-FACTS removes it on a current kernel (including nodelay-then-cork).
#[test]
fn seed_001_linux_loopback() {
    let r = run("multi-write", &["requests=10"], "linux", model::loopback_link(), None);
    let d = row(&r, "default");
    assert!(d.latency_us.p50 >= 30_000.0 && d.latency_us.p50 < 60_000.0, "{}", d.verdict);
    // Wire cost over the 10 measured requests only (warm-up excluded, as in the lab, which
    // measured 12 client and 18 server segments for 6 requests on this kernel): the 275-byte
    // write, the merged 316 bytes; the server's delayed ACK, the ACK of the 316, the response.
    assert_eq!((d.wire.client.segs_out, d.wire.server.segs_out), (20, 30));
    for ok in ["nodelay", "cork", "nodelay-then-cork", "msg-more", "writev", "buffer", "server quickack-each"] {
        assert!(!row(&r, ok).verdict_key.stalls, "{ok}: {}", row(&r, ok).verdict);
    }
}

/// Seed 002 on Linux loopback: N = 3 stalls ~40 ms on every third read after the first round;
/// N = 2 does not; TCP_QUICKACK after each recv removes it.
#[test]
fn seed_002_linux_loopback() {
    let r = run("burst", &["rounds=5"], "linux", model::loopback_link(), None);
    let d = row(&r, "default");
    assert!(d.verdict_key.stalls, "{}", d.verdict);
    assert!(d.latency_us.max >= 30_000.0);
    assert_eq!(d.stall_count, Some(4), "one stalled read per round after the first: {}", d.verdict);
    assert!(!row(&r, "client quickack-each").verdict_key.stalls);
    let r = run("burst", &["rounds=5", "n=2"], "linux", model::loopback_link(), None);
    assert!(!row(&r, "default").verdict_key.stalls, "{}", row(&r, "default").verdict);
}
