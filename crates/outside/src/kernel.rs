//! Kernel evidence for advise-run's runs, as the lab records it for its rows: one source per
//! advise-run (`lab::KernelEvidence::opening`: eBPF programs on TCP tracepoints, loaded on a
//! thread of its own while the namespaces are made), attached only while a run records
//! (`lab::capture::KernelRow`: the filter set to the server's port and the capture namespace's
//! inode, the programs resumed, then paused), its records joined to the run's connections by
//! the lab's own functions (`lab::capture::kernel_events_by_client`). Nothing is pinned: the
//! programs go with this process's file descriptors, on exit, Ctrl-C or a crash.

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use lab::capture::{KernelRecords, KernelRow};
use lab::KernelEvidence;

/// The advise-run's kernel-evidence source, or why there is none.
#[derive(Debug, Default)]
pub struct Kernel {
    asked: KernelEvidence,
    /// `asked` once open (or failed): the first run that records waits for it.
    ready: OnceLock<KernelEvidence>,
}

/// What a run recorded in the kernel: its records, or why none.
pub(crate) enum Recording {
    Off(String),
    On(KernelRow),
}

impl Kernel {
    /// Start opening the source on a thread of its own (as `tcpstall lab` does).
    pub fn opening() -> Kernel {
        Kernel { asked: KernelEvidence::opening(false), ready: OnceLock::new() }
    }

    /// No kernel evidence, and why (`--no-kernel`).
    pub fn off(why: &str) -> Kernel {
        Kernel { asked: KernelEvidence::Unavailable(why.to_string()), ready: OnceLock::new() }
    }

    /// The source once open, waiting for it; a Ctrl-C (`cancel`) while waiting gives up on it
    /// (lab::KernelEvidence::ready: the opener drops what it opened) rather than wait.
    fn ready(&self, cancel: &AtomicBool) -> &KernelEvidence {
        self.ready.get_or_init(|| {
            let token = lab::Cancel::new();
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        if cancel.load(Ordering::Relaxed) {
                            token.cancel();
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                });
                let k = self.asked.ready(&token);
                done.store(true, Ordering::Relaxed);
                k
            })
        })
    }

    /// Whether the runs record kernel evidence (waits for the source to open).
    pub fn on(&self, cancel: &AtomicBool) -> bool {
        matches!(self.ready(cancel), KernelEvidence::On(_))
    }

    /// One line for the report: what is attached and whose sockets it sees (`side`'s: the
    /// filter keeps one namespace, the capture's), or that the stalls come from the packets
    /// only, and why.
    pub fn status(&self, cancel: &AtomicBool, side: crate::run::Side) -> String {
        match self.ready(cancel) {
            KernelEvidence::On(h) => format!(
                "{}, on the {}'s sockets (the capture's namespace), attached only while a run records: each \
                 run's stalls are classified from its packets and the kernel's writes and resends",
                h.0.status(),
                side.name()
            ),
            KernelEvidence::Unavailable(why) => format!("stalls from the packets only: {why}"),
            KernelEvidence::Off | KernelEvidence::Opening(_) => {
                "stalls from the packets only: no kernel-evidence source was opened".into()
            }
        }
    }

    /// Start recording a run: the server's `port` in namespace `ns` (a name of iproute2's or a
    /// namespace file: [`crate::netns_file`]); before the client connects.
    pub(crate) fn start(&self, ns: &str, port: u16, cancel: &AtomicBool) -> Recording {
        let KernelEvidence::On(h) = self.ready(cancel) else {
            return Recording::Off("no kernel evidence".into());
        };
        // The namespace's inode: its identity (`ns.inum`, what the programs compare).
        let netns = match std::fs::metadata(crate::netns_file(ns)) {
            Ok(m) => m.ino() as u32,
            Err(e) => return Recording::Off(format!("no kernel evidence: namespace {ns}: {e}")),
        };
        match KernelRow::start(h, port, Some(netns), None) {
            Ok(k) => Recording::On(k),
            Err(e) => Recording::Off(format!("no kernel evidence: setting the filter: {e}")),
        }
    }
}

impl Recording {
    /// Stop: the programs detached, the run's records (or why there are none).
    pub(crate) fn finish(self) -> Result<KernelRecords, String> {
        match self {
            Recording::Off(why) => Err(why),
            Recording::On(k) => Ok(k.finish()),
        }
    }
}
