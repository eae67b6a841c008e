//! `tcpstall kernel`: fingerprints the running kernel with short experiments on real TCP
//! sockets over loopback, in a private network namespace when the caller may create one (root),
//! else on the caller's loopback. Each experiment reads the sender's `tcpi_unacked` until the
//! peer's ACK arrives: on loopback an ACK sent at once arrives within microseconds, so an ACK
//! that takes 20 ms or more was held by a timer. The classification and comparison with the
//! era profiles is pure and lives in `model::fingerprint`.
//!
//! One experiment needs a long round trip: the delayed-ACK maximum (TCP_DELACK_MAX) only shows
//! when srtt exceeds it, since `tcp_send_delayed_ack` bounds the timeout by max(srtt,
//! TCP_DELACK_MIN). It runs over tcpstall's emulated link ([`DELACK_MAX_LINK`]) and needs what the
//! link needs (root, or an unprivileged user namespace).

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use model::fingerprint::{Fingerprint, DELAYED_MS};

mod document;
pub use document::{document, KernelError};
use socket2::{Domain, SockRef, Socket, Type};

/// TCP_MAXSEG for the experiments that need full-sized segments: the MSS of a 1500-byte MTU,
/// so segments are 1448 bytes with timestamps, as on Ethernet (loopback's own MTU is 64 KB).
const MAXSEG: u32 = 1460;
/// Longest wait for one ACK.
const ACK_TIMEOUT: Duration = Duration::from_millis(1500);
/// The emulated path of the delayed-ACK maximum experiment: srtt 400 ms, above TCP_DELACK_MAX.
pub const DELACK_MAX_LINK: &str = "rtt=400ms";
/// Sysctls whose presence dates a release (the profiles cite the commit of each).
pub const DATING_SYSCTLS: &[&str] = &[
    "tcp_mtu_probe_floor",
    "tcp_reflect_tos",
    "tcp_migrate_req",
    "tcp_child_ehash_entries",
    "tcp_pingpong_thresh",
    "tcp_backlog_ack_defer",
    "tcp_rto_min_us",
    "tcp_rto_max_ms",
];

/// The profile `simulate --profile linux:here` uses: this kernel's measured rules over the
/// newest Linux profile (model::fingerprint::to_profile), with the experiments' notes.
pub fn here_profile() -> Result<(model::Profile, Vec<String>), model::ModelError> {
    let fp = fingerprint();
    let newest = model::Profile::builtin("linux")?;
    let p = model::fingerprint::to_profile(&fp, &newest);
    Ok((p, fp.notes))
}

/// Run every experiment; never fails as a whole: what could not be measured is `None` with a
/// note saying why.
pub fn fingerprint() -> Fingerprint {
    let start = Instant::now();
    // net.core.default_qdisc exists in the initial namespace only (net/core/sysctl_net_core.c
    // registers it for init_net): read it before leaving.
    let qdisc = sysctl("net/core/default_qdisc");
    let h = thread::Builder::new().name("tcpstall-kernel".into()).spawn(move || {
        let mut fp = Fingerprint { kernel: release(), default_qdisc: qdisc, ..Fingerprint::default() };
        match enter_private_netns() {
            Ok(()) => fp.private_netns = true,
            Err(e) => fp.notes.push(format!(
                "no private network namespace ({e}): ran on this namespace's loopback; TcpExt counts (autocork, \
                 loss probes) include every other connection here; run as root for clean counts"
            )),
        }
        run_all(&mut fp);
        fp
    });
    let mut fp =
        match h.map_err(|e| e.to_string()).and_then(|h| h.join().map_err(|_| "experiment thread panicked".into())) {
            Ok(fp) => fp,
            Err(e) => {
                Fingerprint { kernel: release(), notes: vec![format!("experiments failed: {e}")], ..Default::default() }
            }
        };
    // Its own namespaces (the link's), from a thread that never left the initial one.
    match thread::spawn(delack_max).join() {
        Ok(Ok(v)) => fp.delack_max_ms = v,
        Ok(Err(e)) => fp.notes.push(fp_note("delayed-ACK maximum", e)),
        Err(_) => fp.notes.push("delayed-ACK maximum: the experiment thread panicked".into()),
    }
    fp.seconds = start.elapsed().as_secs_f64();
    fp
}

