//! The emulated path's fixed overhead, measured at link start by probes through the link.
//!
//! The forwarder stamps a packet when read(2) returns it (earlier by the scheduler's run_delay
//! of its wake-up) and measures its own lateness when it hands the packet to write(2). What it
//! cannot see by its own clock: the time from the sender's send to the packet being readable
//! and the forwarder running (tun_net_xmit queues the skb and wakes the reader,
//! drivers/net/tun.c; on a VM the woken vCPU may first have to leave its idle halt), and the
//! time from write(2) to the receiving application (tun_get_user -> netif_receive_skb -> the
//! stack -> sock_def_readable waking the receiver). A user's packet feels both.
//!
//! So, before any user traffic, `run` sends `ROUNDS` UDP probes through the link as a
//! ping-pong (a request and its response, as the benchmark's probes and most traffic are),
//! each carrying a magic and a sequence number, from a socket in one namespace to a socket in
//! the other, both in this process, each receiver blocked in recv(2) as an application's would
//! be. The forwarder recognises them (`probe_seq`), keeps them out of the model, the counters
//! and the capture, holds each for min(the configured delay, `PROBE_DELAY_NS`) and records its
//! own times of each (`ProbeSeen`). The path's unseen part of a probe is its one-way time
//! (send to recv returning, CLOCK_MONOTONIC, same process) minus the time the forwarder held
//! it (write called minus its stamp); the sender's transmit timestamp (SO_TIMESTAMPING,
//! taken in tun_net_xmit) splits off the forwarder's wake-up. The same ping-pong over the
//! namespace's loopback (a direct path: sender's stack, receiver's wake-up, as on a veth
//! pair) gives the part any path has. The medians of the differences are the emulator's
//! overhead: the report adds it to each packet's lateness (the write(2) of each packet timed
//! live, the wake-up only to a packet that woke the forwarder). The overhead is measured and
//! printed, never subtracted: an earlier option that stamped packets earlier by the shortest
//! wake-up and wrote them out earlier by the shortest write(2) made round trips shorter than
//! the configured one under load, and it went with the never-early rule (crate::stamp).
//!
//! The overhead depends on how deeply the CPUs slept between packets (a vCPU woken from a
//! long halt costs the most): the probes are spaced like a request/response exchange across
//! the link's delay, and a busy link (bulk transfers, the forwarder never asleep) pays less
//! than what is printed for the wake-up part.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use report::stats;

use crate::netns::{run_in, End};
use crate::probe::{probe, seq_of, Calibration, ProbeSeen, PORT, PROBE_DELAY_NS};
use sys::clock::mono_ns;

/// Probes per direction (and over loopback).
pub const ROUNDS: u32 = 10;
/// Rounds of the ping-pong before the measured ones: at least this many, for at least
/// `WARMUP_NS`.
pub const WARMUP_ROUNDS: u32 = 2;
pub const WARMUP_NS: u64 = 60_000_000;
/// What the probes of one direction measured (medians, ns).
#[derive(Debug, Clone, Default)]
pub struct DirCalibration {
    /// Probes that made it through.
    pub probes: usize,
    /// One way over loopback in the sending namespace: send to recv returning.
    pub direct_ns: u64,
    /// One way through the emulated link, less the time the forwarder held the probe.
    pub unseen_ns: u64,
    /// `unseen_ns - direct_ns` (at least 0): the emulator's fixed overhead for a packet that
    /// finds the forwarder asleep, `wake_ns + rest_ns`.
    pub fixed_ns: u64,
    /// Of it, the forwarder's wake-up: from the probe entering the TUN device (its software
    /// transmit timestamp) to the forwarder's stamp of it.
    pub wake_ns: u64,
    /// The shortest wake-up of the probes.
    pub wake_min_ns: u64,
    /// The shortest write(2) of the probes.
    pub write_min_ns: u64,
    /// Of it, the rest (`fixed_ns - wake_ns`, at least 0): the write into the other device
    /// and the receiving side beyond a direct path's.
    pub rest_ns: u64,
    /// The rest less the write(2) (which the forwarder times for every packet): the sender's
    /// stack up to the TUN queue and the receiver's side after write(2) returns, less the
    /// direct path (may be negative: the receiver often runs in parallel with the writer).
    pub ends_ns: i64,
    /// The parts: send to the forwarder's read(2) returning...
    pub to_read_ns: u64,
    /// ...of which send to the TUN device's queue...
    pub to_queue_ns: u64,
    /// ...and the scheduler's run_delay (stamped back)...
    pub run_delay_ns: u64,
    /// ...how late the forwarder called write(2) after the probe's deadline...
    pub late_ns: u64,
    /// ...write(2) itself (the receiving stack runs inside it)...
    pub write_ns: u64,
    /// ...and write(2) returning to the receiver's recv(2) returning.
    pub to_recv_ns: u64,
}

