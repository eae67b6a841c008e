//! The row's own packets: an AF_PACKET capture on the loopback of the row's network namespace
//! (`sys::packet`), filtered in the kernel to the row's server port, read on a thread of its
//! own in batches; then decoded (`wire::decode`) into trace events with the client as endpoint
//! A and analysed by the one classifier (`analyze::analyze_events`).
//!
//! The capture point is loopback: a packet is recorded once, as it arrives (the outgoing copy
//! is skipped, see `sys::bpf`), and leaves and arrives within microseconds, so both ends'
//! views coincide.

use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sys::packet::{Frame, PacketSocket, Stats};
use trace::{Endpoint, Event, EventKind, Evidence, Instant};
use wire::write::{Interface, PcapNgWriter};

/// Bytes kept per frame: Ethernet (14) + IPv6 (40) or IPv4 with options (60) + TCP with options
/// (60) fit; payload bytes are not needed (the original length is kept apart).
pub const SNAPLEN: u32 = 160;

/// How long the reader sleeps when the queue is empty. The kernel stamps each packet when it
/// arrives (not when read), so batching moves no time; the socket's queue (64 MB asked for)
/// holds far more than this many milliseconds of loopback traffic.
const BATCH_SLEEP: Duration = Duration::from_millis(2);

/// Packets recorded elsewhere for the row: behind `--link` the forwarder's tap (the link
/// crate's `capture::Tap`, adapted by the caller). Raw IPv4 packets (LINKTYPE_IPV4).
pub trait PacketTap: Send + Sync {
    /// Start keeping packets (called before the row's client connects).
    fn arm(&self);
    /// Stop keeping; the packets kept, as (CLOCK_REALTIME ns, original length, the packet's
    /// first bytes: at least its IPv4 and TCP headers).
    fn take(&self) -> Vec<(u64, u32, Vec<u8>)>;
    /// Where the packets are seen, for the report.
    fn point(&self) -> String;
}

/// A shared [`PacketTap`] in `LabOptions`.
#[derive(Clone)]
pub struct TapHandle(pub Arc<dyn PacketTap>);

impl std::fmt::Debug for TapHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TapHandle({})", self.0.point())
    }
}

impl PartialEq for TapHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for TapHandle {}

/// Kernel evidence for the lab's rows (`LabOptions::kernel`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KernelEvidence {
    /// Not asked for.
    #[default]
    Off,
    /// Asked for, not possible here: why, in one line (each row's notes carry it, so the run
    /// says it once).
    Unavailable(String),
    /// The source, shared by the rows (they run one at a time).
    On(KernelHandle),
}

/// A shared kernel-evidence source and its reader thread, and whether its rows record reads.
#[derive(Clone)]
pub struct KernelHandle(pub Arc<kevidence::Reader>, bool);

impl KernelHandle {
    /// Load the programs and attach them (filtered to no port until a row starts), without
    /// reads (`kevidence::Filter::reads`: no rule uses them).
    pub fn open() -> Result<KernelHandle, String> {
        Self::open_with_reads(false)
    }

    /// Like [`KernelHandle::open`]; with `reads`, the rows also record the application's reads.
    pub fn open_with_reads(reads: bool) -> Result<KernelHandle, String> {
        // Port 0 matches no TCP socket of interest until a row sets its own.
        let src = kevidence::Source::open(&kevidence::Filter { ports: vec![0], netns: None, reads })
            .map_err(|e| format!("{e}; the rows run without it"))?;
        let r = kevidence::Reader::spawn(src).map_err(|e| format!("no kernel evidence: reader thread: {e}"))?;
        Ok(KernelHandle(Arc::new(r), reads))
    }
}

impl std::fmt::Debug for KernelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelHandle({})", self.0.status())
    }
}

impl PartialEq for KernelHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for KernelHandle {}

/// A row's kernel evidence while it runs: the filter is the row's server port (and its
/// namespace when private), set before the client connects.
pub(crate) struct KernelRow {
    handle: KernelHandle,
    clock: kevidence::ClockMap,
    /// The reader's counts when the row started (they count from the source's load).
    counts0: kevidence::ReaderCounts,
}

/// What the kernel reported for a row.
#[derive(Debug, Default)]
pub(crate) struct KernelRecords {
    pub records: Vec<kevidence::Record>,
    pub clock: Option<kevidence::ClockMap>,
    pub counts: kevidence::ReaderCounts,
    pub status: String,
}

impl KernelRow {
    /// Start: the row's port, in the namespace with inode `netns` if given.
    pub fn start(handle: &KernelHandle, port: u16, netns: Option<u32>) -> Result<KernelRow, String> {
        handle.0.restart(&kevidence::Filter { ports: vec![port], netns, reads: handle.1 })?;
        let counts0 = handle.0.counts();
        Ok(KernelRow { handle: handle.clone(), clock: kevidence::ClockMap::sample(), counts0 })
    }

