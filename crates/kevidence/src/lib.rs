//! Kernel evidence: what the kernel saw of a connection that its packets cannot show (when the
//! application wrote, every resend, the windows when near a limit), from eBPF programs on stable
//! TCP tracepoints, turned into trace events (`trace::EventKind::Kernel`). Window states
//! (`tcp_probe`) are kept only near a window limit, reads only when a [`Filter`] asks for them:
//! docs/watch.md "What is thinned".
//!
//! The programs (bpf/tcpev.bpf.c) are C compiled by clang at build time and loaded by `aya`
//! (pure Rust: BTF/CO-RE relocation against /sys/kernel/btf/vmlinux, tracepoint links).
//! They attach as BTF raw tracepoints (tp_btf, BPF_RAW_TRACEPOINT_OPEN), which need no tracefs. They filter
//! in the kernel (ports, and optionally one network namespace) and deliver 128-byte records
//! through a BPF ring buffer (16 MiB, drained every 10 ms without per-record wakeups); a record that finds the ring full is counted, never silently lost.
//! Nothing is pinned: the programs, links and maps go away with this process's file
//! descriptors, on exit, Ctrl-C or a crash. [`Source::pause`] detaches the tracepoints and keeps
//! the programs loaded (the lab attaches them only while a row records: an attached program
//! runs on every write and segment of every TCP socket, filter or not).
//!
//! Why clang + aya (issue 22 item 5): CO-RE and typed BTF tracepoints come from a small C file
//! compiled by Debian's clang with libbpf-dev's headers; aya relocates and loads the object in
//! pure Rust on stable (libbpf-rs would build or link libbpf and libelf; bytecode assembled in
//! Rust would have to redo CO-RE by reading BTF itself). Without clang, build.rs leaves an empty
//! object and the cfg `kevidence_no_bpf`: tcpstall builds, and [`Source::open`] says why not.
//!
//! Fails soft: [`Source::open`] returns [`Unavailable`] with one line saying what is missing
//! (not built, not root, no BTF, the load refused); a tracepoint this kernel lacks
//! (`tcp_sendmsg_locked` is 6.12+) is skipped and named in [`Source::status`].

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::tp_btf::BtfTracePointLinkId;
use aya::programs::BtfTracePoint;
use aya::Ebpf;

mod feed;
mod reader;
mod record;
pub use feed::{Feed, FeedError, FeedEvent};
pub use reader::{Reader, ReaderCounts, MAX_HELD};
pub use record::{endpoint, parse, tcp_state_name, to_events, ClockMap, Converter, Kind, RawOwner, Record, RECORD_LEN};

/// The compiled programs (empty when clang was missing at build time).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tcpev.o"));

/// The program that reports reads: attached only when a [`Filter`] asks for them.
pub const READ_PROGRAM: &str = "tcpstall_read";

/// The programs and the tracepoints they attach to, with what each one gives.
pub const TRACEPOINTS: [Tracepoint; 6] = [
    Tracepoint { program: "tcpstall_sendmsg", name: "tcp_sendmsg_locked", gives: "write times and sizes" },
    Tracepoint { program: "tcpstall_retransmit", name: "tcp_retransmit_skb", gives: "resends" },
    Tracepoint { program: "tcpstall_probe", name: "tcp_probe", gives: "windows near a window limit" },
    Tracepoint { program: READ_PROGRAM, name: "tcp_rcv_space_adjust", gives: "reads" },
    Tracepoint { program: "tcpstall_state", name: "inet_sock_set_state", gives: "opens and closes" },
    Tracepoint { program: "tcpstall_cong", name: "tcp_cong_state_set", gives: "congestion states" },
];

/// One program and its tracepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracepoint {
    pub program: &'static str,
    /// The tracepoint (include/trace/events/tcp.h, sock.h), as BPF_RAW_TRACEPOINT_OPEN names it.
    pub name: &'static str,
    /// What is not measured without it, for people.
    pub gives: &'static str,
}