/// Over an emulated link with a 400 ms round trip: 24 one-byte writes spend the receiver's
/// quick ACKs (tcp_incr_quickack, one per ACK sent in quick-ACK mode), then one-byte writes,
/// each after the previous was ACKed. Each delayed-ACK timer that fires while the connection is
/// not interactive doubles `ato` (tcp_delack_timer_handler), and `tcp_send_delayed_ack` caps the
/// timeout at TCP_DELACK_MAX for a pushed segment, srtt (400 ms) being above it. Returns each
/// write's ACK delay beyond the configured round trip (ms).
fn delack_max() -> io::Result<Vec<f64>> {
    let spec: scenario::LinkSpec = DELACK_MAX_LINK.parse().map_err(io::Error::other)?;
    let rtt_ms = (spec.delay_up_ns + spec.delay_down_ns) as f64 / 1e6;
    // No calibration of the emulator's own error: a few hundred microseconds do not move a
    // 200 ms timer.
    let opts = link::LinkOptions { calibrate: false, ..Default::default() };
    let l = link::Link::open_with(&spec, None, &opts).map_err(io::Error::other)?;
    let server = SocketAddr::from((l.server().ip, 0));
    let listener =
        link::netns::run_in(l.server().netns(), || TcpListener::bind(server)).map_err(io::Error::other)??;
    let addr = listener.local_addr()?;
    let mut c = link::netns::run_in(l.client().netns(), || TcpStream::connect_timeout(&addr, ACK_TIMEOUT))
        .map_err(io::Error::other)??;
    let (_s, _) = listener.accept()?;
    c.set_nodelay(true)?;
    // Three rounds of 8 segments (within the initial window, so each write is its own segment):
    // 24 ACKs of new data spend the 16 quick ACKs.
    for _ in 0..3 {
        for _ in 0..8 {
            c.write_all(&[1])?;
            thread::sleep(Duration::from_millis(2));
        }
        wait_acked_for(&c, Instant::now(), Duration::from_secs(3))?;
    }
    let mut delays = Vec::new();
    for _ in 0..6 {
        let t0 = Instant::now();
        c.write_all(&[2])?;
        let d = wait_acked_for(&c, t0, Duration::from_secs(3))?;
        delays.push((d - rtt_ms).max(0.0));
    }
    drop(c);
    let _ = l.finish();
    Ok(delays)
}

fn release() -> String {
    proc_kernel("osrelease").unwrap_or_default()
}

/// A line of /proc/sys/kernel, trimmed (`osrelease`: `uname -r`; `hostname`); None when
/// unreadable. The HTML reports' header names this host with it.
pub fn proc_kernel(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok().map(|s| s.trim().to_string())
}

/// unshare(CLONE_NEWNET) moves only this thread (unshare(2)); bring its loopback up.
fn enter_private_netns() -> io::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
    sys::tun::set_up("lo")
}

fn run_all(fp: &mut Fingerprint) {
    let before = netstat();
    read_sysctls(fp);
    match sys::host::kernel_hz() {
        Ok(hz) => fp.hz = Some(hz),
        Err(e) => fp.notes.push(format!("HZ: {e}")),
    }
    match sys::tun::ethtool_flag("lo", sys::tun::ETHTOOL_GGRO) {
        Ok(g) => fp.gro_lo = Some(g),
        Err(e) => fp.notes.push(format!("GRO on lo: SIOCETHTOOL failed: {e}")),
    }
    let mut notes = Vec::new();
    macro_rules! exp {
        ($what:expr, $e:expr) => {
            match $e {
                Ok(v) => Some(v),
                Err(e) => {
                    notes.push(fp_note($what, e));
                    None
                }
            }
        };
    }
    if let Some(r) = exp!("quick ACKs / delayed ACK", quick_and_delack()) {
        fp.quickacks_at_start = r.quick;
        fp.delack_ms = r.delack_ms;
        fp.ato_us = r.ato_us;
        fp.full_psh_read_ms = r.full_psh_read_ms;
        fp.two_seg_read_ms = r.two_seg_read_ms;
        fp.quickacks_after_idle = r.after_idle;
    }
    fp.two_seg_unread_ms = exp!("two segments unread", two_segments_unread()).flatten();
    fp.quickacks_after_data = exp!("quick-ACK accounting", quickacks_after_data()).flatten();
    fp.pingpong_thresh = exp!("pingpong threshold", pingpong_threshold()).flatten();
    if let Some((max, rto, rtt)) = exp!("seed 004 Nagle", seed004()) {
        fp.seed004_max_ms = Some(max);
        fp.rto_us = Some(rto);
        fp.srtt_us = Some(rtt);
    }
    fp.nodelay_then_cork_held = exp!("NODELAY then CORK", nodelay_then_cork());
    let tlp0 = netstat();
    if let Some(d) = exp!("tail-loss probe", tlp_probe()).flatten() {
        fp.tlp_ack_ms = Some(d);
        fp.tlp_probes = counter_delta(&tlp0, &netstat(), "TCPLossProbes");
    }
    let ac0 = netstat();
    if exp!("autocork burst", autocork_burst()).is_some() {
        fp.autocork_events = counter_delta(&ac0, &netstat(), "TCPAutoCorking");
    }
    fp.loss_probes = counter_delta(&before, &netstat(), "TCPLossProbes");
    fp.notes.extend(notes);
}

