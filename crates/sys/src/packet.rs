//! An AF_PACKET capture socket (packet(7)) for the lab: bound to one interface by index,
//! filtered in the kernel to TCP on given ports (classic BPF, [`crate::bpf`], attached with
//! SO_ATTACH_FILTER), trimmed to a snap length that keeps the headers, read without blocking.
//!
//! Per frame the kernel gives:
//! - the bytes, trimmed to the filter's return value (`packet_rcv` calls `pskb_trim(skb,
//!   snaplen)`, net/packet/af_packet.c);
//! - the original length, from PACKET_AUXDATA (`tpacket_auxdata.tp_len`, set from
//!   `PACKET_SKB_CB(skb)->sa.origlen` before the trim; the recvmsg return value with MSG_TRUNC
//!   is the trimmed length, so it cannot be used; libpcap reads tp_len the same way);
//! - the time, from SO_TIMESTAMPNS (an SCM_TIMESTAMPNS cmsg, CLOCK_REALTIME nanoseconds,
//!   `__sock_recv_timestamp`, net/socket.c). PACKET_AUXDATA carries no time. The stamp is
//!   `skb->tstamp` set when the packet entered the receive path (`net_timestamp_check` in
//!   `netif_rx_internal`, net/core/dev.c; loopback clears the sender's EDT stamp first,
//!   `loopback_xmit` in drivers/net/loopback.c), so it does not depend on when this socket is
//!   read: reads can be batched without moving the times;
//! - the direction, `sockaddr_ll.sll_pkttype`: the filter already drops PACKET_OUTGOING; the
//!   reader checks again on loopback, as libpcap does (pcap-linux.c), in case a caller builds
//!   its own filter.
//!
//! Drops (the receive queue full) are counted by the kernel and read with PACKET_STATISTICS
//! (`packet_getsockopt`: `tp_packets`, `tp_drops`, reset by each read).

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use socket2::{Domain, Protocol, Socket, Type};

use crate::bpf;

// include/uapi/linux/if_packet.h; include/uapi/linux/if_ether.h; asm-generic/socket.h.
const SOL_PACKET: libc::c_int = 263;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_AUXDATA: libc::c_int = 8;
const ETH_P_ALL: u16 = 0x0003;
const SO_TIMESTAMPNS: libc::c_int = 35; // SO_TIMESTAMPNS_OLD: struct timespec with a native time_t
/// Receive queue asked for (the kernel doubles it for bookkeeping, `sk_setsockopt`).
const RCVBUF: libc::c_int = 64 << 20;
/// `sll_pkttype` of a packet this host sent.
pub const PACKET_OUTGOING: u8 = 4;

/// `struct tpacket_auxdata` (include/uapi/linux/if_packet.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketAuxdata {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}

/// `struct tpacket_stats` (include/uapi/linux/if_packet.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// CLOCK_REALTIME nanoseconds when the packet entered the receive path.
    pub ts_ns: u64,
    /// Length on the wire (before the snap length cut it).
    pub orig_len: u32,
    /// The first `snaplen` bytes, link header included (Ethernet on `lo`).
    pub data: Vec<u8>,
}

/// PACKET_STATISTICS, summed over the socket's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets that passed the filter (counted by the kernel, drops included).
    pub packets: u64,
    /// Of those, dropped because the receive queue was full.
    pub drops: u64,
}

/// A capture socket. See the module documentation.
pub struct PacketSocket {
    sock: Socket,
    /// Outgoing copies to skip in user space too (the interface is loopback).
    loopback: bool,
    snaplen: u32,
    buf: Vec<u8>,
    stats: Stats,
    /// Outgoing copies the filter let through and the reader skipped.
    pub skipped_outgoing: u64,
}

impl PacketSocket {
    /// A capture on `lo` of the calling thread's network namespace.
    pub fn loopback(ports: &[u16], snaplen: u32) -> io::Result<PacketSocket> {
        let ifindex = nix::net::if_::if_nametoindex("lo").map_err(io::Error::from)?;
        PacketSocket::open(ifindex, true, ports, snaplen)
    }

    /// A capture on interface `ifindex` (of the calling thread's network namespace, where the
    /// socket stays whichever thread reads it) of TCP packets to or from `ports`, each trimmed to
    /// `snaplen` bytes. `loopback` drops the outgoing copies. Needs CAP_NET_RAW in the
    /// namespace's user namespace (`packet_create`: `ns_capable(net->user_ns, CAP_NET_RAW)`),
    /// else EPERM.
    pub fn open(ifindex: u32, loopback: bool, ports: &[u16], snaplen: u32) -> io::Result<PacketSocket> {
        Self::open_with(Type::RAW, &bpf::tcp_ports(ports, snaplen, loopback), ifindex, loopback, snaplen)
    }

