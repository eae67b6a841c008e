//! The row's own packets: an AF_PACKET capture on the loopback of the row's network namespace
//! through a memory-mapped TPACKET_V3 ring (`sys::ring`, as `tcpstall watch` reads), filtered
//! in the kernel to the row's server port, read on a thread of its own one block at a time.
//! The reader decodes each frame (`wire::decode`) into a trace event with the client as
//! endpoint A and hands it, with the row's kernel records, to the one classifier as it goes
//! ([`rowstream::RowStream`]): nothing is kept per packet, so a row's memory does not grow
//! with its rounds (issue 25). With `--capture FILE` the frames are kept for the file and go
//! through the same stream at the row's end.
//!
//! What recording costs the row, per packet: on loopback the kernel runs the classic BPF filter
//! and copies the headers (at most [`SNAPLEN`] bytes) into the ring in the receive softirq; the
//! socket is left out of the transmit taps (PACKET_IGNORE_OUTGOING), so the outgoing copy of
//! each packet is never cloned. No system call and no wake-up per packet: the reader wakes when
//! a block is full or retired (`RETIRE_MS`), walks it in place and hands it back (kept frames go
//! into one growing buffer, no allocation per frame). The reader's own CPU time (decoding and
//! classifying included, about 0.3 us a packet in rr) and its
//! wake-ups are measured and reported with the row (`report::PacketCapture::reader_cpu_us`).
//! `cargo bench -p tcpstall-lab --bench rr` measures the whole cost end to end against bare C.
//!
//! The capture point is loopback: a packet is recorded once, as it arrives, and leaves and
//! arrives within microseconds, so both ends' views coincide.
//!
//! By job: `ring` (the loopback ring and its reader), `kernel` (the kernel evidence of a row and
//! the join of its records to the row's sides), `file` (`--capture FILE`), `rowstream` (the
//! packets and kernel records merged in time order into the classifier); here, what they
//! share: the frames, the reader thread, a link's tap and the decoding of a row's frames.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use trace::{Endpoint, Event, EventKind, Evidence, Instant};

mod file;
mod kernel;
mod ring;
pub mod rowstream;
pub use file::{CaptureFile, CaptureFileError};
pub use kernel::{
    kernel_events, kernel_events_by_client, kernel_side, KernelEvidence, KernelHandle, KernelOpenError, KernelRecords,
    KernelRow,
};
use ring::lo_header;
pub(crate) use ring::RowCapture;
use rowstream::RowStream;

/// Bytes kept per frame: Ethernet (14) + IPv6 (40) or IPv4 with options (60) + TCP with options
/// (60) fit; payload bytes are not needed (the original length is kept apart).
pub const SNAPLEN: u32 = 160;

/// The frames' link type: Ethernet, as `lo` frames them (ARPHRD_LOOPBACK with a zeroed 14-byte
/// Ethernet header, drivers/net/loopback.c). The cooked ring gives the network header on; the
/// reader puts loopback's header back in front (zero addresses, the EtherType from the IP
/// version), so the frames, their lengths and the `--capture` file are those of `tcpdump -i lo`.
pub const LINKTYPE: u32 = wire::linktype::ETHERNET;

/// The reader's longest sleep without a block: how soon it sees the row end (a wake-up
/// without a block costs one poll call).
const STOP_POLL_MS: u16 = 5;
/// How far a streamed row's events wait to be put in time order
/// ([`rowstream::RowStream`]'s margin): the reader pulls the kernel's records on each wake-up
/// (`kevidence::Reader::take` drains the BPF ring itself, so they are at most one wake-up old:
/// `STOP_POLL_MS`, or sooner with a block), and a packet is seen when its block retires
/// (`RETIRE_MS` after its first packet). Both come through the same thread, so a reader running
/// late delays both alike; what one source can lag the other by is a retire interval plus the
/// timer's slack. 100 ms is twenty times that (and ten times the kevidence thread's own 10 ms
/// drain), and holds about 100 ms of events (a few MB at loopback's rates), whatever the rounds.
pub(crate) const REORDER_MARGIN: Duration = Duration::from_millis(100);
/// Packets recorded elsewhere for the row: behind `--link` the forwarder's tap (the link
/// crate's `capture::Tap`, adapted by the caller). Raw IPv4 packets (LINKTYPE_IPV4).
pub trait PacketTap: Send + Sync {
    /// Start keeping packets (called before the row's client connects).
    fn arm(&self);
    /// Stop keeping; the packets kept, as (CLOCK_REALTIME ns, original length, the packet's
    /// first bytes: at least its IPv4 and TCP headers).
    fn take(&self) -> Vec<(u64, u32, Vec<u8>)>;
    /// The packets kept since the last call, keeping on (the row's reader classifies them as
    /// they come, so the tap holds only a few milliseconds of them).
    fn drain(&self) -> Vec<(u64, u32, Vec<u8>)>;
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

/// Why a row's packet record has nothing to give.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("the packet capture was already stopped")]
    Stopped,
    #[error("reading the packet capture: {0}")]
    Read(std::io::Error),
    #[error("the packet capture thread panicked")]
    Panicked,
}

