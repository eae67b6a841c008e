//! The kernel-evidence source on this kernel: real sockets in a private network namespace, the
//! programs attached to the real tracepoints (include/trace/events/tcp.h, sock.h).
//!
//! These tests need root (eBPF, a network namespace, iptables). Without it each is reported as
//! ignored with the reason; with the environment variable CI set it fails instead (as the CLI
//! tests do, crates/tcpstall/tests/cli/support.rs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Trial};
use tcpstall_kevidence::{Converter, Filter, Kind, Record, Source, Tracepoint, TRACEPOINTS};
use trace::KernelEvent;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

/// A test that needs root and `tools`: ignored with the reason, or under CI a failure.
fn needs_root(name: &str, tools: &[&str], f: fn()) -> Trial {
    let mut missing: Vec<String> = Vec::new();
    if !is_root() {
        missing.push("root (eBPF programs, network namespaces)".into());
    }
    missing.extend(tools.iter().filter(|t| !have(t)).map(|t| format!("{t} on the PATH")));
    if missing.is_empty() {
        return Trial::test(name, move || {
            f();
            Ok(())
        });
    }
    let why = format!("needs {}", missing.join(" and "));
    if in_ci() {
        let msg = format!("{name} cannot run: it {why} (CI is set, so a test that cannot run fails)");
        return Trial::test(name, move || Err(msg.into()));
    }
    println!("SKIPPED {name}: {why}");
    let msg = format!("not run: {why}");
    Trial::test(name, move || Err(msg.into())).with_ignored_flag(true).with_kind(format!("skipped, {why}"))
}

/// Runs `f` on a thread of its own in a fresh network namespace with `lo` up; returns the
/// namespace's inode with `f`'s result. The namespace (and any iptables rule in it) goes away
/// with the thread.
fn in_netns<T: Send + 'static>(f: impl FnOnce(u32) -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        sys::tun::set_up("lo").expect("lo up");
        let ino = std::fs::metadata("/proc/thread-self/ns/net").expect("ns inode").ino() as u32;
        f(ino)
    })
    .join()
    .expect("the namespace thread panicked")
}

fn drain_all(src: &mut Source, out: &mut Vec<Record>, settle: Duration) {
    let end = Instant::now() + settle;
    while Instant::now() < end {
        src.wait(20);
        src.drain(out);
    }
}

fn iptables(args: &[&str]) {
    let st = Command::new("iptables").args(args).status().expect("iptables");
    assert!(st.success(), "iptables {args:?} failed");
}

