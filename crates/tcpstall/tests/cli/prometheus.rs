//! Issue 33 item 5: a real Prometheus (Debian's `prometheus`) scrapes `watch --kernel
//! --metrics` and answers a query for stalls by cause and command.
//!
//! In a private network namespace: Python's http.server (Nagle left on, its header and body
//! writes stall on Nagle x delayed ACK) beside a NODELAY service, each started through a
//! symlink to python3 of its own name, so the kernel's `comm` (the executable's base name,
//! execve(2)) tells them apart: `stall-http` and `nodelay-svc`. Prometheus scrapes the watch
//! every 500 ms; the test asks its HTTP API (`/api/v1/query`, Prometheus docs "HTTP API",
//! instant queries) for `sum by (cause, comm) (tcpstall_watch_stalls_total)` and expects
//! `stall-http` with cause `nagle-delayed-ack` at >= 1, and no `nodelay-svc` series.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PROGRAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/programs/owners.py");

/// Everything the test started, killed and reaped on drop (also after a panic): Prometheus,
/// the watch, the servers and clients. Prometheus' storage is in the test's temporary dir.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A port free on loopback in this namespace (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.0 GET (no chunked answer), the body.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Percent-encodes a query string value (RFC 3986 unreserved characters kept).
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A server of owners.py `mode` on `port`, run as `exe` (a symlink to python3): its pid.
fn server(started: &mut Started, exe: &Path, mode: &str, port: u16) -> u32 {
    let mut c = Command::new(exe).args([PROGRAM, mode, &port.to_string()]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
    started.0.push(c);
    line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{mode}: {line:?}"))
}

/// `sum by (cause, comm) (tcpstall_watch_stalls_total)` as Prometheus answers it: (cause,
/// comm, value) per series; None while Prometheus is not up.
fn stalls_by_cause_and_comm(prom: u16) -> Option<Vec<(String, String, f64)>> {
    let q = encode("sum by (cause, comm) (tcpstall_watch_stalls_total)");
    let body = get(prom, &format!("/api/v1/query?query={q}"))?;
    let v: Value = serde_json::from_str(&body).ok()?;
    assert_eq!(v["status"], "success", "{v}");
    let rows = v["data"]["result"].as_array()?;
    Some(
        rows.iter()
            .map(|r| {
                let m = &r["metric"];
                let value = r["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
                (m["cause"].as_str().unwrap_or("").into(), m["comm"].as_str().unwrap_or("").into(), value)
            })
            .collect(),
    )
}

// long: one scene (Prometheus, two services, a watch, the clients), then the queries in order.
fn scene() {
    let dir = tempfile::tempdir().unwrap();
    let mut started = Started(Vec::new());
    assert!(Command::new("ip").args(["link", "set", "lo", "up"]).status().unwrap().success());
    let (pa, pb, mport, prom) = (free_port(), free_port(), free_port(), free_port());
    // Prometheus: one job scraping the watch, every 500 ms (Prometheus docs, "Configuration":
    // scrape_interval, static_configs), its storage in the temporary directory.
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: tcpstall\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    started.0.push(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // The two services, each under a name of its own (the symlink's: the process's comm).
    let py = python_executable();
    let (exe_a, exe_b) = (dir.path().join("stall-http"), dir.path().join("nodelay-svc"));
    std::os::unix::fs::symlink(&py, &exe_a).unwrap();
    std::os::unix::fs::symlink(&py, &exe_b).unwrap();
    server(&mut started, &exe_a, "http-server", pa);
    server(&mut started, &exe_b, "nodelay-server", pb);
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    started.0.push(
        Command::new(&bin)
            .args(["watch", "-i", "lo", "--port", &pa.to_string(), "--port", &pb.to_string(), "--kernel"])
            .args(["--format", "jsonl", "--duration", "40", "--metrics", &format!("127.0.0.1:{mport}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom_log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    // Both answer: the watch's endpoint, Prometheus' API.
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(mport, "/metrics").is_none() || stalls_by_cause_and_comm(prom).is_none() {
        assert!(Instant::now() < deadline, "watch or prometheus did not come up\n{}", prom_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let body = dir.path().join("body");
    std::fs::write(&body, vec![b'x'; 3000]).unwrap();
    let mut clients = [
        Command::new("python3").args([PROGRAM, "http-client", &pa.to_string(), "30", body.to_str().unwrap()]).spawn(),
        Command::new("python3").args([PROGRAM, "nodelay-client", &pb.to_string(), "200", "5"]).spawn(),
    ]
    .map(Result::unwrap);
    for c in &mut clients {
        assert!(c.wait().unwrap().success(), "a client failed");
    }
    // Prometheus has the stalls once a scrape after them is stored.
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows = stalls_by_cause_and_comm(prom).unwrap_or_default();
        if rows.iter().any(|(_, comm, n)| comm == "stall-http" && *n >= 20.0) || Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("prometheus answers sum by (cause, comm): {rows:?}");
    let http = rows.iter().find(|(cause, comm, _)| cause == "nagle-delayed-ack" && comm == "stall-http");
    assert!(
        http.is_some_and(|(_, _, n)| *n >= 1.0),
        "Prometheus names stall-http's nagle-delayed-ack stalls: {rows:?}\n{}",
        prom_log()
    );
    assert!(!rows.iter().any(|(_, comm, _)| comm == "nodelay-svc"), "never the NODELAY service: {rows:?}");
    // The watch is a target Prometheus sees up (its own `up` series, Prometheus docs "Jobs and
    // instances").
    let up = get(prom, &format!("/api/v1/query?query={}", encode("up{job=\"tcpstall\"}"))).unwrap();
    let up: Value = serde_json::from_str(&up).unwrap();
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
}

/// The python3 interpreter itself (`sys.executable`: past a shim such as pyenv's, which
/// dispatches on its own name and would not run under another).
fn python_executable() -> std::path::PathBuf {
    let o = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    assert!(o.status.success(), "python3: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().into()
}

/// In a private network namespace (a thread of its own, unshared; every child inherits it).
pub(crate) fn prometheus_answers_stalls_by_cause_and_command() {
    let r = std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        scene();
    })
    .join();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}
