//! End-to-end tests of `tcpstall lab` and `tcpstall scenarios`: real sockets on this kernel,
//! JSON output parsed, the seeds' findings asserted with robust margins (a stall is >= 30 ms,
//! no stall is < 5 ms) and reduced rounds.

use serde_json::Value;

use crate::support::{exclusive, tcpstall, twice};

/// Run `tcpstall lab ARGS --format json -q`, expect success, return the report.
fn lab_json(args: &[&str]) -> Value {
    let mut cmd = tcpstall();
    cmd.arg("lab").args(args).args(["--format", "json", "--quiet"]);
    let out = cmd.output().expect("run tcpstall");
    assert!(
        out.status.success(),
        "tcpstall lab {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn row<'a>(r: &'a Value, strategy: &str) -> &'a Value {
    r["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|x| x["strategy"] == strategy)
        .unwrap_or_else(|| panic!("no row '{strategy}' in {r:#}"))
}

fn p50_us(x: &Value) -> f64 {
    x["latency_us"]["p50"].as_f64().expect("p50")
}

fn data_segs(x: &Value) -> u64 {
    x["wire"]["client"]["data_segs_out"].as_u64().unwrap() + x["wire"]["server"]["data_segs_out"].as_u64().unwrap()
}

fn stalls(x: &Value) -> bool {
    x["verdict_key"]["stalls"].as_bool().expect("verdict_key.stalls")
}

/// A fix removes the seeds' stall (Nagle holding a write until the peer's delayed ACK) from
/// the rounds: idle from every round. The kernel's behaviour is timing-dependent, though: on a
/// loaded host (four busy loops on 2 cores) a reply comes after the ACK timeout or a re-armed
/// quick ACK comes late, and some rounds stall the old way anyway (seen: 1-3 of 6 rounds for
/// quickack-each and msg-more, 2 of 5 for seed 004, 11 of 20 for a burst of two), while the
/// unfixed case stalls in every round. So a fix stalls in fewer rounds than `baseline` (the
/// unfixed row's stalls; None where there is none, as on Linux for seed 004) and its median
/// round stays far below a stall. Waits the lab attributes to no TCP mechanism (cause null:
/// "not a TCP timer ... scheduling", a thread descheduled) are not TCP stalls and do not count.
fn fixed(x: &Value, what: &str, baseline: Option<u64>) {
    let rounds = x["rounds"].as_u64().expect("rounds");
    let by_tcp = !x["verdict_key"]["cause"].is_null();
    let n = if by_tcp { x["stall_count"].as_u64().expect("stalls") } else { 0 };
    let most = baseline.map_or(rounds, |b| b.saturating_sub(1));
    assert!(n <= most, "{what}: {n} stalls in {rounds} rounds, the unfixed case {baseline:?}: {x:#}");
    assert!(p50_us(x) < 30_000.0, "{what}: {x:#}");
}

/// Expect a non-zero exit and exactly one line on stderr containing `needle`.
fn fails_with_one_line(args: &[&str], needle: &str) {
    let out = tcpstall().args(args).output().expect("run tcpstall");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail; stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected, got: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in: {err}");
}

pub(crate) fn seed_000_chunked_default_stalls_twice_per_round_and_the_fixes_do_not() {
    let _one_at_a_time = exclusive();
    let r = lab_json(&["chunked", "--set", "round=6"]);
    assert_eq!(r["tool"], "tcpstall");
    assert_eq!(r["scenario"], "chunked");
    assert_eq!(r["params"]["round"], 6);
    let x = row(&r, "default");
    // Two ~40 ms delayed-ACK waits per round: a round takes >= 60 ms.
    assert!(p50_us(x) >= 60_000.0, "default: {x:#}");
    assert_eq!(x["verdict_key"]["cause"], "nagle-delayed-ack", "default: {x:#}");
    // The first round rides the initial quick-ACK budget; the others stall twice (10 in 6
    // rounds idle; on a loaded host a late reply can merge two waits into one: 7 seen).
    assert!(x["stall_count"].as_u64().unwrap() >= 5, "default: {x:#}");
    assert!(x["verdict"].as_str().unwrap().starts_with("stalls ~"), "{x:#}");
    // TCP_QUICKACK set once does not fix it. How often it stalls depends on timing (the socket
    // re-enters pingpong mode only when the reply comes within the ACK timeout, tcp_event_data_sent
    // / inet_csk_enter_pingpong), so idle it stalls twice a round, on a loaded host less often:
    // the robust signal is that it still stalls, by the same mechanism.
    let x = row(&r, "quickack-once");
    assert_eq!(x["verdict_key"]["cause"], "nagle-delayed-ack", "quickack-once: {x:#}");
    assert!(x["stall_count"].as_u64().unwrap() >= 2, "quickack-once: {x:#}");
    assert!(x["latency_us"]["max"].as_f64().unwrap() >= 30_000.0, "quickack-once: {x:#}");
    // The fixed rows: no stall in the packet evidence, and a round well under one delayed-ACK
    // wait (a stall is >= 30 ms; idle they take about 1 ms, on a loaded host a few ms).
    let unfixed = row(&r, "default")["stall_count"].as_u64();
    for f in ["nodelay", "quickack-each", "cork", "msg-more", "writev", "buffer"] {
        fixed(row(&r, f), f, unfixed);
    }
    // NODELAY: every 10-byte write is a segment; cork sends each message as one.
    let (nodelay, cork) = (data_segs(row(&r, "nodelay")), data_segs(row(&r, "cork")));
    assert!(nodelay >= 5 * cork, "nodelay {nodelay} vs cork {cork} data segments");
    // What held is read back: NODELAY on for nodelay, off for default.
    assert_eq!(row(&r, "nodelay")["client"]["nodelay"], true);
    assert_eq!(row(&r, "default")["server"]["nodelay"], false);
}

pub(crate) fn seed_001_multi_write_waits_for_the_delayed_ack_and_nodelay_then_cork_works_here() {
    let _one_at_a_time = exclusive();
    let r = lab_json(&["multi-write", "--set", "requests=5"]);
    let d = row(&r, "default");
    assert!(p50_us(d) >= 30_000.0, "{d:#}");
    assert_eq!(d["verdict_key"]["cause"], "nagle-delayed-ack");
    // The seed's kernel lost CORK after NODELAY had been set; this one does not (the fix that
    // clears TCP_NAGLE_PUSH): no stall and one segment per request.
    for f in ["nodelay", "cork", "nodelay-then-cork", "msg-more", "writev", "buffer", "server quickack-each"] {
        fixed(row(&r, f), f, d["stall_count"].as_u64());
    }
    let ntc = row(&r, "nodelay-then-cork");
    assert!(ntc["wire"]["client"]["data_segs_out"].as_u64().unwrap() <= 6, "{ntc:#}");
}

pub(crate) fn tx_timestamps_name_the_side_that_held_the_request() {
    // Seed 001: the client's second write waits inside the client's TCP (Nagle) for the
    // server's delayed ACK; SO_TIMESTAMPING's SCHED stamp shows the hold on the client only.
    let r =
        lab_json(&["multi-write", "--set", "requests=5", "--client", "none", "--server", "none", "--tx-timestamps"]);
    let x = &r["results"][0];
    let v = x["verdict"].as_str().unwrap();
    assert_eq!(x["verdict_key"]["cause"], "nagle-delayed-ack", "{x:#}");
    assert!(v.contains("client writes held ~") && v.contains("(SO_TIMESTAMPING)"), "{v}");
    assert!(!v.contains("server writes held"), "{v}");
    // The packets say the same: the client's data was held, the server waited.
    let st = tcp_stalls(x);
    assert!(!st.is_empty() && st.iter().all(|s| s["held"] == "A" && s["waited"] == "B"), "{x:#}");
}

pub(crate) fn seed_002_burst_of_three_stalls_on_the_third_read_and_two_does_not() {
    let base = ["burst", "--client", "none", "--server", "none", "--set", "rounds=20"];
    // On loopback the round trip (~10 us) is as short as a send call, so whether the second and
    // third messages coalesce behind Nagle (the seed's stall) is a race between the two threads:
    // when the server thread preempts the client between its sends, r1 acknowledges m1 first and
    // nothing is held. Idle, most rounds stall; on a loaded host a run may miss, so up to three
    // runs are allowed to show the stall.
    let _one_at_a_time = exclusive();
    let mut seen = Vec::new();
    let stalled = (0..3).any(|_| {
        let r = lab_json(&[&base[..], &["--set", "n=3"]].concat());
        let x = r["results"][0].clone();
        // Idle the lab names the read ("(read 3 of 3)"); on a loaded host stalls land on other
        // reads too and the verdict gives a rate instead: the robust signal is Nagle stalls >=
        // 30 ms with three messages and none with two.
        let ok = x["latency_us"]["max"].as_f64().unwrap() >= 30_000.0
            && x["stall_count"].as_u64().unwrap() >= 3
            && x["verdict_key"]["cause"] == "nagle-delayed-ack";
        seen.push(x);
        ok
    });
    assert!(stalled, "n=3 never stalled on the third read: {seen:#?}");
    let r = lab_json(&[&base[..], &["--set", "n=2"]].concat());
    let three = seen.last().and_then(|x| x["stall_count"].as_u64());
    fixed(&r["results"][0], "n=2", three);
}

pub(crate) fn seed_004_bulk_ack_does_not_stall_on_linux_with_minshall() {
    // Root: a private namespace with lo MTU 1500 (loopback's 65536 would make 100,000 bytes two
    // segments).
    let _one_at_a_time = exclusive();
    // 20 rounds: the key needs stalls in more than one round in ten, so one wait of a
    // starved host does not make a row "stall".
    let r = lab_json(&["bulk-ack", "--set", "rounds=20", "--set", "sweep=99912,100000"]);
    assert!(r["link"].as_str().unwrap().contains("lo mtu 1500"), "{r:#}");
    for x in r["results"].as_array().unwrap() {
        // MSS 1448 as on Ethernet with timestamps: 100,000 B = 69 full segments + 88 B, the odd
        // count that stalls 200 ms under classic Nagle. Minshall's rule (tcp_minshall_check)
        // lets the tail go.
        assert_eq!(x["client"]["mss"], 1448, "{x:#}");
        fixed(x, "bulk-ack", None);
    }
    assert_eq!(r["results"][3]["variant"], "size=100000 depth=1");
    // TcpExt counters belong to the run's own namespace.
    assert!(r["results"][0]["netstat"]["DelayedACKs"].is_i64(), "{r:#}");
}

pub(crate) fn stream_reports_throughput_and_pure_acks() {
    let t0 = std::time::Instant::now();
    let r = lab_json(&["stream", "--set", "duration_ms=200", "--client", "none", "--server", "none"]);
    // Regression: the client once waited for the server's close while the server waited for the
    // client, until the 10 s I/O timeout broke the tie.
    assert!(t0.elapsed().as_secs_f64() < 5.0, "a 200 ms stream took {:?}", t0.elapsed());
    let x = &r["results"][0];
    // A bulk stream on loopback stalls only when packets are lost (a starved host's backlog
    // overflows): then the classifier's cause is a loss recovery, from a resent range that
    // tcp_info counts as well.
    if stalls(x) {
        let c = x["verdict_key"]["cause"].as_str().unwrap_or("");
        let retx = x["tcp"]["client"]["retransmits"].as_u64().unwrap();
        if ["retransmission-timeout", "tail-loss-probe", "fast-retransmit"].contains(&c) {
            assert!(retx > 0, "a loss without a retransmission: {x:#}");
        } else {
            // The window filled while the receiver was descheduled: it waited for ACKs.
            assert!(["cwnd-limited", "rwnd-limited"].contains(&c), "{x:#}");
        }
    }
    assert!(x["wire"]["client"]["bytes_sent"].as_u64().unwrap() > 1_000_000, "{x:#}");
    assert!(x["wire"]["server"]["non_data_segs_out"].as_u64().unwrap() > 0, "{x:#}");
    assert!(x["throughput_bytes_per_s"].as_f64().unwrap() > 0.0);
}

pub(crate) fn json_contract_has_the_documented_fields() {
    let r = lab_json(&["rr", "--set", "rounds=50"]);
    for k in ["tool", "version", "schema_version", "kernel", "mode", "scenario", "params", "link", "results"] {
        assert!(r.get(k).is_some(), "missing top-level '{k}'");
    }
    let x = &r["results"][0];
    for k in [
        "strategy",
        "client",
        "server",
        "rounds",
        "latency_us",
        "stall_count",
        "stall_records",
        "wall_s",
        "wire",
        "verdict",
        "verdict_key",
    ] {
        assert!(x.get(k).is_some(), "missing result field '{k}'");
    }
    for k in ["p50", "p90", "p99", "p999", "max", "mean"] {
        assert!(x["latency_us"][k].is_f64(), "latency_us.{k}");
    }
    for side in ["client", "server"] {
        for k in ["segs_out", "data_segs_out", "non_data_segs_out", "bytes_sent", "wire_bytes"] {
            assert!(x["wire"][side][k].is_u64(), "wire.{side}.{k}");
        }
    }
    assert_eq!(x["rounds"], 50);
    // Both sockets are the lab's own process's (issue 33: every command names an owner the
    // same way): its pid, its command, source `lab`.
    for end in ["a", "b"] {
        let o = &x["owners"][end];
        assert!(o["pid"].as_u64().is_some_and(|p| p > 1), "owners.{end}: {x:#}");
        assert_eq!(o["comm"], "tcpstall", "owners.{end}");
        assert_eq!(o["source"], "lab", "owners.{end}");
    }
    // 1-byte request/response: the reply piggybacks the ACK, one data segment per message.
    payload_is(x, 50);
}

pub(crate) fn config_file_runs_its_one_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("tcp_test.conf");
    std::fs::write(&conf, "no_delay 1\nquickack 0\ncork 0\nmsg_more 0\nsend 1000\nn_chunk 100\nround 3\n").unwrap();
    let r = lab_json(&["--config", conf.to_str().unwrap()]);
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["strategy"], "config:nodelay");
    assert_eq!(rows[0]["client"]["nodelay"], true);
    assert_eq!(rows[0]["rounds"], 3);

    // The file is the one configuration: strategy flags would silently replace its options.
    fails_with_one_line(&["lab", "--config", conf.to_str().unwrap(), "--client", "cork"], "drop --client");
    fails_with_one_line(&["lab", "--config", conf.to_str().unwrap(), "--matrix", "all"], "drop --matrix");

    std::fs::write(&conf, "no_delay 1\nnagle 0\n").unwrap();
    fails_with_one_line(&["lab", "--config", conf.to_str().unwrap()], ":2: unknown key 'nagle'");
}

