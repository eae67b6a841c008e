//! `tcpstall advise-run` (issue 34): the user's own programs measured with fixes from outside.

use std::path::PathBuf;

use crate::support::tcpstall;

fn program(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../outside/programs").join(name).display().to_string()
}

/// What the run of process `pid` left: cgroups and files named tcpstall-outside-<pid>-* (the
/// other advise-run tests run beside this one: theirs are not this run's).
fn leftovers(pid: u32) -> Vec<String> {
    let mine = format!("tcpstall-outside-{pid}-");
    let mut v = Vec::new();
    for dir in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/tmp"] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&mine) {
                v.push(format!("{dir}/{n}"));
            }
        }
    }
    v
}

/// The tcpstall binary as a std Command (its pid is wanted: `run`).
fn bin() -> std::process::Command {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
}

/// Runs `cmd` to its end with its output captured; also returns its pid.
fn run(cmd: &mut std::process::Command) -> (std::process::Output, u32) {
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// A setting that is neither form is one line on stderr and exit 2, before anything runs.
pub(crate) fn bad_setting_is_one_line() {
    let out = tcpstall()
        .args(["advise-run", "--server", "true", "--client", "true", "--server-setting", "nodelay"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad input: exit 2 (README)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("env:NAME=VALUE or line:FILE:LINE"), "{err}");
}

/// `--server-addr` that is no IPv4 HOST:PORT, or given with a server command: one line, exit 2,
/// before anything runs.
pub(crate) fn bad_server_addr_is_one_line() {
    for args in [
        vec!["advise-run", "--server-addr", "no-port-here", "--client", "true"],
        vec!["advise-run", "--server-addr", "[::1]:80", "--client", "true"],
        vec!["advise-run", "--server-addr", "192.0.2.1:80", "--server", "true", "--client", "true"],
    ] {
        let out = tcpstall().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--server-addr") || err.contains("--server"), "{args:?}: {err}");
        if !args.contains(&"--server") {
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
    }
}

/// On http.server with http.client POSTing a file body: the stall as written, its removal by
/// a fix from outside with its cost, the deployable form; nothing left behind; the sock_ops
/// object for bpftool is a BPF ELF object.
pub(crate) fn http_server_stall_removed_from_outside() {
    let (out, pid) = run(bin()
        .args(["advise-run", "--port", "8080", "--budget", "40"])
        .args(["--server", &format!("python3 {} {{host}} {{port}}", program("http_server.py"))])
        .args(["--client", &format!("python3 {} {{host}} {{port}} 10", program("http_client.py"))]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("the classifier names: nagle-delayed-ack"), "{text}");
    assert!(text.contains("First choice: "), "{text}");
    assert!(text.contains("Its cost, per request: data segments"), "{text}");
    // The client's delayed ACK capped (TCP_BPF_DELACK_MAX, net/core/filter.c
    // bpf_sol_tcp_setsockopt): offered on the client, whose ACKs the server's held body waits for.
    for c in [
        "client route quickack 1",
        "server sock_ops TCP_NODELAY",
        "server LD_PRELOAD shim",
        "client sock_ops TCP_BPF_DELACK_MAX",
    ] {
        assert!(text.contains(c), "{c}: {text}");
        // Measured, not only named among those left out.
        assert!(!text.contains(&format!("left out: {c}")), "{c}: {text}");
    }
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    let dir = tempfile::tempdir().unwrap();
    let obj = dir.path().join("nodelay.o");
    let st = tcpstall().args(["advise-run", "--write-sockops"]).arg(&obj).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let b = std::fs::read(&obj).unwrap();
    assert!(b.starts_with(b"\x7fELF") && b[18] == 247, "an eBPF ELF object (EM_BPF 247)");
    let obj = dir.path().join("delack.o");
    let st = tcpstall().args(["advise-run", "--write-sockops-delack"]).arg(&obj).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let d = std::fs::read(&obj).unwrap();
    assert!(d.starts_with(b"\x7fELF") && d[18] == 247 && d != b, "another eBPF ELF object");
}

/// `--format json`: the versioned document (docs/json-schema.md, "Advise-run"): every
/// candidate with its p50/p99 in ms, stalls and cost per request; as written stalls on the
/// classifier's nagle-delayed-ack records.
pub(crate) fn advise_run_json_is_the_versioned_document() {
    let (out, pid) = run(bin()
        .args(["advise-run", "--port", "8080", "--budget", "20", "--format", "json"])
        .args(["--server", &format!("python3 {} {{host}} {{port}}", program("http_server.py"))])
        .args(["--client", &format!("python3 {} {{host}} {{port}} 6", program("http_client.py"))]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!((v["mode"].as_str(), v["port"].as_u64()), (Some("advise-run"), Some(8080)), "{v:#}");
    let rows = v["ranking"].as_array().unwrap();
    let base = rows.iter().find(|r| r["label"] == "as written").expect("as written ran");
    assert!(base["p50_ms"].as_f64().unwrap() >= 20.0, "the stall (~40 ms) as written: {v:#}");
    assert_eq!(base["causes"][0]["cause"], "nagle-delayed-ack", "{v:#}");
    assert!(rows.iter().all(|r| r["packets_per_request"].as_f64().unwrap() > 0.0), "{v:#}");
    let w = &v["winner"];
    assert!(w["deploy"].as_str().unwrap().to_lowercase().contains("remove"), "how to remove it: {v:#}");
    let best = rows.iter().find(|r| r["label"] == w["label"]).unwrap();
    assert!(best["p50_ms"].as_f64().unwrap() < 5.0, "{v:#}");
    assert!(v["server_addr"].is_null() && v["link"].is_null(), "{v:#}");
    // The spawned programs, found by ss (the connected and the listening socket) in the
    // cgroups this run made for each side.
    let cg = format!("/tcpstall-outside-{pid}-");
    for end in ["a", "b"] {
        let o = &base["owners"][end];
        assert_eq!(o["comm"], "python3", "{end}: {v:#}");
        assert!(o["cgroup"].as_str().is_some_and(|c| c.starts_with(&cg)), "{end}: {v:#}");
        assert_eq!(o["source"], "proc", "{v:#}");
    }
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
}

/// `--link SPEC` (as `lab --link`): the programs in the emulated link's namespaces, 20 ms of
/// round trip between them. As written the server's body waits for the client's delayed ACK
/// (TCP_ATO_MIN, 40 ms: tcp_send_delayed_ack bounds it by max(srtt, TCP_DELACK_MIN), still 40
/// ms) and then for the ACK to cross the link; with the client's route quickack only the
/// crossing is left, the link's 20 ms, seen at the server's end.
pub(crate) fn advise_run_behind_an_emulated_link() {
    let (out, pid) = run(bin()
        .args(["advise-run", "--port", "8080", "--budget", "40", "--format", "json", "--link", "rtt=20ms,mtu=1500"])
        .args(["--server", &format!("python3 {} {{host}} {{port}}", program("http_server.py"))])
        .args(["--client", &format!("python3 {} {{host}} {{port}} 6", program("http_client.py"))]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["link"], "rtt=20ms,mtu=1500", "{v:#}");
    let rows = v["ranking"].as_array().unwrap();
    let p50 = |label: &str| {
        rows.iter().find(|r| r["label"] == label).unwrap_or_else(|| panic!("{label}: {v:#}"))["p50_ms"]
            .as_f64()
            .unwrap()
    };
    let (base, quick) = (p50("as written"), p50("client route quickack 1"));
    assert!(quick >= 15.0, "the link's round trip is there: {quick} ms");
    assert!(base - quick >= 25.0, "the delayed ACK's wait removed: {base} -> {quick} ms");
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
}

/// The process's BPF links to tracepoints (/proc/PID/fdinfo `link_type: raw_tracepoint`: the
/// kernel-evidence programs; sock_ops links are `cgroup`); None once it is gone.
fn tracepoint_links(pid: u32) -> Option<usize> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    let linked = |e: &std::fs::DirEntry| {
        std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("link_type:\traw_tracepoint"))
    };
    Some(dir.flatten().filter(linked).count())
}

/// `tcpstall ARGS --server <http.server> --client <http.client making REQUESTS requests>`, its
/// output piped.
fn spawn_http_advise_run(args: &[&str], requests: u32) -> std::process::Child {
    bin()
        .args(args)
        .args(["--server", &format!("python3 {} {{host}} {{port}}", program("http_server.py"))])
        .args(["--client", &format!("python3 {} {{host}} {{port}} {requests}", program("http_client.py"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// advise-run as JSON on http.server with http.client (6 requests a run), with `extra` flags;
/// its pid, and its tracepoint links sampled every 10 ms while it ran.
fn http_json(extra: &[&str]) -> (serde_json::Value, u32, Vec<usize>) {
    let args = ["advise-run", "--port", "8080", "--budget", "15", "--format", "json"];
    let child = spawn_http_advise_run(&[&args[..], extra].concat(), 6);
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let mut links = Vec::new();
    while !waiter.is_finished() {
        links.extend(tracepoint_links(pid));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).expect("one JSON document"), pid, links)
}

/// Kernel evidence (eBPF on TCP tracepoints, crates/kevidence, as the lab's rows record it):
/// as written, http.server's body waits behind its header for the client's delayed ACK (RFC
/// 9293 3.7.4 with tcp_nagle_check; tcp_delack_timer), and the classifier's nagle-delayed-ack
/// records carry the kernel's record of that held write (`tcp:tcp_sendmsg_locked`: "kernel:
/// sendmsg N bytes", the server's). With `--no-kernel` the packets alone still name them, and
/// the document says the stalls come from the packets only. The programs are attached only
/// while a run records (kevidence::Reader::pause/resume, as the lab's rows): detached between
/// runs, and never with `--no-kernel`.
pub(crate) fn advise_run_stalls_carry_kernel_evidence() {
    let (v, pid, links) = http_json(&[]);
    let most = links.iter().copied().max().unwrap_or(0);
    assert!(most >= 2, "the tracepoints attached while runs recorded: {links:?}");
    let (first, last) = (links.iter().position(|&n| n > 0).unwrap(), links.iter().rposition(|&n| n > 0).unwrap());
    assert!(links[first..last].contains(&0), "detached between runs: {links:?}");
    let status = v["kernel_evidence"].as_str().unwrap();
    assert!(status.starts_with("kernel evidence: ") && status.contains("the server's sockets"), "{v:#}");
    let rows = v["ranking"].as_array().unwrap();
    let base = rows.iter().find(|r| r["label"] == "as written").expect("as written ran");
    assert_eq!(base["causes"][0]["cause"], "nagle-delayed-ack", "{v:#}");
    let k = &base["kernel"];
    assert_eq!(k["runs"], base["runs"], "every run recorded: {v:#}");
    // The server's sockets (the filter keeps the capture's namespace, the server's): two writes
    // per request at least, the response's header and body.
    assert!(k["writes"].as_u64().unwrap() >= 2 * base["requests"].as_u64().unwrap(), "{v:#}");
    assert!(k["stalls_with_kernel"].as_u64().unwrap() >= 1, "{v:#}");
    let e = k["examples"][0].as_str().unwrap();
    assert!(e.starts_with("nagle-delayed-ack") && e.contains("the server's bytes: kernel: sendmsg"), "{e}");
    assert!(rows.iter().all(|r| r["kernel"]["runs"] == r["runs"]), "every row recorded: {v:#}");
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));

    let (v, pid, links) = http_json(&["--no-kernel"]);
    assert!(links.iter().all(|&n| n == 0), "{links:?}");
    assert_eq!(v["kernel_evidence"], "stalls from the packets only: --no-kernel", "{v:#}");
    let rows = v["ranking"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["kernel"].is_null()), "{v:#}");
    let base = rows.iter().find(|r| r["label"] == "as written").expect("as written ran");
    assert_eq!(base["causes"][0]["cause"], "nagle-delayed-ack", "named from the packets: {v:#}");
    assert!(base["p50_ms"].as_f64().unwrap() >= 20.0, "the stall (~40 ms) as written: {v:#}");
    assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
}

/// Waits until process `pid` catches SIGINT (bit 1 of `SigCgt` in /proc/PID/status, proc(5));
/// fails after 20 s.
fn handles_sigint(pid: u32) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (nix::sys::signal::Signal::SIGINT as i32 - 1)) != 0);
        if caught {
            return;
        }
        assert!(std::time::Instant::now() < until, "pid {pid} never installed a SIGINT handler");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Ctrl-C early (before the first run finished, while the namespaces and the kernel evidence
/// are being set up or the first run measures) and later (mid-way): exit 130 with one line
/// saying so, whatever was ranked printed, and nothing of the run's left on the system.
pub(crate) fn ctrl_c_early_or_late_exits_130_and_leaves_nothing() {
    use std::time::Duration;
    for after in [Duration::from_millis(300), Duration::from_secs(3)] {
        let child = spawn_http_advise_run(&["advise-run", "--port", "8081", "--budget", "40"], 10);
        let pid = child.id();
        // Timed from when the process can take a Ctrl-C: before its handler is installed, a
        // SIGINT ends it by the default action (no code, nothing said), which on a loaded
        // machine can still be 300 ms after the spawn.
        handles_sigint(pid);
        std::thread::sleep(after);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "SIGINT after {after:?}: {err}");
        assert!(err.contains("tcpstall: interrupted"), "{err}");
        assert!(leftovers(pid).is_empty(), "{:?}", leftovers(pid));
    }
}
