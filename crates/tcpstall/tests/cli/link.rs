//! End-to-end tests of the emulated link: `tcpstall shell`, `--capture`, cleanup after SIGKILL,
//! and the unprivileged path. Tests that need namespaces are registered with `Need::Root`
//! (main.rs): ignored with the reason without root, a failure under CI.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{exclusive, tcpstall, twice};

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("tcpstall")
}

pub(crate) fn shell_runs_the_command_in_the_client_namespace_and_returns_its_exit_code() {
    let out = tcpstall()
        .args([
            "shell",
            "--link",
            "rtt=2ms",
            "--",
            "sh",
            "-c",
            "cat /proc/net/route; echo server=$TCPSTALL_SERVER; exit 7",
        ])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "stderr: {stderr}");
    // The client namespace reaches the other end through the TUN device (the /24), and has no
    // default route, so off-link destinations fail at once instead of entering the link.
    assert!(stdout.contains("tcpstall0\t000012C6"), "no 198.18.0.0/24 route: {stdout}");
    assert!(!stdout.contains("\t00000000\t00000000\t0001"), "a default route: {stdout}");
    assert!(stdout.contains("server=198.18.0.2"), "{stdout}");
    assert!(stderr.contains("server namespace at 198.18.0.2"), "{stderr}");
}

pub(crate) fn shell_rejects_a_bad_link_in_one_line() {
    let out = tcpstall().args(["shell", "--link", "rtt=20", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--link") && stderr.contains("needs a unit"), "{stderr}");
}

/// A TCP handshake from the client namespace to a server started with --server-command
/// takes one round trip of the link: at rtt=20ms the fastest of five handshakes lies between
/// 19 and 30 ms. A scheduling delay only adds (on 2 cores with four busy loops beside, python's
/// median was 35-40 ms), so the minimum is the robust figure; no delay or a doubled one would
/// show as < 1 ms or >= 40 ms.
pub(crate) fn server_command_is_reachable_one_rtt_away() {
    let _one_at_a_time = exclusive();
    let server = "python3 -c \"import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);\
                  s.bind(('198.18.0.2',5301));s.listen()\nwhile True:\n c,_=s.accept();c.sendall(c.recv(10));c.close()\"";
    let client = "import socket,time\n\
                  for i in range(100):\n\
                  \x20   try:\n\
                  \x20       socket.create_connection(('198.18.0.2',5301)).close();break\n\
                  \x20   except OSError: time.sleep(0.05)\n\
                  ms=[]\n\
                  for i in range(5):\n\
                  \x20   t=time.monotonic();s=socket.create_connection(('198.18.0.2',5301))\n\
                  \x20   ms.append((time.monotonic()-t)*1e3);s.sendall(b'ping');r=s.recv(10);s.close()\n\
                  print('connect_ms=%.3f'%min(ms));print(r)";
    twice("handshake at rtt=20ms", || {
        let out = tcpstall()
            .args(["shell", "--link", "rtt=20ms", "--server-command", server, "--", "python3", "-c", client])
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("b'ping'"), "{stdout}");
        let ms: f64 = stdout
            .split("connect_ms=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no connect_ms in {stdout}"));
        if (19.0..30.0).contains(&ms) {
            Ok(())
        } else {
            Err(format!("fastest of 5 handshakes {ms} ms at rtt=20ms (want 19-30 ms)"))
        }
    });
}