/// The repository's examples/tcp_test.conf is seed 000's default configuration and runs as
/// written (the README's `--config` example); here with 4 rounds instead of its 100.
pub(crate) fn the_shipped_example_config_is_seed_000() {
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tcp_test.conf");
    let text = std::fs::read_to_string(conf).expect("examples/tcp_test.conf is in the repository");
    for line in ["no_delay 0", "quickack 0", "cork 0", "msg_more 0", "send 1000", "n_chunk 100", "round 100"] {
        assert!(text.lines().any(|l| l.trim() == line), "seed 000 has '{line}': {text}");
    }
    let _one_at_a_time = exclusive();
    let r = lab_json(&["--config", conf, "--set", "round=4"]);
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r:#}");
    let x = &rows[0];
    assert_eq!(x["strategy"], "config:none", "{x:#}");
    assert_eq!(x["rounds"], 4);
    assert_eq!(x["client"]["nodelay"], false);
    payload_is(x, 4000);
    // The seed's finding: the default options stall (Nagle x delayed ACK).
    assert!(stalls(x), "{x:#}");
    assert_eq!(x["verdict_key"]["cause"], "nagle-delayed-ack", "{x:#}");
}

pub(crate) fn csv_markdown_and_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rr.csv");
    tcpstall().args(["lab", "rr", "--set", "rounds=20", "--format", "csv", "-q", "-o"]).arg(&file).assert().success();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("scenario,strategy,"));
    assert!(lines[1].starts_with("rr,default,"));
    let out = tcpstall().args(["lab", "rr", "--set", "rounds=20", "--format", "markdown", "-q"]).output().unwrap();
    assert!(out.status.success());
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| strategy |") && md.contains("| nodelay |"), "{md}");
}

