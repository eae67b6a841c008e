//! Who holds which TCP socket, from /proc (this network namespace's /proc/net/tcp and tcp6,
//! each process's /proc/PID/fd links `socket:[INODE]`, /proc/PID/comm and /proc/PID/cgroup),
//! and cgroup v2 ids as paths (the directories under the cgroup2 mount: a cgroup's id is its
//! directory's inode number, kernel/cgroup/cgroup.c `cgroup_id` = kernfs_node id). Used by
//! `watch --kernel` for sockets the kernel's owner map has not seen (open before the watch
//! began, never written on since) and by `sockets`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use report::owner::{Owner, OwnerSource};

/// One line of /proc/net/tcp or tcp6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// include/net/tcp_states.h (1 ESTABLISHED .. 10 LISTEN).
    pub state: u8,
    pub inode: u64,
}

/// An address as /proc/net/tcp prints it: the in-memory words of the address in hex, each as
/// the host reads a u32 (net/ipv4/tcp_ipv4.c `get_tcp4_sock`: `%08X:%04X`), then the port.
fn proc_addr(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(a.get(8 * i..8 * i + 8)?, 16).ok().map(u32::to_ne_bytes);
    let ip = match a.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?);
            }
            let v6 = Ipv6Addr::from(b);
            // An IPv4-mapped address (RFC 4291 2.5.5.2) is the IPv4 address the packets carry.
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The sockets of /proc/net/tcp's text (the header line skipped, bad lines too).
pub(crate) fn parse_proc_net_tcp(text: &str) -> Vec<ProcSocket> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(ProcSocket {
                local: proc_addr(f.get(1)?)?,
                remote: proc_addr(f.get(2)?)?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// This network namespace's TCP sockets (IPv4 and IPv6).
pub(crate) fn tcp_sockets() -> Vec<ProcSocket> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| parse_proc_net_tcp(&t))
        .collect()
}

/// Socket inode -> the (pid, fd) holding it, over every process readable.
pub(crate) fn socket_holders() -> HashMap<u64, Vec<(u32, i32)>> {
    let mut out: HashMap<u64, Vec<(u32, i32)>> = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else { continue };
            let l = link.to_string_lossy();
            let Some(ino) = l.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) else { continue };
            let (Ok(ino), Some(n)) = (ino.parse::<u64>(), fd.file_name().to_str().and_then(|s| s.parse().ok())) else {
                continue;
            };
            let holders = out.entry(ino).or_default();
            if !holders.iter().any(|(q, _)| *q == pid) {
                holders.push((pid, n));
            }
        }
    }
    out
}

/// The owner of a socket held by `pids` (the first one; the rest share it), from /proc.
pub(crate) fn proc_owner(pids: &[u32]) -> Option<Owner> {
    let (&pid, rest) = pids.split_first()?;
    let comm = sys::host::comm(pid).unwrap_or_default();
    Some(Owner::of_process(pid, comm, sys::host::cgroup_of(pid), rest.to_vec(), OwnerSource::Proc))
}

/// Where the cgroup v2 hierarchy is mounted (/proc/self/mountinfo: `/sys/fs/cgroup` on a
/// pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_mount() -> Option<PathBuf> {
    let t = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    t.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mount = pre.split_whitespace().nth(4)?;
        (post.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(mount))
    })
}

/// The owners of `watch --kernel`: the kernel's raw owners as [`Owner`]s (cgroup ids as paths,
/// one shared value per distinct owner), and the /proc fallback for sockets the kernel's map
/// has not seen, looked up at most once a second.
pub(crate) struct Owners {
    root: Option<PathBuf>,
    cgroups: HashMap<u64, String>,
    cgroups_read: Option<Instant>,
    interned: HashMap<kevidence::RawOwner, Arc<Owner>>,
    by_socket: HashMap<(SocketAddr, SocketAddr), Arc<Owner>>,
    proc_read: Option<Instant>,
}

/// /proc and the cgroup tree are read again at most this often.
const RESCAN: Duration = Duration::from_secs(1);