/// Both directions (index 0 = client->server).
#[derive(Debug, Clone, Default)]
pub struct CalibrationReport {
    pub dirs: [DirCalibration; 2],
}

/// What the echo side saw of one probe (CLOCK_MONOTONIC ns): when recv(2) returned the
/// request, when it sent the reply, and the reply's transmit timestamp.
#[derive(Debug, Clone, Copy)]
struct Echoed {
    seq: u32,
    recv: u64,
    send: u64,
    queued: Option<u64>,
}

/// The echo side of the probes' ping-pong, blocked in recv(2) on its own thread as an
/// application's: each request is answered at once from `reply` to `to` (the same sequence
/// number), then what it saw goes to the channel. It ends when `rx` is shut down for reading
/// (inet_shutdown wakes a blocked reader even of an unconnected UDP socket, whose recv then
/// returns 0).
fn echo(rx: UdpSocket, reply: UdpSocket, to: SocketAddr, stamped: bool, offset: i128, out: mpsc::Sender<Echoed>) {
    let _ = rx.set_read_timeout(Some(Duration::from_secs(1)));
    let mut b = [0u8; 64];
    loop {
        match rx.recv(&mut b) {
            Ok(0) => return,
            Ok(n) => {
                let recv = mono_ns();
                let Some(seq) = seq_of(&b[..n]) else { continue };
                let send = mono_ns();
                if reply.send_to(&probe(seq), to).is_err() {
                    continue;
                }
                let queued = if stamped { tx_stamp(&reply, offset) } else { None };
                if out.send(Echoed { seq, recv, send, queued }).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Ask for software transmit timestamps on `sock` (SO_TIMESTAMPING, timestamping.rst): the
/// kernel stamps a packet where the driver takes it (skb_tx_timestamp, which tun_net_xmit
/// calls before queueing it for the reader) and queues the stamp on the socket's error queue.
fn want_tx_stamps(sock: &UdpSocket) -> bool {
    use nix::sys::socket::{setsockopt, sockopt::Timestamping, TimestampingFlag as F};
    let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE | F::SOF_TIMESTAMPING_SOFTWARE | F::SOF_TIMESTAMPING_OPT_TSONLY;
    setsockopt(sock, Timestamping, &flags).is_ok()
}

/// The transmit timestamp of the packet just sent on `sock`, as CLOCK_MONOTONIC ns (the
/// stamp is CLOCK_REALTIME, `offset` apart).
fn tx_stamp(sock: &UdpSocket, offset: i128) -> Option<u64> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    let mut cmsg = nix::cmsg_space!([nix::sys::time::TimeSpec; 3], libc::sock_extended_err, libc::sockaddr_in);
    let mut data = [0u8; 64];
    let mut iov = [std::io::IoSliceMut::new(&mut data)];
    let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
    let msg = recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), flags).ok()?;
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmTimestampsns(t) = c {
            let real = i128::from(t.system.tv_sec()) * 1_000_000_000 + i128::from(t.system.tv_nsec());
            return u64::try_from(real - offset).ok();
        }
    }
    None
}

/// One probe's times (CLOCK_MONOTONIC ns): sent, in the TUN device's queue (if stamped),
/// received.
#[derive(Debug, Clone, Copy)]
struct Sent {
    seq: u32,
    send: u64,
    queued: Option<u64>,
    recv: u64,
}

