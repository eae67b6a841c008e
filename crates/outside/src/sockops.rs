//! A cgroup BPF `sock_ops` program (bpf/sockops.bpf.c) that sets TCP_NODELAY and/or the delayed
//! ACK's maximum (TCP_BPF_DELACK_MAX) on every TCP socket of a cgroup as it is established
//! (connect or accept), through bpf_setsockopt (net/core/filter.c sol_tcp_sockopt allows both).
//! The values are the program's read-only globals, set at load time. Loaded and attached with
//! `aya` (a BPF link, BPF_LINK_CREATE with BPF_CGROUP_SOCK_OPS); nothing is pinned: dropping
//! [`SockOps`] closes the link and the program is gone, on exit, Ctrl-C or a crash.

use std::path::{Path, PathBuf};

use aya::maps::Array;
use aya::programs::links::CgroupAttachMode;
use aya::{Ebpf, EbpfLoader};

use crate::FixError;

/// The compiled program (empty when clang was missing at build time).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockops.o"));

/// The same program with TCP_NODELAY on by default: what `bpftool prog load` takes.
static NODELAY_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sockops-nodelay.o"));

/// The same program with TCP_BPF_DELACK_MAX asked at [`DELACK_MAX_ASK_US`] by default.
static DELACK_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sockops-delack.o"));

/// The delayed-ACK maximum the program asks for (µs): 2 ms, doubled by the program until the
/// kernel takes it (bpf/sockops.bpf.c), so the kernel's minimum at its HZ: TCP_TIMEOUT_MIN, 2
/// jiffies (include/net/tcp.h; net/core/filter.c bpf_sol_tcp_setsockopt refuses less), 2 ms
/// at HZ=1000, 8 ms at HZ=250. Why the minimum: the held write waits the whole timer, so each
/// jiffy of it is latency; what a short timer costs, ACKs that no longer ride on a reply
/// slower than it, is measured (pure ACKs per request) and printed. The kernel's own
/// TCP_DELACK_MIN is HZ/25 = 40 ms, the very stall, so no help as a value.
pub const DELACK_MAX_ASK_US: u32 = 2_000;

/// Write a deployable object to `path`: TCP_NODELAY on, or (`delack`) TCP_BPF_DELACK_MAX at
/// the kernel's minimum.
pub fn write_object(path: &Path, delack: bool) -> Result<(), FixError> {
    let obj = if delack { DELACK_OBJECT } else { NODELAY_OBJECT };
    if obj.is_empty() {
        return Err(FixError::Unavailable("sock_ops: not built (no clang at build time)".into()));
    }
    std::fs::write(path, obj).map_err(|e| FixError::Io(path.display().to_string(), e))
}

const PROGRAM: &str = "tcpstall_sockops";

/// What the program sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    pub nodelay: bool,
    /// The delayed ACK's maximum (µs); None leaves the kernel's (TCP_DELACK_MAX, 200 ms, with
    /// the ATO starting at TCP_ATO_MIN 40 ms). The kernel keeps it at least TCP_TIMEOUT_MIN
    /// (2 jiffies) and refuses more than TCP_DELACK_MAX (net/core/filter.c sol_tcp_sockopt).
    pub delack_max_us: Option<u32>,
}

impl Options {
    pub fn label(&self) -> String {
        let mut v = Vec::new();
        if self.nodelay {
            v.push("TCP_NODELAY".to_string());
        }
        if let Some(us) = self.delack_max_us {
            v.push(format!("TCP_BPF_DELACK_MAX {us} us"));
        }
        v.join(" + ")
    }
}

/// The program attached to a cgroup; detached on drop.
pub struct SockOps {
    ebpf: Ebpf,
    cgroup: PathBuf,
    pub options: Options,
}

impl std::fmt::Debug for SockOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SockOps").field("cgroup", &self.cgroup).field("options", &self.options).finish()
    }
}