/// Which sockets to report: those with a local or remote port in `ports` (all when empty) and,
/// when `netns` is given, in the network namespace with that inode (`stat -L /proc/PID/ns/net`).
/// `reads`: also report the application's reads (`tcp_rcv_space_adjust`); off by default, as no
/// rule of the classifier uses them and a request/response connection makes one per message
/// (a third of the records of a 1-byte request/response).
/// `owners`: keep the kernel's socket-to-owner map (filled in process context: writes, connect,
/// listen) and copy each record's owner from it ([`Record::owner`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub ports: Vec<u16>,
    pub netns: Option<u32>,
    pub reads: bool,
    pub owners: bool,
}

/// Why there is no kernel evidence, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Unavailable {}

/// A running source refused a change: a BPF map update (the filter) or the kernel's statistics
/// switch; the text is the error and its causes on one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Updating the port, namespace or reads filter in its BPF maps.
    #[error("{0}")]
    Filter(String),
    /// BPF_ENABLE_STATS refused (an older kernel, or no CAP_SYS_ADMIN).
    #[error("{0}")]
    Stats(String),
}

/// What the kernel counted: records that found the ring full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub lost: u64,
}

/// The loaded and attached programs, and their maps.
pub struct Source {
    /// Holds the programs and their links: dropping it detaches everything.
    _ebpf: Ebpf,
    ring: RingBuf<MapData>,
    counts: PerCpuArray<MapData, u64>,
    cfg: Array<MapData, u64>,
    ports: Array<MapData, u8>,
    /// The ports set in `ports` now.
    ports_set: Vec<u16>,
    attached: Vec<Tracepoint>,
    missing: Vec<(Tracepoint, String)>,
    /// Asked for but not attached until a filter wants them (the reads), with the BTF to load
    /// them against.
    deferred: Vec<Tracepoint>,
    btf: &'static aya::Btf,
    /// Whether the filter asks for reads now.
    reads: bool,
    /// The tracepoint links of the attached programs (one per entry of `attached`); empty while
    /// paused ([`Source::pause`]): the programs stay loaded, none runs.
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    paused: bool,
}

/// A message on one line: a verifier log (many lines) keeps its first line and its verdict
/// (the last line before "verification time").
fn one_line(t: &str) -> String {
    let lines: Vec<&str> = t.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        [first, rest @ ..] => {
            let end = rest.iter().position(|l| l.starts_with("verification time")).unwrap_or(rest.len());
            let verdict = if end > 0 { rest[end - 1] } else { rest[rest.len() - 1] };
            format!("{} ... {verdict}", first.trim_end_matches(':'))
        }
    }
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = one_line(&e.to_string());
    let mut src = e.source();
    while let Some(c) = src {
        let t = one_line(&c.to_string());
        if !s.contains(&t) {
            s += &format!(": {t}");
        }
        src = c.source();
    }
    s
}

/// The effective capability set of this process (/proc/self/status CapEff), None if unreadable.
fn effective_caps() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok()
}

/// Whether this process may load tracing BPF programs: CAP_BPF (39) and CAP_PERFMON (38), or
/// CAP_SYS_ADMIN (21) (kernel/bpf/syscall.c `bpf_capable`, `perfmon_capable`).
fn may_load() -> bool {
    match effective_caps() {
        Some(c) => c & (1 << 21) != 0 || (c & (1 << 39) != 0 && c & (1 << 38) != 0),
        None => nix::unistd::geteuid().is_root(),
    }
}

impl Source {
    /// Load the programs, set the filter and attach every tracepoint this kernel has, with a
    /// ring buffer of [`RING_BYTES`].
    pub fn open(filter: &Filter) -> Result<Source, Unavailable> {
        Self::open_tracepoints(filter, &TRACEPOINTS, RING_BYTES)
    }

    /// Like [`Source::open`] with a ring buffer of `ring_bytes` (a power of two, a multiple of
    /// the page size: `ringbuf_map_alloc` in kernel/bpf/ringbuf.c refuses others).
    pub fn open_with_ring(filter: &Filter, ring_bytes: u32) -> Result<Source, Unavailable> {
        Self::open_tracepoints(filter, &TRACEPOINTS, ring_bytes)
    }

