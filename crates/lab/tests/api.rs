//! The library API other parts of tcpstall call (`simulate`'s agreement test, the CLI).

use scenario::{Scenario, SideOpts, StrategyPair};
use tcpstall_lab::{self as lab, LabOptions, Placement, Progress};

/// The client's retransmissions in a row. tcpi_bytes_sent and tcpi_data_segs_out count them: on
/// a loaded host a late ACK can fire a tail loss probe (RFC 8985 7; tcp_send_loss_probe) that
/// resends the last segment, so exact counts hold only up to one segment per retransmission.
fn retransmits(x: &report::RunResult) -> u64 {
    x.tcp.as_ref().map_or(0, |t| t.client.retransmits)
}

#[test]
fn run_scenario_reports_every_row_and_progress() {
    let mut s = Scenario::builtin("rr").unwrap();
    s.apply_sets(&["rounds=200"]).unwrap();
    let mut seen = Vec::new();
    let r = lab::run_scenario(&s, &Placement::loopback(), &LabOptions::default(), &mut |p| seen.push(p));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.mode, "lab");
    assert_eq!(r.results.len(), 2);
    for x in &r.results {
        assert_eq!(x.rounds, 200);
        assert!(!x.verdict_key.stalls, "{}", x.verdict);
        // One 1-byte request per round, each in its own segment.
        assert!((200..=200 + retransmits(x)).contains(&x.wire.client.bytes_sent), "{:?}", x.wire);
        assert!(x.wire.client.data_segs_out >= 200);
    }
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0], Progress::Start { index: 0, total: 2, label: "default".into() });
    assert_eq!(seen[3], Progress::Done { index: 1, total: 2 });
}

#[test]
fn an_error_is_one_line_in_the_report_and_stops_the_run() {
    // 192.0.2.1 (TEST-NET-1, RFC 5737) is on no interface: bind fails with EADDRNOTAVAIL.
    let mut place = Placement::loopback();
    place.server_ip = "192.0.2.1".parse().unwrap();
    let mut s = Scenario::builtin("rr").unwrap();
    s.apply_sets(&["rounds=10"]).unwrap();
    let opts = LabOptions { own_netns: false, ..LabOptions::default() };
    let r = lab::run_scenario(&s, &place, &opts, &mut |_| {});
    assert!(r.results.is_empty());
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(r.errors[0].starts_with("default: server: bind 192.0.2.1:0:"), "{}", r.errors[0]);
    assert!(!r.errors[0].contains('\n'));
}

#[test]
fn run_pair_applies_and_reads_back_the_strategy() {
    let w = Scenario::builtin("multi-write").unwrap().workload;
    let mut w = w;
    if let scenario::Workload::MultiWrite(m) = &mut w {
        m.requests = 3;
        m.warmup = 2;
    }
    let pair = StrategyPair::new(SideOpts::parse_list("nodelay").unwrap(), SideOpts::none());
    let r = lab::run_pair(&w, &pair, &Placement::loopback(), &LabOptions::default()).unwrap();
    assert_eq!(r.strategy, "client:nodelay");
    assert_eq!(r.client.nodelay, Some(true));
    assert_eq!(r.server.nodelay, Some(false));
    assert_eq!(r.client.strategies, vec!["nodelay"]);
    // NODELAY: each of the three writes of a request is its own segment.
    let re = retransmits(&r);
    assert!((9..=9 + re).contains(&r.wire.client.data_segs_out), "{:?} ({re} retransmits)", r.wire);
    let want = 3 * (275 + 24 + 292);
    assert!((want..=want + re * 292).contains(&r.wire.client.bytes_sent), "{:?} ({re} retransmits)", r.wire);
}

#[test]
fn a_cancelled_run_keeps_finished_rows_and_says_it_was_interrupted() {
    let mut s = Scenario::builtin("rr").unwrap();
    s.apply_sets(&["rounds=50"]).unwrap();
    // One row at a time (`--one-at-a-time`): by default the lab's probe decides from the
    // host's load whether rows run side by side, and on a busy host it ran both rr rows at once,
    // so "the second row starts" came before the first had finished (a soak run saw "0 of 2
    // rows finished", rightly). What this test holds is the interruption's handling.
    let opts = LabOptions { parallel: false, ..LabOptions::default() };
    let cancel = opts.cancel.clone();
    // Cancel as the second row starts: the first row is complete and kept.
    let r = lab::run_scenario(&s, &Placement::loopback(), &opts, &mut |p| {
        if let Progress::Start { index: 1, .. } = p {
            cancel.cancel();
        }
    });
    assert_eq!(r.results.len(), 1, "{:?}", r.errors);
    assert_eq!(r.results[0].rounds, 50);
    assert_eq!(r.errors.len(), 1);
    assert!(r.errors[0].starts_with("interrupted during row 'nodelay' (abandoned): 1 of 2 rows"), "{}", r.errors[0]);
}