/// One frame of a [`Frames`] buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// CLOCK_REALTIME ns when the packet entered the receive path.
    pub ts_ns: u64,
    /// Length on the wire (before the snap length cut it).
    pub orig_len: u32,
    /// The packet's first bytes.
    pub data: &'a [u8],
}

/// Frames packed into one byte buffer: 16 bytes of bookkeeping per frame besides its captured
/// bytes, and no allocation per frame.
#[derive(Debug, Default, Clone)]
pub struct Frames {
    bytes: Vec<u8>,
    /// (ts_ns, orig_len, captured length), in order; offsets are cumulative.
    meta: Vec<(u64, u32, u32)>,
}

impl Frames {
    pub fn with_capacity(frames: usize) -> Frames {
        Frames { bytes: Vec::with_capacity(frames * 64), meta: Vec::with_capacity(frames) }
    }
    pub fn push(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) {
        self.push_parts(ts_ns, orig_len, &[], data);
    }
    /// One frame of `head` then `data` (`orig_len` counts both).
    pub fn push_parts(&mut self, ts_ns: u64, orig_len: u32, head: &[u8], data: &[u8]) {
        self.bytes.extend_from_slice(head);
        self.bytes.extend_from_slice(data);
        let len = (head.len() + data.len()) as u32;
        self.meta.push((ts_ns, orig_len.max(len), len));
    }
    pub fn len(&self) -> usize {
        self.meta.len()
    }
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = FrameRef<'_>> + '_ {
        let mut off = 0usize;
        self.meta.iter().map(move |&(ts_ns, orig_len, len)| {
            let data = &self.bytes[off..off + len as usize];
            off += len as usize;
            FrameRef { ts_ns, orig_len, data }
        })
    }
}

/// The capture's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets that passed the filter (counted by the kernel, drops included).
    pub packets: u64,
    /// Of those, dropped because no block of the ring was free.
    pub drops: u64,
}

/// What the capture reader does with the frames.
pub(crate) enum Record {
    /// Keep them all (`--capture FILE`: they are written at the row's end, numbered from the
    /// file's count then): classified at the row's end.
    Frames,
    /// Classify them as they come (the default: nothing kept per packet), pulling the row's
    /// kernel records (`kernel`, when on) on every wake-up of the reader.
    Stream { stream: Box<RowStream>, kernel: Option<Arc<kevidence::Reader>> },
}

/// The reader's side of a [`Record`].
struct Sink {
    frames: Frames,
    stream: Option<RowStream>,
    kernel: Option<Arc<kevidence::Reader>>,
    /// Loopback's header and a frame's bytes, for decoding as the frame will be written.
    buf: Vec<u8>,
}

impl Sink {
    fn new(record: Record) -> Sink {
        let buf = Vec::with_capacity(SNAPLEN as usize + 64);
        match record {
            Record::Frames => Sink { frames: Frames::with_capacity(4096), stream: None, kernel: None, buf },
            Record::Stream { stream, kernel } => Sink { frames: Frames::default(), stream: Some(*stream), kernel, buf },
        }
    }

