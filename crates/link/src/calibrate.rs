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
//! So, before any user traffic, `run` sends `ROUNDS` UDP probes each way through the link,
//! each carrying a magic and a sequence number, from a socket in one namespace to a socket
//! in the other, both in this process, the receiver blocked in recv(2) as an application's
//! would be. The forwarder recognises them (`probe_seq`), keeps them out of the model, the
//! counters and the capture, holds each for min(the configured delay, `PROBE_DELAY_NS`) and
//! records its own times of each (`ProbeSeen`). The path's unseen part of a probe is its
//! one-way time (send to recv returning, CLOCK_MONOTONIC, same process) minus the time the
//! forwarder held it (write called minus its stamp). The same pair of operations over the
//! namespace's loopback (a direct path: sender's stack, receiver's wake-up, as on a veth pair)
//! gives the part any path has. The median difference is the emulator's fixed overhead: the
//! report adds it to each packet's lateness, and (unless turned off) the forwarder releases
//! packets that much before their deadline, never before they arrived, so that the delay a
//! user measures end to end is the configured one.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::forward::{mono_ns, Calibration, ProbeSeen};
use crate::netns::{run_in, End};

/// The UDP port the probes are sent to and from (in the link's own namespaces, before the
/// user's commands start).
pub const PORT: u16 = 47_913;
/// The longest a probe is held by the forwarder: long enough for the forwarder and the
/// receiver to fall asleep as they do behind a real delay, short enough to keep link start
/// quick.
pub const PROBE_DELAY_NS: u64 = 10_000_000;
/// Probes per direction (and over loopback).
pub const ROUNDS: u32 = 10;
const MAGIC: &[u8; 16] = b"tcpstall-calib-1";