/// Why the path was not measured at link start.
///
/// Cloneable (shared sources) since a [`crate::LinkReport`] carries it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CalibrationError {
    /// `LinkOptions::calibrate` was off.
    #[error("not asked for")]
    NotAsked,
    /// Entering a namespace to bind a probe socket.
    #[error("{0}")]
    Namespace(Arc<crate::LinkError>),
    #[error("calibration socket: {0}")]
    Socket(Arc<std::io::Error>),
    /// Setting up a bound socket (clone, address, timeout).
    #[error("{0}")]
    Io(Arc<std::io::Error>),
    #[error("{probes} of {rounds} calibration probes came through")]
    TooFewProbes { probes: usize, rounds: u32 },
}

fn io_err(e: std::io::Error) -> CalibrationError {
    CalibrationError::Io(Arc::new(e))
}

/// The probes' sockets: one per end at `PORT` (which the forwarder looks for), sending and
/// receiving as the benchmark's probes do (a socket's transmit timestamp is read right after
/// its send, before it blocks in recv again), and two pairs on the client namespace's loopback
/// for the direct path.
struct Sockets {
    c_rx: UdpSocket,
    c_tx: UdpSocket,
    s_rx: UdpSocket,
    s_tx: UdpSocket,
    /// (sender, receiver of the reply), and the echo's (receiver, sender).
    lo: [UdpSocket; 2],
    lo_echo: [UdpSocket; 2],
    /// Whether both link sockets give software transmit timestamps.
    stamped: bool,
}

impl Sockets {
    fn open(client: &End, server: &End) -> Result<Sockets, CalibrationError> {
        let bind = |end: &End, ip: Ipv4Addr, port: u16| {
            run_in(end.netns(), || UdpSocket::bind((ip, port)))
                .map_err(|e| CalibrationError::Namespace(Arc::new(e)))?
                .map_err(|e| CalibrationError::Socket(Arc::new(e)))
        };
        let c_rx = bind(client, client.ip, PORT)?;
        let s_rx = bind(server, server.ip, PORT)?;
        let c_tx = c_rx.try_clone().map_err(io_err)?;
        let s_tx = s_rx.try_clone().map_err(io_err)?;
        let lo = [bind(client, Ipv4Addr::LOCALHOST, 0)?, bind(client, Ipv4Addr::LOCALHOST, 0)?];
        let lo_echo = [bind(client, Ipv4Addr::LOCALHOST, 0)?, bind(client, Ipv4Addr::LOCALHOST, 0)?];
        let stamped = want_tx_stamps(&c_tx) && want_tx_stamps(&s_tx);
        let timeout = Duration::from_nanos(PROBE_DELAY_NS * 2) + Duration::from_millis(250);
        c_rx.set_read_timeout(Some(timeout)).map_err(io_err)?;
        lo[1].set_read_timeout(Some(timeout)).map_err(io_err)?;
        Ok(Sockets { c_rx, c_tx, s_rx, s_tx, lo, lo_echo, stamped })
    }
}

/// A measured round through the link: (seq, request sent, its transmit timestamp, reply
/// received), and what the echo side saw of it.
type Ping = (u32, u64, Option<u64>, u64);

