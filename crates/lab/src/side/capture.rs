//! Each host's own packets of a remote row: an AF_PACKET capture on every interface of the
//! calling thread's namespace (or `lo` when the peer is on loopback), filtered in the kernel to
//! the data connection's client port (unique to the row; the server's port is shared with the
//! control connection). Started before the connection's SYN, so the handshake is in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sys::packet::{Frame, PacketSocket, Stats};

use crate::capture::SNAPLEN;

/// What the capture thread hands back: the frames and the socket's statistics.
type Reader = JoinHandle<std::io::Result<(Vec<Frame>, Stats)>>;

/// Why a host capture did not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("lo: {0}")]
    Loopback(nix::Error),
    #[error("AF_PACKET needs CAP_NET_RAW (run as root)")]
    NotPermitted,
    #[error("AF_PACKET capture: {0}")]
    Open(std::io::Error),
    #[error("capture thread: {0}")]
    Thread(std::io::Error),
    #[error("the capture was already stopped")]
    Stopped,
    #[error("reading the capture: {0}")]
    Read(std::io::Error),
    #[error("the capture thread panicked")]
    Panicked,
    /// It ran, but none of its frames are the connection's TCP packets.
    #[error("this host's capture saw none of the connection's packets")]
    SawNone,
    /// Not started on purpose, with the caller's reason ("packet capture off (--no-capture)").
    #[error("{0}")]
    Off(String),
}

impl From<&str> for CaptureError {
    /// A capture not started, and why.
    fn from(why: &str) -> Self {
        CaptureError::Off(why.to_string())
    }
}

/// A running capture.
pub struct HostCapture {
    stop: Arc<AtomicBool>,
    thread: Option<Reader>,
    /// CLOCK_REALTIME (ns) when it started: the trace's time 0.
    pub origin_ns: u64,
    /// Where the packets are seen, for the report.
    pub point: String,
}

impl Drop for HostCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Frames as they travel between hosts (the bytes in hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRecord {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub hex: String,
}

impl From<&Frame> for FrameRecord {
    fn from(f: &Frame) -> Self {
        FrameRecord { ts_ns: f.ts_ns, orig_len: f.orig_len, hex: f.data.iter().map(|b| format!("{b:02x}")).collect() }
    }
}

impl FrameRecord {
    /// The frame, or None when its hex is not bytes (a peer's mistake: the frame is skipped).
    pub fn frame(&self) -> Option<Frame> {
        let s = self.hex.as_bytes();
        if !s.len().is_multiple_of(2) || s.len() > 2 * SNAPLEN as usize {
            return None;
        }
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let data = s.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect::<Option<Vec<u8>>>()?;
        Some(Frame { ts_ns: self.ts_ns, orig_len: self.orig_len, data })
    }
}

impl HostCapture {
    /// Start capturing TCP to or from `port`; `loopback`: the peer is on this host's loopback
    /// (then `lo` only, its outgoing copies skipped). Fails without CAP_NET_RAW.
    pub fn start(port: u16, loopback: bool) -> Result<HostCapture, CaptureError> {
        // On loopback: `lo` with its Ethernet-style header, the outgoing copy of each packet
        // skipped (every packet crosses it twice). Else every interface, cooked (raw IP), so a
        // TUN device (the emulated link, a VPN) is read as well as Ethernet.
        let opened = if loopback {
            let lo = nix::net::if_::if_nametoindex("lo").map_err(CaptureError::Loopback)?;
            PacketSocket::open(lo, true, &[port], SNAPLEN)
        } else {
            PacketSocket::open_cooked(0, &[port], SNAPLEN)
        };
        let mut sock = opened.map_err(|e| {
            if e.raw_os_error() == Some(libc::EPERM) {
                CaptureError::NotPermitted
            } else {
                CaptureError::Open(e)
            }
        })?;
        let origin_ns = sys::clock::realtime_ns();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tcpstall-remote-capture".into())
            .spawn(move || {
                let mut frames = Vec::with_capacity(4096);
                while !flag.load(Ordering::Acquire) {
                    if sock.read_available(&mut frames)? == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                sock.read_available(&mut frames)?;
                let stats = sock.statistics()?;
                Ok((frames, stats))
            })
            .map_err(CaptureError::Thread)?;
        let point = if loopback {
            "this host's loopback (AF_PACKET)".to_string()
        } else {
            "this host's interfaces (AF_PACKET, packets as sent and as received)".to_string()
        };
        Ok(HostCapture { stop, thread: Some(thread), origin_ns, point })
    }

    /// Stop (after a short grace for the last ACKs) and return the frames and the drop count.
    pub fn finish(mut self) -> Result<(Vec<Frame>, u64), CaptureError> {
        std::thread::sleep(Duration::from_millis(5));
        self.stop.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else { return Err(CaptureError::Stopped) };
        match t.join() {
            Ok(Ok((f, s))) => Ok((f, s.drops)),
            Ok(Err(e)) => Err(CaptureError::Read(e)),
            Err(_) => Err(CaptureError::Panicked),
        }
    }
}