    /// Stop: the records so far (the filter stays until the next row sets its own).
    pub fn finish(self) -> KernelRecords {
        // Records of the row's last packets reach the ring within microseconds.
        std::thread::sleep(Duration::from_millis(5));
        let records = self.handle.0.take();
        let (a, b) = (self.handle.0.counts(), self.counts0);
        let counts = kevidence::ReaderCounts {
            kernel: kevidence::Counts { lost: a.kernel.lost.saturating_sub(b.kernel.lost) },
            unparsed: a.unparsed.saturating_sub(b.unparsed),
            overflow: a.overflow.saturating_sub(b.overflow),
            reader_cpu_ns: a.reader_cpu_ns.saturating_sub(b.reader_cpu_ns),
        };
        KernelRecords { records, clock: Some(self.clock), counts, status: self.handle.0.status() }
    }
}

/// The kernel's records of the row's connection as trace events (`kevidence::to_events`): the
/// client (A) is the socket whose remote port is the server's, the server (B) the one whose
/// local port is; times on the packets' clock (CLOCK_REALTIME) minus `origin_ns`.
pub fn kernel_events(
    recs: &[kevidence::Record],
    clock: &kevidence::ClockMap,
    server_port: u16,
    origin_ns: u64,
) -> Vec<Event> {
    kevidence::to_events(
        recs,
        clock,
        origin_ns,
        |r| {
            if r.local.port() == server_port && r.remote.port() != server_port {
                Some(Endpoint::B)
            } else if r.remote.port() == server_port {
                Some(Endpoint::A)
            } else {
                None
            }
        },
        1,
    )
}

/// A running capture (the reader thread).
pub(crate) struct RowCapture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<Captured>>>,
}

impl Drop for RowCapture {
    /// A row that failed still stops its reader.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a capture recorded.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub frames: Vec<Frame>,
    pub stats: Stats,
}

impl RowCapture {
    /// Open the capture on `lo` of the calling thread's namespace, for TCP on `port`, and start
    /// reading. Fails with EPERM without CAP_NET_RAW.
    pub fn start(port: u16) -> io::Result<RowCapture> {
        let mut sock = PacketSocket::loopback(&[port], SNAPLEN)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("tcpstall-lab-capture".into()).spawn(move || {
            let mut frames = Vec::with_capacity(4096);
            while !flag.load(Ordering::Acquire) {
                if sock.read_available(&mut frames)? == 0 {
                    std::thread::sleep(BATCH_SLEEP);
                }
            }
            sock.read_available(&mut frames)?;
            let stats = sock.statistics()?;
            Ok(Captured { frames, stats })
        })?;
        Ok(RowCapture { stop, thread: Some(thread) })
    }

    /// Stop reading (after one last drain) and return what was captured.
    pub fn finish(mut self) -> Result<Captured, String> {
        // Packets already on loopback's backlog are in the socket queue within microseconds of
        // the last send: a short grace keeps the final ACKs.
        std::thread::sleep(Duration::from_millis(5));
        self.stop.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else { return Err("the packet capture was already stopped".into()) };
        match t.join() {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(format!("reading the packet capture: {e}")),
            Err(_) => Err("the packet capture thread panicked".into()),
        }
    }
}

/// CLOCK_REALTIME now, in ns: the clock of the kernel's packet stamps (SO_TIMESTAMPNS).
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Frames that are not a decodable TCP packet of the row's connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    pub not_tcp: u64,
    pub malformed: u64,
    /// TCP packets of another connection (a tap sees everything the link carries).
    pub other_port: u64,
}

/// Decode frames (`linktype`: Ethernet on loopback, IPv4 from the link's tap) into the trace of one connection: endpoint A is
/// the client (the side whose port is not `server_port`), times are ns since `origin_ns`
/// (CLOCK_REALTIME, the same clock as the frames' stamps; an earlier frame is clamped to 0),
/// evidence is the frame's 1-based number in `frames` plus `frame_base` (the frames before
/// them in the file they are written to).
pub fn events(
    frames: &[Frame],
    linktype: u32,
    server_port: u16,
    origin_ns: u64,
    frame_base: u64,
) -> (Vec<Event>, Skipped) {
    let mut out = Vec::with_capacity(frames.len());
    let mut skipped = Skipped::default();
    for (i, f) in frames.iter().enumerate() {
        match wire::decode(linktype, &f.data, f.orig_len) {
            Ok(p) if p.src.port() != server_port && p.dst.port() != server_port => skipped.other_port += 1,
            Ok(p) => out.push(Event {
                t: Instant(f.ts_ns.saturating_sub(origin_ns)),
                from: if p.src.port() == server_port { Endpoint::B } else { Endpoint::A },
                kind: EventKind::Segment(p.segment),
                evidence: Evidence::Frame(frame_base + i as u64 + 1),
            }),
            Err(wire::Skip::Malformed) => skipped.malformed += 1,
            Err(_) => skipped.not_tcp += 1,
        }
    }
    (out, skipped)
}

