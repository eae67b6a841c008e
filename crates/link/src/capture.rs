//! `--capture FILE.pcapng`: every packet the forwarder carries, as seen at each end of the link.
//!
//! The file has one Interface Description Block per side (0 = client, 1 = server), linktype
//! IPV4 (228: IPv4 without a link header, what a TUN device with IFF_NO_PI carries here; the
//! namespaces have IPv6 disabled; LINKTYPE_RAW, 101, would also allow IPv6, but libpcap
//! refuses a second RAW interface in one section, "an interface has a type 101 different from
//! the type of the first interface", as it compares the first one's DLT with the next one's
//! LINKTYPE) and
//! `if_tsresol = 9` (nanoseconds; pcapng spec, draft-ietf-opsawg-pcapng section 4.2). A packet
//! appears on the side it entered the link when the forwarder read it, and on the other side
//! when the forwarder delivered it; a dropped packet appears only where it entered. So a
//! capture reads like tcpdump running at both hosts at once, and the time between a packet's
//! two records is the delay the link applied.
//!
//! Writing happens on its own thread, fed by a channel, so the forwarder never waits on disk.
//! The two forwarder threads each send their records in time order, but a thread descheduled
//! between stamping a packet and sending its record delivers it late (19 ms seen on 2 loaded
//! cores), which a reader of the file would see as time going back (`explain`: "timestamps went
//! back"); the writer holds records for [`REORDER_NS`] and writes them in timestamp order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use wire::write::{Interface, PcapNgWriter};

use crate::LinkError;

/// How long a record waits for an earlier-stamped one from the other forwarder thread before it
/// is written (ns of capture time); also written when the channel is idle for 50 ms or the
/// capture ends, and when more than [`REORDER_BYTES`] are held.
pub const REORDER_NS: u64 = 100_000_000;
/// At most this many packet bytes wait for reordering (the oldest are written first beyond it).
pub const REORDER_BYTES: usize = 32 << 20;

/// Interface index of the client side in the capture.
pub const IFACE_CLIENT: u32 = 0;
/// Interface index of the server side.
pub const IFACE_SERVER: u32 = 1;

/// One packet to record.
#[derive(Debug)]
pub struct Record {
    pub iface: u32,
    /// CLOCK_MONOTONIC nanoseconds; converted to wall-clock time when written.
    pub mono_ns: u64,
    pub data: Vec<u8>,
}

/// The sending half, cloned into each forwarder thread.
pub type CaptureTx = Sender<Record>;

/// A running capture writer.
pub struct Capture {
    tx: Option<CaptureTx>,
    thread: Option<JoinHandle<Result<u64, std::io::Error>>>,
    path: Option<PathBuf>,
    tap: Tap,
}

/// The server side's records, for a consumer that analyses them (the lab's row trace): what
/// tcpdump on the server's TUN device would see (its own packets as they enter the link, the
/// client's as the link delivers them). Armed before a row connects, taken after it ends.
#[derive(Clone, Default)]
pub struct Tap(Arc<Mutex<Option<Vec<TapRecord>>>>);

/// A packet of the tap: (CLOCK_REALTIME ns, length, its first [`TAP_SNAPLEN`] bytes).
pub type TapRecord = (u64, u32, Vec<u8>);

/// Bytes a tap keeps per packet: IPv4 with options (60) + TCP with options (60); the payload is
/// not needed and a long stream would otherwise keep every byte it carried.
pub const TAP_SNAPLEN: usize = 120;

impl Tap {
    /// Start keeping the server side's packets (dropping any kept before).
    pub fn arm(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }
    /// Stop keeping; the packets kept (IPv4 packets, headers only). Records still in
    /// the writer's channel are not in it yet: wait a few milliseconds after the last packet.
    pub fn take(&self) -> Vec<TapRecord> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default()
    }
    /// The packets kept so far, keeping on (a reader that classifies them as they come holds
    /// only what arrived since its last call).
    pub fn drain(&self) -> Vec<TapRecord> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut().map(std::mem::take).unwrap_or_default()
    }
    fn keep(&self, ts: u64, data: &[u8]) {
        if let Some(v) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            v.push((ts, data.len() as u32, data[..data.len().min(TAP_SNAPLEN)].to_vec()));
        }
    }
}

