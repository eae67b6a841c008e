//! End-to-end tests of scenario files, `--exchange`, `scenarios --show` and `tcpstall advise`.

use serde_json::Value;

use crate::support::{exclusive, tcpstall, twice, Tcpdump};

fn run_json(args: &[&str]) -> Value {
    let out = tcpstall().args(args).output().expect("run tcpstall");
    assert!(
        out.status.success(),
        "tcpstall {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("tcpstall {args:?}: not JSON ({e})"))
}

/// A user's file: the client asks with 40 bytes after 1 ms of thinking, the server answers
/// with a header and a body in two writes (Nagle on).
const USER_FILE: &str = r#"name = "header-body"
summary = "a request, then a header and a body from the server"

[workload.exchange]
rounds = 12
warmup = 20

[[workload.exchange.turn]]
side = "client"
writes = [40]
think = "1ms"

[[workload.exchange.turn]]
side = "server"
writes = [60, 900]
"#;

fn user_file(dir: &tempfile::TempDir, text: &str) -> String {
    let p = dir.path().join("mine.toml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// The file runs in the model and over real sockets, one row of 12 rounds each; in the model
/// the server's second write waits for the client's delayed ACK (Nagle x delayed ACK), and
/// fixing the server removes it.
pub(crate) fn a_user_written_scenario_file_runs_in_simulate_and_lab() {
    let dir = tempfile::tempdir().unwrap();
    let f = user_file(&dir, USER_FILE);
    let v = run_json(&["simulate", &f, "--format", "json"]);
    assert_eq!(v["scenario"], "header-body");
    let r = &v["results"][0];
    assert_eq!(r["rounds"], 12, "{r:#}");
    assert!(r["stall_count"].as_u64().unwrap() >= 10, "{r:#}");
    assert!(r["latency_us"]["p50"].as_f64().unwrap() >= 30_000.0, "{r:#}");
    let v = run_json(&["simulate", &f, "--server", "writev", "--format", "json"]);
    assert_eq!(v["results"][0]["stall_count"], 0, "{v:#}");
    let _one_at_a_time = exclusive();
    let v = run_json(&["lab", &f, "--rounds", "3", "--format", "json", "--quiet"]);
    assert_eq!(v["scenario"], "header-body");
    assert_eq!(v["results"][0]["rounds"], 3, "{v:#}");
}

/// A broken file: the error names the file and the line of the bad value, in one line, and
/// nothing is run.
pub(crate) fn a_broken_scenario_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (USER_FILE.replace("writes = [60, 900]", "writes = [60, 0]"), "line 15: each of writes must be at least 1"),
        (USER_FILE.replace("think = \"1ms\"", "think = \"soon\""), "line 11: think 'soon'"),
        (USER_FILE.replace("side = \"server\"", "side = \"peer\""), "line 14: unknown variant `peer`"),
        (USER_FILE.replace("rounds = 12", "rounds = 12\nround_trips = 3"), "line 6: unknown field `round_trips`"),
    ] {
        let f = user_file(&dir, &text);
        for cmd in ["lab", "simulate", "advise"] {
            let out = tcpstall().args([cmd, &f]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{cmd} {want}");
            assert!(err.contains(&format!("mine.toml: {want}")), "{cmd}: want {want}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(out.stdout.is_empty(), "{cmd}: {}", String::from_utf8_lossy(&out.stdout));
        }
    }
    let out = tcpstall().args(["lab", "/nonexistent/x.toml"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read scenario file /nonexistent/x.toml"));
}

/// `--exchange` inline is seed 001's multi-write: the same stall in the model, and a bad turn
/// is a one-line error naming the turn.
pub(crate) fn inline_exchange_runs_and_bad_turns_are_one_line() {
    let v =
        run_json(&["simulate", "--exchange", "client 275,24,292; server 100", "--rounds", "10", "--format", "json"]);
    let r = &v["results"][0];
    assert_eq!(r["rounds"], 10);
    assert!(r["latency_us"]["p50"].as_f64().unwrap() >= 30_000.0, "{r:#}");
    let v = run_json(&["simulate", "--exchange", "client 591; server 100", "--rounds", "10", "--format", "json"]);
    assert!(v["results"][0]["latency_us"]["p99"].as_f64().unwrap() < 5_000.0, "one write does not stall: {v:#}");
    for (bad, want) in [
        ("client 275,,292", "turn 1: '275,,292' is not a comma list"),
        ("client 1; serve 1", "turn 2: 'serve' is not a side"),
    ] {
        let out = tcpstall().args(["simulate", "--exchange", bad]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{bad}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let out = tcpstall().args(["simulate", "multi-write", "--exchange", "client 1"]).output().unwrap();
    assert!(!out.status.success());
}

/// `scenarios --show` prints a built-in as a file that runs like the built-in.
pub(crate) fn scenarios_show_prints_a_file_that_runs_like_the_built_in() {
    let out = tcpstall().args(["scenarios", "--show", "multi-write"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[workload.exchange]") && text.contains("writes = [275, 24, 292]"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let f = user_file(&dir, &text);
    let a = run_json(&["simulate", &f, "--rounds", "5", "--format", "json"]);
    let b = run_json(&["simulate", "multi-write", "--rounds", "5", "--format", "json"]);
    for (x, y) in a["results"].as_array().unwrap().iter().zip(b["results"].as_array().unwrap()) {
        assert_eq!(x["strategy"], y["strategy"]);
        assert_eq!(x["latency_us"], y["latency_us"], "{}", x["strategy"]);
        assert_eq!(x["wire"], y["wire"], "{}", x["strategy"]);
    }
    let out = tcpstall().args(["scenarios", "--show", "stream"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("[workload.stream]"));
    let out = tcpstall().args(["scenarios", "--show", "nope"]).output().unwrap();
    assert!(!out.status.success());
}

/// Seed 001 over real sockets: the request as written waits ~40 ms at p99, the recommended
/// fix is on the client and gathers or corks the request, and its p99 is under 5 ms.
pub(crate) fn advise_on_seed_001_recommends_a_client_side_gathered_write_or_cork() {
    let _one_at_a_time = exclusive();
    let v = twice("advise seed 001", || {
        let v = run_json(&[
            "advise",
            "--exchange",
            "client 275,24,292; server 100",
            // 5 runs x 20 rounds (the defaults): 100 rounds, so the p99 is not the slowest round.
            "--format",
            "json",
            "--quiet",
        ]);
        let rank = v["ranking"].as_array().unwrap();
        let base = rank.iter().find(|r| r["label"] == "default").unwrap();
        let best = &rank[0];
        if base["p99_us"]["est"].as_f64().unwrap() < 30_000.0 {
            return Err(format!("as written p99 {} < 30 ms", base["p99_us"]["est"]));
        }
        if best["p99_us"]["est"].as_f64().unwrap() >= 5_000.0 {
            return Err(format!("{} p99 {} >= 5 ms", best["label"], best["p99_us"]["est"]));
        }
        Ok(v)
    });
    assert_eq!(v["mode"], "lab");
    let best = &v["ranking"][0];
    assert_eq!(best["server"].as_array().unwrap().len(), 0, "{best:#}");
    let client: Vec<&str> = best["client"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(
        client.len() == 1 && ["writev", "buffer", "cork", "msg-more"].contains(&client[0]),
        "the fix gathers or corks the client's request: {best:#}"
    );
    let rec = v["recommendation"].as_str().unwrap();
    assert!(rec.starts_with("Recommendation: change the code on the client side"), "{rec}");
    assert_eq!(v["as_written_stalls"], true);
}

/// Every language prints its code for the recommended fix (model: fast and deterministic).
pub(crate) fn advise_prints_the_code_in_each_language() {
    for (lang, needle) in [
        ("c", "writev(fd"),
        ("go", "net.Buffers"),
        ("rust", "write_vectored"),
        ("python", "sock.sendmsg"),
        ("java", "GatheringByteChannel"),
        ("node", "socket.cork()"),
    ] {
        let out = tcpstall()
            .args(["advise", "--exchange", "client 275,24,292; server 100", "--model", "--reps", "2", "--lang", lang])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{lang}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("client side (writev), {lang}:")), "{lang}: {text}");
        assert!(text.contains(needle), "{lang}: {text}");
        assert!(text.contains("caveat: "), "{lang}: {text}");
    }
    let out = tcpstall().args(["advise", "--model", "--lang", "cobol"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lang cobol: expected one of"));
}

/// `--fail-on-stall` exits 3 when the pattern as written stalls and 0 when it does not;
/// `--peer-profile` runs the peer in the model and says so.
pub(crate) fn advise_fail_on_stall_and_peer_profile() {
    let base = ["advise", "--model", "--reps", "2", "--fail-on-stall", "--exchange"];
    let out = tcpstall().args(base).arg("client 275,24,292; server 100").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
    let out = tcpstall().args(base).arg("client 591; server 100").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Recommendation: keep the code as written"));
    let v = run_json(&[
        "advise",
        "--exchange",
        "client 275,24,292; server 100",
        "--peer-profile",
        "macos",
        "--reps",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(v["mode"], "simulate");
    assert!(v["notes"][0].as_str().unwrap().contains("the server runs the macos model"), "{v:#}");
    for r in v["ranking"].as_array().unwrap() {
        assert_eq!(r["server"].as_array().unwrap().len(), 0, "only the client's fixes: {r:#}");
    }
}

/// The issue's own test program: a server writing a header then a body with Nagle on, a client
/// thinking 5 ms between requests. Captured (the model's pcap), replayed (the same cause
/// reproduced), advised: the server-side fix ranks first and the client's quick-ACK below it.
pub(crate) fn replay_and_advise_a_header_body_server() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("hb.pcap");
    let toml = dir.path().join("hb.toml");
    let (pcap, toml) = (pcap.to_str().unwrap(), toml.to_str().unwrap());
    let out = tcpstall()
        .args(["simulate", "--exchange", "client 40 think=5ms; server 60,900", "--rounds", "10", "--pcap", pcap])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = tcpstall().args(["replay", pcap, "--model", "--emit", toml]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The client's 5 ms think time, less the path RTT (to the microsecond).
    let think = text.split("exchange: client 40 think=").nth(1).and_then(|r| r.split(';').next()).unwrap_or("");
    let think: f64 = match (think.strip_suffix("us"), think.strip_suffix("ms")) {
        (Some(us), _) => us.parse().unwrap_or(f64::NAN),
        (_, Some(ms)) => ms.parse::<f64>().unwrap_or(f64::NAN) * 1000.0,
        _ => f64::NAN,
    };
    assert!((4_000.0..=6_000.0).contains(&think), "{text}");
    assert!(text.contains("; server 60,900"), "{text}");
    assert!(text.contains("capture's stalls: nagle-delayed-ack"), "{text}");
    assert!(text.contains("reproduced (simulate, loopback): nagle-delayed-ack"), "{text}");
    let v = run_json(&["advise", toml, "--model", "--reps", "2", "--format", "json"]);
    let rank = v["ranking"].as_array().unwrap();
    let best = &rank[0];
    assert_eq!(best["client"].as_array().unwrap().len(), 0, "{best:#}");
    assert_eq!(best["server"].as_array().unwrap().len(), 1, "{best:#}");
    let pos = |label: &str| rank.iter().position(|r| r["label"] == label).unwrap();
    assert!(pos("client:quickack-each") > 0, "{v:#}");
    assert!(
        rank[pos("client:quickack-each")]["segments_per_message"].as_f64() > best["segments_per_message"].as_f64(),
        "the quick-ACK fix costs more segments: {v:#}"
    );
    // The capture itself as advise's workload: the same exchange, said where it came from.
    let v = run_json(&["advise", pcap, "--model", "--reps", "2", "--format", "json"]);
    assert!(v["notes"][0].as_str().unwrap().contains("the workload is derived from"), "{v:#}");
    assert_eq!(v["ranking"][0]["server"].as_array().unwrap().len(), 1, "{v:#}");
    let out = tcpstall().args(["replay", "/nonexistent.pcap"]).output().unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end().lines().count(), 1);
}

/// The busy-poll strategy (issue 11 item 5): the readers spin on MSG_DONTWAIT, SO_BUSY_POLL is
/// read back (50 µs as root, 0 when not permitted), and the row reports the CPU its threads
/// used; advise on real sockets runs it as a candidate and shows its CPU per round. Only that it
/// ran and what it cost are asserted: whether spinning is faster depends on free cores.
pub(crate) fn busy_poll_runs_reads_back_and_reports_its_cpu() {
    let j = run_json(&[
        "lab",
        "rr",
        "--set",
        "rounds=300",
        "--client",
        "busy-poll",
        "--server",
        "busy-poll",
        "-q",
        "--format",
        "json",
    ]);
    let r = &j["results"][0];
    for side in ["client", "server"] {
        assert_eq!(r[side]["strategies"][0], "busy-poll", "{r:#}");
        let bp = r[side]["busy_poll_us"].as_u64().expect("SO_BUSY_POLL read back");
        assert!(bp == 50 || bp == 0, "{bp}");
    }
    let cpu = &r["cpu"];
    let per_round = cpu["cpu_us_per_round"].as_f64().expect("cpu per round");
    assert!(per_round > 0.0, "{cpu:#}");
    assert!(cpu["client_cpu_us"].as_f64().unwrap() > 0.0 && cpu["server_cpu_us"].as_f64().unwrap() > 0.0);
    // The table says how the reads ran and what the CPU was.
    let out = tcpstall().args(["lab", "rr", "--set", "rounds=100", "--client", "busy-poll", "-q"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reads=spin") && text.contains("us/round"), "{text}");
    // advise (lab) ranks a busy-poll candidate on the reading side, with its CPU.
    let a = run_json(&[
        "advise",
        "--exchange",
        "client 40; server 60",
        "--rounds",
        "5",
        "--reps",
        "1",
        "-q",
        "--format",
        "json",
    ]);
    let bp = a["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["label"].as_str().is_some_and(|l| l.contains("busy-poll")))
        .unwrap_or_else(|| panic!("no busy-poll candidate: {a:#}"));
    assert!(bp["cpu_us_per_round"].as_f64().unwrap() > 0.0, "{bp:#}");
}

/// `connection = "new"` (issue 11 item 1): seed 001's request on a new connection per request
/// runs in the lab and the model as one row of `rounds` single-round connections. A connection
/// starts in quick-ACK mode (`tcp_incr_quickack`, TCP_MAX_QUICKACKS), so the server ACKs the
/// first small write at once and Nagle releases the next: no 40 ms wait, where the same request
/// on a reused connection waits in every round.
pub(crate) fn a_new_connection_per_request_avoids_seed_001s_stall() {
    let dir = tempfile::tempdir().unwrap();
    let text = "name = \"mine\"\nsummary = \"seed 001 per connection\"\n\n[workload.exchange]\nrounds = 8\n\
                connection = \"new\"\n\n[[workload.exchange.turn]]\nside = \"client\"\nwrites = [275, 24, 292]\n\n\
                [[workload.exchange.turn]]\nside = \"server\"\nwrites = [100]\n";
    let f = user_file(&dir, text);
    for cmd in ["lab", "simulate"] {
        let quiet: &[&str] = if cmd == "lab" { &["-q"] } else { &[] };
        let j = run_json(&[&[cmd, f.as_str(), "--format", "json"], quiet].concat());
        let r = &j["results"][0];
        assert_eq!(r["rounds"], 8, "{cmd}: one round per connection, all counted: {r:#}");
        assert_eq!(j["params"]["connection"], "new", "{cmd}");
        // Every connection's segments are counted: at least the 3 handshake/teardown-free data
        // segments of each request.
        assert!(r["wire"]["client"]["data_segs_out"].as_u64().unwrap() >= 8, "{cmd}: {r:#}");
        let stalls = r["stall_count"].as_u64().unwrap();
        assert!(stalls <= 2, "{cmd}: a new connection should not wait for the delayed ACK: {r:#}");
        assert!(r["latency_us"]["p50"].as_f64().unwrap() < 30_000.0, "{cmd}: {r:#}");
        assert!(r["verdict"].as_str().unwrap().contains("no stalls"), "{cmd}: {r:#}");
    }
    // The same request on one reused connection (the model: deterministic) waits every round.
    let reused = user_file(&dir, &text.replace("connection = \"new\"", "warmup = 20"));
    let j = run_json(&["simulate", &reused, "--format", "json"]);
    assert_eq!(j["results"][0]["stall_count"], 8, "{j:#}");
}

/// The decision (issue 26 item 1): on seed 001 (the model: deterministic) the gathered write,
/// cork and MSG_MORE tie and the gathered write is chosen by the written rule, the same in five
/// runs; the table marks the tie and prints the reason. `advise chunked` over real sockets never
/// recommends busy-poll first, and says which rule chose.
pub(crate) fn advise_declares_the_tie_and_the_rule_that_chose() {
    let args = ["advise", "--exchange", "client 275,24,292; server 100", "--model", "--reps", "2", "--format", "json"];
    let first = run_json(&args);
    let d = &first["decision"];
    assert_eq!(d["chosen"], "client:writev", "{d:#}");
    assert_eq!(d["rule"], "gathered-write", "{d:#}");
    let tie: Vec<&str> = d["tie"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for want in ["client:writev", "client:cork", "client:msg-more"] {
        assert!(tie.contains(&want), "{want} in the tie: {d:#}");
    }
    assert_eq!((d["rules"][0].as_str(), d["rules"][1].as_str()), (Some("practical"), Some("no-busy-poll")));
    assert_eq!(first["ranking"][0]["label"], "client:writev");
    assert_eq!(first["ranking"][0]["tied"], true);
    let reason = d["reason"].as_str().unwrap();
    assert!(reason.contains("client:writev is first by rule gathered-write"), "{reason}");
    for run in 2..=5 {
        let v = run_json(&args);
        assert_eq!(v["decision"], first["decision"], "run {run} decided otherwise");
    }
    let out = tcpstall().args(&args[..args.len() - 2]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("   1= client:writev"), "{text}");
    assert!(text.contains("\nDecision: client:writev, "), "{text}");
    let _one_at_a_time = exclusive();
    let v = run_json(&["advise", "chunked", "--rounds", "5", "--reps", "2", "-q", "--format", "json"]);
    let best = &v["ranking"][0];
    assert!(!best["label"].as_str().unwrap().contains("busy-poll"), "busy-poll recommended first: {v:#}");
    assert_eq!(v["decision"]["chosen"], best["label"]);
    let rule = v["decision"]["rule"].as_str().unwrap();
    assert!(rule == "alone" || v["decision"]["rules"].as_array().unwrap().iter().any(|r| r == rule), "{rule}");
}

/// Issue 26 item 5: SIGINT on `advise` (real sockets) stops the run in progress, ranks and
/// prints the runs finished, says so in one line and exits 130; SIGTERM on `replay` during its
/// run keeps what was derived (printed, saved with --emit) and exits 143.
pub(crate) fn signals_on_advise_and_replay_keep_the_finished_work() {
    let _one_at_a_time = exclusive();
    sigint_on_advise_ranks_the_runs_finished();
    sigterm_on_replay_keeps_the_derived_exchange();
}

fn sigint_on_advise_ranks_the_runs_finished() {
    use nix::sys::signal::{kill, Signal};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    // advise: 10 candidates x 5 runs of 20 rounds; as written a run waits ~1 s on delayed ACKs.
    // SIGINT at 5 s lands after the first round-robin pass on an idle host; a loaded host that
    // had not finished the as-written run gets one more try at 10 s.
    let mut delays = [5000u64, 10_000].into_iter();
    twice("SIGINT on advise after its first runs", || {
        let delay = delays.next().unwrap_or(10_000);
        let child = Command::new(&bin)
            .args(["advise", "--exchange", "client 275,24,292; server 100", "-q", "--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
        let t0 = Instant::now();
        let out = child.wait_with_output().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "took {:?} to stop", t0.elapsed());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains("interrupted by signal 2 after "), "{err}");
        if err.contains("nothing to rank") {
            return Err(format!("SIGINT at {delay} ms came before the as-written run finished: {err}"));
        }
        let v: Value = serde_json::from_slice(&out.stdout).expect("the finished runs as JSON");
        let rank = v["ranking"].as_array().unwrap();
        assert!(!rank.is_empty() && rank.iter().all(|r| r["runs"].as_u64().unwrap() >= 1), "{v:#}");
        assert!(rank.iter().any(|r| r["label"] == "default"), "{v:#}");
        let notes = v["notes"].to_string();
        assert!(notes.contains("interrupted by signal 2"), "{notes}");
        assert!(v["decision"]["chosen"].is_string(), "{v:#}");
        Ok(())
    });
}

fn sigterm_on_replay_keeps_the_derived_exchange() {
    use nix::sys::signal::{kill, Signal};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    // replay: a capture of 100 header+body requests (the model's pcap): the lab run takes ~5 s.
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("hb.pcap");
    let toml = dir.path().join("hb.toml");
    let out = tcpstall()
        .args(["simulate", "--exchange", "client 40; server 60,900", "--rounds", "100", "--pcap"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The handler is installed once the run's environment is open (lab: the link may need a
    // single-threaded process), a moment after "saved": SIGTERM 1.5 s later lands inside the
    // run (about 6 s: 140 rounds of 44 ms); a loaded host that was still starting gets a retry.
    twice("SIGTERM on replay during its run", || {
        let _ = std::fs::remove_file(&toml);
        let mut child = Command::new(&bin)
            .arg("replay")
            .arg(&pcap)
            .arg("--emit")
            .arg(&toml)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut head = String::new();
        while !head.contains("saved: ") {
            if stdout.read_line(&mut head).unwrap() == 0 {
                panic!("replay ended before saving: {head}");
            }
        }
        std::thread::sleep(Duration::from_millis(1500));
        kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code().is_none() {
            return Err(format!("killed by the signal before the handler was installed: {head}{rest}{err}"));
        }
        assert_eq!(out.status.code(), Some(143), "{head}{rest}{err}");
        assert!(rest.contains("reproduced: interrupted"), "{head}{rest}");
        assert!(err.contains("interrupted by signal 15") && err.contains("hb.toml"), "{err}");
        Ok(())
    });
    assert!(std::fs::read_to_string(&toml).unwrap().contains("[workload.exchange]"));
}

/// `replay --format json` (issue 24): one document, the derived exchange beside the capture's
/// records and the reproducing run (here on the model: deterministic), every field the schema
/// names; the capture's Nagle stalls are reproduced.
pub(crate) fn replay_prints_one_json_document() {
    let f = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures/seed001-default.pcap");
    let out =
        tcpstall().args(["replay"]).arg(&f).args(["--model", "--rounds", "5", "--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(j["mode"], "replay");
    assert!(j["exchange"].as_str().unwrap().starts_with("client 275,24,292"), "{}", j["exchange"]);
    assert!(j["capture_stall_summary"]["stall_count"].as_u64().unwrap() >= 5, "{:#}", j["capture_stall_summary"]);
    let row = &j["run"]["results"][0];
    assert_eq!(row["verdict_key"]["cause"], "nagle-delayed-ack", "{row:#}");
    // --no-run: the document without a run.
    let out = tcpstall().args(["replay"]).arg(&f).args(["--no-run", "--format", "json"]).output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["run"].is_null() && j["capture_stall_records"].as_array().is_some_and(|a| !a.is_empty()));
}

/// Issue 34: a capture of Python's http.client POSTing 25 bodies of 175 or 176 bytes to
/// http.server, thinking 5 to 45 ms between them (tests/cli/programs/httppost_jitter.py;
/// the real programs, tcpdump on loopback). replay finds one request/response period (not a
/// 50-turn exchange), keeps the client's TCP_NODELAY (the capture shows a small segment sent
/// while another was unacknowledged) and says what it dropped; advise answers within its
/// default 60 s budget with a change on the server only (http.client sets NODELAY itself).
pub(crate) fn advise_on_a_captured_http_post_changes_the_server_only_within_a_minute() {
    use std::process::Command;
    use std::time::{Duration, Instant};
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("http25.pcap");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dump = Tcpdump::start(&["tcpdump"], &["-i", "lo", "-s", "0"], &cap, &format!("tcp port {port}"));
    let prog = format!("{}/tests/cli/programs/httppost_jitter.py", env!("CARGO_MANIFEST_DIR"));
    let st = Command::new("python3").arg(&prog).arg(port.to_string()).arg("25").status().unwrap();
    dump.stop();
    assert!(st.success(), "the programs failed");
    let cap = cap.to_str().unwrap();
    let out = tcpstall().args(["replay", cap, "--no-run"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("25 repetitions of 2 turn(s)"), "{text}");
    assert!(text.contains("kept: client: TCP_NODELAY shown on by the capture: segment of"), "{text}");
    assert!(text.contains("runs as written with: client:nodelay"), "{text}");
    assert!(text.contains("dropped: turn 1 (client): think times"), "{text}");
    assert!(!text.contains("server: TCP_NODELAY"), "http.server leaves Nagle on: {text}");
    // The replica runs on real sockets: on a host loaded far past its CPUs a late server write
    // can miss the client's delayed ACK and the exchange as written not stall in that run
    // (advise then rightly says nothing needs fixing); such a run is measured once more.
    let v = twice("advise on the capture stalls as written", || {
        let t0 = Instant::now();
        let v = run_json(&["advise", cap, "--format", "json", "--quiet"]);
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(75), "advise took {took:?} (budget 60 s): {v:#}");
        if v["as_written_stalls"] == false {
            return Err(format!("the replica as written did not stall in this run: {}", v["decision"]["reason"]));
        }
        Ok(v)
    });
    let best = &v["ranking"][0];
    assert_eq!(best["client"].as_array().unwrap().len(), 0, "a change on the server only: {v:#}");
    assert!(!best["server"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(best["stalls"], 0, "{v:#}");
    let base = v["ranking"].as_array().unwrap().iter().find(|r| r["label"] == "default").unwrap();
    assert!(base["stalls"].as_u64().unwrap() > 0, "as written stalls: {v:#}");
}
