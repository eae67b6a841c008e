//! `watch --kernel`, the OS half: attach the eBPF programs on TCP tracepoints (crates/kevidence),
//! take the records their reader thread collected, put their times on the realtime clock and
//! hand them to the watcher, which joins them to each flow's packets (crates/watch, `KernelJoin`).

use ::watch::{KernelRecord, Watcher};
use kevidence::{ClockMap, Converter, Filter, Reader, Source};

/// The kernel evidence of a watch.
pub(crate) struct KernelFeed {
    reader: Reader,
    clock: ClockMap,
    conv: Converter,
    status: String,
}

impl KernelFeed {
    /// Attach to the sockets with `ports` (all when empty) in this process's network namespace
    /// (the one the capture sees); with `reads`, also report their reads. Err: one line saying
    /// why not.
    pub(crate) fn open(ports: &[u16], reads: bool) -> Result<KernelFeed, String> {
        use std::os::unix::fs::MetadataExt;
        let netns = std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino() as u32);
        let src = Source::open(&Filter { ports: ports.to_vec(), netns, reads })
            .map_err(|e| format!("{e}; the packets are analysed alone"))?;
        let status = src.status();
        let reader = Reader::spawn(src).map_err(|e| format!("no kernel evidence: reader thread: {e}"))?;
        Ok(KernelFeed { reader, clock: ClockMap::sample(), conv: Converter::new(), status })
    }

    /// What is attached and what is missing, one line.
    pub(crate) fn status(&self) -> &str {
        &self.status
    }

    /// Hands the records read so far to `w`, in the kernel's time order, with the count of
    /// records lost.
    pub(crate) fn pull(&mut self, w: &mut Watcher) {
        let mut recs = self.reader.take();
        recs.sort_by_key(|r| r.mono_ns);
        for r in &recs {
            let Some(event) = self.conv.event(r) else { continue };
            let unix_ns = self.clock.to_realtime(r.mono_ns);
            w.kernel_record(KernelRecord { unix_ns, local: r.local, remote: r.remote, event });
        }
        w.set_kernel_lost(self.reader.counts().lost());
    }

    /// The one-second tick: sample the clocks again (a step of the realtime clock moves the
    /// offset).
    pub(crate) fn resample(&mut self) {
        self.clock = ClockMap::sample();
    }
}