/// A client writes 54, 200 and 1000 bytes with TCP_NODELAY; then a 500-byte write whose
/// segment the server's INPUT chain drops until the sender has resent it (RFC 6298 5 / RFC 8985
/// 7: a tail-loss probe or the RTO). The source must report each write with its size and a
/// sequence number that continues the previous one (tcp_sendmsg_locked's write_seq), the
/// resend of the dropped range (tcp_retransmit_skb), reads (asked for: `Filter::reads`), opens
/// and closes (inet_sock_set_state), every window state it kept with a congestion window
/// (tcp_probe), and lose nothing.
// long: one connection's life, checked record kind by record kind in the order they occur.
fn writes_resends_and_windows_of_a_real_connection() {
    let recs = in_netns(|ino| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut src = Source::open(&Filter { ports: vec![port], netns: Some(ino), reads: true, owners: false })
            .expect("kernel evidence");
        assert!(
            src.attached().iter().any(|t| t.name == "tcp_sendmsg_locked"),
            "tcp_sendmsg_locked (Linux 6.12+) should attach on this kernel: {}",
            src.status()
        );
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_nodelay(true).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 2000];
        for n in [54usize, 200, 1000] {
            c.write_all(&vec![7u8; n]).unwrap();
            s.read_exact(&mut buf[..n]).unwrap();
        }
        // Drop the next data segment to the server (IP 20 + TCP 32 + 500 bytes) on arrival,
        // so the client has sent it and must resend it; the rule is removed once a resend was
        // seen (or after 3 s), and the namespace takes it away in any case.
        let rule =
            ["INPUT", "-p", "tcp", "--dport", &port.to_string(), "-m", "length", "--length", "400:65535", "-j", "DROP"];
        iptables(&[&["-A"], &rule[..]].concat());
        c.write_all(&[9u8; 500]).unwrap();
        let mut recs = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3)
            && !recs.iter().any(|r: &Record| matches!(r.kind, Kind::Retransmit { .. }))
        {
            src.wait(50);
            src.drain(&mut recs);
        }
        iptables(&[&["-D"], &rule[..]].concat());
        s.read_exact(&mut buf[..500]).unwrap();
        drop(c);
        drop(s);
        drain_all(&mut src, &mut recs, Duration::from_millis(300));
        let counts = src.counts();
        (recs, counts, port)
    });
    let (recs, counts, port) = recs;
    assert_eq!(counts.lost, 0, "records lost in the ring: {counts:?}");
    let mut conv = Converter::new();
    let client: Vec<(Record, KernelEvent)> =
        recs.iter().filter(|r| r.remote.port() == port).filter_map(|r| conv.event(r).map(|e| (*r, e))).collect();
    let writes: Vec<(u32, u32)> = client
        .iter()
        .filter_map(|(_, e)| match e {
            KernelEvent::Sendmsg { bytes, seq } => Some((*bytes, *seq)),
            _ => None,
        })
        .collect();
    assert_eq!(writes.iter().map(|w| w.0).collect::<Vec<_>>(), [54, 200, 1000, 500], "{writes:?}");
    for w in writes.windows(2) {
        assert_eq!(w[1].1, w[0].1.wrapping_add(w[0].0), "each write's seq follows the previous one: {writes:?}");
    }
    let resent_seq = writes[3].1;
    let resends: Vec<_> = client
        .iter()
        .filter_map(|(_, e)| match e {
            KernelEvent::Retransmit { seq, len } => Some((*seq, *len)),
            _ => None,
        })
        .collect();
    assert!(
        resends.iter().any(|&(seq, len)| seq == resent_seq && len == 500),
        "a resend of the dropped write [{resent_seq}, +500): {resends:?}"
    );
    let states: Vec<_> = client
        .iter()
        .filter_map(|(_, e)| match e {
            KernelEvent::State(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert!(states.iter().all(|s| s.snd_cwnd > 0), "window states with a cwnd: {states:?}");
    // The server's side: its reads, and both sockets' opens and closes with their 4-tuples.
    assert!(recs.iter().any(|r| r.local.port() == port && matches!(r.kind, Kind::Read { .. })), "the server's reads");
    assert!(
        recs.iter().any(|r| r.remote.port() == port && matches!(r.kind, Kind::SetState { new: 1, .. })),
        "the client's ESTABLISHED"
    );
    // Every record is of this connection, both ends on 127.0.0.1.
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    assert!(recs.iter().all(|r| r.local.ip() == lo && r.remote.ip() == lo), "{recs:?}");
    assert!(recs.windows(2).all(|w| w[0].mono_ns <= w[1].mono_ns) || recs.len() > 1);
}

/// An older kernel lacks tcp_sendmsg_locked (6.12+): the source attaches the rest and names the
/// missing one and what it would have given. Provoked with a tracepoint name no kernel has.
fn a_missing_tracepoint_is_named_and_the_rest_still_attach() {
    let mut tps: Vec<Tracepoint> = TRACEPOINTS.to_vec();
    tps[0].name = "tcp_sendmsg_locked_not_in_any_kernel";
    let src = Source::open_tracepoints(
        &Filter { ports: vec![1], netns: None, reads: true, owners: false },
        &tps,
        tcpstall_kevidence::RING_BYTES,
    )
    .expect("the rest attach");
    assert_eq!(src.attached().len(), TRACEPOINTS.len() - 1, "{}", src.status());
    let status = src.status();
    assert!(
        status.contains(
            "tcp_sendmsg_locked_not_in_any_kernel missing (not in this kernel): write times and sizes not measured"
        ),
        "{status}"
    );
    assert_eq!(status.lines().count(), 1);
}

/// Records that only another namespace's sockets make are filtered out in the kernel.
fn another_namespace_is_filtered_out_in_the_kernel() {
    let (n, counts) = in_netns(|_ino| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // The right port, a namespace inode that is not this one.
        let mut src = Source::open(&Filter { ports: vec![port], netns: Some(1), reads: true, owners: false })
            .expect("kernel evidence");
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        c.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        let mut recs = Vec::new();
        drain_all(&mut src, &mut recs, Duration::from_millis(100));
        (recs.len(), src.counts())
    });
    assert_eq!((n, counts.lost), (0, 0));
}

/// A paused source runs no program (its tracepoints detached: writes made meanwhile leave no
/// record, and the kernel ran none of its programs); resumed, it reports the next writes again.
fn a_paused_source_runs_nothing_and_resumes() {
    let (paused, resumed, runs) = in_netns(|ino| {
        let _stats = Source::enable_run_stats().expect("BPF_ENABLE_STATS");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut src = Source::open(&Filter { ports: vec![port], netns: Some(ino), reads: false, owners: false })
            .expect("kernel evidence");
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 5];
        let mut recs = Vec::new();
        drain_all(&mut src, &mut recs, Duration::from_millis(50));
        src.pause();
        assert!(src.is_paused());
        let runs0: u64 = src.run_stats().iter().map(|x| x.1).sum();
        for _ in 0..10 {
            c.write_all(b"hello").unwrap();
            s.read_exact(&mut b).unwrap();
        }
        let runs: u64 = src.run_stats().iter().map(|x| x.1).sum::<u64>() - runs0;
        let mut during = Vec::new();
        drain_all(&mut src, &mut during, Duration::from_millis(50));
        src.resume();
        c.write_all(b"hello").unwrap();
        s.read_exact(&mut b).unwrap();
        let mut after = Vec::new();
        drain_all(&mut src, &mut after, Duration::from_millis(50));
        let writes = |r: &[Record]| r.iter().filter(|r| matches!(r.kind, Kind::Sendmsg { .. })).count();
        (writes(&during), writes(&after), runs)
    });
    assert_eq!((paused, runs), (0, 0), "paused: records and program runs");
    assert!(resumed >= 1, "resumed: {resumed} write records");
}