    fn frame(&mut self, f: sys::ring::RingFrame<'_>) {
        if f.pkttype == sys::packet::PACKET_OUTGOING {
            return;
        }
        match self.stream.as_mut() {
            None => self.frames.push_parts(f.ts_ns, f.orig_len + 14, &lo_header(f.data), f.data),
            Some(s) => {
                self.buf.clear();
                self.buf.extend_from_slice(&lo_header(f.data));
                self.buf.extend_from_slice(f.data);
                s.frame(f.ts_ns, (f.orig_len + 14).max(self.buf.len() as u32), &self.buf);
            }
        }
    }

    /// A frame already in the row's link type (a link's tap: raw IPv4).
    fn raw(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) {
        match self.stream.as_mut() {
            None => self.frames.push(ts_ns, orig_len, data),
            Some(s) => s.frame(ts_ns, orig_len.max(data.len() as u32), data),
        }
    }

    /// The kernel's records so far into the stream, and what is old enough on to the classifier.
    fn advance(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            if let Some(k) = &self.kernel {
                s.records(k.take());
            }
            s.advance();
        }
    }
}

/// Where a row's reader threads run (the capture's and the kernel evidence's) when the timed
/// threads are pinned (`--pin C,S`): the CPUs this process may use other than C and S, so that
/// a reader's wake-ups never wait in line with, or preempt, a timed thread's; when no other CPU
/// is left (a two-CPU host pinned `0,1`), all of the process's CPUs, so that the scheduler may
/// put a reader beside either side (a reader started from a pinned thread would otherwise stay
/// on that thread's CPU). `None` (where they start) when nothing is pinned. The process's CPUs
/// are its main thread's (sched_getaffinity(2) of the thread-group id), not the calling
/// thread's, which is pinned already.
pub(crate) fn readers_cpus(pin: Option<(usize, usize)>) -> Option<nix::sched::CpuSet> {
    let (cpus, _) = readers_choice(pin?)?;
    let mut set = nix::sched::CpuSet::new();
    for cpu in cpus {
        set.set(cpu).ok()?;
    }
    Some(set)
}

/// [`readers_set`] over the process's CPUs (None when they cannot be read).
fn readers_choice(pin: (usize, usize)) -> Option<(Vec<usize>, bool)> {
    let allowed = nix::sched::sched_getaffinity(nix::unistd::getpid()).ok()?;
    Some(readers_set(&cpu_list(&allowed), pin))
}

/// The header's line for a pinned run: where the timed threads and the readers run, and what
/// sharing costs when the readers have no CPU of their own.
pub(crate) fn pin_note((c, s): (usize, usize)) -> String {
    match readers_choice((c, s)) {
        Some((cpus, true)) => {
            let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
            format!(
                "pinned: client on CPU {c}, server on CPU {s}; the readers (capture, kernel evidence) on CPU {}",
                list.join(",")
            )
        }
        _ => format!(
            "pinned: client on CPU {c}, server on CPU {s}; the readers (capture, kernel evidence) share them (no other CPU left)"
        ),
    }
}

/// The CPUs in `set`, in order.
fn cpu_list(set: &nix::sched::CpuSet) -> Vec<usize> {
    (0..nix::sched::CpuSet::count()).filter(|&i| set.is_set(i).unwrap_or(false)).collect()
}

/// [`readers_cpus`]'s choice among the process's CPUs: those other than the pinned two (and
/// true: the readers have CPUs of their own), or all of them when none is left (false).
fn readers_set(allowed: &[usize], (c, s): (usize, usize)) -> (Vec<usize>, bool) {
    let others: Vec<usize> = allowed.iter().copied().filter(|&i| i != c && i != s).collect();
    if others.is_empty() {
        (allowed.to_vec(), false)
    } else {
        (others, true)
    }
}

/// A row's reader thread (the loopback ring's or a link tap's), stopped by a flag; a row that
/// failed still stops it (on drop).
struct Reader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<Captured>>>,
}

