//! Kernel evidence (issue 22): eBPF on TCP tracepoints joined to the packets, in `lab` rows and
//! in `watch --kernel`; what it says when it cannot run; and the verdicts it settles that packets
//! alone cannot (a server's think time, Nagle x delayed ACK). Root-gated (eBPF, namespaces).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{exclusive, run_unprivileged, stderr_lines, tcpstall};

fn lab_json(args: &[&str]) -> Value {
    let out = tcpstall().arg("lab").args(args).args(["--format", "json", "-q"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("lab JSON")
}

/// As root every lab row carries kernel evidence: rr's 1-byte request and reply are one write
/// each per round (tcp:tcp_sendmsg_locked), nothing lost, and hardly a window state (tcp:tcp_probe
/// is kept only near a window limit, and a one-byte flight is far from every window); the report
/// says once that the tracepoints are attached, reads off. `--no-kernel` turns it off.
pub(crate) fn lab_rows_carry_kernel_evidence_and_no_kernel_turns_it_off() {
    let _one = exclusive();
    let j = lab_json(&["rr", "--set", "rounds=50"]);
    let link = j["link"].as_str().unwrap();
    assert_eq!(link.matches("kernel evidence: 5 of 5 tracepoints (reads off)").count(), 1, "{link}");
    for r in j["results"].as_array().unwrap() {
        let k = &r["capture"]["kernel"];
        let writes = k["writes"].as_u64().unwrap();
        // 50 measured rounds and the warm-up's: two writes each; nothing else writes.
        assert!(writes >= 100 && writes % 2 == 0, "{k}");
        // Before: a window state per segment received (as many as the writes); now thinned.
        assert!(k["windows"].as_u64().unwrap() * 10 <= writes, "window states far from every window: {k}");
        assert_eq!(k["lost"], 0, "{k}");
        assert_eq!(k["resends"], 0, "{k}");
    }
    let j = lab_json(&["rr", "--set", "rounds=20", "--no-kernel"]);
    assert!(!j["link"].as_str().unwrap().contains("kernel evidence"), "{}", j["link"]);
    assert!(j["results"].as_array().unwrap().iter().all(|r| r["capture"].get("kernel").is_none()));
}

/// `--pin C,S` (issue 35): the capture and kernel-evidence readers are kept off the timed
/// threads' CPUs when the process has another, all of the process's CPUs when none is left; each
/// reader reads its own CPUs back (sched_getaffinity(2)) and the row reports them
/// (`capture.reader_cpus`, `capture.kernel_reader_cpus`). Moved, they still read every packet and
/// write: seed 001's three requests wait on Nagle x delayed ACK, named with the kernel's writes
/// (three per request and one per reply, the 20 warm-up requests' included).
pub(crate) fn pinned_rows_keep_the_readers_off_the_timed_cpus_and_still_record() {
    let _one = exclusive();
    let mask = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("this process's CPUs");
    let allowed: Vec<u64> =
        (0..nix::sched::CpuSet::count()).filter(|&i| mask.is_set(i).unwrap_or(false)).map(|i| i as u64).collect();
    let (first, second) = (allowed[0], allowed.get(1).copied());
    let expect = |pinned: &[u64]| -> Vec<u64> {
        let others: Vec<u64> = allowed.iter().copied().filter(|c| !pinned.contains(c)).collect();
        if others.is_empty() {
            allowed.clone()
        } else {
            others
        }
    };
    let pin = format!("{first},{first}");
    let j = lab_json(&["multi-write", "--client", "none", "--server", "none", "--set", "requests=3", "--pin", &pin]);
    let r = &j["results"][0];
    let cpus = |key: &str| -> Vec<u64> {
        let v = r["capture"][key].as_array().unwrap_or_else(|| panic!("no capture.{key}: {r:#}"));
        v.iter().map(|c| c.as_u64().unwrap()).collect()
    };
    let want = expect(&[first]);
    assert_eq!(cpus("reader_cpus"), want, "{}", j["link"]);
    assert_eq!(cpus("kernel_reader_cpus"), want, "{}", j["link"]);
    assert!(
        j["link"].as_str().unwrap().contains(&format!("pinned: client on CPU {first}, server on CPU {first};")),
        "{}",
        j["link"]
    );
    // Under load a request may miss its stall; none comes from elsewhere.
    let stalls = r["stall_count"].as_u64().unwrap();
    assert!((2..=3).contains(&stalls), "{r:#}");
    assert_eq!(r["verdict_key"]["cause"], "nagle-delayed-ack", "{r:#}");
    assert!(r["capture"]["kernel"]["writes"].as_u64().unwrap() >= 4 * (3 + 20), "{r:#}");
    assert_eq!(r["capture"]["kernel"]["lost"], 0, "{r:#}");
    // Two CPUs pinned apart: with no other left (a two-CPU process) the readers may use both.
    if let Some(second) = second {
        let pin = format!("{first},{second}");
        let j = lab_json(&["rr", "--client", "none", "--server", "none", "--set", "rounds=20", "--pin", &pin]);
        let r = &j["results"][0];
        assert_eq!(r["capture"]["reader_cpus"], serde_json::json!(expect(&[first, second])), "{r:#}");
        let shared = allowed.len() == 2;
        assert_eq!(j["link"].as_str().unwrap().contains("share them (no other CPU left)"), shared, "{}", j["link"]);
    }
    // Unpinned rows report no reader CPUs.
    let j = lab_json(&["rr", "--client", "none", "--server", "none", "--set", "rounds=20"]);
    assert!(j["results"][0]["capture"].get("reader_cpus").is_none(), "{:#}", j["results"][0]);
}

/// Without root (nobody, no capabilities): the lab still runs and its report says in one line,
/// once, why there is no kernel evidence.
pub(crate) fn lab_without_root_says_once_why_there_is_no_kernel_evidence() {
    let out = run_unprivileged(&["lab", "rr", "--set", "rounds=20", "--format", "json", "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let link = j["link"].as_str().unwrap();
    let why = "no kernel evidence: loading eBPF programs needs root, or CAP_BPF and CAP_PERFMON";
    assert_eq!(link.matches(why).count(), 1, "{link}");
    assert_eq!(j["results"].as_array().unwrap().len(), 2);
}

/// `watch --kernel` on a port: it says what it attached, counts the flow's writes (a client's
/// 10-byte requests and a TCP_NODELAY server's 54-byte replies after 200 ms of thinking: one
/// tcp_sendmsg_locked each) and loses none; and, the kernel having seen each reply written at
/// the end of its pause, it reports no stall (issue 22: packets alone called them probe-timer).
/// Far from every window, no window state is kept; reads are off without `--kernel-reads`.
pub(crate) fn watch_kernel_counts_the_writes_of_the_watched_flow() {
    let _one = exclusive();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mport = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut watch = Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .args(["watch", "-i", "lo", "--port", &port.to_string(), "--kernel", "--format", "jsonl", "--duration", "8"])
        .args(["--metrics", &format!("127.0.0.1:{mport}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The watch says its kernel evidence is attached before it reads: wait for that line (a
    // fixed 1.5 s missed the first writes when loading the programs took longer on a loaded
    // host), then give its packet ring a moment.
    let (lines, stderr_all) = stderr_lines(watch.stderr.take().unwrap());
    let first = lines.recv_timeout(Duration::from_secs(60)).expect("the watch's first line");
    std::thread::sleep(Duration::from_millis(300));
    let srv = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 10];
        while s.read_exact(&mut b).is_ok() {
            std::thread::sleep(Duration::from_millis(200));
            s.write_all(&[b'r'; 54]).unwrap();
        }
    });
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    let mut b = [0u8; 54];
    for _ in 0..10 {
        c.write_all(&[b'q'; 10]).unwrap();
        c.read_exact(&mut b).unwrap();
    }
    drop(c);
    srv.join().unwrap();
    // The metrics follow the counts on the watch's one-second tick.
    std::thread::sleep(Duration::from_millis(1300));
    let mut m = TcpStream::connect(("127.0.0.1", mport)).unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut metrics = String::new();
    m.read_to_string(&mut metrics).unwrap();
    assert!(metrics.contains("tcpstall_watch_kernel_events_total{kind=\"write\"} 20"), "{metrics}");
    assert!(metrics.contains("tcpstall_watch_kernel_lost_records 0"), "{metrics}");
    assert!(metrics.contains("tcpstall_watch_kernel_events_total{kind=\"window\"} 0"), "{metrics}");
    // No reads (20 with them); the rest are congestion-state records (tcp:tcp_cong_state_set,
    // one seen here around the open), at most one per socket.
    let other: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tcpstall_watch_kernel_events_total{kind=\"other\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(other <= 2, "no reads without --kernel-reads: {other} other events");
    let out = watch.wait_with_output().unwrap();
    let err = format!("{first}\n{}", stderr_all.join().unwrap());
    assert!(out.status.success(), "{err}");
    assert_eq!(first, "tcpstall watch: kernel evidence: 5 of 5 tracepoints (reads off)", "{err}");
    let summary = err.lines().find(|l| l.contains("kernel evidence:") && l.contains("events")).expect(&err);
    let writes: u64 = summary
        .split(" writes,")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(writes, 20, "10 requests and 10 replies: {summary}");
    assert!(summary.contains(", 0 lost,"), "{summary}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.trim().is_empty(), "the server's think time is no stall: {stdout}\n{err}");
}

/// Issue 22: a TCP_NODELAY server that thinks 200 ms before each 54-byte answer. Packets alone
/// called those pauses `probe-timer` (nothing in flight, released after 200 ms); the kernel saw
/// the write (tcp:tcp_sendmsg_locked) at the end of the pause, so each is `application`, no
/// stall, with the write in its evidence. On a loaded host the client's own pauses (the lab's
/// work between the warm-up and the measured rounds, a client waiting for a CPU) may be long
/// enough to be records too: they are `application` as well, with the client's write in their
/// evidence, and the server's pauses are there all the same.
pub(crate) fn a_thinking_nodelay_server_is_application_with_the_kernel_write_time() {
    let _one = exclusive();
    let j = lab_json(&[
        "--exchange",
        "client 10; server 54 think=200ms",
        "--client",
        "nodelay",
        "--server",
        "nodelay",
        "--rounds",
        "5",
        "--set",
        "warmup=2",
    ]);
    let r = &j["results"][0];
    assert!(r["capture"]["kernel"]["writes"].as_u64().unwrap() >= 14, "{}", r["capture"]);
    assert_eq!(r["stall_summary"]["stall_count"], 0, "no TCP stall: {:#}", r["stall_summary"]);
    let recs = r["stall_records"].as_array().unwrap();
    // Every record is an application's own time, with the write that ended it from the kernel:
    // its length is the hold the kernel measured (write to release: microseconds), not the pause.
    let kernel_write = |s: &Value, bytes: u32| {
        let what = format!("kernel: sendmsg {bytes} bytes");
        s["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["source"].get("kernel").is_some() && e["what"].as_str().is_some_and(|w| w.contains(&what)))
    };
    for s in recs {
        assert_eq!(s["cause"], "application", "{s:#}");
        let bytes = if s["held"] == "B" { 54 } else { 10 };
        assert!(kernel_write(s, bytes), "the write that ended the pause, from the kernel, in the evidence: {s:#}");
    }
    // Each round's 200 ms server pause is a record (the warm-up's too).
    let server = recs.iter().filter(|s| s["held"] == "B").count();
    assert!(server >= 5, "each round's 200 ms pause is a record: {server} of them in {recs:#?}");
}

/// Issue 22: a periodic sender with Nagle on (two small writes every 20 ms), its peer in
/// delayed-ACK mode (it answers each round): every real wait (a round the client measured
/// slow) is `nagle-delayed-ack`, at least 90% of them, with the held write from the kernel in
/// the evidence.
pub(crate) fn a_periodic_nagle_sender_is_nagle_delayed_ack_for_its_real_waits() {
    let _one = exclusive();
    let j = lab_json(&["--exchange", "client 10,10 think=20ms; server 10", "--rounds", "30"]);
    let r = &j["results"][0];
    assert_eq!(r["capture"]["kernel"]["lost"], 0, "{}", r["capture"]);
    let waits = r["slow_samples"].as_u64().unwrap();
    assert!(waits >= 20, "the client measured its waits: {waits}");
    let (lo, hi) = (r["measured_from_ns"].as_u64().unwrap(), r["measured_to_ns"].as_u64().unwrap());
    let named: Vec<&Value> = r["stall_records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| (lo..=hi).contains(&s["start_ns"].as_u64().unwrap()) && s["cause"] == "nagle-delayed-ack")
        .collect();
    assert!(named.len() as f64 >= 0.9 * waits as f64, "{} of {waits} real waits named", named.len());
    assert!(
        named.iter().all(|s| s["evidence"].as_array().unwrap().iter().any(|e| e["source"].get("kernel").is_some())),
        "each with kernel evidence: {named:#?}"
    );
}

/// The kernel's writes land on the packets' clock where they belong: in a lab row (seed 001's
/// request as writes of 275, 24 and 292 bytes, a 100-byte answer; Nagle holds the 24 and 292
/// until the server's delayed ACK), every data segment's first byte was written (a Sendmsg
/// covering it) before the segment was captured, within the clocks' mapping error; the writes'
/// sizes are the program's; with reads asked for (`KernelHandle::open_with_reads`), both sides'
/// reads are there.
pub(crate) fn kernel_writes_precede_the_packets_that_carry_them() {
    let _one = exclusive();
    let mut s = scenario::Scenario::builtin("multi-write").unwrap();
    s.apply_sets(&["requests=5"]).unwrap();
    let handle = lab::KernelHandle::open_with_reads(true).expect("kernel evidence as root");
    let opts =
        lab::LabOptions { keep_packets: true, kernel: lab::KernelEvidence::On(handle), ..lab::LabOptions::default() };
    let r = lab::run_scenario(&s, &lab::Placement::loopback(), &opts, &mut |_| {});
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let row = &r.results[0];
    let ev = &row.packets;
    use trace::{Endpoint, EventKind, KernelEvent};
    let writes: Vec<(u64, Endpoint, u32, u32)> = ev
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Kernel(KernelEvent::Sendmsg { bytes, seq }) => Some((e.t.0, e.from, seq, bytes)),
            _ => None,
        })
        .collect();
    let client: Vec<u32> = writes.iter().filter(|w| w.1 == Endpoint::A).map(|w| w.3).collect();
    // The warm-up's requests and the measured ones, each as the three writes.
    assert!(client.len() >= 15 && client.chunks(3).all(|c| c == [275, 24, 292]), "{client:?}");
    assert!(writes.iter().filter(|w| w.1 == Endpoint::B).all(|w| w.3 == 100), "{writes:?}");
    let mut data = 0;
    for e in ev {
        let EventKind::Segment(seg) = &e.kind else { continue };
        if seg.len == 0 {
            continue;
        }
        data += 1;
        let w = writes
            .iter()
            .filter(|w| w.1 == e.from && seg.seq - trace::SeqNum(w.2) < w.3)
            .map(|w| w.0)
            .min()
            .unwrap_or_else(|| panic!("no write covers {:?} at {} ({:?})", e.from, e.t.0, seg));
        // Written before captured (1 ms allows the clock mapping's error many times over).
        assert!(w <= e.t.0 + 1_000_000, "write at {w} after its segment at {} ({seg:?})", e.t.0);
    }
    assert!(data >= 20, "{data} data segments");
    assert!(ev.iter().any(|e| matches!(e.kind, EventKind::Kernel(KernelEvent::Read))));
    assert!(ev.iter().all(|e| !matches!(e.kind, EventKind::Kernel(KernelEvent::State(s)) if s.snd_cwnd == 0)));
    let k = row.capture.as_ref().and_then(|c| c.kernel).expect("capture.kernel");
    assert_eq!(k.lost, 0);
}

/// Rows that run side by side each get a kernel-evidence source of their own, recording what
/// the caller's records: reads too, when asked. Which rows run side by side is the probe's
/// choice and load changes it (on a loaded host seed 001's default row joined starved rows, and
/// lost the reads `kernel_writes_precede_the_packets_that_carry_them` asks for); seed 000's two
/// timer-bound rows run side by side on an idle host as on a busy one.
pub(crate) fn rows_side_by_side_record_the_reads_asked_for() {
    use trace::{EventKind, KernelEvent};
    let _one = exclusive();
    let mut s = scenario::Scenario::builtin("chunked").unwrap();
    s.apply_sets(&["round=6"]).unwrap();
    let handle = lab::KernelHandle::open_with_reads(true).expect("kernel evidence as root");
    let opts =
        lab::LabOptions { keep_packets: true, kernel: lab::KernelEvidence::On(handle), ..lab::LabOptions::default() };
    let r = lab::run_scenario(&s, &lab::Placement::loopback(), &opts, &mut |_| {});
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.link.contains("timer-bound rows side by side: "), "{}", r.link);
    for row in &r.results {
        let reads = row.packets.iter().filter(|e| matches!(e.kind, EventKind::Kernel(KernelEvent::Read))).count();
        assert!(reads > 0, "row {}: no reads recorded ({})", row.strategy, r.link);
    }
}