/// Measure both directions, then tell the forwarder threads (`calib`, index 0 = up) what was
/// found.
///
/// The probes are a ping-pong, as a request and its response, or the benchmark's probes: the
/// client sends (after 300 us asleep), the server's echo thread answers at once, the client
/// receives; each way is timed on its own (same clock, same process). The direct path is the
/// same ping-pong over the client namespace's loopback, half its round trip each way.
pub fn run(client: &End, server: &End, calib: [&Arc<Calibration>; 2]) -> Result<CalibrationReport, CalibrationError> {
    let socks = Sockets::open(client, server)?;
    let offset = sys::clock::realtime_offset_ns();
    let (to_server, to_client) = (SocketAddr::from((server.ip, PORT)), SocketAddr::from((client.ip, PORT)));
    let lo_to_echo = socks.lo_echo[0].local_addr().map_err(io_err)?;
    let lo_to_me = socks.lo[1].local_addr().map_err(io_err)?;
    let clone = |s: &UdpSocket| s.try_clone().map_err(io_err);
    let (s_rx2, s_tx2) = (clone(&socks.s_rx)?, clone(&socks.s_tx)?);
    let (lo_echo0, lo_echo1) = (clone(&socks.lo_echo[0])?, clone(&socks.lo_echo[1])?);
    for cal in calib {
        cal.active.store(true, Ordering::Relaxed);
    }
    let stamped = socks.stamped;
    let result = std::thread::scope(|scope| -> Result<CalibrationReport, CalibrationError> {
        let (link_tx, link_rx) = mpsc::channel();
        let (lo_tx, lo_rx) = mpsc::channel();
        scope.spawn(move || echo(s_rx2, s_tx2, to_client, stamped, offset, link_tx));
        scope.spawn(move || echo(lo_echo0, lo_echo1, lo_to_me, false, offset, lo_tx));
        let (pings, echoes) = ping_link(&socks, to_server, offset, &link_rx);
        // The direct path, the same way (after the link's rounds, not between them).
        let direct = ping_direct(&socks.lo, lo_to_echo, &lo_rx);
        for sock in [&socks.s_rx, &socks.lo_echo[0]] {
            let _ = nix::sys::socket::shutdown(sock.as_raw_fd(), nix::sys::socket::Shutdown::Read);
        }
        let direct = stats::median(direct).unwrap_or(0);
        let mut report = CalibrationReport::default();
        for (d, (cal, sent)) in calib.iter().zip(split_directions(&pings, &echoes)).enumerate() {
            let seen: Vec<ProbeSeen> = cal.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
            report.dirs[d] = measure_direction(&sent, &seen, direct)?;
        }
        Ok(report)
    });
    for (d, cal) in calib.iter().enumerate() {
        cal.active.store(false, Ordering::Relaxed);
        if let Ok(report) = &result {
            publish(cal, &report.dirs[d]);
        }
    }
    result
}

/// The rounds through the link: `ROUNDS` measured ones after the warm-up (at most 200 more
/// tries), each a request from the client and the echo's reply.
fn ping_link(
    socks: &Sockets,
    to_server: SocketAddr,
    offset: i128,
    echoed: &mpsc::Receiver<Echoed>,
) -> (Vec<Ping>, Vec<Echoed>) {
    let mut pings = Vec::new();
    let mut echoes = Vec::new();
    let mut b = [0u8; 64];
    // The first rounds after the link starts are not measured: at rtt=2ms the probes of its
    // first ~40 ms paid 20-25 us of forwarder wake-up, those after 4-5 us, as the benchmark's
    // probes do (the cause was not found).
    let measure_from = mono_ns() + WARMUP_NS;
    let mut seq = 0u32;
    while pings.len() < ROUNDS as usize && seq < ROUNDS + 200 {
        seq += 1;
        std::thread::sleep(Duration::from_micros(300));
        let warm = mono_ns() < measure_from || seq <= WARMUP_ROUNDS;
        let t = mono_ns();
        if socks.c_tx.send_to(&probe(seq), to_server).is_err() {
            continue;
        }
        let queued = if socks.stamped { tx_stamp(&socks.c_tx, offset) } else { None };
        let back = loop {
            match socks.c_rx.recv(&mut b) {
                Ok(n) if seq_of(&b[..n]) == Some(seq) => break Some(mono_ns()),
                Ok(_) => {}
                Err(_) => break None,
            }
        };
        if let (Some(back), Ok(e)) = (back, echoed.recv_timeout(Duration::from_millis(250))) {
            if !warm {
                pings.push((seq, t, queued, back));
                echoes.push(e);
            }
        }
    }
    (pings, echoes)
}

