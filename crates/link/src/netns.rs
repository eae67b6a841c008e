//! The two network namespaces and their TUN devices.
//!
//! Each namespace is created by a short-lived thread: `unshare(CLONE_NEWNET)` moves only that
//! thread into a fresh namespace (unshare(2): CLONE_NEWNET is per task), where it creates and
//! configures the TUN device, then opens `/proc/thread-self/ns/net`. The thread exits; the two
//! file descriptors it hands back (the namespace and the TUN device) are what keeps the
//! namespace alive. Nothing is named, mounted or registered anywhere: when the process ends,
//! for any reason including SIGKILL, the kernel closes the descriptors and frees both
//! namespaces with their devices and routes (net/core/net_namespace.c: a namespace is destroyed
//! when its last reference goes). Other threads and child processes enter a namespace through
//! the path `/proc/<pid>/fd/<n>` of its descriptor.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::sched::{unshare, CloneFlags};

use crate::LinkError;

/// Name of the TUN device inside each namespace.
pub const TUN_NAME: &str = "tcpstall0";
/// The client's address (198.18.0.0/15 is the benchmarking range, RFC 2544 appendix C / RFC 6815).
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The server's address.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Both ends share one /24 on their TUN devices, so each has a connected route to the other.
pub const PREFIX: u8 = 24;

/// The TUN devices' transmit queue length by default: 4000 packets waiting for the forwarder
/// (the kernel's is 500). A forwarder descheduled for a few milliseconds on a loaded machine
/// overran 500 even with a sender paced at 0.8x of its capacity (395-4980 drops in 1.5 s, 3 of
/// 3 runs), 4000 never did (0 of 3; docs/link.md, issue 25). Setting it needs root: without it
/// SIOCSIFTXQLEN is refused (EPERM) even inside the link's own user namespace, and this default
/// is then left at the kernel's (any other length asked for is an error).
pub const DEFAULT_TXQUEUELEN: u32 = 4000;

/// How an end's TUN device is set up; the default (plain device, no RPS) is what the
/// forwarder bench found best on a 2-core machine (docs/link.md, "Packet rate").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceOptions {
    /// `IFF_NAPI`: packets the forwarder writes are received by a NAPI poll with GRO.
    pub napi: bool,
    /// With `napi`: run the device's NAPI poll in its own kernel thread (sysfs `threaded`),
    /// so write(2) only queues the packet and the receive path runs there, in batches.
    pub threaded_napi: bool,
    /// Receive packet steering: CPUs (bit mask) that process the packets the forwarder writes
    /// into this end, instead of the forwarder's own CPU inside write(2). 0 = no RPS.
    pub rps_mask: u64,
    /// IFF_VNET_HDR with TSO/checksum offloads: the forwarder carries GSO super-packets whole
    /// (sys::tun::create_tun_opts).
    pub gso: bool,
    /// The device's transmit queue length (sys::tun::set_txqueuelen); 0 = the kernel's 500;
    /// [`DEFAULT_TXQUEUELEN`] is best effort (left at 500 without root).
    pub txqueuelen: u32,
}

/// One end: a network namespace holding a configured TUN device.
#[derive(Debug)]
pub struct End {
    ns: OwnedFd,
    tun: Arc<OwnedFd>,
    pub ip: Ipv4Addr,
}

impl End {
    /// Create a namespace with `TUN_NAME` at `ip/PREFIX`, MTU `mtu`, up; no default route.
    pub fn create(ip: Ipv4Addr, mtu: u32) -> Result<End, LinkError> {
        End::create_with(ip, mtu, DeviceOptions::default())
    }

    /// [`End::create`] with a non-default device setup.
    pub fn create_with(ip: Ipv4Addr, mtu: u32, dev: DeviceOptions) -> Result<End, LinkError> {
        let h = std::thread::Builder::new()
            .name("tcpstall-netns".into())
            .spawn(move || setup_in_new_namespace(ip, mtu, dev))
            .map_err(|e| LinkError::Io { what: "spawning the namespace thread".into(), err: e })?;
        let (ns, tun) = h.join().map_err(|_| LinkError::Setup("namespace setup thread panicked".into()))??;
        Ok(End { ns, tun: Arc::new(tun), ip })
    }

    /// The namespace, as an open file.
    pub fn netns(&self) -> BorrowedFd<'_> {
        self.ns.as_fd()
    }

    /// A path other threads and processes can open (or setns into) while this process lives.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), self.ns.as_raw_fd()))
    }

    pub fn tun(&self) -> BorrowedFd<'_> {
        self.tun.as_fd()
    }

    pub(crate) fn tun_shared(&self) -> Arc<OwnedFd> {
        self.tun.clone()
    }

    /// Packets the kernel dropped on their way *into* the forwarder: the TUN device's transmit
    /// drops (drivers/net/tun.c tun_net_xmit drops when its ring of tx_queue_len packets is
    /// full, i.e. when the forwarder falls behind). Read from /proc/thread-self/net/dev on a
    /// thread inside the namespace (that file shows the reading thread's namespace).
    pub fn tun_tx_dropped(&self) -> Result<u64, LinkError> {
        let text = run_in(self.netns(), || std::fs::read_to_string("/proc/thread-self/net/dev"))?
            .map_err(|e| LinkError::Io { what: "reading /proc/net/dev".into(), err: e })?;
        parse_tx_dropped(&text, TUN_NAME)
            .ok_or_else(|| LinkError::Setup(format!("{TUN_NAME} is missing from /proc/net/dev")))
    }
}