    /// Like [`Source::open_with_ring`] with another list of tracepoints (a name this kernel
    /// lacks is skipped and reported; tests use it to provoke that path).
    pub fn open_tracepoints(
        filter: &Filter,
        tracepoints: &[Tracepoint],
        ring_bytes: u32,
    ) -> Result<Source, Unavailable> {
        // The caller says what still works (watch: the packets; lab: the rows).
        let off = |why: String| Unavailable(format!("no kernel evidence: {why}"));
        if cfg!(kevidence_no_bpf) || OBJECT.is_empty() {
            return Err(off(
                "not built (no clang at build time; install clang, llvm and libbpf-dev and rebuild)".into()
            ));
        }
        if !may_load() {
            return Err(off("loading eBPF programs needs root, or CAP_BPF and CAP_PERFMON".into()));
        }
        let btf_path = std::path::Path::new("/sys/kernel/btf/vmlinux");
        if !btf_path.exists() {
            return Err(off("this kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF)".into()));
        }
        let btf = kernel_btf().map_err(|e| off(format!("reading the kernel's BTF: {e}")))?;
        // Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK (later ones to the memory
        // cgroup): lift it, best effort.
        let _ = nix::sys::resource::setrlimit(
            nix::sys::resource::Resource::RLIMIT_MEMLOCK,
            nix::sys::resource::RLIM_INFINITY,
            nix::sys::resource::RLIM_INFINITY,
        );
        let mut ebpf = aya::EbpfLoader::new()
            .btf(Some(btf))
            .set_max_entries("events", ring_bytes)
            .load(OBJECT)
            .map_err(|e| off(format!("the kernel refused the programs: {}", chain(&e))))?;
        let map = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name).ok_or_else(|| off(format!("map {name} missing from the object")))
        };
        let events = map(&mut ebpf, "events")?;
        let ring = RingBuf::try_from(events).map_err(|e| off(chain(&e)))?;
        let counts = PerCpuArray::try_from(map(&mut ebpf, "counts")?).map_err(|e| off(chain(&e)))?;
        let cfg = Array::try_from(map(&mut ebpf, "cfg")?).map_err(|e| off(chain(&e)))?;
        let ports = Array::try_from(map(&mut ebpf, "ports")?).map_err(|e| off(chain(&e)))?;
        let mut src = Source {
            _ebpf: ebpf,
            ring,
            counts,
            cfg,
            ports,
            ports_set: Vec::new(),
            attached: Vec::new(),
            missing: Vec::new(),
            deferred: tracepoints.iter().filter(|t| t.program == READ_PROGRAM).copied().collect(),
            btf,
            reads: false,
            links: Vec::new(),
            paused: false,
        };
        for tp in tracepoints.iter().filter(|t| t.program != READ_PROGRAM) {
            src.attach(*tp);
        }
        src.set_filter(filter).map_err(|e| off(format!("setting the filter: {e}")))?;
        if src.attached.is_empty() {
            let why: Vec<String> = src.missing.iter().map(|(t, w)| format!("{}: {w}", t.name)).collect();
            return Err(off(format!("no tracepoint attached ({})", why.join("; "))));
        }
        Ok(src)
    }

    /// Load and attach one program (on failure, it is named in `missing` with why).
    fn attach(&mut self, tp: Tracepoint) {
        let Some(p) = self._ebpf.program_mut(tp.program) else {
            self.missing.push((tp, "no such program in the object".into()));
            return;
        };
        let p: &mut BtfTracePoint = match p.try_into() {
            Ok(p) => p,
            Err(e) => {
                self.missing.push((tp, chain(&e)));
                return;
            }
        };
        // Loaded against the tracepoint's type, btf_trace_<name>: a kernel without the
        // tracepoint has no such type (include/trace/bpf_probe.h, DEFINE_EVENT's typedef).
        if let Err(e) = p.load(tp.name, self.btf) {
            let text = chain(&e);
            let why = if text.contains("not found") || text.contains("Unknown") || text.contains("unknown") {
                "not in this kernel".to_string()
            } else {
                format!("the verifier refused it: {text}")
            };
            self.missing.push((tp, why));
            return;
        }
        match p.attach() {
            Ok(id) => {
                self.attached.push(tp);
                self.links.push((tp.program, id));
                if self.paused {
                    // Loaded (and known to attach on this kernel), not running until resumed.
                    self.pause();
                }
            }
            Err(e) => {
                let text = chain(&e);
                // BPF_RAW_TRACEPOINT_OPEN: ENOENT when the kernel has no such tracepoint
                // (bpf_get_raw_tracepoint, kernel/trace/bpf_trace.c).
                let why = if text.contains("No such file") || text.contains("os error 2") {
                    "not in this kernel".to_string()
                } else {
                    text
                };
                self.missing.push((tp, why));
            }
        }
    }

    /// Replace the filter (ports, namespace, reads). Records already in the ring stay. The reads'
    /// program is attached the first time a filter asks for reads; a later filter without them
    /// turns them off in the kernel (the program then returns at once).
    pub fn set_filter(&mut self, f: &Filter) -> Result<(), SourceError> {
        if f.reads {
            for tp in std::mem::take(&mut self.deferred) {
                self.attach(tp);
            }
        }
        for p in std::mem::take(&mut self.ports_set).iter().filter(|p| !f.ports.contains(p)) {
            self.ports.set(u32::from(*p), 0, 0).map_err(|e| SourceError::Filter(chain(&e)))?;
        }
        for p in &f.ports {
            self.ports.set(u32::from(*p), 1, 0).map_err(|e| SourceError::Filter(chain(&e)))?;
        }
        self.ports_set = f.ports.clone();
        self.reads = f.reads;
        // struct config { u32 netns; u16 any_port; u16 flags; } as one little-endian u64;
        // flags: CFG_READS 1, CFG_OWNERS 2.
        let flags = u64::from(f.reads) | (u64::from(f.owners) << 1);
        let value = u64::from(f.netns.unwrap_or(0)) | (u64::from(f.ports.is_empty()) << 32) | (flags << 48);
        self.cfg.set(0, value, 0).map_err(|e| SourceError::Filter(chain(&e)))
    }

    /// Detach every tracepoint, keeping the programs and maps loaded: until [`Source::resume`]
    /// no program runs at all, so a connection measured meanwhile pays nothing (an attached
    /// program that the filter turns away still costs its call and the filter's loads on every
    /// segment and write of every TCP socket). Records already in the ring stay.
    pub fn pause(&mut self) {
        self.paused = true;
        for (program, id) in std::mem::take(&mut self.links) {
            if let Some(p) = self._ebpf.program_mut(program) {
                let p: Result<&mut BtfTracePoint, _> = p.try_into();
                if let Ok(p) = p {
                    // Detaching a link we hold fails only if it is already gone.
                    let _ = p.detach(id);
                }
            }
        }
    }

    /// Attach again every tracepoint [`Source::pause`] detached (BPF_RAW_TRACEPOINT_OPEN per
    /// program: tens of microseconds each). A tracepoint that no longer attaches is moved to
    /// [`Source::missing`].
    pub fn resume(&mut self) {
        if !self.paused {
            return;
        }
        self.paused = false;
        for tp in std::mem::take(&mut self.attached) {
            let linked = self
                ._ebpf
                .program_mut(tp.program)
                .and_then(|p| <&mut BtfTracePoint>::try_from(p).ok())
                .map(|p| p.attach().map_err(|e| chain(&e)));
            match linked {
                Some(Ok(id)) => {
                    self.attached.push(tp);
                    self.links.push((tp.program, id));
                }
                Some(Err(why)) => self.missing.push((tp, why)),
                None => self.missing.push((tp, "no such program in the object".into())),
            }
        }
    }

    /// Whether the programs are detached ([`Source::pause`]).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The tracepoints attached.
    pub fn attached(&self) -> &[Tracepoint] {
        &self.attached
    }

    /// The tracepoints asked for and not attached, with why.
    pub fn missing(&self) -> &[(Tracepoint, String)] {
        &self.missing
    }

    /// One line: what is attached, and what is missing and so not measured (the reads, unless a
    /// filter asked for them, are neither: "reads off").
    pub fn status(&self) -> String {
        let mut s = format!(
            "kernel evidence: {} of {} tracepoints",
            self.attached.len(),
            self.attached.len() + self.missing.len()
        );
        let has_reads = self.deferred.iter().chain(&self.attached).any(|t| t.program == READ_PROGRAM);
        if has_reads && !self.reads {
            s += " (reads off)";
        }
        for (t, why) in &self.missing {
            s += &format!("; {} missing ({why}): {} not measured", t.name, t.gives);
        }
        s
    }

    /// Turn on the kernel's run-time statistics of BPF programs (BPF_ENABLE_STATS) while the
    /// returned fd is held: then [`Source::run_stats`] tells what the programs cost.
    pub fn enable_run_stats() -> Result<std::os::fd::OwnedFd, SourceError> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| SourceError::Stats(chain(&e)))
    }

    /// Per attached program: (tracepoint, runs, ns spent in it), from the kernel's statistics
    /// (counted only while [`Source::enable_run_stats`]'s fd is held).
    pub fn run_stats(&self) -> Vec<(&'static str, u64, u64)> {
        self.attached
            .iter()
            .filter_map(|t| {
                let info = self._ebpf.program(t.program)?.info().ok()?;
                Some((t.name, info.run_count(), info.run_time().as_nanos() as u64))
            })
            .collect()
    }

    /// The kernel's counts, summed over CPUs.
    pub fn counts(&self) -> Counts {
        let sum = |i: u32| self.counts.get(&i, 0).map_or(0, |v| v.iter().sum::<u64>());
        Counts { lost: sum(0) }
    }

    /// Wait `timeout_ms` for records: the programs do not wake a reader (BPF_RB_NO_WAKEUP),
    /// so this sleeps.
    pub fn wait(&self, timeout_ms: u16) {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(timeout_ms)));
    }

    /// Copy every record in the ring into `out` as it lies (parsed later, by [`parse`]: the
    /// reader thread does the least it can while a connection is being timed); returns how
    /// many were copied and how many were too short to be a record (skipped).
    pub fn drain_raw(&mut self, out: &mut Vec<[u8; RECORD_LEN]>) -> (usize, u64) {
        let (mut n, mut bad) = (0, 0);
        while let Some(item) = self.ring.next() {
            match item.get(..RECORD_LEN).and_then(|b| <[u8; RECORD_LEN]>::try_from(b).ok()) {
                Some(b) => {
                    out.push(b);
                    n += 1;
                }
                None => bad += 1,
            }
        }
        (n, bad)
    }

    /// Parse every record in the ring into `out`; returns how many were read (records that do
    /// not parse are skipped and counted in the second value).
    pub fn drain(&mut self, out: &mut Vec<Record>) -> (usize, u64) {
        let mut raw = Vec::new();
        let (copied, short) = self.drain_raw(&mut raw);
        let unparsed = parse_into(&raw, out);
        (copied - unparsed as usize, short + unparsed)
    }
}

