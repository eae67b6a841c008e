//! Issue 33's "done means": two real programs side by side in one private network namespace,
//! each in a cgroup of its own and run under strace (setsockopt only):
//! - Python's http.server answering http.client POSTs of a file (its header and body writes
//!   stall on Nagle x delayed ACK), one of its response bodies dropped once by iptables;
//! - a NODELAY service (tests/cli/programs/owners.py nodelay-server).
//!
//! `watch --kernel` must name http.server's pid, command and cgroup on every stall record and
//! metric and never the other's, and charge the resend of the dropped body to http.server;
//! `tcpstall sockets` must report TCP_NODELAY as strace saw each program set it, and flag the
//! first.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::stderr_lines;

const PROGRAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/programs/owners.py");

/// The cgroup v2 mount (/proc/self/mountinfo).
fn cgroup2() -> PathBuf {
    let t = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    t.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.starts_with("cgroup2 ")).then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap()))
        })
        .expect("a cgroup2 mount")
}

/// What the test made on the system, removed on drop: the processes, then their cgroups.
struct Made {
    children: Vec<Child>,
    /// The servers' python processes (children of strace, which a kill of strace leaves).
    pids: Vec<u32>,
    cgroups: Vec<PathBuf>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for &p in &self.pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), nix::sys::signal::Signal::SIGKILL);
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for g in &self.cgroups {
            // The processes in it are gone (killed, reaped): it can go.
            for _ in 0..50 {
                if std::fs::remove_dir(g).is_ok() || !g.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A server of owners.py `mode` on `port` under strace, in cgroup `cg`: (the process, its
/// python pid, strace's output file).
fn server(made: &mut Made, mode: &str, port: u16, cg: &Path, trace: &Path) -> u32 {
    std::fs::create_dir(cg).unwrap();
    made.cgroups.push(cg.to_path_buf());
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec strace -f -qq -e trace=setsockopt -o {} python3 {PROGRAM} {mode} {port}",
        cg.display(),
        trace.display()
    );
    let mut c = Command::new("sh").args(["-c", &script]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
    made.children.push(c);
    let pid =
        line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{mode}: {line:?}"));
    made.pids.push(pid);
    pid
}

/// Whether strace saw the program set TCP_NODELAY to 1.
fn set_nodelay(trace: &Path) -> bool {
    std::fs::read_to_string(trace).unwrap().lines().any(|l| l.contains("TCP_NODELAY, [1]"))
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn sh(cmd: &str) {
    assert!(Command::new("sh").args(["-c", cmd]).status().unwrap().success(), "{cmd}");
}

// long: one scene (two services, a watch, a drop, a socket audit), then its checks in order.
fn scene() {
    let dir = tempfile::tempdir().unwrap();
    let tag = std::process::id();
    let root = cgroup2();
    let (cg_a, cg_b) =
        (root.join(format!("tcpstall-test-http-{tag}")), root.join(format!("tcpstall-test-nodelay-{tag}")));
    let (trace_a, trace_b) = (dir.path().join("a.strace"), dir.path().join("b.strace"));
    let body = dir.path().join("body");
    std::fs::write(&body, vec![b'x'; 3000]).unwrap();
    sh("ip link set lo up");
    let mut made = Made { children: Vec::new(), pids: Vec::new(), cgroups: Vec::new() };
    let (pa, pb, mport) = (18081u16, 18082u16, 19464u16);
    let pid_a = server(&mut made, "http-server", pa, &cg_a, &trace_a);
    let pid_b = server(&mut made, "nodelay-server", pb, &cg_b, &trace_b);
    let bin = assert_cmd::cargo::cargo_bin("tcpstall");
    let mut watch = Command::new(&bin)
        .args(["watch", "-i", "lo", "--port", &pa.to_string(), "--port", &pb.to_string(), "--kernel"])
        .args(["--format", "jsonl", "--duration", "7", "--metrics", &format!("127.0.0.1:{mport}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The watch's first line says its kernel evidence is attached: wait for it (a fixed 1.5 s
    // missed the first writes, and so their owner, when loading the programs took longer on a
    // loaded host: the soak's one failure), then give its packet ring a moment.
    let (lines, stderr_rest) = stderr_lines(watch.stderr.take().unwrap());
    let first = lines.recv_timeout(Duration::from_secs(60)).expect("the watch's first line");
    assert!(first.contains("kernel evidence"), "the watch's kernel evidence: {first}");
    std::thread::sleep(Duration::from_millis(300));
    // The 6th response body of the http server is dropped once on arrival (after it left, so
    // that the sender counts it sent; a drop in OUTPUT is a local send error, not a loss): its resend
    // fires from the retransmit timer (softirq).
    let drop_rule = format!(
        "INPUT -p tcp --sport {pa} -m length --length 190:400 -m statistic --mode nth --every 1000 --packet 5 -j DROP"
    );
    sh(&format!("iptables -A {drop_rule}"));
    let client_a = Command::new("python3")
        .args([PROGRAM, "http-client", &pa.to_string(), "60", body.to_str().unwrap()])
        .spawn()
        .unwrap();
    let client_b =
        Command::new("python3").args([PROGRAM, "nodelay-client", &pb.to_string(), "400", "5"]).spawn().unwrap();
    made.children.extend([client_a, client_b]);
    std::thread::sleep(Duration::from_millis(1000));
    let sockets = Command::new(&bin)
        .args([
            "sockets",
            "--port",
            &pa.to_string(),
            "--port",
            &pb.to_string(),
            "--format",
            "json",
            "--interval",
            "0.1",
        ])
        .output()
        .unwrap();
    assert!(sockets.status.success(), "{}", String::from_utf8_lossy(&sockets.stderr));
    let at_risk = Command::new(&bin).args(["sockets", "--at-risk", "--interval", "0"]).output().unwrap();
    for c in made.children.iter_mut().skip(2) {
        assert!(c.wait().unwrap().success(), "a client failed");
    }
    sh(&format!("iptables -D {drop_rule}"));
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = scrape(mport);
    let out = watch.wait_with_output().unwrap();
    let err = format!("{first}\n{}", stderr_rest.join().unwrap());
    assert!(out.status.success(), "{err}");

    // watch: every record is http.server's, with its cgroup; one carries the resend.
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() >= 40, "a stall per request or so: {} records\n{err}", lines.len());
    let cg_a_path = format!("/{}", cg_a.file_name().unwrap().to_str().unwrap());
    for l in &lines {
        let o = &l["owner"];
        assert_eq!(o["pid"], pid_a, "the held end is http.server's socket: {l}");
        assert_eq!((o["comm"].as_str(), o["cgroup"].as_str()), (Some("python3"), Some(cg_a_path.as_str())), "{l}");
        assert!(l["b"].as_str().unwrap().ends_with(&format!(":{pa}")), "{l}");
    }
    assert!(lines.iter().any(|l| l["kernel"]["resends"].as_u64() >= Some(1)), "the dropped body's resend\n{err}");
    assert!(err.contains(" 0 lost,"), "{err}");
    // The metrics: stalls by cause and command, http.server's cgroup only.
    let series: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tcpstall_watch_stalls_total{")).collect();
    assert!(!series.is_empty(), "{metrics}");
    for s in &series {
        assert!(s.contains(&format!("comm=\"python3\",cgroup=\"{cg_a_path}\"")), "{s}");
    }
    let cg_b_path = format!("/{}", cg_b.file_name().unwrap().to_str().unwrap());
    assert!(!metrics.contains(&cg_b_path), "{metrics}");

    // sockets: TCP_NODELAY as strace saw each server set it, and only http.server at risk.
    assert!(!set_nodelay(&trace_a), "http.server leaves Nagle on");
    assert!(set_nodelay(&trace_b), "the NODELAY service sets it");
    let doc: Value = serde_json::from_slice(&sockets.stdout).unwrap();
    let rows = doc["sockets"].as_array().unwrap();
    let server_side = |port: u16| {
        rows.iter()
            .find(|r| r["local"].as_str().unwrap().ends_with(&format!(":{port}")) && r["state"] == "ESTABLISHED")
            .unwrap_or_else(|| panic!("the server socket of port {port}: {doc:#}"))
    };
    let (a, b) = (server_side(pa), server_side(pb));
    assert_eq!((a["owner"]["pid"].as_u64(), b["owner"]["pid"].as_u64()), (Some(pid_a.into()), Some(pid_b.into())));
    assert_eq!(a["options"]["nodelay"], set_nodelay(&trace_a), "{a:#}");
    assert_eq!(b["options"]["nodelay"], set_nodelay(&trace_b), "{b:#}");
    assert!(a["risks"][0].as_str().unwrap().starts_with("Nagle on"), "{a:#}");
    assert_eq!(b["risks"].as_array().unwrap().len(), 0, "{b:#}");
    let text = String::from_utf8_lossy(&at_risk.stdout);
    assert!(text.contains(&format!("python3[{pid_a}]")) && !text.contains(&format!("[{pid_b}]")), "{text}");
}

/// In a private network namespace (a thread of its own, unshared; every child inherits it,
/// and the iptables rule goes with it).
pub(crate) fn watch_and_sockets_name_the_program_that_stalls() {
    let r = std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        scene();
    })
    .join();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}
