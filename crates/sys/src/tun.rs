//! TUN devices and the interface ioctls that configure them (owned by the link work).
//!
//! Everything here acts on the network namespace of the *calling thread*: a TUN device is
//! created in the namespace current at `TUNSETIFF` time, and the `SIOCSIF*` / `SIOCADDRT`
//! ioctls act on the namespace of the socket they are issued on, which is the namespace of the
//! thread that created it. The file descriptor of a TUN device keeps working from any thread
//! and any namespace afterwards (drivers/net/tun.c binds the device to the fd, not to a task).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// `struct ifreq` from <linux/if.h>: 16 bytes of name, then a 24-byte union (the largest
/// member, `struct ifmap`, is 24 bytes on 64-bit; 16 on 32-bit, where 24 is merely generous).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name '{name}'")));
        }
        let mut r = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        for (d, s) in r.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(r)
    }
    fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }
    fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }
    fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }
    /// A `struct sockaddr_in` for AF_INET: family, port 0, address (network order).
    fn set_sockaddr_in(&mut self, a: Ipv4Addr) {
        self.data[..16].copy_from_slice(&sockaddr_in_bytes(a));
    }
    fn name_string(&self) -> String {
        let bytes: Vec<u8> = self.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

fn sockaddr_in_bytes(a: Ipv4Addr) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    b[4..8].copy_from_slice(&a.octets());
    b
}

fn sockaddr_in(a: Ipv4Addr) -> libc::sockaddr {
    let b = sockaddr_in_bytes(a);
    let mut sa = libc::sockaddr { sa_family: libc::AF_INET as libc::sa_family_t, sa_data: [0; 14] };
    for (d, s) in sa.sa_data.iter_mut().zip(&b[2..]) {
        *d = *s as libc::c_char;
    }
    sa
}

/// An AF_INET datagram socket in the calling thread's network namespace, the handle the
/// interface ioctls are issued on.
fn ctl_socket() -> io::Result<OwnedFd> {
    let s = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    Ok(s)
}

/// Create a TUN device (IFF_TUN | IFF_NO_PI: raw IP packets, no 4-byte packet-info header) in
/// the calling thread's network namespace. The fd is non-blocking. Returns the fd and the
/// device's name as the kernel assigned it.
pub fn create_tun(name: &str) -> io::Result<(OwnedFd, String)> {
    create_tun_with(name, false)
}

/// [`create_tun`], optionally with `IFF_NAPI`: a packet written to the device is queued on the
/// device's NAPI instance and received by its poll (drivers/net/tun.c: tun_get_user queues the
/// skb and calls napi_schedule, tun_napi_poll -> tun_napi_receive -> napi_gro_receive) instead
/// of by netif_receive_skb directly in the writer's context (tun_rx_batched).
pub fn create_tun_with(name: &str, napi: bool) -> io::Result<(OwnedFd, String)> {
    create_tun_opts(name, napi, false)
}

/// Bytes of the `struct virtio_net_hdr` before each packet of a device made with `gso`
/// (include/uapi/linux/virtio_net.h, without mergeable buffers: flags, gso_type, hdr_len,
/// gso_size, csum_start, csum_offset).
pub const VNET_HDR_LEN: usize = 10;

/// [`create_tun_with`], and with `gso`: IFF_VNET_HDR and TUNSETOFFLOAD(TUN_F_CSUM | TUN_F_TSO4
/// | TUN_F_TSO6), so the kernel hands the reader whole TSO/GSO super-packets (up to 64 KB, with
/// a partial checksum) each behind a virtio_net_hdr that describes them, and takes them back the
/// same way (drivers/net/tun.c: tun_put_user / tun_get_user, virtio_net_hdr_from_skb /
/// virtio_net_hdr_to_skb).
pub fn create_tun_opts(name: &str, napi: bool, gso: bool) -> io::Result<(OwnedFd, String)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = IfReq::new(name)?;
    let napi = if napi { libc::IFF_NAPI } else { 0 };
    let vnet = if gso { libc::IFF_VNET_HDR } else { 0 };
    req.set_short((libc::IFF_TUN | libc::IFF_NO_PI | napi | vnet) as i16);
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `req` is a live, properly sized
    // (40-byte) repr(C) value for the duration of the call, and the fd is a valid open
    // /dev/net/tun descriptor owned by `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if gso {
        let flags = (libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6) as libc::c_ulong;
        // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of TUN_F_* bits),
        // no memory is passed; the fd is the open /dev/net/tun descriptor owned by `file`.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETOFFLOAD as _, flags) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((OwnedFd::from(file), req.name_string()))
}

