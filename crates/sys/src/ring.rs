//! An AF_PACKET capture with a TPACKET_V3 memory-mapped receive ring (packet(7),
//! Documentation/networking/packet_mmap.rst) for `tcpstall watch`: the kernel writes packets
//! into blocks of a ring shared with this process and hands a block over when it is full or its
//! timer (`tp_retire_blk_tov`) expires; the reader walks the block and gives it back. No copy
//! per packet into user space and no system call per packet.
//!
//! The socket is SOCK_DGRAM (cooked): each packet starts at its network header whatever the
//! interface's link layer (Ethernet, loopback, TUN, none), so one filter and one decoder serve
//! `--interface any`. The classic BPF filter (crate::bpf::tcp_l3) is attached before the bind,
//! so only the TCP packets asked for are ever copied, trimmed to the snap length.
//!
//! Layouts (include/uapi/linux/if_packet.h): `struct tpacket_req3`, `struct
//! tpacket_block_desc` (block_status at 8, num_pkts at 12, offset_to_first_pkt at 16), `struct
//! tpacket3_hdr` (48 bytes: tp_next_offset 0, tp_sec 4, tp_nsec 8, tp_snaplen 12, tp_len 16,
//! tp_status 20, tp_mac 24, tp_net 26) followed at TPACKET_ALIGN(48) = 48 by `struct
//! sockaddr_ll` (sll_ifindex at +4, sll_pkttype at +10). Block parsing is pure
//! ([`parse_block`]) and tested on bytes built here.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{fence, Ordering};

use socket2::{Domain, Protocol, Socket, Type};

use crate::bpf::Insn;
use crate::packet::{bind, set_int};

const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// The block's frames were not all copied: the ring was full (`TP_STATUS_LOSING`).
const TP_STATUS_LOSING: u32 = 1 << 2;
const SO_TIMESTAMPNS: libc::c_int = 35;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

/// One packet in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFrame<'a> {
    /// CLOCK_REALTIME ns when the packet entered the receive (or transmit) path.
    pub ts_ns: u64,
    /// Length on the wire (network layer, before the snap length).
    pub orig_len: u32,
    pub ifindex: i32,
    /// `sll_pkttype`: 0 host, 4 outgoing (a packet this host sent), ...
    pub pkttype: u8,
    /// From the network header, at most the snap length.
    pub data: &'a [u8],
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4).map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}
fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

/// Walks the packets of one block handed to user space (pure). Returns the packets read and
/// whether the kernel flagged the block as losing packets; a malformed offset stops the walk.
pub fn parse_block(block: &[u8], mut each: impl FnMut(RingFrame<'_>)) -> (u32, bool) {
    let (Some(num), Some(first)) = (u32_at(block, 12), u32_at(block, 16)) else { return (0, false) };
    let mut off = first as usize;
    let mut losing = false;
    let mut n = 0;
    for _ in 0..num {
        let h = off;
        let (Some(next), Some(sec), Some(nsec), Some(snap), Some(len), Some(status), Some(net)) = (
            u32_at(block, h),
            u32_at(block, h + 4),
            u32_at(block, h + 8),
            u32_at(block, h + 12),
            u32_at(block, h + 16),
            u32_at(block, h + 20),
            u16_at(block, h + 26),
        ) else {
            break;
        };
        let sll = h + 48;
        let (Some(ifindex), Some(pkttype)) = (u32_at(block, sll + 4), block.get(sll + 10).copied()) else { break };
        let start = h + net as usize;
        let Some(data) = block.get(start..start + snap as usize) else { break };
        losing |= status & TP_STATUS_LOSING != 0;
        each(RingFrame {
            ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
            orig_len: len,
            ifindex: ifindex as i32,
            pkttype,
            data,
        });
        n += 1;
        if next == 0 {
            break;
        }
        off += next as usize;
    }
    (n, losing)
}

/// The ring's counters (PACKET_STATISTICS, summed over the socket's life).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Packets that passed the filter, drops included.
    pub packets: u64,
    /// Of those, dropped because no block was free.
    pub drops: u64,
    /// Times the queue was frozen for want of a free block.
    pub freezes: u64,
}

