//! A live feed of kernel evidence (`tcpstall watch --kernel`): the programs attached to the
//! sockets of this process's network namespace (the one its capture sees), their records
//! collected by the [`Reader`] thread, converted to kernel events with their times on the
//! realtime clock, handed out in the kernel's time order (crates/watch joins them to each
//! flow's packets).

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;

use trace::KernelEvent;

use crate::{ClockMap, Converter, Filter, RawOwner, Reader, Source, Unavailable};

/// One kernel event of the feed: when (realtime ns), the socket's own address and its peer's,
/// its owner when the kernel's map knew it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeedEvent {
    pub unix_ns: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub owner: Option<RawOwner>,
    pub event: KernelEvent,
}

/// Why there is no feed, in one line.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The programs could not be loaded or attached.
    #[error("{0}; the packets are analysed alone")]
    Unavailable(#[from] Unavailable),
    /// The thread that drains the ring buffer could not start.
    #[error("no kernel evidence: reader thread: {0}")]
    Reader(std::io::Error),
}

/// The kernel evidence of a live capture.
pub struct Feed {
    reader: Reader,
    clock: ClockMap,
    conv: Converter,
    status: String,
}

impl Feed {
    /// Attaches to the sockets with `ports` (all when empty) in this process's network
    /// namespace; with `reads`, also reports their reads; with `owners`, each record carries
    /// its socket's owner.
    pub fn open(ports: &[u16], reads: bool, owners: bool) -> Result<Feed, FeedError> {
        let netns = std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino() as u32);
        let src = Source::open(&Filter { ports: ports.to_vec(), netns, reads, owners })?;
        let status = src.status();
        let reader = Reader::spawn(src).map_err(FeedError::Reader)?;
        Ok(Feed { reader, clock: ClockMap::sample(), conv: Converter::new(), status })
    }

    /// What is attached and what is missing, one line.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// The records read so far, in the kernel's time order, to `each`; returns the count of
    /// records lost so far.
    pub fn pull(&mut self, mut each: impl FnMut(FeedEvent)) -> u64 {
        let mut recs = self.reader.take();
        recs.sort_by_key(|r| r.mono_ns);
        for r in &recs {
            let Some(event) = self.conv.event(r) else { continue };
            let unix_ns = self.clock.to_realtime(r.mono_ns);
            each(FeedEvent { unix_ns, local: r.local, remote: r.remote, owner: r.owner, event });
        }
        self.reader.counts().lost()
    }

    /// Samples the clocks again (a step of the realtime clock moves the offset): once a second.
    pub fn resample(&mut self) {
        self.clock = ClockMap::sample();
    }
}