impl SockOps {
    /// Load the program with `options` and attach it to the cgroup at `cgroup`.
    pub fn attach(cgroup: &Path, options: Options) -> Result<SockOps, FixError> {
        let off = |why: String| FixError::Unavailable(format!("sock_ops: {why}"));
        if cfg!(outside_no_bpf) || OBJECT.is_empty() {
            return Err(off("not built (no clang at build time; install clang and libbpf-dev and rebuild)".into()));
        }
        let nodelay = u32::from(options.nodelay);
        let delack = options.delack_max_us.unwrap_or(0);
        let mut ebpf = EbpfLoader::new()
            .set_global("nodelay", &nodelay, true)
            .set_global("delack_max_us", &delack, true)
            .load(OBJECT)
            .map_err(|e| off(format!("loading the program: {e} (needs root)")))?;
        let prog: &mut aya::programs::SockOps = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| off("the object has no program".into()))?
            .try_into()
            .map_err(|e| off(format!("{e}")))?;
        prog.load().map_err(|e| off(format!("loading the program: {e}")))?;
        let fd = std::fs::File::open(cgroup).map_err(|e| FixError::Io(cgroup.display().to_string(), e))?;
        // A BPF link (BPF_LINK_CREATE, Linux 5.7): links to a cgroup always stack with other
        // programs, and the kernel refuses any flag (kernel/bpf/cgroup.c cgroup_bpf_link_attach),
        // so the mode is the one that passes none.
        prog.attach(&fd, CgroupAttachMode::Single)
            .map_err(|e| off(format!("attaching to {}: {}", cgroup.display(), chain(&e))))?;
        Ok(SockOps { ebpf, cgroup: cgroup.to_path_buf(), options })
    }

    /// Sockets changed so far: (TCP_NODELAY set, TCP_BPF_DELACK_MAX set).
    pub fn applied(&self) -> (u64, u64) {
        (self.slot(0), self.slot(1))
    }

    /// The delayed-ACK maximum the kernel holds (µs), once a socket took one: the value asked
    /// for and accepted (slot 2), rounded up to whole jiffies as the kernel stores it
    /// (`usecs_to_jiffies` in bpf_sol_tcp_setsockopt, net/core/filter.c) at this kernel's HZ
    /// (`sys::host::kernel_hz`); the accepted ask itself when HZ cannot be read.
    pub fn delack_max_taken_us(&self) -> Option<u64> {
        let asked = Some(self.slot(2)).filter(|v| *v > 0)?;
        Some(sys::host::kernel_hz().map_or(asked, |hz| kernel_delack_us(asked, hz)))
    }

    fn slot(&self, i: u32) -> u64 {
        let Some(map) = self.ebpf.map("applied") else { return 0 };
        let Ok(a) = Array::<_, u64>::try_from(map) else { return 0 };
        a.get(&i, 0).unwrap_or(0)
    }
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}

/// How to deploy it by hand with bpftool (the object written by `tcpstall advise-run
/// --write-sockops FILE`, its globals set there), and how to remove it.
/// The pin is named after the object (`tcpstall-delack.o` -> /sys/fs/bpf/tcpstall_delack), so
/// that both programs can be deployed and each removed alone.
pub fn deploy_commands(object: &str, cgroup: &str) -> String {
    let stem =
        std::path::Path::new(object).file_stem().map_or("sockops".into(), |s| s.to_string_lossy().replace('-', "_"));
    let pin = format!("/sys/fs/bpf/{stem}");
    format!(
        "bpftool prog load {object} {pin} type sockops\n\
         bpftool cgroup attach {cgroup} sock_ops pinned {pin} multi\n\
         # remove: bpftool cgroup detach {cgroup} sock_ops pinned {pin} && rm {pin}\n"
    )
}

/// What the kernel holds for an accepted TCP_BPF_DELACK_MAX of `asked_us` at `hz`: whole
/// jiffies, rounded up (`usecs_to_jiffies`, include/linux/jiffies.h), in µs. Pure.
pub fn kernel_delack_us(asked_us: u64, hz: u32) -> u64 {
    let hz = u64::from(hz.max(1));
    (asked_us * hz).div_ceil(1_000_000) * 1_000_000 / hz
}

#[cfg(test)]
mod delack_tests {
    /// bpf_sol_tcp_setsockopt (net/core/filter.c): usecs_to_jiffies rounds up; the kernel holds
    /// whole jiffies.
    #[test]
    fn the_kernel_holds_whole_jiffies() {
        assert_eq!(super::kernel_delack_us(2_000, 1000), 2_000);
        assert_eq!(super::kernel_delack_us(8_000, 250), 8_000);
        // HZ=300: 4 ms is 1.2 jiffies, accepted as 2 (6.67 ms).
        assert_eq!(super::kernel_delack_us(4_000, 300), 6_666);
        // HZ=100: 16 ms is 1.6 jiffies, accepted as 2 (20 ms).
        assert_eq!(super::kernel_delack_us(16_000, 100), 20_000);
    }
}

#[cfg(test)]
mod deploy_tests {
    #[test]
    fn each_object_has_a_pin_of_its_own() {
        let a = super::deploy_commands("tcpstall-nodelay.o", "/sys/fs/cgroup/app");
        let b = super::deploy_commands("tcpstall-delack.o", "/sys/fs/cgroup/app");
        assert!(a.contains("/sys/fs/bpf/tcpstall_nodelay type sockops"), "{a}");
        assert!(b.contains("rm /sys/fs/bpf/tcpstall_delack\n"), "{b}");
    }
}