fn ifreq_ioctl(sock: &OwnedFd, request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: every SIOC[GS]IF* request used here reads/writes one `struct ifreq`, which `req`
    // points to and which outlives the call; `sock` is an open socket. SIOCETHTOOL (only from
    // `ethtool_flag`) also writes one `struct ethtool_value` through `ifr_data`, which points
    // at a live local of that function for the whole call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, req as *mut IfReq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `ip link set NAME mtu MTU` (SIOCSIFMTU), in the calling thread's namespace.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut req = IfReq::new(name)?;
    req.set_int(i32::try_from(mtu).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mtu too large"))?);
    ifreq_ioctl(&s, libc::SIOCSIFMTU, &mut req)
}

/// `ip link set NAME txqueuelen LEN` (SIOCSIFTXQLEN, net/core/dev_ioctl.c -> dev_change_tx_queue_len).
/// For a TUN device this is the length of the ring of packets waiting for the reader:
/// drivers/net/tun.c resizes it on NETDEV_CHANGE_TX_QUEUE_LEN (tun_queue_resize), and
/// tun_net_xmit drops what does not fit.
pub fn set_txqueuelen(name: &str, len: u32) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut req = IfReq::new(name)?;
    req.set_int(i32::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "txqueuelen too large"))?);
    ifreq_ioctl(&s, libc::SIOCSIFTXQLEN, &mut req)
}

/// `ip addr add ADDR/PREFIX dev NAME` (SIOCSIFADDR then SIOCSIFNETMASK). The kernel adds the
/// connected route for the prefix (fib_add_ifaddr in net/ipv4/fib_frontend.c) once the device
/// is up.
pub fn set_ipv4(name: &str, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut req = IfReq::new(name)?;
    req.set_sockaddr_in(addr);
    ifreq_ioctl(&s, libc::SIOCSIFADDR, &mut req)?;
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix.min(32))) };
    let mut req = IfReq::new(name)?;
    req.set_sockaddr_in(Ipv4Addr::from(mask));
    ifreq_ioctl(&s, libc::SIOCSIFNETMASK, &mut req)
}

/// `ip link set NAME up` (SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP added).
pub fn set_up(name: &str) -> io::Result<()> {
    let s = ctl_socket()?;
    let mut req = IfReq::new(name)?;
    ifreq_ioctl(&s, libc::SIOCGIFFLAGS, &mut req)?;
    let flags = req.short() | libc::IFF_UP as i16;
    req.set_short(flags);
    ifreq_ioctl(&s, libc::SIOCSIFFLAGS, &mut req)
}

/// `ip route add default dev NAME` (SIOCADDRT with no gateway: a device route), in the calling
/// thread's namespace.
pub fn add_default_route(name: &str) -> io::Result<()> {
    let s = ctl_socket()?;
    let dev = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad name"))?;
    let any = sockaddr_in(Ipv4Addr::UNSPECIFIED);
    let mut rt = libc::rtentry {
        rt_pad1: 0,
        rt_dst: any,
        rt_gateway: any,
        rt_genmask: any,
        rt_flags: libc::RTF_UP,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_tos: 0,
        rt_class: 0,
        rt_pad4: [0; 3],
        rt_metric: 0,
        rt_dev: dev.as_ptr() as *mut libc::c_char,
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    // SAFETY: SIOCADDRT reads one `struct rtentry` (net/ipv4/af_inet.c -> ip_rt_ioctl), which
    // `rt` is; `rt_dev` points into `dev`, a NUL-terminated string alive until after the call.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCADDRT as _, &mut rt as *mut libc::rtentry) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// SIOCETHTOOL: `ifr_data` (the first pointer-sized bytes of the union) points at a
// `struct ethtool_value` the kernel fills in; the ifreq_ioctl SAFETY comment covers the call, and
// `v` lives on the stack of `ethtool_flag` for the whole call.

/// `ETHTOOL_GGRO` (include/uapi/linux/ethtool.h): is generic receive offload on.
pub const ETHTOOL_GGRO: u32 = 0x0000_002b;
/// `ETHTOOL_GTSO`: is TCP segmentation offload on.
pub const ETHTOOL_GTSO: u32 = 0x0000_001e;
/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// `struct ethtool_value` (include/uapi/linux/ethtool.h).
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `ethtool -k NAME` for one legacy on/off feature (`ETHTOOL_GGRO`, `ETHTOOL_GTSO`), through
/// SIOCETHTOOL (net/ethtool/ioctl.c `ethtool_get_value`), in the calling thread's namespace.
pub fn ethtool_flag(name: &str, cmd: u32) -> io::Result<bool> {
    let s = ctl_socket()?;
    let mut req = IfReq::new(name)?;
    let mut v = EthtoolValue { cmd, data: 0 };
    let ptr = std::ptr::addr_of_mut!(v) as usize;
    req.data[..std::mem::size_of::<usize>()].copy_from_slice(&ptr.to_ne_bytes());
    ifreq_ioctl(&s, SIOCETHTOOL, &mut req)?;
    Ok(v.data != 0)
}