pub(crate) fn capture_is_readable_by_tcpdump_and_tshark() {
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("link.pcapng");
    // Three UDP datagrams through the link (the shell's own /dev/udp needs bash).
    let cmd = "for i in 1 2 3; do python3 -c \"import socket;socket.socket(2,2).sendto(b'x'*64,('198.18.0.2',9))\" \
               || exit 9; done";
    let out = tcpstall()
        .args(["shell", "--link", "rtt=2ms", "--capture"])
        .arg(&cap)
        .args(["--", "sh", "-c", cmd])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Each datagram is recorded where it entered (client) and where it left (server); so is
    // the ICMP port-unreachable the server's stack answers with (nothing listens on port 9).
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("(12 packet records"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    {
        let o = Command::new("tcpdump").args(["-nn", "-tt", "-r"]).arg(&cap).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "tcpdump: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(text.matches("> 198.18.0.2.9: UDP, length 64").count(), 6, "{text}");
        assert_eq!(text.matches("ICMP 198.18.0.2 udp port 9 unreachable").count(), 6, "{text}");
    }
    {
        let o = Command::new("tshark")
            .args(["-r"])
            .arg(&cap)
            .args(["-T", "fields", "-e", "frame.interface_id", "-e", "frame.time_epoch"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "tshark: {}", String::from_utf8_lossy(&o.stderr));
        let rows: Vec<(u32, f64)> = text
            .lines()
            .map(|l| {
                let mut f = l.split('\t');
                (f.next().unwrap().parse().unwrap(), f.next().unwrap().parse().unwrap())
            })
            .collect();
        assert_eq!(rows.iter().filter(|r| r.0 == 0).count(), 6, "{text}");
        assert_eq!(rows.iter().filter(|r| r.0 == 1).count(), 6, "{text}");
        // Each datagram reaches the server side one one-way delay (1 ms) after it entered on
        // the client side: never earlier; later only by the forwarder's scheduling, which on a
        // loaded host adds milliseconds (seen: 12-22 ms at load 6), and which the link reports
        // as what the emulator added. So each lies within 1 ms and the link's own delay p99
        // plus its added p99 (plus 1 ms for the path's ends): the capture shows what the link
        // says it did.
        let o = Command::new("tshark")
            .args(["-r"])
            .arg(&cap)
            .args(["-Y", "udp && !icmp", "-T", "fields", "-e", "frame.interface_id", "-e", "frame.time_epoch"])
            .output()
            .unwrap();
        let udp = String::from_utf8_lossy(&o.stdout);
        let side = |i: &str| -> Vec<f64> {
            udp.lines().filter_map(|l| l.strip_prefix(i)).map(|t| t.trim().parse().unwrap()).collect()
        };
        let (client, server) = (side("0\t"), side("1\t"));
        assert_eq!((client.len(), server.len()), (3, 3), "{udp}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let most = reported_delay_s(&stderr, "client->server") + 0.001;
        for (c, s) in client.iter().zip(&server) {
            let d = s - c;
            assert!(
                (0.000_999..=most).contains(&d),
                "one-way delay in the capture: {d} s at delay 1 ms, the link reports at most {most} s\n{udp}\n{stderr}"
            );
        }
        // Nanosecond resolution survives: tshark prints 9 decimals from if_tsresol=9.
        assert!(text.lines().any(|l| l.split('.').nth(1).is_some_and(|d| d.len() == 9)), "{text}");
    }
}

/// The most a packet took in `dir` by the link's own report (its summary line "link DIR: delay
/// p50 X p99 Y (configured Z); emulator added p50 A p99 B end to end ..."): Y + B, in seconds.
fn reported_delay_s(stderr: &str, dir: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(&format!("link {dir}: delay p50")))
        .unwrap_or_else(|| panic!("no delay line for {dir}: {stderr}"));
    let (delay, added) = line.split_once("emulator added").unwrap_or_else(|| panic!("no 'emulator added': {line}"));
    p99_s(delay, line) + p99_s(added, line)
}

/// The time after the first " p99 " in `part`, in seconds: "1.000 ms" or "145.0 us"
/// (report::cells::ms_or_us).
fn p99_s(part: &str, line: &str) -> f64 {
    let at = part.find(" p99 ").unwrap_or_else(|| panic!("no p99 in {line}"));
    let mut w = part[at + 5..].split_whitespace();
    let v: f64 = w.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no number after p99: {line}"));
    match w.next() {
        Some("ms") => v / 1e3,
        Some("us") => v / 1e6,
        u => panic!("unit {u:?} after p99: {line}"),
    }
}

fn alive(pid: u32) -> bool {
    // A zombie has released its namespaces; it only waits for its (re)parent to reap it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Every holder of a namespace: /proc/*/ns/net of tasks and /proc/*/fd/* descriptors.
fn netns_holders(ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        if !e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if std::fs::read_link(p.join("ns/net")).is_ok_and(|l| l.to_string_lossy() == ns) {
            out.push(format!("{} (task)", p.display()));
        }
        if let Ok(fds) = std::fs::read_dir(p.join("fd")) {
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == ns) {
                    out.push(fd.path().display().to_string());
                }
            }
        }
    }
    out
}

