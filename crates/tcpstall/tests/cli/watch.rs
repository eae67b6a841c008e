//! `tcpstall watch` on loopback: a pair that stalls (seed 001's request in three writes with
//! Nagle on, a server that answers after reading it all: Nagle x delayed ACK on a reused
//! connection) and a pair that does not (the request in one write), on two ports, watched live.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{exclusive, tcpstall, Tcpdump};

/// A server answering 100 bytes to each 591-byte request, and a client sending `rounds`
/// requests, as three writes (`split`) or one; on a thread of its own.
fn run_pair(l: TcpListener, rounds: usize, split: bool) -> std::thread::JoinHandle<()> {
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 591];
            for _ in 0..rounds {
                if s.read_exact(&mut buf).is_err() {
                    return;
                }
                s.write_all(&[b'r'; 100]).unwrap();
            }
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let mut answer = [0u8; 100];
        for _ in 0..rounds {
            if split {
                c.write_all(&[b'a'; 275]).unwrap();
                c.write_all(&[b'b'; 24]).unwrap();
                c.write_all(&[b'c'; 292]).unwrap();
            } else {
                c.write_all(&[b'a'; 591]).unwrap();
            }
            c.read_exact(&mut answer).unwrap();
        }
        drop(c);
        server.join().unwrap();
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Stall records for the stalling pair only, with the Nagle x delayed-ACK cause; the metrics
/// endpoint counts them; `--write` keeps a capture explain classifies the same way, under 10%
/// of a full tcpdump capture of the same traffic.
pub(crate) fn watch_finds_the_stalling_pair_only_and_keeps_its_packets() {
    let _one = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (stall_l, ok_l) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    let (p1, p2) = (stall_l.local_addr().unwrap().port(), ok_l.local_addr().unwrap().port());
    let mport = free_port();
    let (w, full) = (dir.path().join("w.pcapng"), dir.path().join("full.pcap"));
    let watch = Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .args(["watch", "-i", "lo", "--port", &p1.to_string(), "--port", &p2.to_string()])
        .args(["--format", "jsonl", "--duration", "8", "--metrics", &format!("127.0.0.1:{mport}"), "--write"])
        .arg(&w)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dump =
        Tcpdump::start(&["tcpdump"], &["-i", "lo", "-s", "0"], &full, &format!("tcp port {p1} or tcp port {p2}"));
    // The ring is up well before this on any machine.
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let a = run_pair(stall_l, 14, true);
    let b = run_pair(ok_l, 3000, false);
    a.join().unwrap();
    b.join().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(6), "the traffic must end inside the watch's 8 s");
    std::thread::sleep(Duration::from_millis(500));
    let metrics = scrape(mport);
    let out = watch.wait_with_output().unwrap();
    dump.stop();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(lines.len() >= 6, "14 rounds stall (but the first few, in quick-ACK mode): {lines:#?}\n{err}");
    for l in &lines {
        let flow = l["flow"].as_str().unwrap();
        assert!(flow.contains(&format!(":{p1}")), "only the stalling pair: {l:#}");
        assert_eq!(l["stall"]["cause"], "nagle-delayed-ack", "{l:#}");
        assert!(l["stall"]["length_ns"].as_u64().unwrap() >= 30_000_000, "{l:#}");
        assert!(l["start_unix_ns"].as_u64().unwrap() > 1_700_000_000_000_000_000);
    }
    assert!(err.contains("0 dropped by the ring"), "{err}");
    // Without --kernel no owner is known: comm and cgroup are empty, which Prometheus reads as
    // absent (docs/watch.md, Owners).
    let want =
        format!("tcpstall_watch_stalls_total{{cause=\"nagle-delayed-ack\",port=\"{p1}\",comm=\"\",cgroup=\"\"}}");
    assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains(&want), "{metrics}");
    assert!(metrics.contains("tcpstall_watch_stall_length_seconds_bucket"), "{metrics}");
    // The flight recorder's capture: explain names the same cause, same count within one.
    let e = tcpstall().arg("explain").arg(&w).args(["--format", "json"]).output().unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    let j: Value = serde_json::from_slice(&e.stdout).unwrap();
    let flows = j["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 1, "only the stalling flow's packets were written");
    let st: Vec<&Value> =
        flows[0]["stalls"].as_array().unwrap().iter().filter(|s| s["kind"] == "stall" || s["kind"] == "wait").collect();
    assert!(st.iter().all(|s| s["cause"] == "nagle-delayed-ack"), "{st:#?}");
    if st.len().abs_diff(lines.len()) > 1 {
        // Kept for a look: the soak saw "explain 10 vs watch 12" once (load 6).
        let keep = std::env::temp_dir().join(format!("tcpstall-watch-write-{}.pcapng", std::process::id()));
        let _ = std::fs::copy(&w, &keep);
        let brief = |v: &Value| format!("{} {} {} {}", v["kind"], v["cause"], v["start_ns"], v["length_ns"]);
        let watch_said: Vec<String> =
            lines.iter().map(|l| format!("{} {}", l["stall"]["cause"], l["stall"]["length_ns"])).collect();
        let explain_said: Vec<String> = flows[0]["stalls"].as_array().unwrap().iter().map(brief).collect();
        panic!(
            "explain {} vs watch {}; the file is kept at {}\nwatch: {watch_said:#?}\nexplain (every record): {explain_said:#?}",
            st.len(),
            lines.len(),
            keep.display()
        );
    }
    let (small, big) = (std::fs::metadata(&w).unwrap().len(), std::fs::metadata(&full).unwrap().len());
    assert!(small * 10 < big, "--write {small} bytes against a full capture of {big}");
}

/// Without CAP_NET_RAW: one line naming it, a non-zero exit.
pub(crate) fn watch_without_cap_net_raw_says_so() {
    let out = crate::support::run_unprivileged(&["watch", "--duration", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_NET_RAW") && err.trim().lines().count() == 1, "{err}");
}

/// Bad flags: one line each, before any capture; Ctrl-C ends a watch cleanly with its summary.
pub(crate) fn watch_bad_flags_and_ctrl_c() {
    for (args, want) in [
        (&["watch", "--threshold", "0"][..], "--min-gap 0"),
        (&["watch", "--min-gap", "0"], "--min-gap 0"),
        (&["watch", "-i", "no-such-if0"], "no such interface"),
        (&["watch", "--duration=0"], "--duration"),
        (&["watch", "--write", "/nonexistent-dir/w.pcapng", "--duration", "1"], "--write"),
    ] {
        let out = tcpstall().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want) && err.trim().lines().count() == 1, "{args:?}: {err}");
    }
    let child = Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .args(["watch", "-i", "lo", "--port", &free_port().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tcpstall watch:") && text.contains("0 stall records"), "{text}");
}