impl Capture {
    /// Create `path` and start the writer. `realtime_offset_ns` is CLOCK_REALTIME minus
    /// CLOCK_MONOTONIC, so packets carry wall-clock timestamps like any tcpdump capture; `link`
    /// (the spec) goes into each interface's description.
    /// Without `path` nothing is written: the records only feed the [`Tap`].
    pub fn start(
        path: Option<&Path>,
        realtime_offset_ns: i128,
        names: [String; 2],
        link: &str,
    ) -> Result<Capture, LinkError> {
        let tap = Tap::default();
        let w = match path {
            Some(p) => Some(Self::writer(p, &names, link)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel();
        let t = tap.clone();
        let thread = std::thread::Builder::new()
            .name("tcpstall-capture".into())
            .spawn(move || write_loop(w, rx, realtime_offset_ns, t))
            .map_err(|e| LinkError::Io { what: "spawning the capture thread".into(), err: e })?;
        Ok(Capture { tx: Some(tx), thread: Some(thread), path: path.map(Path::to_path_buf), tap })
    }

    /// The server side's records, for the lab's row trace.
    pub fn tap(&self) -> Tap {
        self.tap.clone()
    }

    fn writer(path: &Path, names: &[String; 2], link: &str) -> Result<PcapNgWriter<BufWriter<File>>, LinkError> {
        let file = File::create(path)
            .map_err(|e| LinkError::Io { what: format!("creating capture file {}", path.display()), err: e })?;
        let interfaces: Vec<Interface> = names
            .iter()
            .enumerate()
            .map(|(i, name)| Interface {
                name: name.clone(),
                description: format!("tcpstall link {link}, {} side", if i == 0 { "client" } else { "server" }),
                linktype: wire::linktype::IPV4,
                snaplen: 0,
            })
            .collect();
        PcapNgWriter::new(BufWriter::with_capacity(1 << 20, file), &interfaces)
            .map_err(|e| LinkError::Setup(format!("writing {}: {e}", path.display())))
    }

    pub fn sender(&self) -> CaptureTx {
        self.tx.clone().expect("capture is running")
    }

    /// Stop after writing everything queued (the forwarder threads must have dropped their
    /// senders); returns the number of packet records written.
    pub fn finish(mut self) -> Result<u64, LinkError> {
        self.tx.take();
        let t = self.thread.take().expect("capture thread");
        t.join().map_err(|_| LinkError::Setup("capture thread panicked".into()))?.map_err(|e| {
            let p = self.path.as_deref().map_or_else(|| "the capture".to_string(), |p| p.display().to_string());
            LinkError::Setup(format!("writing {p}: {e}"))
        })
    }
}

/// A record waiting to be written: (timestamp, arrival order, interface, packet).
type Held = (u64, u64, u32, Vec<u8>);

/// The file side of the writer thread: records held for reordering, and the first error
/// (after which nothing more is written).
struct Sink {
    w: PcapNgWriter<BufWriter<File>>,
    written: u64,
    error: Option<std::io::Error>,
    /// Written to since the last flush.
    dirty: bool,
    /// Records not yet written, oldest first.
    held: BinaryHeap<Reverse<Held>>,
    held_bytes: usize,
    seq: u64,
    newest: u64,
}

impl Sink {
    fn new(w: PcapNgWriter<BufWriter<File>>) -> Sink {
        Sink { w, written: 0, error: None, dirty: false, held: BinaryHeap::new(), held_bytes: 0, seq: 0, newest: 0 }
    }

    fn write(&mut self, (ts, _, iface, data): Held) {
        if self.error.is_some() {
            return;
        }
        match self.w.packet(iface, ts, &data, data.len() as u32) {
            Ok(()) => {
                self.written += 1;
                self.dirty = true;
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Hold a record, then write those that waited `REORDER_NS` (of capture time) or that
    /// exceed `REORDER_BYTES`.
    fn hold(&mut self, ts: u64, iface: u32, data: Vec<u8>) {
        self.newest = self.newest.max(ts);
        self.held_bytes += data.len();
        self.held.push(Reverse((ts, self.seq, iface, data)));
        self.seq += 1;
        while let Some(Reverse((ts, ..))) = self.held.peek() {
            if ts.saturating_add(REORDER_NS) > self.newest && self.held_bytes <= REORDER_BYTES {
                break;
            }
            let Reverse(h) = self.held.pop().expect("peeked");
            self.held_bytes -= h.3.len();
            self.write(h);
        }
    }

    /// Write everything held and flush if anything was written.
    fn drain(&mut self) {
        while let Some(Reverse(h)) = self.held.pop() {
            self.write(h);
        }
        self.held_bytes = 0;
        if self.dirty {
            if let Err(e) = self.w.flush() {
                self.error.get_or_insert(e);
            }
            self.dirty = false;
        }
    }
}

fn write_loop(
    w: Option<PcapNgWriter<BufWriter<File>>>,
    rx: Receiver<Record>,
    offset: i128,
    tap: Tap,
) -> Result<u64, std::io::Error> {
    let mut sink = w.map(Sink::new);
    loop {
        // Flush whenever the queue runs dry for a moment, so an interrupted run keeps almost
        // everything it captured (the file is valid up to its last complete block).
        let rec = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(s) = sink.as_mut() {
                    s.drain();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let ts = (i128::from(rec.mono_ns) + offset).max(0) as u64;
        if rec.iface == IFACE_SERVER {
            tap.keep(ts, &rec.data);
        }
        // After an error, drain the channel so the forwarder never blocks, but stop writing.
        if let Some(s) = sink.as_mut().filter(|s| s.error.is_none()) {
            s.hold(ts, rec.iface, rec.data);
        }
    }
    let Some(mut s) = sink else { return Ok(0) };
    s.dirty = true; // always flush at the end
    s.drain();
    match s.error {
        Some(e) => Err(e),
        None => Ok(s.written),
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
