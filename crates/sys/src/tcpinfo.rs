//! getsockopt(TCP_INFO), parsed by the length the kernel returns.
//!
//! `struct tcp_info` (include/uapi/linux/tcp.h) only ever grows at its end, and the kernel copies
//! `min(optlen, sizeof(struct tcp_info))` bytes (`do_tcp_getsockopt`, net/ipv4/tcp.c). So the raw
//! bytes are read into a buffer larger than any known layout and each field is taken only when
//! the returned length covers it: an older kernel gives `None` for the fields it lacks instead of
//! garbage. The offsets below were checked with `offsetof` against the uapi header.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Buffer size handed to the kernel: larger than any `struct tcp_info` so far (248 bytes on 6.x).
const BUF: usize = 512;

/// `TCPI_OPT_TIMESTAMPS` in `tcpi_options` (include/uapi/linux/tcp.h).
pub const TCPI_OPT_TIMESTAMPS: u8 = 1;
/// `TCPI_OPT_SACK` in `tcpi_options`.
pub const TCPI_OPT_SACK: u8 = 2;

/// The tcp_info fields tcpstall uses. Times are microseconds, as the kernel reports them.
/// Fields the kernel did not return (older layouts) are `None`. Serialised as it is for the
/// far host of `lab --remote` (unknown fields refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpInfo {
    /// How many bytes the kernel returned.
    pub len: usize,
    pub state: u8,
    /// `tcpi_options`: TCPI_OPT_* bits negotiated on the connection.
    pub options: u8,
    /// Retransmission timeout (µs).
    pub rto: u32,
    /// Delayed-ACK timeout (µs): `icsk_ack.ato`.
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    /// Smoothed RTT (µs).
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_cwnd: u32,
    pub total_retrans: u32,
    /// Since 4.2.
    pub segs_out: Option<u32>,
    pub segs_in: Option<u32>,
    /// Since 4.6.
    pub notsent_bytes: Option<u32>,
    pub min_rtt: Option<u32>,
    pub data_segs_in: Option<u32>,
    pub data_segs_out: Option<u32>,
    /// Since 4.19.
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
    /// Since 4.1 (`tcpi_bytes_acked`, RFC 4898 tcpEStatsAppHCThruOctetsAcked).
    #[serde(default)]
    pub bytes_acked: Option<u64>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4).map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8).map(|s| u64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}

impl TcpInfo {
    /// Parse the bytes the kernel returned (`raw` is exactly the returned length). The first 104
    /// bytes (up to `tcpi_total_retrans`) exist on every kernel since 2.6; shorter input is an
    /// error.
    pub fn parse(raw: &[u8]) -> io::Result<TcpInfo> {
        if raw.len() < 104 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("tcp_info is {} bytes, expected at least 104", raw.len()),
            ));
        }
        let req = |off| u32_at(raw, off).unwrap_or(0);
        Ok(TcpInfo {
            len: raw.len(),
            state: raw[0],
            options: raw[5],
            rto: req(8),
            ato: req(12),
            snd_mss: req(16),
            rcv_mss: req(20),
            unacked: req(24),
            rtt: req(68),
            rttvar: req(72),
            snd_cwnd: req(80),
            total_retrans: req(100),
            segs_out: u32_at(raw, 136),
            segs_in: u32_at(raw, 140),
            notsent_bytes: u32_at(raw, 144),
            min_rtt: u32_at(raw, 148),
            data_segs_in: u32_at(raw, 152),
            data_segs_out: u32_at(raw, 156),
            bytes_sent: u64_at(raw, 200),
            bytes_retrans: u64_at(raw, 208),
            bytes_acked: u64_at(raw, 120),
        })
    }

    /// True when the connection negotiated TCP timestamps (RFC 7323): 12 option bytes per segment.
    pub fn timestamps(&self) -> bool {
        self.options & TCPI_OPT_TIMESTAMPS != 0
    }
}

/// getsockopt(fd, IPPROTO_TCP, TCP_INFO) on a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut buf = [0u8; BUF];
    let mut len = BUF as libc::socklen_t;
    // SAFETY: `buf` is a live, writable buffer of `len` bytes for the whole call; the kernel
    // writes at most `len` bytes and stores the count it wrote in `len`. `fd` is a borrowed,
    // open descriptor (a non-TCP fd only makes the call fail with an errno).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (len as usize).min(BUF);
    TcpInfo::parse(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn short_layouts_leave_newer_fields_out() {
        // A 2.6-era struct (104 bytes) has no segs_out; a 4.6 one (160) has no bytes_sent.
        let mut raw = vec![0u8; 160];
        raw[12..16].copy_from_slice(&40_000u32.to_ne_bytes());
        raw[136..140].copy_from_slice(&7u32.to_ne_bytes());
        raw[156..160].copy_from_slice(&5u32.to_ne_bytes());
        let t = TcpInfo::parse(&raw).unwrap();
        assert_eq!(t.ato, 40_000);
        assert_eq!(t.segs_out, Some(7));
        assert_eq!(t.data_segs_out, Some(5));
        assert_eq!(t.bytes_sent, None);
        let t = TcpInfo::parse(&raw[..104]).unwrap();
        assert_eq!(t.segs_out, None);
        assert!(TcpInfo::parse(&raw[..50]).is_err());
    }

    #[test]
    fn reads_a_real_loopback_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let t = tcp_info(c.as_fd()).unwrap();
        assert_eq!(t.state, 1, "TCP_ESTABLISHED");
        assert!(t.len >= 160, "kernel returned {} bytes", t.len);
        // The client sent SYN and the final handshake ACK, no data.
        assert!(t.segs_out.unwrap() >= 2);
        assert_eq!(t.data_segs_out, Some(0));
        assert!(t.snd_mss > 0 && t.snd_cwnd >= 1);
    }
}