/// Parse records copied by [`Source::drain_raw`] into `out`; returns how many did not parse
/// (skipped).
pub fn parse_into(raw: &[[u8; RECORD_LEN]], out: &mut Vec<Record>) -> u64 {
    let before = out.len();
    out.extend(raw.iter().filter_map(|b| parse(b)));
    (raw.len() - (out.len() - before)) as u64
}

/// The ring buffer's size by default (the watch's: a host's traffic, read every 10 ms): 16 MiB,
/// about 120,000 records. The C object declares the same.
pub const RING_BYTES: u32 = 1 << 24;

/// The running kernel's BTF, parsed once per process and shared by every source: the kernel's
/// types do not change while it runs, and each parse of /sys/kernel/btf/vmlinux costs tens of
/// MB of heap (`tcpstall lab` opens a source per row run side by side: parsed each time, the
/// run's peak RSS was 236 MB against 77 MB without kernel evidence).
fn kernel_btf() -> Result<&'static aya::Btf, String> {
    static BTF: std::sync::OnceLock<Result<aya::Btf, String>> = std::sync::OnceLock::new();
    BTF.get_or_init(|| aya::Btf::from_sys_fs().map_err(|e| chain(&e))).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verifier_log_becomes_one_line_with_its_verdict() {
        let log = "the BPF_PROG_LOAD syscall failed. Verifier output: 0: R1=ctx()\n1: (bf) r6 = r1\n\
                   invalid func unknown#195896080\nverification time 263 usec\nstack depth 32\n";
        assert_eq!(
            one_line(log),
            "the BPF_PROG_LOAD syscall failed. Verifier output: 0: R1=ctx() ... invalid func unknown#195896080"
        );
        assert_eq!(one_line("plain"), "plain");
    }
}