fn setup_in_new_namespace(ip: Ipv4Addr, mtu: u32, dev: DeviceOptions) -> Result<(OwnedFd, OwnedFd), LinkError> {
    unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|e| LinkError::Privilege(privilege_hint("creating a network namespace", e)))?;
    if dev.rps_mask != 0 {
        // net.core.rps_default_mask (per namespace on this kernel: a fresh namespace shows its
        // own 0) is copied into the rps_cpus of every receive queue registered afterwards
        // (net/core/net-sysfs.c rx_queue_default_mask), so it must be set before TUNSETIFF.
        std::fs::write("/proc/sys/net/core/rps_default_mask", format!("{:x}", dev.rps_mask))
            .map_err(|err| LinkError::Io { what: "setting net.core.rps_default_mask".into(), err })?;
    }
    // No IPv6 on the link: router solicitations and MLD reports would otherwise cross it and
    // show up in captures. /proc/sys/net is resolved against the opener's namespace, i.e. this
    // thread's new one. Best effort: a kernel without IPv6 has no such file.
    for knob in ["default", "all"] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{knob}/disable_ipv6"), "1");
    }
    let io = |what: &str| {
        let what = what.to_string();
        move |err: io::Error| LinkError::Io { what, err }
    };
    sys::tun::set_up("lo").map_err(io("bringing up lo in the new namespace"))?;
    let (tun, name) = sys::tun::create_tun_opts(TUN_NAME, dev.napi, dev.gso).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            LinkError::Setup("/dev/net/tun is missing: the kernel has no TUN support (modprobe tun)".into())
        }
        io::ErrorKind::PermissionDenied => LinkError::Privilege(format!(
            "cannot open /dev/net/tun: permission denied ({}); as root this works, and without root it needs the \
             device to be world read-writable (mode 0666, as most distributions ship it)",
            tun_mode()
        )),
        _ => LinkError::Io { what: "creating the TUN device (TUNSETIFF)".into(), err: e },
    })?;
    sys::tun::set_mtu(&name, mtu).map_err(io("setting the TUN MTU"))?;
    if dev.txqueuelen != 0 {
        match sys::tun::set_txqueuelen(&name, dev.txqueuelen) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && dev.txqueuelen == DEFAULT_TXQUEUELEN => {}
            r => r.map_err(io("setting the TUN txqueuelen"))?,
        }
    }
    sys::tun::set_ipv4(&name, ip, PREFIX).map_err(io("setting the TUN address"))?;
    sys::tun::set_up(&name).map_err(io("bringing the TUN device up"))?;
    // No default route: the connected /24 reaches the other end, and anything else (the
    // host's DNS server in /etc/resolv.conf, e.g. the reverse lookup `python3 -m http.server`
    // makes at start) fails at once with ENETUNREACH instead of going into the link, dying
    // at the far end and making the resolver wait its full timeout (QA 17).
    let ns = File::open("/proc/thread-self/ns/net").map_err(io("opening /proc/thread-self/ns/net"))?;
    if dev.napi && dev.threaded_napi {
        set_threaded_napi(&name)?;
    }
    Ok((OwnedFd::from(ns), tun))
}

/// Write 1 to `/sys/class/net/NAME/threaded` (net/core/net-sysfs.c threaded_store ->
/// dev_set_threaded). /sys shows the devices of the namespace that mounted it, so this thread
/// (about to exit) takes a private mount namespace (unshare(2): CLONE_NEWNS implies CLONE_FS,
/// allowed in a multi-threaded process) and mounts a fresh sysfs over /sys there; nothing is
/// visible outside the thread and the mount goes with it.
fn set_threaded_napi(name: &str) -> Result<(), LinkError> {
    use nix::mount::{mount, MsFlags};
    let err = |what: &str, e: nix::Error| LinkError::Setup(format!("threaded NAPI: {what}: {}", e.desc()));
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| err("unshare(CLONE_NEWNS)", e))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| err("making / private", e))?;
    mount(Some("sysfs"), "/sys", Some("sysfs"), MsFlags::empty(), None::<&str>)
        .map_err(|e| err("mounting sysfs", e))?;
    std::fs::write(format!("/sys/class/net/{name}/threaded"), "1")
        .map_err(|e| LinkError::Io { what: format!("writing /sys/class/net/{name}/threaded"), err: e })
}

fn tun_mode() -> String {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata("/dev/net/tun") {
        Ok(m) => format!("mode {:04o} here", m.permissions().mode() & 0o7777),
        Err(e) => e.to_string(),
    }
}

pub(crate) fn privilege_hint(what: &str, e: nix::Error) -> String {
    match e {
        nix::Error::EPERM => {
            format!("{what}: operation not permitted (needs root, or CAP_SYS_ADMIN in a user namespace)")
        }
        other => format!("{what}: {}", other.desc()),
    }
}

/// Run `f` on a new thread that has entered the network namespace `ns` (sockets it creates
/// live there and keep working after the thread ends).
pub fn run_in<T: Send, F: FnOnce() -> T + Send>(ns: BorrowedFd<'_>, f: F) -> Result<T, LinkError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(ns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| LinkError::Privilege(privilege_hint("entering the namespace (setns)", e)))?;
            Ok(f())
        })
        .join()
        .map_err(|_| LinkError::Setup("thread in namespace panicked".into()))?
    })
}

/// The transmit "drop" column of `dev` in a /proc/net/dev table (proc(5): after the name, 8
/// receive columns, then bytes, packets, errs, drop, ... for transmit).
pub fn parse_tx_dropped(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        rest.split_whitespace().nth(11)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn tx_drop_column_of_proc_net_dev() {
        let t = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
tcpstall0: 1500 1 0 0 0 0 0 0 3000 2 0 17 0 0 0 0\n";
        assert_eq!(super::parse_tx_dropped(t, "tcpstall0"), Some(17));
        assert_eq!(super::parse_tx_dropped(t, "lo"), Some(0));
        assert_eq!(super::parse_tx_dropped(t, "eth0"), None);
    }
}