/// The sequence number of a calibration probe, if `ip` (an IPv4 packet) is one.
pub fn probe_seq(ip: &[u8]) -> Option<u32> {
    if ip.first()? >> 4 != 4 || *ip.get(9)? != 17 {
        return None;
    }
    let l3 = usize::from(ip[0] & 0x0f) * 4;
    let udp = ip.get(l3..l3 + 8)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != PORT {
        return None;
    }
    let payload = ip.get(l3 + 8..)?;
    if payload.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    let s = payload.get(MAGIC.len()..MAGIC.len() + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn probe(seq: u32) -> Vec<u8> {
    let mut p = MAGIC.to_vec();
    p.extend_from_slice(&seq.to_le_bytes());
    p
}

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
    /// The shortest wake-up of the probes: what a packet that woke the forwarder is stamped
    /// earlier by when compensating (a packet is never delivered before its delay counted
    /// from its arrival, unless it woke the forwarder faster than every probe did).
    pub wake_min_ns: u64,
    /// The shortest write(2) of the probes: how much before its deadline a packet is written
    /// out when compensating.
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
    /// Whether a packet that wakes the forwarder is stamped earlier by `wake_min_ns`.
    pub compensated: bool,
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// A receiver blocked in recv(2) on its own thread, as an application's: each datagram's
/// (sequence number, CLOCK_MONOTONIC when recv returned) goes to the channel.
/// It ends when the socket is shut down for reading (inet_shutdown wakes a blocked reader
/// even of an unconnected UDP socket, whose recv then returns 0).
fn receiver(sock: UdpSocket, tx: mpsc::Sender<(u32, u64)>) {
    let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
    let mut b = [0u8; 64];
    loop {
        match sock.recv(&mut b) {
            Ok(0) => return,
            Ok(n) if n >= MAGIC.len() + 4 && &b[..MAGIC.len()] == MAGIC => {
                let t = mono_ns();
                let s = &b[MAGIC.len()..MAGIC.len() + 4];
                if tx.send((u32::from_le_bytes([s[0], s[1], s[2], s[3]]), t)).is_err() {
                    return;
                }
            }
            Ok(_) => {}
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

/// Measure both directions, then tell the forwarder threads (`calib`, index 0 = up) what was
/// found, and to stamp a packet that wakes them earlier by their wake-up if `compensate`.
pub fn run(
    client: &End,
    server: &End,
    calib: [&Arc<Calibration>; 2],
    compensate: bool,
) -> Result<CalibrationReport, String> {
    let bind = |end: &End, ip: Ipv4Addr, port: u16| {
        run_in(end.netns(), || UdpSocket::bind((ip, port)))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("calibration socket: {e}"))
    };
    // Senders (any port) and receivers (`PORT`, which the forwarder looks for) apart, so that
    // a receiver is not woken by its socket's transmit timestamps.
    let tx = [bind(client, client.ip, 0)?, bind(server, server.ip, 0)?];
    let rx = [bind(server, server.ip, PORT)?, bind(client, client.ip, PORT)?];
    let lo_tx = [bind(client, Ipv4Addr::LOCALHOST, 0)?, bind(server, Ipv4Addr::LOCALHOST, 0)?];
    let lo_rx = [bind(client, Ipv4Addr::LOCALHOST, 0)?, bind(server, Ipv4Addr::LOCALHOST, 0)?];
    let stamped = tx.iter().all(want_tx_stamps);
    let offset = crate::forward::realtime_offset_ns();
    let dsts: Vec<SocketAddr> =
        rx.iter().chain(&lo_rx).map(|r| r.local_addr()).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    // Receivers: [server (up), client (down), lo client, lo server].
    let socks: Vec<UdpSocket> =
        rx.iter().chain(&lo_rx).map(UdpSocket::try_clone).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    for cal in calib {
        cal.active.store(true, Ordering::Relaxed);
    }
    let mut rxs = Vec::new();
    let mut report = CalibrationReport { compensated: compensate, ..Default::default() };
    let result = std::thread::scope(|scope| -> Result<(), String> {
        for sock in socks {
            let (tx, rx) = mpsc::channel();
            scope.spawn(move || receiver(sock, tx));
            rxs.push(rx);
        }
        // Per kind: up, down, lo in the client ns, lo in the server ns.
        let mut sent: [Vec<Sent>; 4] = Default::default();
        let senders = [&tx[0], &tx[1], &lo_tx[0], &lo_tx[1]];
        for round in 0..ROUNDS {
            for kind in 0..4 {
                let seq = round * 4 + kind as u32;
                if kind >= 2 {
                    // The direct path as a ping-pong sees it (the receiver woken 300 us
                    // before), as the benchmark's veth round trip does.
                    let _ = senders[kind].send_to(&probe(u32::MAX), dsts[kind]);
                    let _ = rxs[kind].recv_timeout(Duration::from_millis(250));
                    std::thread::sleep(Duration::from_micros(300));
                }
                let t = mono_ns();
                if senders[kind].send_to(&probe(seq), dsts[kind]).is_err() {
                    continue;
                }
                let queued = if kind < 2 && stamped { tx_stamp(senders[kind], offset) } else { None };
                let deadline = t + PROBE_DELAY_NS + 200_000_000;
                while mono_ns() < deadline {
                    match rxs[kind].recv_timeout(Duration::from_millis(250)) {
                        Ok((got, at)) if got == seq => {
                            sent[kind].push(Sent { seq, send: t, queued, recv: at });
                            break;
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        for sock in rx.iter().chain(&lo_rx) {
            let _ = nix::sys::socket::shutdown(sock.as_raw_fd(), nix::sys::socket::Shutdown::Read);
        }
        for (d, cal) in calib.iter().enumerate() {
            let seen: Vec<ProbeSeen> = cal.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let direct = median(sent[2 + d].iter().map(|p| p.recv.saturating_sub(p.send)).collect());
            let mut parts: [Vec<u64>; 8] = Default::default();
            let mut ends = Vec::new();
            for q in &sent[d] {
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
            if probes < ROUNDS as usize / 2 || sent[2 + d].len() < ROUNDS as usize / 2 {
                return Err(format!("{probes} of {ROUNDS} calibration probes came through"));
            }
            let wake_min = parts[7].iter().copied().min().unwrap_or(0);
            let write_min = parts[4].iter().copied().min().unwrap_or(0);
            let [unseen, to_read, run_delay, late, write, to_recv, to_queue, wake] = parts.map(median);
            let fixed = unseen.saturating_sub(direct);
            let ends_ns = if ends.is_empty() {
                // No transmit timestamps: no wake-up apart, all but the write.
                fixed as i64 - write as i64
            } else {
                median(ends) as i64 - direct as i64
            };
            report.dirs[d] = DirCalibration {
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
            };
        }
        Ok(())
    });
    for (d, cal) in calib.iter().enumerate() {
        cal.active.store(false, Ordering::Relaxed);
        if result.is_ok() {
            let c = &report.dirs[d];
            cal.wake_ns.store(c.wake_ns, Ordering::Relaxed);
            cal.wake_min_ns.store(c.wake_min_ns, Ordering::Relaxed);
            cal.ends_ns.store(c.ends_ns, Ordering::Relaxed);
            cal.measured.store(true, Ordering::Relaxed);
            cal.compensate.store(compensate, Ordering::Relaxed);
            cal.run_delay_ns.store(c.run_delay_ns, Ordering::Relaxed);
            cal.release_early_ns.store(if compensate { c.write_min_ns } else { 0 }, Ordering::Relaxed);
        }
    }
    result.map(|()| report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn probes_are_recognised_by_port_and_magic() {
        assert_eq!(probe_seq(&udp4(PORT, &probe(7))), Some(7));
        assert_eq!(probe_seq(&udp4(PORT + 1, &probe(7))), None);
        assert_eq!(probe_seq(&udp4(PORT, b"tcpstall-calib-2xxxx")), None);
        assert_eq!(probe_seq(&udp4(PORT, &probe(7)[..10])), None);
        let mut tcp = udp4(PORT, &probe(7));
        tcp[9] = 6;
        assert_eq!(probe_seq(&tcp), None);
        assert_eq!(probe_seq(&[0x60; 60]), None);
        assert_eq!(probe_seq(&[]), None);
    }
}
