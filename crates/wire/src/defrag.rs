//! Reassembly of fragmented IP datagrams (IPv4: RFC 791 3.2 "Fragmentation and Reassembly";
//! IPv6: RFC 8200 4.5 "Fragment Header"), following Linux's `ip_defrag` / `ipv6_frag_rcv`
//! (net/ipv4/ip_fragment.c, net/ipv6/reassembly.c, net/ipv4/inet_fragment.c) where the RFCs
//! leave a choice. Pure: frames in, datagrams and losses out; time is the capture's.
//!
//! - A datagram is identified by (source, destination, protocol, identification) for IPv4
//!   (RFC 791 3.2), (source, destination, identification) for IPv6 (RFC 8200 4.5), and the
//!   capture interface (the same datagram seen on two interfaces is two copies).
//! - Fragments are kept sorted by offset, RFC 815's hole list in another form: the datagram is
//!   complete when the last fragment (MF clear) has come and the fragments tile 0..end.
//! - A fragment inside what is already held is a copy, dropped (Linux `IPFRAG_DUP`); one that
//!   overlaps it partly discards the whole datagram (Linux `IPFRAG_OVERLAP`, since 4.19, and RFC
//!   5722 for IPv6), as do a second last fragment with another end, bytes beyond the end, an
//!   empty fragment, or a datagram over 65,535 bytes (`ip_frag_queue`, `ip6_frag_queue`). A
//!   non-last fragment whose length is not a multiple of 8 is cut to one (Linux, IPv4).
//! - A datagram not complete [`TIMEOUT_V4_NS`] (30 s, `net.ipv4.ipfrag_time`) or
//!   [`TIMEOUT_V6_NS`] (60 s, `net.ipv6.ip6frag_time`) after its first fragment, or at the end
//!   of the capture, is given up.
//! - Memory: at most [`MAX_BYTES`] (4 MiB, `ipfrag_high_thresh`) of fragments held, counted as
//!   their captured bytes plus [`PER_FRAGMENT`] each, and at most [`MAX_DATAGRAMS`] datagrams;
//!   beyond them a new fragment is refused, as Linux refuses one beyond `ipfrag_high_thresh`.
//!
//! Every datagram given up comes back as a [`Dropped`] with its frames and reason, so the
//! frames are counted, never lost silently. A fragment cut by the snaplen is kept as captured:
//! the reassembled datagram's headers then give the lengths and the bytes stop at the first
//! byte not captured (decoded as a snaplen-cut frame).

use std::collections::VecDeque;
use std::net::IpAddr;

/// How long a datagram waits for its missing fragments: Linux's `net.ipv4.ipfrag_time`
/// default (`IP_FRAG_TIME`, 30 s); RFC 791 3.2 suggests a timer of at least 15 s.
pub(crate) const TIMEOUT_V4_NS: u64 = 30_000_000_000;
/// Linux's `net.ipv6.ip6frag_time` default (`IPV6_FRAG_TIMEOUT`, 60 s; RFC 8200 4.5: "60
/// seconds of the arrival of the first-arriving fragment").
pub(crate) const TIMEOUT_V6_NS: u64 = 60_000_000_000;
/// Bytes of fragments held at most: Linux's `ipfrag_high_thresh` default (4 MiB).
pub(crate) const MAX_BYTES: usize = 4 << 20;
/// Bookkeeping charged per fragment on top of its bytes, so empty fragments cost memory too.
pub(crate) const PER_FRAGMENT: usize = 64;
/// Datagrams being reassembled at most.
pub(crate) const MAX_DATAGRAMS: usize = 1024;
/// The largest IP datagram (IPv4 total length, IPv6 payload length: 16 bits).
const MAX_DATAGRAM: usize = 65_535;

/// Reasons a datagram is given up; each names its frames in the decode counts.
pub(crate) const NEVER_COMPLETED: &str = "datagram never completed (RFC 791 3.2, RFC 8200 4.5)";
pub(crate) const OVERLAP: &str = "overlapping or inconsistent fragments, discarded as Linux does";
pub(crate) const OVER_LIMIT: &str = "beyond the reassembly memory limit (4 MiB, as Linux's ipfrag_high_thresh)";