pub(crate) fn table_shows_rows_verdicts_and_held_options() {
    let out = tcpstall().args(["lab", "multi-write", "--set", "requests=3", "--client", "cork"]).output().unwrap();
    assert!(out.status.success());
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("client -> server") && t.contains("server -> client"), "{t}");
    assert!(t.lines().any(|l| l.starts_with("client:cork ")), "{t}");
    assert!(t.contains("options held"), "{t}");
    assert!(out.stderr.is_empty(), "no progress bar when stderr is not a terminal");
}

pub(crate) fn bad_input_is_one_line_and_non_zero() {
    fails_with_one_line(&["lab", "nosuch"], "unknown scenario 'nosuch'");
    fails_with_one_line(&["lab", "rr", "--set", "size=0"], "size must be at least 1");
    fails_with_one_line(&["lab", "rr", "--set", "size=99999999999"], "--set size");
    fails_with_one_line(&["lab", "--client", "nagle"], "unknown strategy 'nagle'");
    fails_with_one_line(&["lab", "--config", "/nonexistent/tcp_test.conf"], "cannot read /nonexistent/tcp_test.conf");
    // --stall-threshold is --min-gap's old name, kept as an alias.
    fails_with_one_line(&["lab", "--stall-threshold=0"], "--min-gap 0");
    fails_with_one_line(&["lab", "--min-gap=0"], "--min-gap 0");
}