/// Host pids of the processes whose environment carries the owner tag of the tcpstall run
/// `run` (`TCPSTALL_LINK_OWNER=<pid>:<start time>`), with their command lines. The commands
/// run in their own PID namespace, so pids they print themselves ($!) are not host pids.
fn tagged_by(run: u32) -> Vec<(u32, String)> {
    let prefix = format!("TCPSTALL_LINK_OWNER={run}:");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if env.split(|&b| b == 0).any(|kv| kv.starts_with(prefix.as_bytes())) && alive(pid) {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ").trim().to_string()));
        }
    }
    out
}

/// Wait until the processes tagged by `run` include every command line in `want`.
fn wait_tagged(run: u32, want: &[&str]) -> Vec<(u32, String)> {
    let t = Instant::now();
    loop {
        let procs = tagged_by(run);
        if want.iter().all(|w| procs.iter().any(|(_, c)| c == w)) {
            return procs;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never saw all of {want:?} running: {procs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// QA 16: after SIGKILL of tcpstall, no process it started survives, not even the server
/// command's child, a background job, or a job that left its session with setsid: they run in
/// a PID namespace whose init dies with tcpstall (PR_SET_PDEATHSIG), and the kernel kills the
/// rest of the namespace with it (kernel/pid_namespace.c zap_pid_ns_processes). Then nothing
/// holds the link's namespaces, so the kernel has freed them with their devices and routes.
/// The next run still sweeps processes tagged by a dead owner (the fallback where no PID
/// namespace can be made) and only those.
pub(crate) fn sigkill_leaves_no_process_of_the_run_and_the_next_run_removes_only_stale_ones() {
    let mut run = Command::new(bin())
        .args(["shell", "--link", "rtt=1ms", "--server-command", "sleep 301; echo", "--"])
        .args(["sh", "-c", "sleep 303 & setsid sleep 304 & sleep 302"])
        .spawn()
        .unwrap();
    let procs = wait_tagged(run.id(), &["sleep 301", "sleep 302", "sleep 303", "sleep 304"]);
    let client = procs.iter().find(|(_, c)| c == "sleep 302").unwrap().0;
    let ns = std::fs::read_link(format!("/proc/{client}/ns/net")).unwrap().to_string_lossy().into_owned();
    let own_ns = std::fs::read_link("/proc/self/ns/net").unwrap().to_string_lossy().into_owned();
    assert_ne!(ns, own_ns, "the command runs in its own network namespace");
    let dead_tag = std::fs::read(format!("/proc/{client}/environ")).unwrap();
    let dead_tag = dead_tag
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"TCPSTALL_LINK_OWNER="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap();

    run.kill().unwrap(); // SIGKILL
    run.wait().unwrap();
    let t = Instant::now();
    let survivors = |procs: &[(u32, String)]| procs.iter().filter(|(p, _)| alive(*p)).cloned().collect::<Vec<_>>();
    while !survivors(&procs).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(survivors(&procs).is_empty(), "outlived a SIGKILLed tcpstall: {:?}", survivors(&procs));
    while !netns_holders(&ns).is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let holders = netns_holders(&ns);
    assert!(holders.is_empty(), "namespace {ns} still held by {holders:?}");
    // Only what this run made: other runs on the machine (this binary's tests beside this one,
    // other programs) make their own namespaces and devices meanwhile.
    let left = crate::leftovers::left_by(&[run.id()]);
    assert!(left.is_empty(), "{left:?}");

    // The sweep: a process tagged by the dead run goes, one tagged by a live owner (this
    // test) stays.
    let me = format!(
        "{}:{}",
        std::process::id(),
        std::fs::read_to_string("/proc/self/stat")
            .unwrap()
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(19)
            .unwrap()
    );
    let mut stale = Command::new("sleep").arg("300").env("TCPSTALL_LINK_OWNER", &dead_tag).spawn().unwrap();
    let mut innocent = Command::new("sleep").arg("300").env("TCPSTALL_LINK_OWNER", &me).spawn().unwrap();
    let out = tcpstall()
        .args(["shell", "--link", "rtt=1ms", "--", "true"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Every `--link` run sweeps, so a test running in parallel may have removed the stale
    // process first and this run has nothing to report: what must hold is that it is gone.
    let t = Instant::now();
    let stale_status = loop {
        if let Some(s) = stale.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the stale process survived the next run");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!stale_status.success());
    assert!(innocent.try_wait().unwrap().is_none(), "a process of a live owner was killed");
    innocent.kill().unwrap();
    innocent.wait().unwrap();
}

/// Ctrl-C (SIGINT from the terminal) reaches the command; a SIGTERM sent to tcpstall is
/// relayed to it; either way tcpstall tears down and exits with the command's status.
pub(crate) fn sigterm_is_relayed_to_the_command() {
    let mut run =
        Command::new(bin()).args(["shell", "--quiet", "--link", "rtt=1ms", "--", "sleep", "300"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    nix_kill(run.id(), "TERM");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "tcpstall did not end after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(128 + 15), "sleep died of SIGTERM and tcpstall reports it shell-style");
}

fn nix_kill(pid: u32, sig: &str) {
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success());
}

/// Without root: either the link works in an unprivileged user namespace, or tcpstall says
/// in one line why it cannot (never a panic, never a partial setup).
pub(crate) fn without_root_it_works_or_says_why() {
    // A copy uid 65534 can execute wherever the build directory is (e.g. under /root).
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = dir.path().join("tcpstall");
    std::fs::copy(bin(), &b).unwrap();
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&b)
        .args(["shell", "--link", "rtt=2ms", "--", "sh", "-c", "cat /proc/net/route"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert!(String::from_utf8_lossy(&out.stdout).contains("tcpstall0"), "{stderr}");
        eprintln!("unprivileged path works here");
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("root"), "says what to do: {stderr}");
        eprintln!("unprivileged path refused, as reported: {}", stderr.trim());
    }
}

/// One CSV row of `tcpstall lab ... --format csv`, as a header -> value map.
fn csv_rows(stdout: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines.next().unwrap_or_default().split(',').map(String::from).collect();
    lines
        .map(|l| {
            // The columns used here come before any quoted text column.
            header.iter().cloned().zip(l.split(',').map(String::from)).collect()
        })
        .collect()
}

fn lab(args: &[&str]) -> (String, String) {
    let out = tcpstall().arg("lab").args(args).timeout(Duration::from_secs(120)).output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "tcpstall lab {args:?}: {e}\n{o}");
    (o, e)
}

/// Behind rtt=20ms the rr scenario's median round trip shows the added 20 ms: never below it,
/// and below 60 ms, where a doubled delay would be. Four scheduler wake-ups per round trip (two
/// forwarder threads, two application threads) add milliseconds each on a loaded host: with
/// four busy loops on 2 cores the median was 35-40 ms. The tighter 19-30 ms window is asserted
/// on the fastest UDP round trip (crates/link/tests/forwarding.rs), the exact one
/// (20.0-20.5 ms) by `cargo bench -p tcpstall-link --bench forwarder` ("meets"/"misses").
pub(crate) fn lab_rr_behind_rtt_20ms_shows_the_delay() {
    let _one_at_a_time = exclusive();
    twice("rr p50 behind rtt=20ms", || {
        let (o, _) = lab(&[
            "rr", "--link", "rtt=20ms", "--rounds", "100", "--client", "nodelay", "--server", "nodelay", "--format",
            "csv",
        ]);
        let rows = csv_rows(&o);
        let p50: f64 = rows[0]["p50_us"].parse().unwrap();
        if (19_000.0..60_000.0).contains(&p50) {
            Ok(())
        } else {
            Err(format!("rr p50 {p50} us behind rtt=20ms (want 19-60 ms)"))
        }
    });
}

/// Behind rate=50mbit a stream never runs faster than the link, and not slower than half of it
/// (a userspace forwarder on a loaded host falls short; it never exceeds the rate). The issue's
/// 10% window is a speed target in the forwarder benchmark.
pub(crate) fn lab_stream_behind_rate_50mbit_never_exceeds_it() {
    let _one_at_a_time = exclusive();
    twice("stream behind rate=50mbit", || {
        let (o, _) = lab(&[
            "stream",
            "--link",
            "rate=50mbit,rtt=2ms",
            "--client",
            "none",
            "--server",
            "none",
            "--format",
            "csv",
        ]);
        let rows = csv_rows(&o);
        // throughput_bytes_per_s is payload bytes per second (docs/json-schema.md); the link's rate
        // counts IP packets, of which payload is 1448/1500 at MSS 1448.
        let bits: f64 = rows[0]["throughput_bytes_per_s"].parse::<f64>().unwrap() * 8.0;
        if (25e6..=52e6).contains(&bits) {
            Ok(())
        } else {
            Err(format!("stream at {:.2} Mbit/s behind rate=50mbit (want 25-52)", bits / 1e6))
        }
    });
}

/// The link's summary line for one direction: (packets in, pure ACKs in, drops of `reason`).
fn link_counts(stdout: &str, dir: &str, reason: &str) -> (u64, u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("link {dir}: ")) && l.contains("packets in"))
        .unwrap_or_else(|| panic!("no link line for {dir} in\n{stdout}"));
    let num_before = |word: &str| -> u64 {
        let i = line.find(word).unwrap();
        line[..i].split_whitespace().last().unwrap().trim_start_matches('(').parse().unwrap()
    };
    let drops = line
        .split("drops: ")
        .nth(1)
        .unwrap_or_default()
        .split(", ")
        .find_map(|item| item.strip_prefix(&format!("{reason} ")))
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (num_before(" packets in"), num_before(" pure ACKs"), drops)
}

fn within_5_sigma(observed: u64, n: u64, p: f64) -> bool {
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (observed as f64 - n as f64 * p).abs() <= 5.0 * sd.max(1.0)
}

/// Issue: "loss and ack-loss counters match the configured fractions within sampling error".
pub(crate) fn lab_loss_and_ack_loss_counters_match_their_fractions() {
    let _one_at_a_time = exclusive();
    // The receiver's pure ACKs travel server->client; the data client->server. When other
    // tests load the 2 shared cores, a run can stall in retransmission timeouts (every other
    // ACK is lost) and carry too few ACKs to judge: measure once more then.
    let mut runs = 0;
    let (o, acks, ack_drops) = loop {
        let (o, _) = lab(&["stream", "--link", "ack-loss=50%,loss=1%,rtt=2ms", "--client", "none", "--server", "none"]);
        let (_, acks, ack_drops) = link_counts(&o, "server->client", "ack-loss");
        runs += 1;
        if acks > 500 || runs == 3 {
            break (o, acks, ack_drops);
        }
    };
    assert!(acks > 500, "too few pure ACKs to judge after {runs} runs: {acks}\n{o}");
    assert!(within_5_sigma(ack_drops, acks, 0.5), "{ack_drops} of {acks} pure ACKs dropped at 50%\n{o}");
    let (packets, _, lost) = link_counts(&o, "client->server", "loss");
    assert!(within_5_sigma(lost, packets, 0.01), "{lost} of {packets} packets lost at 1%\n{o}");
}

/// Issue: "Leaves nothing behind ... on normal exit": a background job of the command, one
/// that left its session, and the server command's children do not outlive the session.
pub(crate) fn normal_exit_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut run = Command::new(bin())
        .args(["shell", "--quiet", "--link", "rtt=1ms", "--server-command", "sleep 301 & wait", "--", "sh", "-c"])
        .arg(format!("sleep 300 & setsid sleep 299 & while [ ! -e {} ]; do sleep 0.05; done", go.display()))
        .spawn()
        .unwrap();
    let procs = wait_tagged(run.id(), &["sleep 299", "sleep 300", "sleep 301"]);
    std::fs::write(&go, "").unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the session did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    for (pid, cmd) in procs {
        assert!(!alive(pid), "{cmd} (pid {pid}) outlived the session");
    }
}

/// QA 18: a command that cannot be started ends the session like a shell would: one line
/// saying why, exit 127 when it is not found, 126 when it is not executable (POSIX "Command
/// Search and Execution").
pub(crate) fn a_command_that_cannot_start_exits_127_or_126_with_one_line() {
    let out =
        tcpstall().args(["shell", "--", "tcpstall-no-such-command"]).timeout(Duration::from_secs(20)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("'tcpstall-no-such-command'") && stderr.contains("command not found"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let out = tcpstall().args(["shell", "--"]).arg(&file).timeout(Duration::from_secs(20)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
}

/// QA 17: lookups inside the namespaces do not hang. `python3 -m http.server --bind` makes a
/// reverse lookup of its address before it listens; with the host's DNS server reachable only
/// through a default route into the link, it hung for the resolver's timeout. Now the
/// commands' /etc/hosts names the two ends and there is no default route, so it listens at
/// once, names resolve from the file, and an off-link address fails with ENETUNREACH.
pub(crate) fn python_http_server_is_reachable_at_once_and_lookups_do_not_hang() {
    let _one_at_a_time = exclusive();
    let client = r#"
import errno, socket, time
t = time.monotonic()
while True:
    try:
        socket.create_connection(("198.18.0.2", 8080), timeout=1).close()
        break
    except OSError:
        if time.monotonic() - t > 10:
            raise
        time.sleep(0.02)
print("ready %.3f" % (time.monotonic() - t))
print("server", socket.gethostbyname("tcpstall-server"), socket.gethostbyaddr("198.18.0.1")[0])
t = time.monotonic()
try:
    socket.create_connection(("192.0.2.1", 53), timeout=5)
except OSError as e:
    print("off-link", errno.errorcode.get(e.errno, e.errno), "%.3f" % (time.monotonic() - t))
"#;
    let out = tcpstall()
        // The server's own output ("Serving HTTP on ...", no newline until it flushes) would
        // share stdout with the client's lines: it goes to /dev/null.
        .args([
            "shell",
            "--link",
            "rtt=2ms",
            "--server-command",
            "exec python3 -m http.server 8080 --bind 198.18.0.2 >/dev/null 2>&1",
        ])
        .args(["--", "python3", "-c", client])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = |prefix: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' line in the output:\n{stdout}\n{stderr}"))
            .to_string()
    };
    // A reverse lookup that hangs waits for the resolver's timeout (5 s per try, resolv.conf(5));
    // starting python3 on a loaded host takes a second or two, never that long.
    let ready: f64 = line("ready ").parse().unwrap();
    assert!(ready < 4.5, "http.server listened only after {ready} s");
    assert!(stdout.contains("server 198.18.0.2 tcpstall-client"), "{stdout}");
    let off = line("off-link ");
    let (code, secs) = off.split_once(' ').unwrap();
    assert_eq!(code, "ENETUNREACH", "{stdout}");
    assert!(secs.parse::<f64>().unwrap() < 1.0, "{stdout}");
}

/// Run `tcpstall shell -- sh -c SCRIPT`, send `sig` to tcpstall once the pipeline runs, and
/// return (exit code, stdout). The script traps the signal itself, so with the signal relayed
/// to the command alone (its first process) the shell would wait for the pipeline for 300 s;
/// relayed to the command's process group, the pipeline's `sleep`s die and the script goes on.
fn signal_a_pipeline(sig: &str) -> (Option<i32>, String) {
    use std::process::Stdio;
    let script = format!("trap 'echo trapped-{sig}' {sig}; sleep 300 | sleep 301; echo pipeline-ended; exit 3");
    let run = Command::new(bin())
        .args(["shell", "--quiet", "--link", "rtt=1ms", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_tagged(run.id(), &["sleep 300", "sleep 301"]);
    nix_kill(run.id(), sig);
    let t = Instant::now();
    let out = run.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "tcpstall took {:?} after SIG{sig}", t.elapsed());
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Issue 10: `shell` runs the command in its own process group and relays SIGINT and SIGTERM
/// to all of it, so a pipeline stops as a whole (Ctrl-C from a terminal reaches the group
/// directly: it is the terminal's foreground group while it runs).
pub(crate) fn sigint_and_sigterm_reach_the_whole_pipeline() {
    for sig in ["INT", "TERM"] {
        let (code, stdout) = signal_a_pipeline(sig);
        assert!(stdout.contains("pipeline-ended"), "SIG{sig} did not end the pipeline: {stdout}");
        assert!(stdout.contains(&format!("trapped-{sig}")), "the script itself got SIG{sig}: {stdout}");
        assert_eq!(code, Some(3), "the command's own exit status: {stdout}");
    }
}

/// Issue 10: a capture that cannot be written fails in one line before the link is built
/// (needs no root: the check comes first).
pub(crate) fn unwritable_capture_fails_before_the_link_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/x.pcapng");
    let cap = missing.to_str().unwrap();
    for args in [
        vec!["shell", "--link", "rtt=1ms", "--capture", cap, "--", "true"],
        vec!["lab", "rr", "--link", "rtt=1ms", "--capture", cap],
    ] {
        let out = tcpstall().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("--capture") && stderr.contains("cannot write"), "{args:?}: {stderr}");
        assert!(!stderr.contains("namespace") && !stderr.contains("root"), "{args:?}: {stderr}");
    }
}

/// Issue 26: a capture tcpstall wrote never warns about its own timestamps. The link's two
/// forwarder threads hand their records over out of order when one is descheduled; the writer
/// puts them back in time order, so `explain` finds no frame stamped before the one ahead of it.
pub(crate) fn the_links_capture_is_written_in_time_order() {
    let _one_at_a_time = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("s.pcapng");
    let cap = cap.to_str().unwrap();
    // The writer holds records up to 100 ms to put them in order (link/src/capture.rs): a
    // forwarder thread descheduled longer can still hand one over late, so one capture out of
    // order gets one more try, as before. A stream behind 50% ACK loss can also stall early in
    // a retransmission timer's backoff (a run of lost ACKs where the sender waits on them: 627
    // frames in one soak run), which leaves too few frames to mean much: it runs again then,
    // up to three times.
    let (mut misses, mut few) = (Vec::new(), Vec::new());
    loop {
        let out = tcpstall()
            .args(["lab", "stream", "--link", "rtt=2ms,rate=200mbit,ack-loss=50%,ack-dir=down"])
            .args(["--set", "duration_ms=500", "--client", "none", "-q", "--capture", cap])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let out = tcpstall().args(["explain", "--format", "json", cap]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = &v["decode"];
        match d["ts_backwards"].as_u64().unwrap() {
            0 => {}
            n => {
                misses.push(format!("{n} frames stamped before the frame ahead of them: {d}"));
                assert!(misses.len() < 2, "the link's capture in time order: both tries missed: {misses:?}");
                continue;
            }
        }
        let frames = d["frames"].as_u64().unwrap();
        if frames > 1000 {
            return;
        }
        few.push(frames);
        assert!(few.len() < 3, "three streams stalled with too few frames to check the order: {few:?}");
    }
}

/// A stream whose receiver's ACKs are all dropped (`ack-loss=100%`) stalls in the sender's
/// retransmission timer after its first flight. The run still ends: the writes stop at the
/// stream's end, the receiver stops waiting for the end of the stream 2 s after the sender has
/// finished (lab `exec::STREAM_DRAIN`) and says so in the notes. Before, the receiver waited
/// for the FIN for 10 s and failed the run with "no progress: the peer stopped".
pub(crate) fn a_stream_whose_acks_are_all_lost_ends_and_says_why() {
    let _one_at_a_time = exclusive();
    let out = tcpstall()
        .args(["lab", "stream", "--link", "rtt=2ms,rate=200mbit,ack-loss=100%,ack-dir=down"])
        .args(["--set", "duration_ms=300", "--client", "none", "--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"].as_array().map_or(0, Vec::len), 0, "{v}");
    let link = v["link"].as_str().unwrap();
    assert!(link.contains("had not arrived 2 s after the sender finished"), "{link}");
    let row = &v["results"][0];
    // No ACK came back, so the sender had at most a few windows out: far under the link's
    // 25 MB/s (200 Mbit/s).
    let rate = row["throughput_bytes_per_s"].as_f64().unwrap();
    assert!(rate < 5e6, "{rate} B/s with every ACK lost");
}
