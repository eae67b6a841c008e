//! The row's kernel evidence: the eBPF source shared by the rows (`kevidence::Reader`), each
//! row's filter and clock map while it runs, and the join of the kernel's records to the row's
//! two sides.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use trace::{Endpoint, Event};

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
    /// Being opened on a thread of its own ([`KernelEvidence::opening`]): the first row that
    /// records waits for it ([`KernelEvidence::ready`]).
    Opening(Opening),
}

/// A kernel-evidence source being opened on a thread of its own. Parsing the kernel's BTF and
/// loading the programs takes 0.2-0.3 s of CPU on this class of host (more in a debug build):
/// `tcpstall lab` starts it before its probes, which record nothing, so the first recorded row
/// finds it open instead of waiting for it.
#[derive(Clone)]
pub struct Opening(Arc<OpeningInner>);

struct OpeningInner {
    rx: Mutex<Option<Receiver<Result<KernelHandle, KernelOpenError>>>>,
    done: OnceLock<KernelEvidence>,
}

impl KernelEvidence {
    /// Start opening a source ([`KernelHandle::open_with_reads`]) on a thread of its own; the
    /// rows that record wait for it. A thread that cannot start makes it `Unavailable`.
    pub fn opening(reads: bool) -> KernelEvidence {
        let (tx, rx) = std::sync::mpsc::channel();
        let open = move || {
            let _ = tx.send(KernelHandle::open_with_reads(reads));
        };
        match std::thread::Builder::new().name("tcpstall-kev-open".into()).spawn(open) {
            Ok(_) => KernelEvidence::Opening(Opening(Arc::new(OpeningInner {
                rx: Mutex::new(Some(rx)),
                done: OnceLock::new(),
            }))),
            Err(e) => KernelEvidence::Unavailable(format!("no kernel evidence: opener thread: {e}")),
        }
    }

    /// The evidence to record with: an opening source once open (`On`, or `Unavailable` with
    /// why), waiting for it; the others as they are. Cancelled while waiting: `Unavailable`
    /// (the opener finishes and drops what it opened), so that Ctrl-C never waits for BPF
    /// loading.
    pub fn ready(&self, cancel: &crate::Cancel) -> KernelEvidence {
        let KernelEvidence::Opening(o) = self else { return self.clone() };
        if let Some(k) = o.0.done.get() {
            return k.clone();
        }
        // One waiter receives; the others wait on the lock, then find `done` set.
        let mut rx = o.0.rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = o.0.done.get() {
            return k.clone();
        }
        let Some(r) = rx.as_ref() else {
            return KernelEvidence::Unavailable("no kernel evidence: its opener failed".into());
        };
        let got = loop {
            match r.recv_timeout(Duration::from_millis(20)) {
                Ok(Ok(h)) => break KernelEvidence::On(h),
                Ok(Err(e)) => break KernelEvidence::Unavailable(e.to_string()),
                Err(RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                    return KernelEvidence::Unavailable("no kernel evidence: cancelled while opening it".into());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    break KernelEvidence::Unavailable("no kernel evidence: opening it failed".into())
                }
            }
        };
        *rx = None;
        o.0.done.get_or_init(|| got).clone()
    }
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.done.get() {
            Some(k) => write!(f, "Opening(done: {k:?})"),
            None => write!(f, "Opening(pending)"),
        }
    }
}

