//! Bad workload, strategy and link input (QA findings 2, 4, 9, 11, 13): one line on stderr, a
//! non-zero exit, before anything is allocated, measured or set up.

use crate::support::tcpstall;

/// Run tcpstall with `args`; it must fail at once with one stderr line containing `needle`.
fn rejects(args: &[&str], needle: &str) {
    let t0 = std::time::Instant::now();
    let out = tcpstall().args(args).output().expect("run tcpstall");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail; stderr: {err}");
    assert_ne!(out.status.code(), Some(134), "{args:?} aborted: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected, got: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing measured, nothing printed");
    assert!(t0.elapsed().as_secs() < 10, "{args:?} took {:?} to refuse", t0.elapsed());
}

/// QA 2: huge counts aborted allocating memory (exit 134) or ran forever.
pub(crate) fn huge_counts_are_refused_with_the_parameter_and_its_limit() {
    let limit = "is above the limit of 1000000";
    rejects(&["lab", "--set", "round=4000000000", "-q", "--client", "nodelay"], &format!("round = 4000000000 {limit}"));
    rejects(&["lab", "multi-write", "--set", "requests=4000000000", "-q"], &format!("requests = 4000000000 {limit}"));
    rejects(
        &["lab", "multi-write", "--set", "warmup=4000000000", "-q"],
        "warmup = 4000000000 is above the limit of 10000",
    );
    rejects(&["lab", "burst", "--set", "rounds=4000000000", "-q"], &format!("rounds = 4000000000 {limit}"));
    rejects(&["lab", "burst", "--set", "n=4000000000", "-q"], "n = 4000000000 is above the limit of 10000");
    rejects(&["simulate", "burst", "--set", "n=4000000000"], "n = 4000000000 is above the limit of 10000");
    rejects(&["lab", "bulk-ack", "--set", "rounds=4000000000", "-q"], &format!("rounds = 4000000000 {limit}"));
    rejects(&["lab", "rr", "--rounds", "4000000000", "-q"], &format!("rounds = 4000000000 {limit}"));
    rejects(&["simulate", "--rounds", "4000000000"], &format!("round = 4000000000 {limit}"));
    rejects(
        &["simulate", "chunked", "--set", "n_chunk=5000", "--set", "send=10000"],
        "n_chunk = 5000 is above the limit of 1024",
    );
}

/// QA 2: the tcp_test.conf path has the same limits, named by file and line.
pub(crate) fn a_config_file_with_a_huge_count_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("tcp_test.conf");
    std::fs::write(&conf, "no_delay 1\nsend 1000\nround 4000000000\n").unwrap();
    let conf = conf.to_str().unwrap();
    rejects(&["lab", "--config", conf, "-q"], &format!("{conf}:3: round = 4000000000 is above the limit of 1000000"));
}

/// QA 4: a burst beyond what the socket buffers hold deadlocked both sides in send().
pub(crate) fn a_burst_that_would_deadlock_is_refused_and_says_why() {
    // 8000 x 132 bytes = 1,056,000 > 1 MiB.
    let args = ["lab", "burst", "--set", "n=8000", "--set", "rounds=1", "--client", "nodelay", "-q"];
    rejects(&args, "n x size = 1056000 is above the limit of 1048576");
    rejects(&args, "a deadlock, not a stall");
    rejects(&["simulate", "burst", "--set", "size=1448", "--set", "n=1000"], "a deadlock, not a stall");
}

/// QA 11: `--set` values in plain words, a single value for a list, and a depth sweep.
pub(crate) fn set_values_are_read_as_the_parameter_type() {
    rejects(
        &["lab", "multi-write", "--set", "writes=275,abc", "-q"],
        "--set writes: '275,abc' is not a list of whole numbers",
    );
    rejects(&["lab", "multi-write", "--set", "response=abc", "-q"], "--set response: 'abc' is not a whole number");
    let out = tcpstall()
        .args(["simulate", "bulk-ack", "--set", "sweep=100000", "--set", "depth=1,2", "--set", "rounds=4"])
        .args(["--client", "none", "--format", "json"])
        .output()
        .expect("run tcpstall");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let variants: Vec<_> = r["results"].as_array().unwrap().iter().map(|x| x["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["size=100000 depth=1", "size=100000 depth=2"], "{r:#}");
}

/// QA 9: link SPECs: a bare loss number, repeated keys, an empty SPEC, rtt against one delay.
pub(crate) fn link_specs_that_could_be_misread_are_refused() {
    rejects(
        &["simulate", "--link", "rtt=2ms,loss=0.5"],
        "'0.5' needs a % sign (netem reads `loss 0.5` as 0.5 percent): write 0.5%",
    );
    rejects(&["simulate", "--link", "ack-loss=0.5"], "write 0.5%");
    rejects(&["simulate", "--link", "rtt=5ms,rtt=6ms"], "'rtt' is given twice");
    rejects(&["simulate", "--link", ""], "the SPEC is empty");
    rejects(&["lab", "--link", "", "-q"], "the SPEC is empty");
    rejects(&["simulate", "--link", "delay=1ms,rtt=10ms"], "rtt=10 ms disagrees with the one-way delays");
    rejects(&["simulate", "--link", "rtt=10ms,delay-up=12ms"], "delay-up=12 ms is longer than rtt=10 ms");
    // rtt with one one-way delay: the other is what is left, so a round trip takes the rtt
    // (QA: the other was taken as half the rtt, a 6 ms round trip for rtt=10ms).
    let out = tcpstall()
        .args(["simulate", "rr", "--link", "rtt=10ms,delay-up=1ms", "--rounds", "3", "--client", "none"])
        .args(["--format", "json"])
        .output()
        .expect("run tcpstall");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let p50 = r["results"][0]["latency_us"]["p50"].as_f64().expect("p50");
    assert!((9_000.0..11_000.0).contains(&p50), "a 10 ms round trip, got p50 {p50} us");
}

/// QA 13: `none` among strategies, and an empty list.
pub(crate) fn strategy_lists_are_none_alone_or_strategies() {
    rejects(
        &["lab", "--client", "none,nodelay", "-q"],
        "--client: 'none,nodelay': none means no strategy, so it cannot be listed with strategies",
    );
    rejects(&["simulate", "--server", "nodelay,none"], "--server: 'nodelay,none': none means no strategy");
    rejects(&["lab", "--client", "", "-q"], "--client: the strategy list is empty (use none for no strategy)");
    rejects(&["simulate", "--client", "nagle"], "unknown strategy 'nagle'");
}