/// One IP fragment as the decoder read it (see [`crate::decode`]): borrowed from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fragment<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 identification (16 bits) or IPv6 fragment identification (32 bits).
    pub id: u32,
    /// IPv4 protocol (part of the key); 0 for IPv6.
    pub proto: u8,
    /// Byte offset of this fragment's data in the datagram's payload.
    pub offset: usize,
    /// More fragments follow (MF, RFC 791 3.1; M, RFC 8200 4.5).
    pub more: bool,
    /// The fragment's data length, from its IP header.
    pub len: usize,
    /// The fragment's data as captured (shorter than `len` when the snaplen cut it).
    pub data: &'a [u8],
    /// The header the datagram is rebuilt with: the whole IPv4 header (with options; only the
    /// first fragment's counts), or IPv6's fixed 40-byte header.
    pub head: &'a [u8],
    /// The upper-layer protocol: IPv4's protocol field, or the fragment header's next header.
    pub next: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    id: u32,
    proto: u8,
    iface: u32,
}

#[derive(Debug)]
struct Piece {
    offset: usize,
    end: usize,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Datagram {
    key: Key,
    /// Capture time of the first fragment (the timer starts then, as in Linux).
    first_ns: u64,
    /// The first fragment's header and upper protocol, once it came.
    head: Option<(Vec<u8>, u8)>,
    /// Sorted by offset, not overlapping.
    pieces: Vec<Piece>,
    /// The datagram's payload length, once the last fragment came.
    end: Option<usize>,
    /// Frames that carried its fragments (copies included) and their bytes on the wire.
    frames: u64,
    wire_len: u64,
    bytes: usize,
}

/// A datagram whose fragments all came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reassembled {
    /// The IP packet: the first fragment's header with the lengths of the whole, then the data.
    pub datagram: Vec<u8>,
    /// Some data was not captured (snaplen): the headers' lengths exceed the bytes.
    pub cut: bool,
    /// Frames it was carried in, and their bytes on the wire.
    pub frames: u64,
    pub wire_len: u32,
}

/// A datagram given up, with the frames that carried its fragments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub frames: u64,
    pub reason: &'static str,
    /// What was held, as a snaplen-cut datagram, when the first fragment had come: its headers
    /// say what the datagram carried (TCP, UDP, a tunnel).
    pub partial: Option<Vec<u8>>,
}

/// The datagrams being reassembled.
#[derive(Debug, Default)]
pub(crate) struct Defrag {
    pending: Vec<Datagram>,
    bytes: usize,
    dropped: VecDeque<Dropped>,
}

impl Defrag {
    /// Adds fragment `f`, captured at `ts_ns` on interface `iface` in a frame of `wire_len`
    /// bytes on the wire. Returns the datagram when this fragment completes it. A datagram it
    /// discards (or the fragment itself, when refused) shows in [`Defrag::pop_dropped`].
    pub(crate) fn push(&mut self, f: &Fragment<'_>, iface: u32, ts_ns: u64, wire_len: u32) -> Option<Reassembled> {
        let key = Key { src: f.src, dst: f.dst, id: f.id, proto: f.proto, iface };
        let cost = f.data.len().min(f.len) + PER_FRAGMENT;
        let found = self.pending.iter().position(|d| d.key == key);
        if self.bytes + cost > MAX_BYTES || (found.is_none() && self.pending.len() >= MAX_DATAGRAMS) {
            // Refused, as Linux refuses fragments beyond ipfrag_high_thresh: this frame is
            // counted now; its datagram, if held, will miss it.
            self.dropped.push_back(Dropped { frames: 1, reason: OVER_LIMIT, partial: None });
            return None;
        }
        let i = found.unwrap_or_else(|| {
            self.pending.push(Datagram {
                key,
                first_ns: ts_ns,
                head: None,
                pieces: Vec::new(),
                end: None,
                frames: 0,
                wire_len: 0,
                bytes: 0,
            });
            self.pending.len() - 1
        });
        let d = &mut self.pending[i];
        d.frames += 1;
        d.wire_len += u64::from(wire_len);
        match insert(d, f) {
            Insert::Copy => return None,
            Insert::Bad => {
                self.discard(i, OVERLAP);
                return None;
            }
            Insert::Added => {
                d.bytes += cost;
                self.bytes += cost;
            }
        }
        let d = &self.pending[i];
        if d.head.is_none() || !d.end.is_some_and(|end| tiles(&d.pieces, end)) {
            return None;
        }
        let d = self.remove(i);
        let Some((datagram, cut)) = rebuild(&d) else {
            // Longer than an IP datagram can be: no host would take it.
            self.dropped.push_back(Dropped { frames: d.frames, reason: OVERLAP, partial: None });
            return None;
        };
        Some(Reassembled { datagram, cut, frames: d.frames, wire_len: u32::try_from(d.wire_len).unwrap_or(u32::MAX) })
    }