/// `lab --capture FILE` without `--link`: every row's frames, one pcapng interface per row (each
/// row has a loopback of its own). Shared by the rows; written as each row ends.
#[derive(Clone)]
pub struct CaptureFile {
    inner: Arc<Mutex<FileInner>>,
}

struct FileInner {
    path: PathBuf,
    w: Option<PcapNgWriter<BufWriter<std::fs::File>>>,
    interfaces: u32,
    error: Option<String>,
}

impl std::fmt::Debug for CaptureFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        write!(f, "CaptureFile({})", g.path.display())
    }
}

impl PartialEq for CaptureFile {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for CaptureFile {}

impl CaptureFile {
    /// Create (truncate) `path` and write the section header: fails at once, before any row
    /// runs, when the file cannot be written.
    pub fn create(path: &Path) -> io::Result<CaptureFile> {
        let f = std::fs::File::create(path)?;
        let w = PcapNgWriter::new(BufWriter::with_capacity(1 << 16, f), &[])?;
        Ok(CaptureFile {
            inner: Arc::new(Mutex::new(FileInner { path: path.to_path_buf(), w: Some(w), interfaces: 0, error: None })),
        })
    }

    /// Append one row's frames on an interface of their own; returns the number of frames
    /// before them in the file.
    pub(crate) fn write_row(&self, label: &str, frames: &[Frame]) -> u64 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        let Some(w) = g.w.as_mut() else { return 0 };
        let base = w.packets();
        if g.error.is_some() {
            return base;
        }
        let iface = Interface {
            name: "lo".into(),
            description: format!("tcpstall lab row '{label}': loopback of its network namespace, arriving copies"),
            linktype: wire::linktype::ETHERNET,
            snaplen: SNAPLEN,
        };
        let r = w.add_interface(&iface).and_then(|id| {
            for f in frames {
                w.packet(id, f.ts_ns, &f.data, f.orig_len)?;
            }
            w.flush()
        });
        g.interfaces += 1;
        if let Err(e) = r {
            g.error = Some(format!("writing {}: {e}", g.path.display()));
        }
        base
    }

    /// Flush and close; the number of packets written, or the first write error.
    pub fn finish(&self) -> Result<u64, String> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let n = g.w.as_ref().map_or(0, |w| w.packets());
        if let Some(mut w) = g.w.take() {
            if let Err(e) = w.flush() {
                let msg = format!("writing {}: {e}", g.path.display());
                g.error.get_or_insert(msg);
            }
        }
        match g.error.clone() {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).path.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP frame (20-byte headers) from `sport` to `dport`.
    fn frame(ts_ns: u64, sport: u16, dport: u16, flags: u8, payload: u16) -> Frame {
        let mut d = vec![0u8; 12];
        d.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        d.extend_from_slice(&(40 + payload).to_be_bytes());
        d.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        d.extend_from_slice(&sport.to_be_bytes());
        d.extend_from_slice(&dport.to_be_bytes());
        d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        Frame { ts_ns, orig_len: d.len() as u32 + u32::from(payload), data: d }
    }

    #[test]
    fn frames_become_segments_with_the_client_as_a() {
        let frames = [
            frame(1_000, 40000, 5001, 0x02, 0),
            frame(2_000, 5001, 40000, 0x12, 0),
            frame(3_000, 40000, 5001, 0x18, 100),
            // An IPv4 frame cut inside its IP header, and an ARP frame.
            Frame { ts_ns: 4_000, orig_len: 60, data: frame(4_000, 1, 5001, 0x10, 0).data[..20].to_vec() },
            Frame { ts_ns: 5_000, orig_len: 42, data: [&[0u8; 12][..], &[0x08, 0x06], &[0; 28]].concat() },
        ];
        let (ev, skipped) = events(&frames, wire::linktype::ETHERNET, 5001, 1_000, 0);
        assert_eq!(ev.len(), 3);
        assert_eq!(skipped, Skipped { not_tcp: 1, malformed: 1, other_port: 0 });
        assert_eq!((ev[0].from, ev[1].from, ev[2].from), (Endpoint::A, Endpoint::B, Endpoint::A));
        assert_eq!((ev[0].t, ev[2].t), (Instant(0), Instant(2_000)));
        assert_eq!(ev[2].evidence, Evidence::Frame(3));
        let EventKind::Segment(s) = ev[2].kind else { panic!("not a segment") };
        assert_eq!((s.len, s.wire_len), (100, 154));
    }
}