    /// Like `open`, but cooked (SOCK_DGRAM): every frame starts at its network header whatever
    /// the interface's framing (Ethernet, a TUN device, WireGuard), so frames are raw IP
    /// (LINKTYPE_RAW); `ifindex` 0 is every interface. The filter is `bpf::tcp_l3`, which reads
    /// the network header where SOCK_DGRAM puts it. Outgoing copies are kept (on an interface
    /// other than loopback they are this host's sent packets).
    pub fn open_cooked(ifindex: u32, ports: &[u16], snaplen: u32) -> io::Result<PacketSocket> {
        Self::open_with(Type::DGRAM, &bpf::tcp_l3(ports, &[], snaplen, None), ifindex, false, snaplen)
    }

    /// The socket of `open` and `open_cooked`: `kind` RAW or DGRAM, `filter` attached before bind.
    fn open_with(
        kind: Type,
        filter: &[libc::sock_filter],
        ifindex: u32,
        loopback: bool,
        snaplen: u32,
    ) -> io::Result<PacketSocket> {
        // Protocol 0: the socket is not hooked into the stack until bind (`packet_create` only
        // registers the hook for a non-zero protocol), so no unfiltered packet is queued before
        // the filter is attached (packet(7): "If protocol is set to zero, no packets are
        // received").
        let sock = Socket::new(Domain::PACKET, kind, Some(Protocol::from(0)))?;
        sock.attach_filter(filter)?;
        set_int(sock.as_fd(), libc::SOL_SOCKET, SO_TIMESTAMPNS, 1)?;
        set_int(sock.as_fd(), SOL_PACKET, PACKET_AUXDATA, 1)?;
        // A deep queue: each queued packet is charged its whole skb (`skb_set_owner_r` in
        // `packet_rcv` charges truesize, not the snap length), and a loopback GSO packet is ~64
        // KB. SO_RCVBUFFORCE passes net.core.rmem_max with CAP_NET_ADMIN (`sk_setsockopt`,
        // net/core/sock.c); without it SO_RCVBUF gets at most rmem_max. Memory is only used
        // while packets wait.
        if set_int(sock.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
            let _ = sock.set_recv_buffer_size(RCVBUF as usize);
        }
        sock.set_nonblocking(true)?;
        bind(sock.as_fd(), ifindex)?;
        Ok(PacketSocket {
            sock,
            loopback,
            snaplen,
            buf: vec![0; snaplen as usize],
            stats: Stats::default(),
            skipped_outgoing: 0,
        })
    }

    /// Reads every frame queued now (never blocks) into `out`; returns how many.
    pub fn read_available(&mut self, out: &mut Vec<Frame>) -> io::Result<usize> {
        let mut n = 0;
        loop {
            match self.recv_one()? {
                Some(Some(f)) => {
                    out.push(f);
                    n += 1;
                }
                Some(None) => {}
                None => return Ok(n),
            }
        }
    }

    /// Waits until a frame is queued or `timeout_ms` passed; true when one is.
    pub fn wait(&self, timeout_ms: u16) -> io::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(timeout_ms)) {
            Ok(n) => Ok(n > 0),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// One recvmsg: Ok(None) when the queue is empty, Ok(Some(None)) for a skipped frame.
    fn recv_one(&mut self) -> io::Result<Option<Option<Frame>>> {
        let mut addr = MaybeUninit::<libc::sockaddr_ll>::zeroed();
        // u64 elements keep the control buffer aligned for cmsghdr.
        let mut control = [0u64; 32];
        let mut iov = libc::iovec { iov_base: self.buf.as_mut_ptr().cast(), iov_len: self.buf.len() };
        // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = addr.as_mut_ptr().cast();
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<[u64; 32]>() as _;
        // SAFETY: every pointer in `msg` points at a live local or at `self.buf`, with the length
        // given beside it; the kernel writes at most those lengths and updates msg_namelen,
        // msg_controllen and msg_flags. The fd is our open socket.
        let rc = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => Ok(Some(None)),
                _ => Err(e),
            };
        }
        let got = (rc as usize).min(self.buf.len());
        // SAFETY: the kernel filled (or left zeroed) the sockaddr_ll; every bit pattern of it is
        // a valid value.
        let addr = unsafe { addr.assume_init() };
        if self.loopback && addr.sll_pkttype == PACKET_OUTGOING {
            self.skipped_outgoing += 1;
            return Ok(Some(None));
        }
        let (mut ts_ns, mut orig_len) = (None, None);
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR walk the control buffer within msg_controllen, which
        // the kernel set to what it wrote into `control`; each header they return lies inside
        // it; CMSG_DATA points into the same buffer and the reads are unaligned copies of at
        // most the cmsg's length (checked against cmsg_len first).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let data = libc::CMSG_DATA(c);
                let room = (h.cmsg_len as usize).saturating_sub(data.offset_from(c.cast::<u8>()) as usize);
                if h.cmsg_level == libc::SOL_SOCKET
                    && h.cmsg_type == SO_TIMESTAMPNS
                    && room >= size_of::<libc::timespec>()
                {
                    let t = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                    ts_ns = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                } else if h.cmsg_level == SOL_PACKET
                    && h.cmsg_type == PACKET_AUXDATA
                    && room >= size_of::<TpacketAuxdata>()
                {
                    let a = std::ptr::read_unaligned(data.cast::<TpacketAuxdata>());
                    orig_len = Some(a.tp_len);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let ts_ns = match ts_ns {
            Some(t) => t,
            // Never expected with SO_TIMESTAMPNS set; the time of reading is the best left.
            None => nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)
                .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
                .unwrap_or(0),
        };
        Ok(Some(Some(Frame {
            ts_ns,
            orig_len: orig_len.unwrap_or(got as u32).max(got as u32),
            data: self.buf[..got].to_vec(),
        })))
    }

    /// PACKET_STATISTICS so far (the kernel resets its counters at each read; they are summed
    /// here).
    pub fn statistics(&mut self) -> io::Result<Stats> {
        let mut s = TpacketStats::default();
        let mut len = size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: `s` is a live, writable `tpacket_stats` of `len` bytes; the kernel copies at
        // most `len` bytes (`packet_getsockopt`) and writes the count back to `len`.
        let rc = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut s as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.stats.packets += u64::from(s.tp_packets);
        self.stats.drops += u64::from(s.tp_drops);
        Ok(self.stats)
    }

    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }
}

