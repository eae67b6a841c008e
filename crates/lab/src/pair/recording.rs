//! A row's evidence while it runs: its packet capture (the loopback ring, classified as it
//! comes, or a link's tap) and its kernel evidence, started by the server thread before the
//! client connects and finished after the rounds.

use super::Ns;
use crate::capture::rowstream::RowStream;
use crate::capture::{self, KernelEvidence, KernelRecords, KernelRow, Record, RowCapture, TapReader};
use crate::side::row as result;
use crate::side::PacketsOut;
use crate::{LabOptions, Placement};

/// The row's kernel evidence, as the server thread recorded it.
pub(crate) enum KernelOut {
    Off,
    Unavailable(String),
    Records(KernelRecords),
}

/// Start the row's kernel evidence (`LabOptions::kernel`) for the server's port, in the calling
/// thread's namespace (the server's) when it is the row's own.
pub(super) fn start_kernel(lab: &LabOptions, ns: &Ns, port: u16) -> (KernelOut, Option<KernelRow>) {
    match &lab.kernel.ready(&lab.cancel) {
        KernelEvidence::Off | KernelEvidence::Opening(_) => (KernelOut::Off, None),
        KernelEvidence::Unavailable(why) => (KernelOut::Unavailable(why.clone()), None),
        KernelEvidence::On(h) => {
            // The namespace's inode (its identity: `ns.inum`, what the programs compare).
            let netns = match ns {
                Ns::Private => {
                    use std::os::unix::fs::MetadataExt;
                    std::fs::metadata("/proc/thread-self/ns/net").ok().map(|m| m.ino() as u32)
                }
                _ => None,
            };
            match KernelRow::start(h, port, netns, capture::readers_cpus(lab.pin)) {
                Ok(k) => (KernelOut::Off, Some(k)),
                Err(e) => (KernelOut::Unavailable(format!("no kernel evidence: setting the filter: {e}")), None),
            }
        }
    }
}

/// The row's capture while it runs: its reader, the frames' link type, where they are seen
/// (for the report) and the trace's time 0 (CLOCK_REALTIME ns).
pub(super) struct Running {
    reader: Reader,
    linktype: u32,
    point: String,
    origin_ns: u64,
}

enum Reader {
    Socket(RowCapture),
    Tap(TapReader),
}

impl Running {
    pub(super) fn finish(self, port: u16) -> PacketsOut {
        let got = match self.reader {
            Reader::Socket(c) => c.finish(),
            Reader::Tap(t) => t.finish(),
        };
        match got {
            Ok(cap) => PacketsOut::Captured {
                cap,
                linktype: self.linktype,
                point: self.point,
                origin_ns: self.origin_ns,
                server_port: port,
                frame_base: 0,
                kernel: None,
            },
            Err(e) => PacketsOut::Failed(e.to_string()),
        }
    }
}

/// Start the row's capture in the calling thread's namespace (the server's, before the client
/// connects), when asked for and possible: behind a link the forwarder's tap, else AF_PACKET
/// on the namespace's loopback.
pub(super) fn start_capture(
    place: &Placement,
    lab: &LabOptions,
    port: u16,
    kernel: Option<&KernelRow>,
) -> (PacketsOut, Option<Running>) {
    if !lab.capture {
        return (PacketsOut::Off, None);
    }
    let origin = sys::clock::realtime_ns();
    let readers = capture::readers_cpus(lab.pin);
    // The reader classifies the packets as they come and keeps none; but `--capture FILE` on
    // loopback keeps the frames for the file (numbered from its count at the row's end).
    let stream = |linktype: u32| {
        let margin = lab.stall_margin();
        let clock = kernel.map(KernelRow::clock);
        let cfg = result::stream_cfg((margin, lab.keep_packets), linktype, (origin, port, 0), clock);
        Record::Stream { stream: Box::new(RowStream::new(cfg)), kernel: kernel.map(KernelRow::reader) }
    };
    if place.server_netns.is_some() || place.client_netns.is_some() {
        return match &lab.tap {
            // Behind a link the link writes the capture file itself: the tap is streamed.
            Some(t) => match TapReader::start(t.clone(), stream(wire::linktype::IPV4), readers) {
                Ok(r) => {
                    let (linktype, point) = (wire::linktype::IPV4, t.0.point());
                    (PacketsOut::Off, Some(Running { reader: Reader::Tap(r), linktype, point, origin_ns: origin }))
                }
                Err(e) => (PacketsOut::Failed(format!("the link tap's reader: {e}")), None),
            },
            None => (PacketsOut::Failed("behind --link the row's loopback carries none of its packets".into()), None),
        };
    }
    let record = if lab.capture_file.is_some() { Record::Frames } else { stream(capture::LINKTYPE) };
    match RowCapture::start(port, record, lab.small_ring, readers) {
        Ok(c) => {
            let point = "loopback of the row's network namespace (arriving copies, AF_PACKET TPACKET_V3 ring)".into();
            let reader = Reader::Socket(c);
            (PacketsOut::Off, Some(Running { reader, linktype: capture::LINKTYPE, point, origin_ns: origin }))
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            (PacketsOut::Failed("AF_PACKET needs CAP_NET_RAW (run as root)".into()), None)
        }
        Err(e) => (PacketsOut::Failed(format!("AF_PACKET capture on lo: {e}")), None),
    }
}