/// The capture socket and its mapped ring.
pub struct Ring {
    sock: Socket,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    next: usize,
    stats: RingStats,
}

// SAFETY: the mapping is owned by this value alone and only touched through &mut self (or &self
// for reads of blocks the kernel handed over); moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    /// A capture on interface `ifindex` (0 = every interface) of the calling thread's network
    /// namespace, filtered by `filter` (attached before the bind), with `blocks` blocks of
    /// `block_size` bytes (a power of two multiple of the page size) retired after
    /// `retire_ms` at most. Needs CAP_NET_RAW (EPERM otherwise).
    pub fn open(ifindex: u32, filter: &[Insn], block_size: u32, blocks: u32, retire_ms: u32) -> io::Result<Ring> {
        // Protocol 0: no packet is queued before the bind (see crate::packet).
        let sock = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(0)))?;
        sock.attach_filter(filter)?;
        set_int(sock.as_fd(), SOL_PACKET, PACKET_VERSION, TPACKET_V3)?;
        let _ = set_int(sock.as_fd(), libc::SOL_SOCKET, SO_TIMESTAMPNS, 1);
        let req = TpacketReq3 {
            tp_block_size: block_size,
            tp_block_nr: blocks,
            // Frames are variable-sized in V3; frame_size/nr only pass the kernel's checks
            // (`packet_set_ring`: frame_nr = block_size / frame_size * block_nr).
            tp_frame_size: 2048,
            tp_frame_nr: block_size / 2048 * blocks,
            tp_retire_blk_tov: retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        // SAFETY: `req` is a live tpacket_req3 and its exact size is passed; the kernel reads it.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                SOL_PACKET,
                PACKET_RX_RING,
                (&req as *const TpacketReq3).cast(),
                std::mem::size_of::<TpacketReq3>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let map_len = block_size as usize * blocks as usize;
        // SAFETY: a shared read/write mapping of the ring the kernel just allocated for this
        // socket (packet_mmap); the length is the ring's; the result is checked for MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                sock.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED can fail on RLIMIT_MEMLOCK: map without it.
            // SAFETY: as above, without MAP_LOCKED.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    sock.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            m
        } else {
            map
        };
        bind(sock.as_fd(), ifindex)?;
        Ok(Ring {
            sock,
            map: map.cast(),
            map_len,
            block_size: block_size as usize,
            blocks: blocks as usize,
            next: 0,
            stats: RingStats::default(),
        })
    }

    /// Leaves this socket out of the transmit taps (PACKET_IGNORE_OUTGOING, Linux 4.20+): an
    /// outgoing packet is then neither cloned for it nor run through its filter
    /// (`dev_queue_xmit_nit` skips a `packet_type` with `ignore_outgoing`, net/core/dev.c). On
    /// loopback every packet also arrives, so nothing is lost; a filter that drops outgoing
    /// copies only saves the copy, not the clone made before the filter runs. Errors with
    /// ENOPROTOOPT on older kernels (the filter still drops the copies there).
    pub fn ignore_outgoing(&self) -> io::Result<()> {
        set_int(self.sock.as_fd(), SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    }

    fn status(&self, b: usize) -> u32 {
        // SAFETY: block `b` < blocks lies inside the mapping; block_status is an aligned u32 at
        // offset 8 that the kernel writes: read it volatile, then order the reads of the block
        // after it (the kernel publishes the block with smp_wmb before setting the status).
        let s = unsafe { std::ptr::read_volatile(self.map.add(b * self.block_size + 8).cast::<u32>()) };
        fence(Ordering::Acquire);
        s
    }

    /// Waits up to `timeout_ms` for a block (true when one is ready).
    pub fn wait(&self, timeout_ms: u16) -> io::Result<bool> {
        if self.status(self.next) & TP_STATUS_USER != 0 {
            return Ok(true);
        }
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN | PollFlags::POLLERR)];
        match poll(&mut fds, PollTimeout::from(timeout_ms)) {
            Ok(_) => Ok(self.status(self.next) & TP_STATUS_USER != 0),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads every block handed over now, in ring order, and gives each back to the kernel.
    /// Returns the packets read and whether a block was flagged as losing packets.
    pub fn drain(&mut self, mut each: impl FnMut(RingFrame<'_>)) -> (u64, bool) {
        let (mut n, mut losing) = (0u64, false);
        for _ in 0..self.blocks {
            let b = self.next;
            if self.status(b) & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the kernel handed block `b` (inside the mapping) to user space: it does not
            // write it until the status is set back to TP_STATUS_KERNEL below.
            let block = unsafe { std::slice::from_raw_parts(self.map.add(b * self.block_size), self.block_size) };
            let (k, l) = parse_block(block, &mut each);
            n += u64::from(k);
            losing |= l;
            fence(Ordering::Release);
            // SAFETY: the same aligned u32 as `status`; writing TP_STATUS_KERNEL returns the
            // block to the kernel (packet_mmap.rst); the parse above is ordered before it.
            unsafe { std::ptr::write_volatile(self.map.add(b * self.block_size + 8).cast::<u32>(), TP_STATUS_KERNEL) };
            self.next = (b + 1) % self.blocks;
        }
        (n, losing)
    }

    /// PACKET_STATISTICS (the kernel resets them at each read; summed here).
    pub fn statistics(&mut self) -> io::Result<RingStats> {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` is a live tpacket_stats_v3 and `len` its size; the kernel writes at most len.
        let rc = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.stats.packets += u64::from(st.tp_packets);
        self.stats.drops += u64::from(st.tp_drops);
        self.stats.freezes += u64::from(st.tp_freeze_q_cnt);
        Ok(self.stats)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once; the socket closes after this.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block as the kernel writes it: two packets with their headers and sockaddr_ll.
    #[test]
    fn a_block_is_walked_by_its_offsets() {
        let mut b = vec![0u8; 4096];
        let put = |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, 8, TP_STATUS_USER);
        put(&mut b, 12, 2); // num_pkts
        put(&mut b, 16, 48); // offset_to_first_pkt
        for (k, (h, next, payload)) in [(48usize, 160u32, &b"abcd"[..]), (208, 0, &b"xyz"[..])].iter().enumerate() {
            put(&mut b, *h, *next);
            put(&mut b, h + 4, 100 + k as u32);
            put(&mut b, h + 8, 5);
            put(&mut b, h + 12, payload.len() as u32);
            put(&mut b, h + 16, 1500);
            put(&mut b, h + 20, if k == 1 { TP_STATUS_LOSING } else { 0 });
            b[h + 26..h + 28].copy_from_slice(&80u16.to_ne_bytes()); // tp_net
            put(&mut b, h + 48 + 4, 7); // sll_ifindex
            b[h + 48 + 10] = if k == 0 { 0 } else { 4 };
            b[h + 80..h + 80 + payload.len()].copy_from_slice(payload);
        }
        let mut seen = Vec::new();
        let (n, losing) = parse_block(&b, |f| seen.push((f.ts_ns, f.orig_len, f.ifindex, f.pkttype, f.data.to_vec())));
        assert_eq!((n, losing), (2, true));
        assert_eq!(seen[0], (100_000_000_005, 1500, 7, 0, b"abcd".to_vec()));
        assert_eq!(seen[1], (101_000_000_005, 1500, 7, 4, b"xyz".to_vec()));
        // A truncated block stops the walk instead of reading past it.
        assert_eq!(parse_block(&b[..230], |_| {}).0, 1);
    }
}