    /// Gives up the datagrams whose timer ran out by `now_ns`.
    pub(crate) fn expire(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.pending.len() {
            let d = &self.pending[i];
            let timeout = if d.key.src.is_ipv4() { TIMEOUT_V4_NS } else { TIMEOUT_V6_NS };
            if now_ns.saturating_sub(d.first_ns) > timeout {
                self.discard(i, NEVER_COMPLETED);
            } else {
                i += 1;
            }
        }
    }

    /// The end of the capture: every datagram still waiting is given up.
    pub(crate) fn finish(&mut self) {
        while !self.pending.is_empty() {
            self.discard(0, NEVER_COMPLETED);
        }
    }

    /// The next datagram given up (discarded, timed out, refused), oldest first.
    pub(crate) fn pop_dropped(&mut self) -> Option<Dropped> {
        self.dropped.pop_front()
    }

    /// Whether datagrams are waiting (expiry has work to do).
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    fn remove(&mut self, i: usize) -> Datagram {
        let d = self.pending.swap_remove(i);
        self.bytes -= d.bytes;
        d
    }

    fn discard(&mut self, i: usize, reason: &'static str) {
        let d = self.remove(i);
        let partial = rebuild(&d).map(|(p, _)| p);
        self.dropped.push_back(Dropped { frames: d.frames, reason, partial });
    }
}

enum Insert {
    Added,
    /// Inside what is held already: a copy.
    Copy,
    /// Overlaps partly, contradicts the end, is empty or too long: the datagram is discarded.
    Bad,
}

/// Adds `f` to `d` (Linux `ip_frag_queue` and `inet_frag_queue_insert`).
fn insert(d: &mut Datagram, f: &Fragment<'_>) -> Insert {
    let offset = f.offset;
    let mut end = offset + f.len;
    if f.more {
        end &= !7; // RFC 791 3.2: non-last fragments carry a multiple of 8 octets
    }
    if end <= offset || end > MAX_DATAGRAM {
        return Insert::Bad;
    }
    match (f.more, d.end) {
        // A last fragment: nothing held beyond it, and no other last fragment ending elsewhere.
        (false, Some(e)) if e != end => return Insert::Bad,
        (false, _) if d.pieces.last().is_some_and(|p| p.end > end) => return Insert::Bad,
        (true, Some(e)) if end > e => return Insert::Bad,
        _ => {}
    }
    // The pieces held tile disjoint ranges in order: those touching [offset, end).
    let at = d.pieces.partition_point(|p| p.end <= offset);
    let mut covered = offset;
    for p in d.pieces[at..].iter().take_while(|p| p.offset < end) {
        if p.offset > covered {
            break;
        }
        covered = covered.max(p.end);
    }
    let touches = d.pieces.get(at).is_some_and(|p| p.offset < end);
    if covered >= end {
        return Insert::Copy;
    }
    if touches {
        return Insert::Bad;
    }
    if !f.more {
        d.end = Some(end);
    }
    if offset == 0 {
        d.head = Some((f.head.to_vec(), f.next));
    }
    let data = f.data[..f.data.len().min(end - offset)].to_vec();
    d.pieces.insert(at, Piece { offset, end, data });
    Insert::Added
}

/// Whether sorted, disjoint `pieces` cover 0..end without a hole.
fn tiles(pieces: &[Piece], end: usize) -> bool {
    let mut at = 0;
    for p in pieces {
        if p.offset != at {
            return false;
        }
        at = p.end;
    }
    at == end
}