/// Whether a window state is near a window limit as bpf/tcpev.bpf.c `near_a_window_limit`
/// means it, leaving out its congestion-state clause: the flight within one
/// MSS of the congestion window (`tcp_cwnd_test`) or of the peer's window (`tcp_snd_wnd_test`),
/// or a peer window under two segments.
fn near_a_limit(s: &trace::KernelState, mss: u32) -> bool {
    let (mss, flight) = (u64::from(mss), u64::from(s.snd_nxt.wrapping_sub(s.snd_una)));
    let wnd = u64::from(s.snd_wnd);
    flight + mss >= u64::from(s.snd_cwnd) * mss || flight + mss >= wnd || wnd < 2 * mss
}

/// Window states are kept only near a window limit, and reads only when asked for: 300 1-byte
/// round trips (a flight of one byte, far from every window) make writes and no read and (almost)
/// no window state; then a server that stops reading, behind a 4 KiB receive buffer, closes its
/// window on a client that writes 1 MB: the client's states near the peer's window are kept,
/// each one near a limit by the record's own fields.
fn window_states_only_near_a_limit_and_reads_only_when_asked() {
    let (bulk, rr, port) = in_netns(|ino| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut src =
            Source::open(&Filter { ports: vec![port], netns: Some(ino), reads: false, owners: false }).expect("kernel");
        assert!(src.status().ends_with("(reads off)"), "{}", src.status());
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_nodelay(true).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        for _ in 0..300 {
            c.write_all(&b).unwrap();
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
            c.read_exact(&mut b).unwrap();
        }
        let mut recs = Vec::new();
        drain_all(&mut src, &mut recs, Duration::from_millis(100));
        let rr = recs.len();
        // The server stops reading; its receive buffer is small, so its window closes.
        let small = socket2::SockRef::from(&s);
        small.set_recv_buffer_size(4096).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
        let chunk = vec![5u8; 16 * 1024];
        let mut sent = 0;
        while sent < 1 << 20 {
            match c.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        drain_all(&mut src, &mut recs, Duration::from_millis(200));
        drop(c);
        drop(s);
        (recs.split_off(rr), recs, port)
    });
    let client_states = |v: &[Record]| -> Vec<(trace::KernelState, u32, u8)> {
        v.iter()
            .filter(|r| r.remote.port() == port)
            .filter_map(|r| match r.kind {
                Kind::Probe { state, mss, ca_state } => Some((state, mss, ca_state)),
                _ => None,
            })
            .collect()
    };
    let writes = rr.iter().filter(|r| matches!(r.kind, Kind::Sendmsg { .. })).count();
    assert!(writes >= 600, "300 requests and 300 replies: {writes} writes");
    assert!(!rr.iter().any(|r| matches!(r.kind, Kind::Read { .. })), "no read unless asked for");
    let rr_states = rr.iter().filter(|r| matches!(r.kind, Kind::Probe { .. })).count();
    // The first segments of a connection may find its windows still small; 600 far from them.
    assert!(rr_states <= 10, "{rr_states} window states for 600 one-byte segments far from every window");
    let near = client_states(&bulk);
    assert!(!near.is_empty(), "a closing peer window is kept: {} records of the bulk phase", bulk.len());
    // TCP_CA_Open is 0 (include/net/tcp.h enum tcp_ca_state): any other state is kept anyway.
    assert!(
        near.iter().all(|(s, mss, ca)| *ca != 0 || (*mss > 0 && near_a_limit(s, *mss))),
        "every kept state near a limit: {near:?}"
    );
}