impl Owners {
    /// The sockets open now and their holders, and the cgroup tree.
    pub(crate) fn new() -> Owners {
        let mut o = Owners {
            root: cgroup2_mount(),
            cgroups: HashMap::new(),
            cgroups_read: None,
            interned: HashMap::new(),
            by_socket: HashMap::new(),
            proc_read: None,
        };
        o.read_cgroups();
        o.read_proc();
        o
    }

    fn read_cgroups(&mut self) {
        self.cgroups_read = Some(Instant::now());
        let Some(root) = self.root.clone() else { return };
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(m) = std::fs::metadata(&d) {
                let rel = d.strip_prefix(&root).map(|p| format!("/{}", p.display())).unwrap_or_default();
                self.cgroups.insert(m.ino(), rel);
            }
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }

    fn read_proc(&mut self) {
        self.proc_read = Some(Instant::now());
        let holders = socket_holders();
        for s in tcp_sockets() {
            if let Some(o) = holders.get(&s.inode).and_then(|h| proc_owner(&h.iter().map(|x| x.0).collect::<Vec<_>>()))
            {
                self.by_socket.insert((s.local, s.remote), Arc::new(o));
            }
        }
    }

    /// The kernel's owner as an [`Owner`].
    pub(crate) fn of_raw(&mut self, raw: &kevidence::RawOwner) -> Arc<Owner> {
        if let Some(o) = self.interned.get(raw) {
            return o.clone();
        }
        if !self.cgroups.contains_key(&raw.cgroup_id) && self.cgroups_read.is_none_or(|t| t.elapsed() >= RESCAN) {
            self.read_cgroups();
        }
        let cgroup = self.cgroups.get(&raw.cgroup_id).cloned();
        let source = if raw.inherited { OwnerSource::Listener } else { OwnerSource::Kernel };
        let shared = raw.shared_with.into_iter().collect();
        let o = Arc::new(Owner::of_process(raw.pid, raw.comm(), cgroup, shared, source));
        self.interned.insert(*raw, o.clone());
        o
    }

    /// The owner /proc gives the socket at `local` talking to `remote` (read again, at most
    /// once a second, when it is not known).
    pub(crate) fn of_socket(&mut self, local: SocketAddr, remote: SocketAddr) -> Option<Arc<Owner>> {
        if let Some(o) = self.by_socket.get(&(local, remote)) {
            return Some(o.clone());
        }
        if self.proc_read.is_none_or(|t| t.elapsed() >= RESCAN) {
            self.read_proc();
        }
        self.by_socket.get(&(local, remote)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_lines_parse_in_both_families() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                  0: 0100007F:1F90 0100007F:B0C4 01 00000000:00000000 00:00000000 00000000     0        0 51234 1 0 20 4 30 10 -1\n";
        let s = parse_proc_net_tcp(v4);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].local, s[0].remote), ("127.0.0.1:8080".parse().unwrap(), "127.0.0.1:45252".parse().unwrap()));
        assert_eq!((s[0].state, s[0].inode), (1, 51234));
        let v6 = "header\n   0: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000001000000:0000 0A \
                  00000000:00000000 00:00000000 00000000     0        0 777 1\n";
        let s = parse_proc_net_tcp(v6);
        assert_eq!(s[0].local, "127.0.0.1:8080".parse().unwrap(), "IPv4-mapped");
        assert_eq!(s[0].remote, "[::1]:0".parse().unwrap());
        assert_eq!((s[0].state, s[0].inode), (10, 777));
        assert!(parse_proc_net_tcp("header\n garbage line\n").is_empty());
    }

    /// This process's own listening socket is found with its holder.
    #[test]
    fn a_socket_of_this_process_is_found_with_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let s = tcp_sockets().into_iter().find(|s| s.local == addr).expect("in /proc/net/tcp");
        let h = socket_holders();
        let pids: Vec<u32> = h[&s.inode].iter().map(|x| x.0).collect();
        assert_eq!(pids, [std::process::id()]);
        let o = proc_owner(&pids).unwrap();
        assert_eq!((o.pid, o.source), (std::process::id(), OwnerSource::Proc));
        assert!(!o.comm.is_empty());
    }
}