pub(crate) fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` is a live c_int and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// bind(2) to every protocol (ETH_P_ALL) on one interface (packet(7): only sll_protocol and
/// sll_ifindex are used; `packet_do_bind` registers the hook with them).
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_ll is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = ETH_P_ALL.to_be();
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: `sa` is a live sockaddr_ll and its exact size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn captures_its_ports_on_loopback_once_each() {
        if !is_root() {
            eprintln!("skipped: needs CAP_NET_RAW (run as root)");
            return;
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // Traffic on another port in the same namespace must not show.
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut cap = PacketSocket::loopback(&[port], 128).unwrap();
        let t0 = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let _o = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let _oa = other.accept().unwrap();
        c.write_all(&[7u8; 3000]).unwrap();
        let mut got = vec![0u8; 3000];
        s.read_exact(&mut got).unwrap();
        drop(c);
        drop(s);
        let mut frames = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // SYN, SYN-ACK, ACK, data, its ACK, FIN/ACK both ways: at least 7 frames.
        while frames.len() < 7 && std::time::Instant::now() < deadline {
            cap.wait(100).unwrap();
            cap.read_available(&mut frames).unwrap();
        }
        let stats = cap.statistics().unwrap();
        assert!(frames.len() >= 7, "{} frames", frames.len());
        assert_eq!(stats.drops, 0);
        let t0 = t0.tv_sec() as u64 * 1_000_000_000 + t0.tv_nsec() as u64;
        for f in &frames {
            // Ethernet, IPv4, TCP, one of our ports; trimmed to the snap length.
            assert_eq!(&f.data[12..14], &[0x08, 0x00]);
            assert_eq!(f.data[23], 6);
            let ihl = usize::from(f.data[14] & 0xf) * 4;
            let sport = u16::from_be_bytes([f.data[14 + ihl], f.data[15 + ihl]]);
            let dport = u16::from_be_bytes([f.data[16 + ihl], f.data[17 + ihl]]);
            assert!(sport == port || dport == port, "ports {sport} {dport}");
            assert!(f.data.len() <= 128);
            assert!(f.orig_len as usize >= f.data.len());
            assert!(f.ts_ns + 1_000_000 >= t0, "kernel stamp before the test started");
        }
        // The 3000 data bytes kept their original length although at most 128 bytes of each
        // frame were copied, and were seen once, not twice (outgoing copies skipped): all
        // frames' original lengths add up to the data plus under 3000 bytes of headers.
        let total: u64 = frames.iter().map(|f| u64::from(f.orig_len)).sum();
        assert!((3000..6000).contains(&total), "{:?}", frames.iter().map(|f| f.orig_len).collect::<Vec<_>>());
        let syns = frames.iter().filter(|f| f.data[14 + usize::from(f.data[14] & 0xf) * 4 + 13] == 0x02).count();
        assert_eq!(syns, 1, "the SYN appears once");
        // (Queue order is not time order: on loopback each CPU stamps its own packets in
        // netif_rx, so two CPUs' packets can reach the socket's queue stamped out of order; the
        // decoder counts and orders those, wire::DecodeStats.)
    }
}