impl Reader {
    /// Run `body` on a thread named `name` until the flag it is given is set; what it recorded
    /// comes back with the thread's CPU time over `body` (`Captured::reader_cpu_ns`).
    /// On `cpus` when given ([`readers_cpus`]).
    fn spawn(
        name: &str,
        cpus: Option<nix::sched::CpuSet>,
        body: impl FnOnce(&AtomicBool) -> io::Result<Captured> + Send + 'static,
    ) -> io::Result<Reader> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            let me = nix::unistd::Pid::from_raw(0);
            // A set the kernel refuses leaves the reader where it was (it still reads), and the
            // row says where it ran: the set is read back.
            let reader_cpus = cpus.map(|set| {
                let _ = nix::sched::sched_setaffinity(me, &set);
                nix::sched::sched_getaffinity(me).map_or_else(|_| Vec::new(), |s| cpu_list(&s))
            });
            let cpu0 = sys::host::thread_cpu_ns();
            let c = body(&flag)?;
            let reader_cpu_ns = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
            Ok(Captured { reader_cpu_ns, reader_cpus, ..c })
        })?;
        Ok(Reader { stop, thread: Some(thread) })
    }

    /// Stop it (its body ends with a last drain) and return what it recorded.
    fn finish(mut self) -> Result<Captured, RecordError> {
        self.stop.store(true, Ordering::Release);
        let Some(t) = self.thread.take() else { return Err(RecordError::Stopped) };
        match t.join() {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(RecordError::Read(e)),
            Err(_) => Err(RecordError::Panicked),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a capture recorded, and what recording cost in user space.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// The frames, when kept ([`Record::Frames`]; empty when streamed).
    pub frames: Frames,
    /// The row's stream, fed as the frames came ([`Record::Stream`]): kernel records still to
    /// come at the row's end, then [`RowStream::finish`].
    pub stream: Option<RowStream>,
    pub stats: Stats,
    /// CPU time of the reader thread from the ring's opening (or the tap's arming) to its last
    /// drain (ns).
    pub reader_cpu_ns: Option<u64>,
    /// Times the reader woke up and found blocks to read.
    pub reader_wakeups: u64,
    /// The CPUs the reader ran on, read back, when it was kept off pinned CPUs
    /// ([`readers_cpus`]); empty if they could not be read back.
    pub reader_cpus: Option<Vec<usize>>,
}

/// Behind a link: the tap's packets drained every `STOP_POLL_MS` into the row's [`Record`]
/// (streamed: classified as they come, so neither the tap nor the row keeps them), with the
/// kernel's records pulled on the same wake-ups.
pub(crate) struct TapReader(Reader);

impl TapReader {
    /// Arm `tap` and start draining it into `record`.
    pub(crate) fn start(tap: TapHandle, record: Record, cpus: Option<nix::sched::CpuSet>) -> io::Result<TapReader> {
        tap.0.arm();
        let reader = Reader::spawn("tcpstall-lab-tap", cpus, move |flag| {
            let mut sink = Sink::new(record);
            let mut wakeups = 0u64;
            let mut pull = |sink: &mut Sink, recs: Vec<(u64, u32, Vec<u8>)>| {
                wakeups += u64::from(!recs.is_empty());
                for (ts_ns, orig_len, data) in &recs {
                    sink.raw(*ts_ns, *orig_len, data);
                }
                sink.advance();
            };
            while !flag.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(u64::from(STOP_POLL_MS)));
                pull(&mut sink, tap.0.drain());
            }
            // The tap's records pass a channel to the link's writer thread first.
            std::thread::sleep(TAP_FINAL_WAIT);
            pull(&mut sink, tap.0.take());
            let (frames, stream) = (sink.frames, sink.stream);
            Ok(Captured {
                frames,
                stream,
                stats: Stats::default(),
                reader_cpu_ns: None,
                reader_wakeups: wakeups,
                reader_cpus: None,
            })
        })?;
        Ok(TapReader(reader))
    }

    /// Stop after one last drain and return what was recorded.
    pub(crate) fn finish(self) -> Result<Captured, RecordError> {
        self.0.finish()
    }
}

/// How long a tap's last drain waits for records still in the link writer's channel.
const TAP_FINAL_WAIT: Duration = Duration::from_millis(20);

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
    frames: &Frames,
    linktype: u32,
    server_port: u16,
    origin_ns: u64,
    frame_base: u64,
) -> (Vec<Event>, Skipped) {
    let mut out = Vec::with_capacity(frames.len());
    let mut skipped = Skipped::default();
    for (i, f) in frames.iter().enumerate() {
        if let Some((segment, from)) = row_segment(linktype, f.data, f.orig_len, server_port, &mut skipped) {
            out.push(Event {
                t: Instant(f.ts_ns.saturating_sub(origin_ns)),
                from,
                kind: EventKind::Segment(segment),
                evidence: Evidence::Frame(frame_base + i as u64 + 1),
            });
        }
    }
    (out, skipped)
}

