//! How long each write sat inside TCP before it left: SO_TIMESTAMPING's SCHED timestamp (taken
//! when the segment is handed to the qdisc, `__dev_queue_xmit`) minus the time of the write
//! (Documentation/networking/timestamping.rst). A write held by Nagle, a cork or a full
//! congestion window shows the hold on the side that held it, which tells which end of the
//! connection a stall came from.
//!
//! Keys: with SOF_TIMESTAMPING_OPT_ID a TCP timestamp carries the offset of the last byte of the
//! skb (`tcp_tx_timestamp`, net/ipv4/tcp.c), counted from the moment the option was set
//! (OPT_ID_TCP, 6.2+, counts from write_seq; older kernels from snd_una, the same on the idle
//! socket this is set on). Writes appended to a held skb move its key to their own last byte, so
//! one stamp can cover several writes: its hold is that of the oldest byte it carries.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, TimestampingFlag};
use socket2::Socket;

/// `SCM_TSTAMP_SCHED` (include/uapi/linux/errqueue.h): the stamp taken entering the qdisc.
const SCM_TSTAMP_SCHED: u32 = 1;

/// Ask for a SCHED software timestamp of every write, keyed by byte offset, without payload.
pub fn enable(sock: &Socket) -> io::Result<()> {
    let base = libc::SOF_TIMESTAMPING_TX_SCHED
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    let with_tcp = TimestampingFlag::from_bits_retain(base | libc::SOF_TIMESTAMPING_OPT_ID_TCP);
    match setsockopt(sock, sockopt::Timestamping, &with_tcp) {
        Ok(()) => Ok(()),
        // Before 6.2 OPT_ID_TCP is unknown (EINVAL); on an idle socket plain OPT_ID is the same.
        Err(nix::errno::Errno::EINVAL) => {
            setsockopt(sock, sockopt::Timestamping, &TimestampingFlag::from_bits_retain(base)).map_err(io::Error::from)
        }
        Err(e) => Err(e.into()),
    }
}

/// The clock pair that maps SO_TIMESTAMPING's CLOCK_REALTIME stamps onto the monotonic clock
/// the writes are timed with.
#[derive(Debug, Clone, Copy)]
pub struct Epoch {
    mono: Instant,
    real_ns: i128,
}

impl Epoch {
    pub fn now() -> Self {
        let mono = Instant::now();
        let real_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
        Epoch { mono, real_ns }
    }
    /// Nanoseconds since the epoch of a monotonic instant.
    pub fn mono_ns(&self, t: Instant) -> i64 {
        t.saturating_duration_since(self.mono).as_nanos() as i64
    }
    /// Nanoseconds since the epoch of a realtime stamp.
    pub fn real_ns(&self, sec: i64, nsec: i64) -> i64 {
        (i128::from(sec) * 1_000_000_000 + i128::from(nsec) - self.real_ns) as i64
    }
}

/// Writes and stamps of one side, in storage allocated before the first round.
#[derive(Debug)]
pub struct TxLog {
    pub epoch: Epoch,
    /// (end offset of the write in bytes, time just before the call, ns since epoch).
    pub writes: Vec<(u64, i64)>,
    /// (key = offset of the last byte, SCHED time ns since epoch).
    pub stamps: Vec<(u64, i64)>,
    pub sent: u64,
    /// Writes or stamps that did not fit.
    pub lost: u64,
    cmsg: Vec<u8>,
}

impl TxLog {
    pub fn with_capacity(n: usize) -> Self {
        TxLog {
            epoch: Epoch::now(),
            writes: Vec::with_capacity(n),
            stamps: Vec::with_capacity(n),
            sent: 0,
            lost: 0,
            cmsg: nix::cmsg_space!(nix::sys::socket::Timestamps, libc::sock_extended_err, libc::sockaddr_in6),
        }
    }