fn fp_note(what: &str, e: io::Error) -> String {
    format!("{what}: not measured ({e})")
}

fn netstat() -> Option<std::collections::BTreeMap<String, i64>> {
    sys::host::netstat_thread().ok()
}

fn counter_delta(
    a: &Option<std::collections::BTreeMap<String, i64>>,
    b: &Option<std::collections::BTreeMap<String, i64>>,
    k: &str,
) -> Option<i64> {
    Some(b.as_ref()?.get(k)? - a.as_ref()?.get(k)?)
}

fn sysctl(path: &str) -> Option<String> {
    // /proc/sys/net is the calling thread's namespace (net/sysctl_net.c net_ctl_header_lookup).
    std::fs::read_to_string(format!("/proc/sys/{path}")).ok().map(|s| s.trim().to_string())
}

fn read_sysctls(fp: &mut Fingerprint) {
    let num = |p: &str| sysctl(p).and_then(|s| s.parse::<u32>().ok());
    fp.pingpong_sysctl = num("net/ipv4/tcp_pingpong_thresh");
    fp.autocork_sysctl = num("net/ipv4/tcp_autocorking");
    fp.early_retrans = num("net/ipv4/tcp_early_retrans");
    fp.rto_min_us_sysctl = num("net/ipv4/tcp_rto_min_us");
    fp.congestion_control = sysctl("net/ipv4/tcp_congestion_control");
    for s in DATING_SYSCTLS {
        if std::path::Path::new(&format!("/proc/sys/net/ipv4/{s}")).exists() {
            fp.sysctls_present.push((*s).to_string());
        } else {
            fp.sysctls_absent.push((*s).to_string());
        }
    }
}

/// A connected pair over 127.0.0.1 (client, server); `maxseg` sets TCP_MAXSEG on both.
fn pair(maxseg: Option<u32>) -> io::Result<(TcpStream, TcpStream)> {
    let l = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(m) = maxseg {
        l.set_mss(m)?;
    }
    l.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
    l.listen(4)?;
    let l: TcpListener = l.into();
    let c = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(m) = maxseg {
        c.set_mss(m)?;
    }
    c.connect(&l.local_addr()?.into())?;
    let (s, _) = l.accept()?;
    let c: TcpStream = c.into();
    c.set_nodelay(true)?;
    s.set_nodelay(true)?;
    Ok((c, s))
}

fn info(s: &TcpStream) -> io::Result<sys::tcpinfo::TcpInfo> {
    sys::tcpinfo::tcp_info(s.as_fd())
}

/// Write `data` and wait until the peer has acknowledged everything (tcpi_unacked == 0 and
/// nothing unsent); returns the time taken (ms).
fn write_acked(c: &mut TcpStream, data: &[u8]) -> io::Result<f64> {
    let t0 = Instant::now();
    c.write_all(data)?;
    wait_acked(c, t0)
}

fn wait_acked(c: &TcpStream, t0: Instant) -> io::Result<f64> {
    wait_acked_for(c, t0, ACK_TIMEOUT)
}

fn wait_acked_for(c: &TcpStream, t0: Instant, limit: Duration) -> io::Result<f64> {
    loop {
        let i = info(c)?;
        if i.unacked == 0 && i.notsent_bytes.unwrap_or(0) == 0 {
            return Ok(t0.elapsed().as_secs_f64() * 1e3);
        }
        if t0.elapsed() > limit {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no ACK within {limit:?}")));
        }
        thread::sleep(Duration::from_micros(100));
    }
}

/// Read whatever the socket holds now, without blocking for more.
fn drain(s: &mut TcpStream) -> io::Result<usize> {
    s.set_nonblocking(true)?;
    let mut buf = [0u8; 65536];
    let mut n = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => {
                s.set_nonblocking(false)?;
                return Err(e);
            }
        }
    }
    s.set_nonblocking(false)?;
    Ok(n)
}