pub(crate) fn an_unwritable_output_fails_before_measuring() {
    // The lab is pointed at a port this test holds: had it started measuring before checking
    // the output, it would fail with "port N is already in use" instead (and a 200-round
    // chunked run would take seconds, not well under one).
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let missing = dir.path().join("no/such/dir/out.json");
    let base = ["lab", "--rounds", "200", "-q", "--port", &port];
    fails_with_one_line(&[&base[..], &["-o", missing.to_str().unwrap()]].concat(), "cannot write ");
    fails_with_one_line(&[&base[..], &["-o", dir.path().to_str().unwrap()]].concat(), "Is a directory");
    assert!(t0.elapsed().as_secs_f64() < 10.0, "took {:?}", t0.elapsed());
    // The check leaves nothing behind.
    assert!(!dir.path().join("no").exists());
    // The same port without the bad output does fail on the port: the probe above is live.
    fails_with_one_line(&["lab", "rr", "--set", "rounds=10", "--port", &port], "already in use");
}

/// --report and --pcap are checked before the analysis or the simulation runs: one line, no file.
pub(crate) fn unwritable_plot_and_pcap_fail_first() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("no/such/dir/x.html");
    let cap = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/captures/seed000-default.pcap");
    fails_with_one_line(&["explain", cap, "--report", bad.to_str().unwrap()], "--report: cannot write ");
    let out = tcpstall().args(["explain", cap, "--report", bad.to_str().unwrap()]).output().unwrap();
    assert!(out.stdout.is_empty(), "no analysis printed: {}", String::from_utf8_lossy(&out.stdout));
    fails_with_one_line(&["simulate", "--pcap", bad.to_str().unwrap()], "--pcap: cannot write ");
    fails_with_one_line(&["simulate", "--report", bad.to_str().unwrap()], "--report: cannot write ");
}

pub(crate) fn a_port_in_use_is_a_one_line_error() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    fails_with_one_line(
        &["lab", "rr", "--set", "rounds=10", "--port", &port],
        &format!("port {port} is already in use"),
    );
}

pub(crate) fn scenarios_lists_the_catalogue() {
    let out = tcpstall().args(["scenarios", "--format", "json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["chunked", "multi-write", "burst", "bulk-ack", "stream", "rr"]);
    assert_eq!(v[0]["seed"], "000");
    // Each entry has the documented fields (docs/json-schema.md, "Scenarios").
    for s in v.as_array().unwrap() {
        let mut keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["finding", "kind", "matrix", "name", "params", "seed", "summary"], "{s}");
    }
    let out = tcpstall().arg("scenarios").output().unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("burst (seed 002)") && t.contains("matrix:"), "{t}");
    fails_with_one_line(&["scenarios", "nosuch"], "unknown scenario");
    // Every format the help lists works.
    for (format, first) in [("csv", "name,seed,kind,"), ("markdown", "| scenario | seed |")] {
        let out = tcpstall().args(["scenarios", "--format", format]).output().unwrap();
        assert!(out.status.success(), "{format}: {}", String::from_utf8_lossy(&out.stderr));
        let t = String::from_utf8_lossy(&out.stdout);
        assert!(t.starts_with(first) && t.lines().count() >= 7, "{format}: {t}");
    }
}