/// One frame decoded for the row: its segment and side (A is the client, the side whose port
/// is not `server_port`), or None, counted in `skipped` (not TCP, malformed, another
/// connection).
pub(crate) fn row_segment(
    linktype: u32,
    data: &[u8],
    orig_len: u32,
    server_port: u16,
    skipped: &mut Skipped,
) -> Option<(trace::Segment, Endpoint)> {
    match wire::decode(linktype, data, orig_len) {
        Ok(p) if p.src.port() != server_port && p.dst.port() != server_port => skipped.other_port += 1,
        Ok(p) => return Some((p.segment, if p.src.port() == server_port { Endpoint::B } else { Endpoint::A })),
        Err(wire::Skip::Malformed) => skipped.malformed += 1,
        Err(_) => skipped.not_tcp += 1,
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 + TCP packet (20-byte headers, from the network header as the cooked ring gives
    /// it) from `sport` to `dport`.
    fn packet(sport: u16, dport: u16, flags: u8, payload: u16) -> Vec<u8> {
        let mut d = vec![0x45, 0];
        d.extend_from_slice(&(40 + payload).to_be_bytes());
        d.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        d.extend_from_slice(&sport.to_be_bytes());
        d.extend_from_slice(&dport.to_be_bytes());
        d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        d
    }

    #[test]
    fn readers_keep_off_the_pinned_cpus_when_others_are_left() {
        assert_eq!(readers_set(&[0, 1, 2, 3], (0, 1)), (vec![2, 3], true));
        assert_eq!(readers_set(&[0, 1], (0, 0)), (vec![1], true));
        // Nothing else left: anywhere the process may run, not the spawning thread's CPU.
        assert_eq!(readers_set(&[0, 1], (0, 1)), (vec![0, 1], false));
        assert_eq!(readers_set(&[3], (3, 3)), (vec![3], false));
    }

    #[test]
    fn frames_become_segments_with_the_client_as_a() {
        let mut frames = Frames::default();
        for (ts, sport, dport, flags, payload) in
            [(1_000, 40000, 5001, 0x02, 0), (2_000, 5001, 40000, 0x12, 0), (3_000, 40000, 5001, 0x18, 100)]
        {
            let p = packet(sport, dport, flags, payload);
            frames.push_parts(ts, 54 + u32::from(payload), &lo_header(&p), &p);
        }
        // An IPv4 packet cut inside its IP header, and a UDP packet.
        let p = packet(1, 5001, 0x10, 0);
        frames.push_parts(4_000, 54, &lo_header(&p), &p[..10]);
        let mut udp = packet(1, 5001, 0, 0);
        udp[9] = 17;
        frames.push_parts(5_000, 54, &lo_header(&udp), &udp);
        assert_eq!(frames.len(), 5);
        let (ev, skipped) = events(&frames, LINKTYPE, 5001, 1_000, 0);
        assert_eq!(ev.len(), 3);
        assert_eq!(skipped, Skipped { not_tcp: 1, malformed: 1, other_port: 0 });
        assert_eq!((ev[0].from, ev[1].from, ev[2].from), (Endpoint::A, Endpoint::B, Endpoint::A));
        assert_eq!((ev[0].t, ev[2].t), (Instant(0), Instant(2_000)));
        assert_eq!(ev[2].evidence, Evidence::Frame(3));
        let EventKind::Segment(s) = ev[2].kind else { panic!("not a segment") };
        assert_eq!((s.len, s.wire_len), (100, 154));
        // The frames come back as they were pushed, loopback's header in front.
        let back: Vec<_> = frames.iter().map(|f| (f.ts_ns, f.orig_len, f.data.len(), f.data[12])).collect();
        assert_eq!(back[2], (3_000, 154, 54, 0x08));
        assert_eq!(back[3], (4_000, 54, 24, 0x08));
        assert_eq!(lo_header(&[0x60])[12..], [0x86, 0xdd]);
    }
}