/// Owners (`Filter::owners`): a client in another process (python3) connects, writes, and its
/// second write is dropped until resent. Every record of its socket carries its pid and
/// command, the resend too (it fires in softirq, from the retransmit timer or an ACK: the
/// current task there is whoever was interrupted); the accepted socket carries this process
/// (inherited from the listener, then claimed by its own write), and is not marked shared.
// long: one two-process connection, then each socket's records checked.
fn owners_come_from_the_map_in_every_context() {
    let (recs, port, child) = in_netns(|ino| {
        let mut src = Source::open(&Filter { ports: vec![], netns: Some(ino), reads: false, owners: true })
            .expect("kernel evidence");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "import socket,sys\ns=socket.create_connection(('127.0.0.1',{port}))\ns.sendall(b'q'*54)\n\
             s.recv(1)\ns.sendall(b'w'*500)\ns.recv(1)\ns.close()"
        );
        let mut py = Command::new("python3").args(["-c", &script]).spawn().expect("python3");
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 600];
        s.read_exact(&mut buf[..54]).unwrap();
        let rule =
            ["INPUT", "-p", "tcp", "--dport", &port.to_string(), "-m", "length", "--length", "400:65535", "-j", "DROP"];
        iptables(&[&["-A"], &rule[..]].concat());
        s.write_all(b"k").unwrap();
        let mut recs = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3)
            && !recs.iter().any(|r: &Record| matches!(r.kind, Kind::Retransmit { .. }))
        {
            src.wait(50);
            src.drain(&mut recs);
        }
        iptables(&[&["-D"], &rule[..]].concat());
        s.read_exact(&mut buf[..500]).unwrap();
        s.write_all(b"k").unwrap();
        assert!(py.wait().unwrap().success(), "the python client failed");
        drop(s);
        drain_all(&mut src, &mut recs, Duration::from_millis(300));
        (recs, port, py.id())
    });
    let me = std::process::id();
    let client: Vec<&Record> = recs.iter().filter(|r| r.remote.port() == port).collect();
    let server: Vec<&Record> = recs.iter().filter(|r| r.local.port() == port && r.remote.port() != 0).collect();
    assert!(client.iter().any(|r| matches!(r.kind, Kind::Retransmit { .. })), "a resend of the client's: {client:?}");
    for r in &client {
        let o = r.owner.unwrap_or_else(|| panic!("a client record without its owner: {r:?}"));
        assert_eq!(o.pid, child, "the client's record charged to pid {} ({}): {r:?}", o.pid, o.comm());
        assert!(o.comm().starts_with("python"), "{}", o.comm());
        assert_eq!(o.shared_with, None);
    }
    let written: Vec<&&Record> = server.iter().filter(|r| matches!(r.kind, Kind::Sendmsg { .. })).collect();
    assert_eq!(written.len(), 2, "{server:?}");
    for r in &server {
        let o = r.owner.unwrap_or_else(|| panic!("an accepted socket's record without its owner: {r:?}"));
        assert_eq!((o.pid, o.shared_with), (me, None), "{r:?}");
    }
    assert!(written.iter().all(|r| !r.owner.unwrap().inherited), "claimed by its own writes");
}

fn main() {
    let _ = SocketAddr::from(([127, 0, 0, 1], 0));
    let args = Arguments::from_args();
    let trials = vec![
        needs_root(
            "writes_resends_and_windows_of_a_real_connection",
            &["iptables"],
            writes_resends_and_windows_of_a_real_connection,
        ),
        needs_root(
            "a_missing_tracepoint_is_named_and_the_rest_still_attach",
            &[],
            a_missing_tracepoint_is_named_and_the_rest_still_attach,
        ),
        needs_root(
            "window_states_only_near_a_limit_and_reads_only_when_asked",
            &[],
            window_states_only_near_a_limit_and_reads_only_when_asked,
        ),
        needs_root("a_paused_source_runs_nothing_and_resumes", &[], a_paused_source_runs_nothing_and_resumes),
        needs_root(
            "owners_come_from_the_map_in_every_context",
            &["iptables", "python3"],
            owners_come_from_the_map_in_every_context,
        ),
        needs_root(
            "another_namespace_is_filtered_out_in_the_kernel",
            &[],
            another_namespace_is_filtered_out_in_the_kernel,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