/// Send one byte at a time, each after the previous was ACKed, until an ACK is delayed; returns
/// how many were ACKed at once (at most `cap`). The receiver does not read, so only
/// __tcp_ack_snd_check decides (quick-ACK mode: `icsk_ack.quick` and not pingpong).
fn count_quick(c: &mut TcpStream, cap: u32) -> io::Result<(u32, Option<f64>)> {
    let mut n = 0;
    while n < cap {
        let d = write_acked(c, &[1])?;
        if d >= DELAYED_MS {
            return Ok((n, Some(d)));
        }
        // Not held by the delayed-ACK timer (40 ms or more): a quick ACK, even if this thread
        // was scheduled late on a loaded machine.
        n += 1;
    }
    Ok((n, None))
}

/// Read exactly `n` bytes on another thread, started (and blocked in recv) before the write.
fn reader(s: &TcpStream, n: usize) -> io::Result<thread::JoinHandle<io::Result<()>>> {
    let mut s = s.try_clone()?;
    let h = thread::spawn(move || {
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf)
    });
    thread::sleep(Duration::from_millis(15));
    Ok(h)
}

fn join(h: thread::JoinHandle<io::Result<()>>) -> io::Result<()> {
    h.join().map_err(|_| io::Error::other("reader thread panicked"))?
}

struct QuickDelack {
    quick: Option<u32>,
    delack_ms: Vec<f64>,
    ato_us: Vec<u32>,
    full_psh_read_ms: Option<f64>,
    two_seg_read_ms: Option<f64>,
    after_idle: Option<u32>,
}

/// One connection: quick ACKs at start (tcp_event_data_recv -> tcp_incr_quickack), delayed-ACK
/// delays and tcpi_ato (tcp_send_delayed_ack, tcp_delack_timer_handler), a full segment with
/// PSH read at once (tcp_measure_rcv_mss, 4720852ed9af), two full segments read at once
/// (__tcp_cleanup_rbuf), and the quick-ACK refill after idle (tcp_event_data_recv: gap > rto).
fn quick_and_delack() -> io::Result<QuickDelack> {
    let (mut c, mut s) = pair(Some(MAXSEG))?;
    let mss = info(&c)?.snd_mss as usize;
    let (quick, first) = count_quick(&mut c, 40)?;
    let mut r = QuickDelack {
        quick: first.map(|_| quick),
        delack_ms: Vec::new(),
        ato_us: Vec::new(),
        full_psh_read_ms: None,
        two_seg_read_ms: None,
        after_idle: None,
    };
    if let Some(d) = first {
        r.delack_ms.push(d);
        r.ato_us.push(info(&s)?.ato);
        for _ in 0..3 {
            r.delack_ms.push(write_acked(&mut c, &[2])?);
            r.ato_us.push(info(&s)?.ato);
        }
    }
    drain(&mut s)?;
    // Out of quick-ACK mode and not interactive (the receiver never sent): one full segment
    // with PSH, read at once.
    let h = reader(&s, mss)?;
    r.full_psh_read_ms = Some(write_acked(&mut c, &vec![3u8; mss])?);
    join(h)?;
    let h = reader(&s, 2 * mss)?;
    r.two_seg_read_ms = Some(write_acked(&mut c, &vec![4u8; 2 * mss])?);
    join(h)?;
    // Spend whatever quick ACKs those left, then idle longer than the receiver's RTO.
    count_quick(&mut c, 40)?;
    let rto = Duration::from_micros(u64::from(info(&s)?.rto));
    thread::sleep(rto + Duration::from_millis(60));
    r.after_idle = Some(count_quick(&mut c, 3)?.0);
    Ok(r)
}

/// Two full segments the receiver does not read, out of quick-ACK mode (__tcp_ack_snd_check's
/// window-edge condition). Its own connection: a loss probe here would make the receiver
/// re-enter quick-ACK mode (tcp_send_dupack -> tcp_enter_quickack_mode).
fn two_segments_unread() -> io::Result<Option<f64>> {
    let (mut c, _s) = pair(Some(MAXSEG))?;
    let mss = info(&c)?.snd_mss as usize;
    let (_, first) = count_quick(&mut c, 40)?;
    if first.is_none() {
        return Ok(None);
    }
    Ok(Some(write_acked(&mut c, &vec![5u8; 2 * mss])?))
}

/// 059217c18be6: the receiver gets one segment (one quick ACK spent), waits longer than `ato`
/// (so its replies do not count towards pingpong), sends 10 data segments, then counts the
/// quick ACKs it has left.
fn quickacks_after_data() -> io::Result<Option<u32>> {
    let (mut c, mut s) = pair(None)?;
    write_acked(&mut c, &[1])?;
    thread::sleep(Duration::from_millis(80));
    for _ in 0..10 {
        write_acked(&mut s, &[7u8; 100])?;
    }
    let (n, first) = count_quick(&mut c, 40)?;
    Ok(first.map(|_| n))
}