/// The same ping-pong over loopback: half of each round trip (ns).
fn ping_direct(lo: &[UdpSocket; 2], to_echo: SocketAddr, echoed: &mpsc::Receiver<Echoed>) -> Vec<u64> {
    let mut direct = Vec::new();
    let mut b = [0u8; 64];
    for seq in 0..ROUNDS {
        std::thread::sleep(Duration::from_micros(300));
        let t = mono_ns();
        if lo[0].send_to(&probe(seq), to_echo).is_ok() {
            if let Ok(n) = lo[1].recv(&mut b) {
                if seq_of(&b[..n]) == Some(seq) {
                    direct.push((mono_ns() - t) / 2);
                }
            }
            let _ = echoed.recv_timeout(Duration::from_millis(250));
        }
    }
    direct
}

/// Each round's two one-way trips: client->server (the request) and server->client (the
/// reply), with the echo's side from its own times.
fn split_directions(pings: &[Ping], echoes: &[Echoed]) -> [Vec<Sent>; 2] {
    let matched = || pings.iter().zip(echoes).filter(|(p, e)| p.0 == e.seq);
    let up = matched().map(|(&(seq, send, queued, _), e)| Sent { seq, send, queued, recv: e.recv }).collect();
    let down =
        matched().map(|(&(seq, _, _, back), e)| Sent { seq, send: e.send, queued: e.queued, recv: back }).collect();
    [up, down]
}

/// One direction's medians from its probes' times and the forwarder's (`seen`), against the
/// direct path's one-way time.
fn measure_direction(sent: &[Sent], seen: &[ProbeSeen], direct: u64) -> Result<DirCalibration, CalibrationError> {
    let mut parts: [Vec<u64>; 8] = Default::default();
    let mut ends = Vec::new();
    for q in sent {
        let Some(p) = seen.iter().find(|p| p.seq == q.seq) else { continue };
        let stamp = p.read.saturating_sub(p.backdate);
        parts[0].push((q.recv - q.send).saturating_sub(p.write_start.saturating_sub(stamp)));
        parts[1].push(p.read.saturating_sub(q.send));
        parts[2].push(p.backdate);
        parts[3].push(p.write_start.saturating_sub(p.due));
        parts[4].push(p.write_end - p.write_start);
        parts[5].push(q.recv.saturating_sub(p.write_end));
        if let Some(queued) = q.queued {
            parts[6].push(queued.saturating_sub(q.send));
            parts[7].push(stamp.saturating_sub(queued));
            ends.push(queued.saturating_sub(q.send) + q.recv.saturating_sub(p.write_end));
        }
    }
    let probes = parts[0].len();
    if probes < ROUNDS as usize / 2 {
        return Err(CalibrationError::TooFewProbes { probes, rounds: ROUNDS });
    }
    let wake_min = parts[7].iter().copied().min().unwrap_or(0);
    let write_min = parts[4].iter().copied().min().unwrap_or(0);
    let [unseen, to_read, run_delay, late, write, to_recv, to_queue, wake] =
        parts.map(|p| stats::median(p).unwrap_or(0));
    let fixed = unseen.saturating_sub(direct);
    let ends_ns = if ends.is_empty() {
        // No transmit timestamps: no wake-up apart, all but the write.
        fixed as i64 - write as i64
    } else {
        stats::median(ends).unwrap_or(0) as i64 - direct as i64
    };
    Ok(DirCalibration {
        probes,
        direct_ns: direct,
        unseen_ns: unseen,
        fixed_ns: fixed,
        wake_ns: wake.min(fixed),
        wake_min_ns: wake_min.min(wake).min(fixed),
        write_min_ns: write_min,
        rest_ns: fixed.saturating_sub(wake),
        ends_ns,
        to_read_ns: to_read,
        to_queue_ns: to_queue,
        run_delay_ns: run_delay,
        late_ns: late,
        write_ns: write,
        to_recv_ns: to_recv,
    })
}

/// Hand one direction's figures to its forwarder thread.
fn publish(cal: &Calibration, c: &DirCalibration) {
    cal.wake_ns.store(c.wake_ns, Ordering::Relaxed);
    cal.ends_ns.store(c.ends_ns, Ordering::Relaxed);
    cal.measured.store(true, Ordering::Relaxed);
    cal.run_delay_ns.store(c.run_delay_ns, Ordering::Relaxed);
}