impl PartialEq for Opening {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Opening {}

/// Why the lab runs without kernel evidence (said once in the report; the rows still run).
#[derive(Debug, thiserror::Error)]
pub enum KernelOpenError {
    /// The programs could not be loaded or attached (kevidence says what is missing).
    #[error("{0}; the rows run without it")]
    Unavailable(kevidence::Unavailable),
    /// The reader thread could not start.
    #[error("no kernel evidence: reader thread: {0}")]
    Reader(std::io::Error),
}

/// A shared kernel-evidence source and its reader thread, and whether its rows record reads.
#[derive(Clone)]
pub struct KernelHandle(pub Arc<kevidence::Reader>, bool);

/// A row's kernel-evidence ring: 4 MiB, about 30,000 records, read every 10 ms: 200 ms of a
/// CPU-bound rr row's writes at 70,000 round trips a second. Sized to a row, not to a host (the
/// watch keeps `kevidence::RING_BYTES`): rows run side by side each open a source, and at 16 MiB
/// each `tcpstall lab` peaked at 216 MB of RSS, at 4 MiB at 142 MB. A record the ring could not
/// hold is counted and said in the row's notes, never silently missing.
const ROW_RING_BYTES: u32 = 1 << 22;

impl KernelHandle {
    /// Load the programs and attach them (filtered to no port until a row starts), without
    /// reads (`kevidence::Filter::reads`: no rule uses them).
    pub fn open() -> Result<KernelHandle, KernelOpenError> {
        Self::open_with_reads(false)
    }

    /// Like [`KernelHandle::open`]; with `reads`, the rows also record the application's reads.
    pub fn open_with_reads(reads: bool) -> Result<KernelHandle, KernelOpenError> {
        // Port 0 matches no TCP socket of interest until a row sets its own.
        let filter = kevidence::Filter { ports: vec![0], netns: None, reads, owners: false };
        let src = kevidence::Source::open_with_ring(&filter, ROW_RING_BYTES).map_err(KernelOpenError::Unavailable)?;
        let r = kevidence::Reader::spawn(src).map_err(KernelOpenError::Reader)?;
        // Loaded and checked, detached until a row records (`KernelRow::start`): between rows,
        // and in the unrecorded runs CPU-bound rows take their latency from, no program runs.
        r.pause();
        Ok(KernelHandle(Arc::new(r), reads))
    }