/// The datagram from what `d` holds: the first fragment's header with the whole datagram's
/// length and no fragmentation, then the data captured from offset 0 until the first byte not
/// held or not captured. Returns it with `cut` (bytes stop before the lengths say), or None
/// without the first fragment or when the datagram would exceed 65,535 bytes.
fn rebuild(d: &Datagram) -> Option<(Vec<u8>, bool)> {
    let (head, next) = d.head.as_ref()?;
    let len = d.end.unwrap_or_else(|| d.pieces.last().map_or(0, |p| p.end));
    let mut out = head.clone();
    match head.first().map(|b| b >> 4) {
        // RFC 791 3.1: total length includes the header; flags and offset cleared (DF kept).
        Some(4) if head.len() >= 20 => {
            let total = u16::try_from(head.len() + len).ok()?;
            out[2..4].copy_from_slice(&total.to_be_bytes());
            out[6] &= 0x40;
            out[7] = 0;
        }
        // RFC 8200 3: payload length after the fixed header; the next header is the upper
        // layer's (the per-fragment extension headers before the fragment header are dropped).
        Some(6) if head.len() == 40 => {
            let plen = u16::try_from(len).ok()?;
            out[4..6].copy_from_slice(&plen.to_be_bytes());
            out[6] = *next;
        }
        _ => return None,
    }
    let mut at = 0;
    let mut cut = d.end.is_none();
    for p in &d.pieces {
        if p.offset != at {
            cut = true;
            break;
        }
        out.extend_from_slice(&p.data);
        if p.data.len() < p.end - p.offset {
            cut = true;
            break;
        }
        at = p.end;
    }
    Some((out, cut || at < len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A 20-byte IPv4 header (RFC 791 3.1) of a fragment: protocol 6, id 7.
    fn head4() -> Vec<u8> {
        vec![0x45, 0, 0, 0, 0, 7, 0x20, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]
    }

    fn frag<'a>(head: &'a [u8], offset: usize, more: bool, data: &'a [u8]) -> Fragment<'a> {
        Fragment {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            id: 7,
            proto: 6,
            offset,
            more,
            len: data.len(),
            data,
            head,
            next: 6,
        }
    }

    #[test]
    fn fragments_in_any_order_make_the_datagram_once() {
        // RFC 791 3.2: offsets in 8-octet units; the datagram is whole when 0..end is covered.
        let h = head4();
        let data: Vec<u8> = (0..40).collect();
        let mut r = Defrag::default();
        assert_eq!(r.push(&frag(&h, 16, true, &data[16..32]), 0, 1, 50), None);
        assert_eq!(r.push(&frag(&h, 32, false, &data[32..]), 0, 2, 30), None);
        // A copy of a fragment held changes nothing (Linux IPFRAG_DUP).
        assert_eq!(r.push(&frag(&h, 32, false, &data[32..]), 0, 2, 30), None);
        let whole = r.push(&frag(&h, 0, true, &data[..16]), 0, 3, 50).expect("complete");
        assert_eq!((whole.frames, whole.wire_len, whole.cut), (4, 160, false));
        let d = &whole.datagram;
        assert_eq!(&d[2..4], &60u16.to_be_bytes(), "total length = 20 + 40");
        assert_eq!(&d[6..8], &[0, 0], "MF and offset cleared");
        assert_eq!(&d[20..], &data[..]);
        assert!(r.is_empty() && r.pop_dropped().is_none());
        assert_eq!(r.bytes, 0);
    }

    #[test]
    fn overlap_discards_the_datagram_and_says_so() {
        // Linux (since 4.19, "ip: discard IPv4 datagrams with overlapping segments"): a
        // fragment overlapping one held, not inside it, discards the whole datagram.
        let h = head4();
        let data = [9u8; 32];
        let mut r = Defrag::default();
        assert_eq!(r.push(&frag(&h, 0, true, &data[..16]), 0, 1, 50), None);
        assert_eq!(r.push(&frag(&h, 8, false, &data[..16]), 0, 2, 50), None);
        let d = r.pop_dropped().expect("dropped");
        assert_eq!((d.frames, d.reason), (2, OVERLAP));
        // The first fragment had come: what was held says what the datagram carried.
        assert!(d.partial.is_some_and(|p| p[9] == 6));
        assert!(r.is_empty());
    }

    #[test]
    fn missing_fragments_time_out_or_end_with_the_capture() {
        let h = head4();
        let data = [1u8; 16];
        let mut r = Defrag::default();
        r.push(&frag(&h, 16, true, &data), 0, 0, 50);
        r.expire(TIMEOUT_V4_NS);
        assert!(r.pop_dropped().is_none(), "not yet");
        r.expire(TIMEOUT_V4_NS + 1);
        let d = r.pop_dropped().expect("timed out");
        assert_eq!((d.frames, d.reason, d.partial), (1, NEVER_COMPLETED, None));
        r.push(&frag(&h, 0, true, &data), 1, 5, 50);
        r.finish();
        assert_eq!(r.pop_dropped().map(|d| (d.frames, d.reason)), Some((1, NEVER_COMPLETED)));
    }

    #[test]
    fn inconsistent_ends_and_empty_fragments_are_discarded() {
        let h = head4();
        let data = [1u8; 24];
        // Two last fragments ending at different places (Linux: "different end").
        let mut r = Defrag::default();
        r.push(&frag(&h, 8, false, &data[..8]), 0, 0, 1);
        r.push(&frag(&h, 8, false, &data), 0, 0, 1);
        assert_eq!(r.pop_dropped().map(|d| d.reason), Some(OVERLAP));
        // A fragment beyond the last one's end.
        r.push(&frag(&h, 8, false, &data[..8]), 0, 0, 1);
        r.push(&frag(&h, 16, true, &data[..8]), 0, 0, 1);
        assert_eq!(r.pop_dropped().map(|d| d.reason), Some(OVERLAP));
        // An empty fragment.
        r.push(&frag(&h, 0, true, &[]), 0, 0, 1);
        assert_eq!(r.pop_dropped().map(|d| d.reason), Some(OVERLAP));
        // An offset that puts the end past 65,535 bytes.
        r.push(&frag(&h, 65_528, false, &data[..16]), 0, 0, 1);
        assert_eq!(r.pop_dropped().map(|d| d.reason), Some(OVERLAP));
        assert!(r.is_empty());
    }

    #[test]
    fn memory_and_datagram_count_are_bounded() {
        let h = head4();
        let data = vec![0u8; 20_000];
        let mut r = Defrag::default();
        let mut refused = 0;
        for id in 0..2 * MAX_DATAGRAMS as u32 {
            let f = Fragment { id, ..frag(&h, 0, true, &data[..id as usize % 2 * 16_000 + 8]) };
            r.push(&f, 0, 0, 1);
            assert!(r.bytes <= MAX_BYTES);
            while let Some(d) = r.pop_dropped() {
                assert_eq!((d.frames, d.reason), (1, OVER_LIMIT));
                refused += 1;
            }
        }
        let held = r.pending.len();
        assert!(held <= MAX_DATAGRAMS);
        assert_eq!(refused + held, 2 * MAX_DATAGRAMS);
        // Every frame is accounted for: those held are given up at the end of the capture.
        r.finish();
        let mut given_up = 0;
        while let Some(d) = r.pop_dropped() {
            assert_eq!(d.reason, NEVER_COMPLETED);
            given_up += d.frames as usize;
        }
        assert_eq!((given_up, r.bytes), (held, 0));
    }

    #[test]
    fn a_cut_fragment_gives_a_cut_datagram() {
        // Captured with a snaplen: the first fragment's data stops after 8 of 16 bytes.
        let h = head4();
        let data = [5u8; 24];
        let mut r = Defrag::default();
        let first = Fragment { len: 16, ..frag(&h, 0, true, &data[..8]) };
        r.push(&first, 0, 0, 1);
        let whole = r.push(&frag(&h, 16, false, &data[..8]), 0, 0, 1).expect("lengths complete it");
        assert!(whole.cut);
        assert_eq!(whole.datagram.len(), 20 + 8);
        assert_eq!(&whole.datagram[2..4], &44u16.to_be_bytes());
    }
}