/// Smallest k such that after k request/reply exchanges (each reply sent within `ato` of the
/// request: tcp_event_data_sent -> inet_csk_inc_pingpong_cnt) the next request's ACK is
/// delayed (inet_csk_in_pingpong_mode disables quick ACKs in __tcp_ack_snd_check).
fn pingpong_threshold() -> io::Result<Option<u32>> {
    for k in 0..=4u32 {
        let (mut c, s) = pair(None)?;
        let mut sv = s.try_clone()?;
        let h = thread::spawn(move || -> io::Result<()> {
            let mut b = [0u8; 10];
            for _ in 0..k {
                sv.read_exact(&mut b)?;
                sv.write_all(&b)?;
            }
            Ok(())
        });
        let mut b = [0u8; 10];
        for _ in 0..k {
            c.write_all(&[8u8; 10])?;
            c.read_exact(&mut b)?;
        }
        join(h)?;
        let d = write_acked(&mut c, &[9u8; 10])?;
        if d >= DELAYED_MS {
            return Ok(if k == 0 { None } else { Some(k) });
        }
    }
    Ok(None)
}

/// Seed 004's shape at MSS 1448: 100,000 bytes (69 full segments and an 88-byte tail) then a
/// 1-byte reply, 4 rounds. With Minshall's rule (tcp_minshall_check) the tail leaves at once;
/// with classic Nagle it waits for the delayed ACK of the last full segment. Also returns the
/// connection's tcpi_rto and tcpi_rtt.
fn seed004() -> io::Result<(f64, u32, u32)> {
    let (mut c, s) = pair(Some(MAXSEG))?;
    c.set_nodelay(false)?;
    const N: usize = 100_000;
    const ROUNDS: usize = 4;
    let mut sv = s.try_clone()?;
    let h = thread::spawn(move || -> io::Result<()> {
        let mut buf = vec![0u8; N];
        for _ in 0..ROUNDS {
            sv.read_exact(&mut buf)?;
            sv.write_all(&[1])?;
        }
        Ok(())
    });
    let data = vec![6u8; N];
    let mut worst: f64 = 0.0;
    let mut b = [0u8; 1];
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        c.write_all(&data)?;
        c.read_exact(&mut b)?;
        worst = worst.max(t0.elapsed().as_secs_f64() * 1e3);
    }
    join(h)?;
    let i = info(&c)?;
    Ok((worst, i.rto, i.rtt))
}

/// Seed 001: TCP_NODELAY on, then off, then TCP_CORK, then writes of 275, 24 and 292 bytes.
/// Held (nothing sent 10 ms later) when tcp_skb_entail clears TCP_NAGLE_PUSH.
fn nodelay_then_cork() -> io::Result<bool> {
    let (mut c, _s) = pair(None)?;
    let r = SockRef::from(&c);
    r.set_nodelay(true)?;
    r.set_nodelay(false)?;
    r.set_cork(true)?;
    let before = info(&c)?.data_segs_out.unwrap_or(0);
    for n in [275usize, 24, 292] {
        c.write_all(&vec![1u8; n])?;
    }
    thread::sleep(Duration::from_millis(10));
    let after = info(&c)?.data_segs_out.unwrap_or(0);
    SockRef::from(&c).set_cork(false)?;
    Ok(after == before)
}

/// 2000 writes of 10 bytes with TCP_NODELAY while the peer reads (tcp_should_autocork holds a
/// write while an earlier skb is still in the qdisc/device: TcpExt TCPAutoCorking).
fn autocork_burst() -> io::Result<()> {
    let (mut c, s) = pair(None)?;
    let h = reader(&s, 20_000)?;
    for _ in 0..2000 {
        c.write_all(&[1u8; 10])?;
    }
    join(h)
}

/// Two small TCP_NODELAY segments in flight to a receiver out of quick-ACK mode, which delays
/// its ACK 40 ms. tcp_schedule_loss_probe arms the probe at 2 * srtt + TCP_TIMEOUT_MIN (two
/// jiffies) when more than one segment is out; tcp_send_loss_probe retransmits the last one,
/// and the receiver ACKs the duplicate at once (tcp_data_queue -> tcp_enter_quickack_mode).
/// Returns the ACK delay (ms): a few ticks with TLP, ~40 ms without.
fn tlp_probe() -> io::Result<Option<f64>> {
    let (mut c, _s) = pair(None)?;
    let (_, first) = count_quick(&mut c, 40)?;
    if first.is_none() {
        return Ok(None);
    }
    let t0 = Instant::now();
    c.write_all(&[1u8; 10])?;
    c.write_all(&[2u8; 10])?;
    Ok(Some(wait_acked(&c, t0)?))
}