    /// Whether the rows record the application's reads ([`KernelHandle::open_with_reads`]).
    pub(crate) fn reads(&self) -> bool {
        self.1
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
/// namespace when private), set before the client connects. The programs are attached from
/// [`KernelRow::start`] to [`KernelRow::finish`] only (`kevidence::Reader::pause`/`resume`).
pub struct KernelRow {
    handle: KernelHandle,
    clock: kevidence::ClockMap,
    /// The reader's counts when the row started (they count from the source's load).
    counts0: kevidence::ReaderCounts,
    /// Whether the row moved the reader ([`KernelRow::start`]'s `cpus`): then its records say
    /// where the reader ran.
    moved: bool,
}

/// What the kernel reported for a row.
#[derive(Debug, Default)]
pub struct KernelRecords {
    pub records: Vec<kevidence::Record>,
    pub clock: Option<kevidence::ClockMap>,
    pub counts: kevidence::ReaderCounts,
    pub status: String,
    /// The CPUs the reader thread ran on, read back, when the row kept it off pinned CPUs.
    pub reader_cpus: Option<Vec<usize>>,
}

impl KernelRow {
    /// Start: the row's port, in the namespace with inode `netns` if given; the reader thread on
    /// `cpus` (the process's CPUs other than the pinned ones, when it has others), or where it started.
    pub fn start(
        handle: &KernelHandle,
        port: u16,
        netns: Option<u32>,
        cpus: Option<nix::sched::CpuSet>,
    ) -> Result<KernelRow, kevidence::SourceError> {
        let moved = cpus.is_some();
        handle.0.keep_on(cpus);
        handle.0.restart(&kevidence::Filter { ports: vec![port], netns, reads: handle.1, owners: false })?;
        handle.0.resume();
        let counts0 = handle.0.counts();
        Ok(KernelRow { handle: handle.clone(), clock: kevidence::ClockMap::sample(), counts0, moved })
    }

    /// The clock map the row's records are converted with (sampled at its start).
    pub fn clock(&self) -> kevidence::ClockMap {
        self.clock
    }

    /// The reader the row's records are taken from while it runs.
    pub(crate) fn reader(&self) -> Arc<kevidence::Reader> {
        self.handle.0.clone()
    }

    /// Stop: the programs detached (`kevidence::Reader::pause`), the records so far.
    pub fn finish(self) -> KernelRecords {
        // Records of the row's last packets reach the ring within microseconds.
        std::thread::sleep(Duration::from_millis(5));
        self.handle.0.pause();
        let records = self.handle.0.take();
        let (a, b) = (self.handle.0.counts(), self.counts0);
        let counts = kevidence::ReaderCounts {
            kernel: kevidence::Counts { lost: a.kernel.lost.saturating_sub(b.kernel.lost) },
            unparsed: a.unparsed.saturating_sub(b.unparsed),
            overflow: a.overflow.saturating_sub(b.overflow),
            reader_cpu_ns: a.reader_cpu_ns.saturating_sub(b.reader_cpu_ns),
        };
        let reader_cpus = if self.moved { self.handle.0.cpus() } else { None };
        KernelRecords { records, clock: Some(self.clock), counts, status: self.handle.0.status(), reader_cpus }
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
    kevidence::to_events(recs, clock, origin_ns, |r| kernel_side(r, server_port), 1)
}

/// The kernel's records of a run with several connections to the server's port, as trace
/// events per connection ([`kernel_events`] on each connection's records): each with its
/// client's port (the client's socket's local port, the server's socket's remote port), in
/// port order.
pub fn kernel_events_by_client(
    recs: &[kevidence::Record],
    clock: &kevidence::ClockMap,
    server_port: u16,
    origin_ns: u64,
) -> Vec<(u16, Vec<Event>)> {
    let mut by: std::collections::BTreeMap<u16, Vec<kevidence::Record>> = std::collections::BTreeMap::new();
    for r in recs {
        let client_port = match kernel_side(r, server_port) {
            Some(Endpoint::A) => r.local.port(),
            Some(Endpoint::B) => r.remote.port(),
            None => continue,
        };
        by.entry(client_port).or_default().push(*r);
    }
    by.into_iter().map(|(p, rs)| (p, kernel_events(&rs, clock, server_port, origin_ns))).collect()
}

/// The side a kernel record of the row belongs to: the client (A) is the socket whose remote
/// port is the server's, the server (B) the one whose local port is; None for another socket.
pub fn kernel_side(r: &kevidence::Record, server_port: u16) -> Option<Endpoint> {
    if r.local.port() == server_port && r.remote.port() != server_port {
        Some(Endpoint::B)
    } else if r.remote.port() == server_port {
        Some(Endpoint::A)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kevidence::{ClockMap, Kind, Record};

    const CLOCK: ClockMap = ClockMap { offset_ns: 0, error_ns: 0 };

    fn write(t: u64, local: &str, remote: &str) -> Record {
        Record {
            mono_ns: t,
            sk: 7,
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            tcp_state: 1,
            kind: Kind::Sendmsg { left: 100, write_seq: 1, msg: t, size_goal: 1448 },
            owner: None,
        }
    }

    /// Each connection's records with its client's port: the client's socket by its local
    /// port, the server's by its remote port; another socket's are dropped.
    #[test]
    fn kernel_records_grouped_by_the_client_port() {
        let recs = [
            write(3_000, "10.0.0.2:8080", "10.0.0.1:40001"),
            write(1_000, "10.0.0.1:40000", "10.0.0.2:8080"),
            write(2_000, "10.0.0.2:8080", "10.0.0.1:40000"),
            write(4_000, "10.0.0.1:5000", "10.0.0.2:6000"),
        ];
        let by = kernel_events_by_client(&recs, &CLOCK, 8080, 500);
        let got: Vec<(u16, Vec<(u64, Endpoint)>)> =
            by.iter().map(|(p, ev)| (*p, ev.iter().map(|e| (e.t.0, e.from)).collect())).collect();
        assert_eq!(
            got,
            vec![(40000, vec![(500, Endpoint::A), (1_500, Endpoint::B)]), (40001, vec![(2_500, Endpoint::B)])]
        );
    }
}