/// The default schedule runs seed 000's two timer-bound rows side by side: SIGINT while they
/// run stops both at once, exits 130 with one line, and the JSON says how many rows finished;
/// the header names the rows that ran side by side.
pub(crate) fn side_by_side_rows_stop_at_ctrl_c_too() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let _one_at_a_time = exclusive();
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    // 60 rounds: the pair waits about 5 s side by side, after a probe of under a second.
    let child = Command::new(bin)
        .args(["lab", "chunked", "--set", "round=60", "--format", "json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpstall");
    std::thread::sleep(Duration::from_millis(2500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("send SIGINT");
    let t0 = Instant::now();
    let out = child.wait_with_output().expect("wait for tcpstall");
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?} to stop", t0.elapsed());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line on stderr: {err}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("the finished rows as JSON");
    let rows = r["results"].as_array().expect("results");
    assert!(rows.len() < 8, "{r:#}");
    let e = r["errors"][0].as_str().unwrap();
    assert!(e.contains(&format!("{} of 8 rows finished", rows.len())), "{e}");
}

/// Without the interruption the header says which rows waited side by side: seed 000's two
/// timer-bound rows, which stall there as they do alone. Which other rows join them is the
/// probe's choice, and load legitimately changes it (a CPU-bound row starved of a CPU by busy
/// loops waits as long as a timer-bound one at a few percent of a CPU: seen for `nodelay` with
/// four busy loops on 2 cores), so the test asserts what a user relies on: the header names
/// the rows that ran side by side, among them the two that wait on delayed-ACK timers, and
/// the timer-bound rows stall and the fix does not.
pub(crate) fn timer_bound_rows_run_side_by_side_and_say_so() {
    let _one_at_a_time = exclusive();
    let r = lab_json(&["chunked", "--set", "round=6"]);
    let link = r["link"].as_str().unwrap();
    let (_, after) = link.split_once("timer-bound rows side by side: ").unwrap_or_else(|| panic!("{link}"));
    let (names, rule) = after.split_once(" (").unwrap_or_else(|| panic!("{link}"));
    assert!(
        rule.starts_with(
            "probe: 3 rounds, p50 >= 5 ms at < 20% CPU); the others alone (their evidence recorded beside them)"
        ),
        "{link}"
    );
    let names: Vec<&str> = names.split(", ").collect();
    for n in &names {
        row(&r, n);
    }
    for s in ["default", "quickack-once"] {
        assert!(names.contains(&s), "{s} waits on delayed-ACK timers, so it runs side by side: {link}");
        assert!(stalls(row(&r, s)), "{s} stalls side by side as alone: {r:#}");
    }
    // The fix that removes the stall outright (no Nagle), wherever it ran.
    fixed(row(&r, "nodelay"), "nodelay", row(&r, "default")["stall_count"].as_u64());
}

pub(crate) fn ctrl_c_keeps_the_finished_rows_and_exits_130() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    // Seed 000's matrix with 30 rounds, one row at a time (`side_by_side_rows_stop_at_ctrl_c_too`
    // covers the default schedule): `default` waits on delayed-ACK timers for about 2.5 s,
    // `nodelay` takes milliseconds, `quickack-once` stalls for 2.5 s again. SIGINT goes as soon
    // as the first row's packets reach the `--capture` file (each row's are written when it
    // ends): it lands in a later row however long a loaded host took to start (a fixed delay
    // landed before the first row or after the last under a load of 10 on 2 CPUs).
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("rows.pcapng");
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    let child = Command::new(bin)
        .args(["lab", "chunked", "--set", "round=30", "--format", "json", "--quiet", "--one-at-a-time", "--capture"])
        .arg(&cap)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpstall");
    let start = Instant::now();
    // A row of 30 rounds is thousands of frames: tens of kB once written.
    while std::fs::metadata(&cap).map_or(0, |m| m.len()) < 10_000 {
        assert!(start.elapsed() < Duration::from_secs(120), "no row finished in 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("send SIGINT");
    let t0 = Instant::now();
    let out = child.wait_with_output().expect("wait for tcpstall");
    // The row in progress is abandoned at once (its sockets are shut down), not run to its end.
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?} to stop", t0.elapsed());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "stderr: {err}");
    // One line: the interruption (the capture file's count is not printed when interrupted).
    let lines: Vec<&str> = err.trim_end().lines().filter(|l| !l.contains("wrote")).collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {err}");
    // Usually it lands inside a row; it may land between two ("before row '...'").
    assert!(err.contains("interrupted during row '") || err.contains("interrupted before row '"), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("the finished rows as JSON");
    let rows = r["results"].as_array().expect("results");
    let e = r["errors"][0].as_str().unwrap();
    assert!(e.contains(&format!("{} of 8 rows finished", rows.len())), "{e}");
    assert!(!rows.is_empty() && rows.len() < 8, "{r:#}");
    // The finished rows are whole: all their rounds, their stalls, their verdict.
    let d = row(&r, "default");
    assert_eq!(d["rounds"], 30);
    assert!(d["stall_count"].as_u64().unwrap() >= 30, "{d:#}");
    payload_is(d, 30_000);
}

pub(crate) fn wire_covers_the_measured_rounds_only() {
    // Depth 2: a message is always in flight at the ends of the measured rounds; the snapshots
    // wait until every written byte has left the socket, so the payload is exactly rounds x size
    // and grows with the size.
    let r = lab_json(&["bulk-ack", "--client", "none", "--set", "depth=2", "--set", "rounds=5"]);
    let r2 =
        lab_json(&["bulk-ack", "--client", "none", "--set", "depth=2", "--set", "rounds=5", "--set", "size=99900"]);
    payload_is(&r["results"][0], 500_000);
    payload_is(&r2["results"][0], 499_500);
}

/// The client's payload in the measured rounds is `want` bytes. tcpi_bytes_sent counts
/// retransmissions too: on a loaded host a tail loss probe (RFC 8985 7; tcp_send_loss_probe)
/// may resend the last segment when an ACK is late, so each retransmission may add up to one
/// segment (snd_mss), and only then.
fn payload_is(x: &Value, want: u64) {
    let sent = x["wire"]["client"]["bytes_sent"].as_u64().unwrap();
    let retrans = x["tcp"]["client"]["retransmits"].as_u64().unwrap();
    let mss = x["tcp"]["client"]["snd_mss"].as_u64().unwrap();
    assert!((want..=want + retrans * mss).contains(&sent), "sent {sent}, want {want} (+{retrans} retransmits): {x:#}");
}

/// TcpExt counters are the namespace's, so they belong to the run only with root (a private
/// namespace per row).
pub(crate) fn tcpext_counters_cover_the_measured_rounds_only() {
    let _one_at_a_time = exclusive();
    // Seed 001: one delayed ACK per request. Ten warm-up requests stall too, but are not counted.
    let r = lab_json(&["multi-write", "--client", "none", "--set", "requests=5", "--set", "warmup=10"]);
    let x = &r["results"][0];
    let d = x["netstat"]["DelayedACKs"].as_i64().expect("DelayedACKs");
    assert!((3..=7).contains(&d), "DelayedACKs +{d} for 5 measured requests: {x:#}");
}

/// Seed 004 at depth 2 ends with a wait after the measured rounds: the client only reads the
/// last application ack, so nothing carries its ACK of the server's previous 1-byte ack; it
/// delays it (RFC 1122 4.2.3.2; `tcp_send_delayed_ack`, TCP_ATO_MIN 40 ms) and Nagle holds the
/// server's last 1-byte ack behind it (RFC 896; `tcp_nagle_check`). The verdict names the wait;
/// the samples, stalls, ms/round and `verdict_key` (the measured rounds) do not count it.
pub(crate) fn bulk_ack_depth_2_names_the_drain_wait_after_the_measured_rounds_without_counting_it() {
    // Root: a private namespace with lo MTU 1500 (as in seed 004).
    let _one_at_a_time = exclusive();
    // Whether a row ends with the wait is a race in the kernel (the client's ACK may ride on
    // the tail of its last message instead): measured in 20 runs of the three rows, 18, 19 and
    // 12 of 20 rows had it, every run at least one row. So: up to three runs, one row suffices.
    let prefix = "epilogue after the measured rounds (not in the samples or ms/round): 1 wait of ";
    let (mut named, mut misses) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let r = lab_json(&["bulk-ack", "--set", "depth=1,2", "--set", "rounds=10"]);
        for x in r["results"].as_array().unwrap() {
            let v = x["verdict"].as_str().unwrap();
            if x["variant"] == "size=100000 depth=1" {
                assert!(!v.contains("epilogue"), "depth 1 has no epilogue: {x:#}");
                continue;
            }
            assert_eq!(x["variant"], "size=100000 depth=2", "{x:#}");
            // Named: a wait of at least a delayed-ACK timer, by its mechanism. (On a loaded host
            // the client may reach the wait late and the lab names a shorter one "matching no
            // TCP timer"; such a row says nothing either way.)
            let Some(at) = v.find(prefix) else { continue };
            if !v.ends_with("(nagle-delayed-ack)") {
                eprintln!("depth-2 epilogue not by the delayed ACK here (left out): {v}");
                continue;
            }
            let ms: f64 = v[at + prefix.len()..].split(' ').next().unwrap().parse().expect("wait in ms");
            // The peer's delayed-ACK timer runs >= 40 ms (TCP_ATO_MIN, tcp_send_delayed_ack in
            // net/ipv4/tcp_output.c) from the segment that armed it, not from the held write:
            // a server that writes late (a loaded host) is held only for what is left of it
            // (seen: 20 ms in a soak). Such a row shows the mechanism, not the timer's length:
            // left out like the rows above; a full one must show in one of the three runs.
            if ms < 30.0 {
                eprintln!("depth-2 epilogue wait shorter than a delayed ACK (the write came late; left out): {v}");
                continue;
            }
            // Idle the measured rounds have no stall, and then nothing says otherwise. On a
            // loaded host the same race puts a delayed-ACK wait inside a round now and then
            // (seen: 1-3 of 10 rounds), which is counted there, as it should be.
            if x["stall_count"] == 0 {
                assert!(v.starts_with("no stalls") && !stalls(x), "{v}");
                // The epilogue's wait is not in the samples: the measured rounds' packets span less
                // time than the wait (so it cannot lie among them), or else no sample is as long as
                // a delayed ACK. (Not "no sample over 30 ms" alone: on a loaded host a round took
                // 34.6 ms with no wait on the wire, the rounds' packets spanning 13.6 ms: the client
                // was not run.)
                let span_ms =
                    (x["measured_to_ns"].as_u64().unwrap() - x["measured_from_ns"].as_u64().unwrap()) as f64 / 1e6;
                let max_us = x["latency_us"]["max"].as_f64().unwrap();
                assert!(
                    span_ms < ms || max_us < 30_000.0,
                    "the epilogue wait in the samples? rounds span {span_ms} ms: {x:#}"
                );
            }
            // Nor is it in the wall time (ms/round): the wall time exceeds the rounds' samples by
            // less than the wait. On a loaded host the gaps between rounds add up too, so a miss
            // costs one more run, and two misses fail with both figures.
            let samples_ms = x["latency_us"]["mean"].as_f64().unwrap() * 10.0 / 1e3;
            let extra_ms = x["wall_s"].as_f64().unwrap() * 1e3 - samples_ms;
            if extra_ms >= ms {
                misses.push(format!("{}: wall time {extra_ms:.1} ms over the samples, wait {ms} ms", x["strategy"]));
                assert!(misses.len() < 2, "the epilogue wait looks counted in ms/round: {misses:?}\n{x:#}");
                continue;
            }
            named.push(format!("{}: {ms} ms", x["strategy"]));
        }
        if !named.is_empty() {
            break;
        }
    }
    eprintln!("bulk-ack depth 2 epilogue waits named: {named:?}");
    assert!(!named.is_empty(), "no depth-2 row named its epilogue wait in three runs");
}

/// TCP stall records (application gaps are not stalls) inside the measured rounds.
fn tcp_stalls(x: &Value) -> Vec<&Value> {
    let (from, to) = (x["measured_from_ns"].as_u64().unwrap(), x["measured_to_ns"].as_u64().unwrap());
    x["stall_records"]
        .as_array()
        .expect("stall_records")
        .iter()
        .filter(|s| s["cause"] != "application")
        .filter(|s| (from..=to).contains(&s["start_ns"].as_u64().unwrap()))
        .collect()
}

/// Each row records its own packets (AF_PACKET on its namespace's loopback) and the one
/// classifier names the stalls from them: seed 000's default row has Nagle/delayed-ACK stall
/// records of >= 30 ms (about two per round), the nodelay row none; the capture lost nothing.
pub(crate) fn rows_carry_the_classifiers_stalls_from_their_own_packets() {
    let _one_at_a_time = exclusive();
    let r = lab_json(&["chunked", "--set", "round=6"]);
    let x = row(&r, "default");
    let cap = &x["capture"];
    assert!(cap["tcp_packets"].as_u64().unwrap() >= 6 * 4, "{cap:#}");
    assert_eq!(cap["kernel_drops"], 0, "{cap:#}");
    // The record says what it cost: its reader's CPU, and wake-ups per ring block (at least
    // one packet each), never more than one per packet.
    assert!(cap["reader_cpu_us"].as_f64().is_some(), "{cap:#}");
    let wakeups = cap["reader_wakeups"].as_u64().unwrap();
    assert!(wakeups >= 1 && wakeups <= cap["frames"].as_u64().unwrap(), "{cap:#}");
    // Every captured byte of the measured rounds is there: each side's packets carry at least
    // what tcp_info says it sent in them.
    for side in ["client", "server"] {
        let sent = x["wire"][side]["bytes_sent"].as_u64().unwrap();
        assert!(cap[side]["payload_bytes"].as_u64().unwrap() >= sent, "{side}: {x:#}");
    }
    let st = tcp_stalls(x);
    // The first round rides the initial quick-ACK budget; the other five stall twice.
    assert!(st.len() >= 6, "{} records: {x:#}", st.len());
    for s in &st {
        assert_eq!(s["cause"], "nagle-delayed-ack", "{s:#}");
        assert!(!s["evidence"].as_array().unwrap().is_empty(), "{s:#}");
    }
    // Most wait out the delayed-ACK timer (TCP_DELACK_MIN, 40 ms: include/net/tcp.h). On a
    // loaded host one may end sooner, by an ACK sent for another reason (the receiving
    // application's late read, tcp_cleanup_rbuf in net/ipv4/tcp.c, or a timer armed for an
    // earlier segment; seen: 11.9 ms beside four busy loops): still Nagle holding data until
    // an ACK, as named.
    let long = st.iter().filter(|s| s["length_ns"].as_u64().unwrap() >= 30_000_000).count();
    assert!(long >= 5, "{long} of {} records waited out the timer: {x:#}", st.len());
    let n = row(&r, "nodelay");
    assert!(n["capture"]["tcp_packets"].as_u64().unwrap() > 0, "{n:#}");
    // No mechanism held the nodelay row's data. On a starved host the kernel may resend a tail
    // whose ACK came late (a tail-loss probe); the ACK echoing the original's timestamp shows
    // it spurious (Eifel), so such a record is `unknown`, never a named cause.
    assert!(!stalls(n), "nodelay: {n:#}");
    assert!(tcp_stalls(n).iter().all(|s| s["cause"] == "unknown"), "nodelay: {n:#}");
}

/// `lab --capture FILE` on loopback writes the rows' packets as pcapng (one interface per
/// row); tcpdump reads it, and `explain` finds the ~40 ms Nagle/delayed-ACK waits of seed
/// 001's default row in it and none in the nodelay row.
pub(crate) fn lab_capture_on_loopback_is_a_pcapng_explain_reads() {
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mw.pcapng");
    let r = lab_json(&["multi-write", "--set", "requests=6", "--capture", f.to_str().unwrap()]);
    let rows = r["results"].as_array().unwrap();
    assert_eq!((rows[0]["strategy"].as_str(), rows[1]["strategy"].as_str()), (Some("default"), Some("nodelay")));
    let out = std::process::Command::new("tcpdump").arg("-nr").arg(&f).output().expect("tcpdump");
    assert!(out.status.success(), "tcpdump -r: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("EN10MB"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() > 40);
    let out = tcpstall().args(["explain", "--format", "json"]).arg(&f).output().unwrap();
    assert!(out.status.success(), "explain: {}", String::from_utf8_lossy(&out.stderr));
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let flows = e["flows"].as_array().unwrap();
    assert_eq!(flows.len(), rows.len(), "one connection per row: {e:#}");
    let long = |f: &Value| {
        f["stalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["cause"] != "application" && s["length_ns"].as_u64().unwrap() >= 30_000_000)
            .map(|s| s["cause"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // Row order is file order: interface 0 is the default row.
    let (default, nodelay) = (long(&flows[0]), long(&flows[1]));
    assert!(default.len() >= 4, "default row: {default:?}");
    assert!(default.iter().all(|c| c == "nagle-delayed-ack"), "{default:?}");
    assert!(nodelay.is_empty(), "nodelay row: {nodelay:?}");
    // Same packets, same classifier: each wait explain names in the file is a record of the
    // lab's row with the same cause and the same evidence frames (numbered as in the file; the
    // times differ by the traces' origins: the first packet for explain, the start for lab; as
    // root the lab's records also name kernel evidence, which the file does not hold).
    let key = |s: &Value| {
        let frames: Vec<String> = s["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["source"].get("kernel").is_none())
            .map(|e| e["source"].to_string())
            .collect();
        (s["cause"].to_string(), frames)
    };
    let lab_records: Vec<_> = rows[0]["stall_records"].as_array().unwrap().iter().map(key).collect();
    for s in flows[0]["stalls"].as_array().unwrap() {
        assert!(lab_records.contains(&key(s)), "explain's {s:#} is not among the lab's records {lab_records:?}");
    }
}

/// Without CAP_NET_RAW the rows keep their other measurements and the report says why there
/// are no stall records; --no-capture leaves the capture out.
pub(crate) fn without_cap_net_raw_the_capture_is_skipped_with_a_note() {
    let out = crate::support::run_unprivileged(&["lab", "rr", "--set", "rounds=20", "--format", "json", "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["link"].as_str().unwrap().contains("no packet capture: AF_PACKET needs CAP_NET_RAW"), "{r:#}");
    for x in r["results"].as_array().unwrap() {
        assert!(x.get("capture").is_none(), "{x:#}");
        assert_eq!(x["rounds"], 20);
    }
    let r = lab_json(&["rr", "--set", "rounds=20", "--no-capture"]);
    assert!(r["results"].as_array().unwrap().iter().all(|x| x.get("capture").is_none()), "{r:#}");
}

/// Behind `--link` the rows' traces come from the forwarder's tap (the link's server end):
/// seed 001's default row has stall records of >= 30 ms, the nodelay row none, each row only
/// its own connection's packets.
pub(crate) fn behind_a_link_rows_take_their_packets_from_the_forwarders_tap() {
    let _one_at_a_time = exclusive();
    let long = |x: &Value| {
        x["stall_records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["cause"] != "application" && s["length_ns"].as_u64().unwrap() >= 30_000_000)
            .count()
    };
    // Whether the server reaches pingpong mode (and so delays its ACKs) depends on its reply
    // coming within `ato` (tcp_event_data_sent): a starved host can miss it for a whole run, and
    // then nothing stalls. One more run is allowed; both are reported.
    twice("Nagle stalls behind the link, from the tap's packets", || {
        let r = lab_json(&["multi-write", "--link", "rtt=2ms,mtu=1500", "--set", "requests=6"]);
        let (d, n) = (row(&r, "default"), row(&r, "nodelay"));
        for x in [d, n] {
            assert!(x["capture"]["point"].as_str().unwrap().contains("emulated link"), "{x:#}");
            // The tap is drained and classified while the row runs, by a reader of its own.
            assert!(x["capture"]["reader_cpu_us"].is_number(), "{x:#}");
            // 6 measured + 20 warm-up requests of 3 writes and a response, plus the handshake.
            let p = x["capture"]["tcp_packets"].as_u64().unwrap();
            assert!((26 * 2..26 * 20).contains(&p), "{p} packets: {x:#}");
        }
        assert_eq!(long(n), 0, "nodelay: {n:#}");
        if long(d) >= 3 {
            Ok(())
        } else {
            Err(format!("default row: {} stalls of >= 30 ms ({})", long(d), d["verdict"]))
        }
    });
}

/// `--capture FILE` on loopback is checked before any row runs: one line, non-zero, no file;
/// `--capture` with `--no-capture` is refused.
pub(crate) fn an_unwritable_loopback_capture_fails_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("no/such/dir/x.pcapng");
    fails_with_one_line(&["lab", "rr", "--set", "rounds=10", "--capture", bad.to_str().unwrap()], "--capture");
    let ok = dir.path().join("x.pcapng");
    fails_with_one_line(
        &["lab", "rr", "--set", "rounds=10", "--no-capture", "--capture", ok.to_str().unwrap()],
        "--no-capture",
    );
    assert!(!ok.exists(), "refused before the file was created");
}

/// Issue 26 item 2: without packets the stall count is not measured, and says so: `?` in the
/// table with a footnote naming why, null in the JSON (never 0 next to 44 ms rounds), while the
/// slow samples are still counted and shown. Run as nobody (setpriv): no CAP_NET_RAW.
pub(crate) fn without_packets_the_stall_count_is_not_measured_not_zero() {
    let _one_at_a_time = exclusive();
    let out = crate::support::run_unprivileged(&["lab", "multi-write", "--set", "requests=5", "--quiet"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let default = text.lines().find(|l| l.starts_with("default ")).unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = default.split_whitespace().collect();
    assert_eq!(cells[5], "?", "the stalls column of the default row: {default}\n{text}");
    assert!(text.lines().all(|l| !l.starts_with("nodelay ") || l.split_whitespace().nth(5) == Some("?")), "{text}");
    assert!(text.contains("\n?: stalls not measured (not zero): the row recorded no packets"), "{text}");
    assert!(text.contains("no packets captured: AF_PACKET needs CAP_NET_RAW"), "the verdict says why: {text}");
    let out =
        crate::support::run_unprivileged(&["lab", "multi-write", "--set", "requests=5", "--quiet", "--format", "json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = row(&r, "default");
    assert!(d["stall_count"].is_null(), "{d:#}");
    // The slow samples are still measured: seed 001 as written waits for the delayed ACK.
    twice("slow samples without packets", || {
        let out = crate::support::run_unprivileged(&[
            "lab",
            "multi-write",
            "--set",
            "requests=5",
            "--client",
            "none",
            "--quiet",
            "--format",
            "json",
        ]);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = r["results"][0]["slow_samples"].as_u64().unwrap();
        if n >= 1 {
            Ok(())
        } else {
            Err(format!("no slow sample in 5 rounds: {:#}", r["results"][0]))
        }
    });
    // CSV: an empty field, not 0.
    let out =
        crate::support::run_unprivileged(&["lab", "multi-write", "--set", "requests=2", "--quiet", "--format", "csv"]);
    let csv = String::from_utf8_lossy(&out.stdout);
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = head.iter().position(|h| *h == "stall_count").unwrap();
    let first = csv.lines().nth(1).unwrap();
    assert_eq!(first.split(',').nth(col), Some(""), "{csv}");
}