    /// Record a write of `n` bytes that started at `t` (no allocation).
    #[inline]
    pub fn write(&mut self, n: usize, t: Instant) {
        self.sent += n as u64;
        if self.writes.len() < self.writes.capacity() {
            let at = self.epoch.mono_ns(t);
            self.writes.push((self.sent, at));
        } else {
            self.lost += 1;
        }
    }

    /// Read every timestamp waiting on the socket's error queue (non-blocking). Called between
    /// rounds, never inside one.
    pub fn drain(&mut self, sock: &Socket) -> io::Result<()> {
        loop {
            let mut byte = [0u8; 1];
            let mut iov = [IoSliceMut::new(&mut byte)];
            let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
            let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut self.cmsg), flags) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let (mut when, mut key) = (None, None);
            for c in msg.cmsgs().map_err(io::Error::from)? {
                match c {
                    ControlMessageOwned::ScmTimestampsns(t) => {
                        when = Some(self.epoch.real_ns(t.system.tv_sec(), t.system.tv_nsec()));
                    }
                    ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _)
                        if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING && e.ee_info == SCM_TSTAMP_SCHED =>
                    {
                        key = Some(u64::from(e.ee_data));
                    }
                    _ => {}
                }
            }
            if let (Some(t), Some(k)) = (when, key) {
                if self.stamps.len() < self.stamps.capacity() {
                    self.stamps.push((k, t));
                } else {
                    self.lost += 1;
                }
            }
        }
    }
}

/// Hold time of every stamped segment: for each stamp (in key order) the bytes since the
/// previous stamp left at its time, so the hold is the stamp's time minus the time of the write
/// that holds the oldest of those bytes. `writes` are (end offset, time) in write order; keys are
/// the offset of the last byte (end - 1). Returns (time of that write, hold ns).
pub fn holds(writes: &[(u64, i64)], stamps: &[(u64, i64)]) -> Vec<(i64, i64)> {
    let mut s: Vec<(u64, i64)> = stamps.to_vec();
    s.sort_unstable();
    let mut out = Vec::with_capacity(s.len());
    let mut first_byte = 0u64;
    for (key, t) in s {
        // The write holding `first_byte`: the first whose end is past it.
        let i = writes.partition_point(|&(end, _)| end <= first_byte);
        if let Some(&(_, tw)) = writes.get(i) {
            out.push((tw, (t - tw).max(0)));
        }
        first_byte = key + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_covering_held_writes_measures_the_oldest() {
        // Three 10-byte writes at t=0, 1, 2 ms. The first leaves at once (key 9, t=0.01 ms);
        // Nagle holds the next two, appended into one skb (key 29) released at 41 ms.
        let writes = [(10, 0), (20, 1_000_000), (30, 2_000_000)];
        let stamps = [(29, 41_000_000), (9, 10_000)];
        let h = holds(&writes, &stamps);
        assert_eq!(h, vec![(0, 10_000), (1_000_000, 40_000_000)]);
    }

    #[test]
    fn real_sockets_report_sched_stamps_keyed_by_offset() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Socket::from(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let (mut peer, _) = l.accept().unwrap();
        c.set_nodelay(true).unwrap();
        enable(&c).unwrap();
        let mut log = TxLog::with_capacity(8);
        for _ in 0..3 {
            let t = Instant::now();
            let n = c.send(&[1u8; 100]).unwrap();
            log.write(n, t);
        }
        let mut b = [0u8; 300];
        peer.read_exact(&mut b).unwrap();
        log.drain(&c).unwrap();
        let mut keys: Vec<u64> = log.stamps.iter().map(|s| s.0).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![99, 199, 299], "one SCHED stamp per write, keyed by its last byte");
        let h = holds(&log.writes, &log.stamps);
        assert_eq!(h.len(), 3);
        assert!(h.iter().all(|&(_, hold)| hold < 5_000_000), "NODELAY writes leave at once: {h:?}");
    }
}
