//! The row's loopback capture: an AF_PACKET TPACKET_V3 ring on `lo` of the row's namespace
//! (`sys::ring`), filtered in the kernel to the row's port, read one block at a time by the
//! row's reader thread.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant as StdInstant};

use super::{Captured, Reader, Record, RecordError, Sink, Stats, SNAPLEN, STOP_POLL_MS};

/// Of those, the ring keeps the bytes from the network header on (it is cooked, SOCK_DGRAM).
const RING_SNAPLEN: u32 = SNAPLEN - 14;

/// Loopback's Ethernet header for a packet starting with `ip`.
pub(super) fn lo_header(ip: &[u8]) -> [u8; 14] {
    let mut h = [0u8; 14];
    let et: u16 = if ip.first().is_some_and(|b| b >> 4 == 6) { 0x86dd } else { 0x0800 };
    h[12..].copy_from_slice(&et.to_be_bytes());
    h
}

/// The ring: `RING_BLOCKS` blocks of `RING_BLOCK` bytes (about 7,000 small packets each: 32 MB
/// hold over 200,000 packets, more than the reader's worst delay at loopback rates).
const RING_BLOCK: u32 = 1 << 20;
const RING_BLOCKS: u32 = 32;
/// A timer-bound row's ring (`LabOptions::small_ring`): as many blocks, of 128 KB (about 900
/// small packets each: 4 MB, a minute of such a row's few hundred packets a second). As many
/// blocks keep the same slack for a late reader (blocks retire every `RETIRE_MS` however
/// full), and the row's RSS: every block of a ring is touched once the row has run
/// `RING_BLOCKS` retire times, and three 32 MB rings at once took `tcpstall lab` past 200 MB.
const SMALL_RING_BLOCK: u32 = 1 << 17;
/// A block with packets is handed over at the latest this long after its first packet: the
/// reader sees quiet rows' packets this late at most, and wakes at most this often besides full
/// blocks.
const RETIRE_MS: u32 = 4;
/// How long the last drain waits for the kernel to retire the block still being filled.
const FINAL_WAIT: Duration = Duration::from_millis(200);

/// A running capture on the row's loopback (the reader thread).
pub(crate) struct RowCapture(Reader);

impl RowCapture {
    /// Open the capture on `lo` of the calling thread's namespace, for TCP on `port`, and start
    /// reading into `record`. Fails with EPERM without CAP_NET_RAW.
    pub(crate) fn start(
        port: u16,
        record: Record,
        small: bool,
        cpus: Option<nix::sched::CpuSet>,
    ) -> io::Result<RowCapture> {
        let lo = nix::net::if_::if_nametoindex("lo").map_err(io::Error::from)?;
        // The filter also drops outgoing copies on lo, for kernels without PACKET_IGNORE_OUTGOING.
        let filter = sys::bpf::tcp_l3(&[port], &[], RING_SNAPLEN, Some(lo));
        let block = if small { SMALL_RING_BLOCK } else { RING_BLOCK };
        let mut ring = sys::ring::Ring::open(lo, &filter, block, RING_BLOCKS, RETIRE_MS)?;
        let _ = ring.ignore_outgoing();
        let reader = Reader::spawn("tcpstall-lab-capture", cpus, move |flag| {
            let mut sink = Sink::new(record);
            let (mut wakeups, mut read) = (0u64, 0u64);
            while !flag.load(Ordering::Acquire) {
                if ring.wait(STOP_POLL_MS)? {
                    wakeups += 1;
                    read += ring.drain(|f| sink.frame(f)).0;
                }
                // Kernel records are pulled on every wake, block or not (at most STOP_POLL_MS
                // apart): the reorder margin is above that.
                sink.advance();
            }
            // The last block is handed over when the kernel retires it: wait until every
            // packet the kernel accepted has been read (or FINAL_WAIT passed).
            let deadline = StdInstant::now() + FINAL_WAIT;
            read += ring.drain(|f| sink.frame(f)).0;
            let mut stats = ring.statistics()?;
            loop {
                let missing = stats.packets.saturating_sub(stats.drops).saturating_sub(read);
                if missing == 0 || StdInstant::now() >= deadline {
                    break;
                }
                if ring.wait(RETIRE_MS as u16 * 2)? {
                    wakeups += 1;
                    read += ring.drain(|f| sink.frame(f)).0;
                }
                stats = ring.statistics()?;
            }
            sink.advance();
            let stats = Stats { packets: stats.packets, drops: stats.drops };
            let (frames, stream) = (sink.frames, sink.stream);
            Ok(Captured { frames, stream, stats, reader_cpu_ns: None, reader_wakeups: wakeups, reader_cpus: None })
        })?;
        Ok(RowCapture(reader))
    }

    /// Stop reading (after one last drain) and return what was captured.
    pub(crate) fn finish(self) -> Result<Captured, RecordError> {
        // Packets already on loopback's backlog are in the ring within microseconds of the last
        // send: a short grace keeps the final ACKs.
        std::thread::sleep(Duration::from_millis(5));
        self.0.finish()
    }
}
