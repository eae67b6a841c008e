//! Builders for tests, so a test names only the fields it is about.

use crate::{Segment, SeqNum, TcpFlags};

/// A segment with the given numbers, flags (`TcpFlags::*` bits) and payload length; the rest
/// as a plain IPv4 segment with timestamps would be captured: window 1000, no options, no SACK
/// blocks, no TTL, 66 + `len` bytes on the wire. Change the rest with struct update syntax:
/// `Segment { window: 512, ..segment(1000, 5000, TcpFlags::ACK, 0) }`.
pub fn segment(seq: u32, ack: u32, flags: u8, len: u32) -> Segment {
    Segment {
        seq: SeqNum(seq),
        ack: SeqNum(ack),
        flags: TcpFlags(flags),
        len,
        window: 1000,
        wscale: None,
        mss: None,
        ts: None,
        sack_blocks: 0,
        sack: [(SeqNum(0), SeqNum(0)); 4],
        wire_len: 66 + len,
        ttl: None,
        ip_id: None,
    }
}

impl Segment {
    /// This segment carrying the SACK blocks `blocks` (left and right edges, at most 4).
    pub fn with_sack(mut self, blocks: &[(u32, u32)]) -> Segment {
        self.sack_blocks = blocks.len().min(4) as u8;
        for (slot, &(l, r)) in self.sack.iter_mut().zip(blocks) {
            *slot = (SeqNum(l), SeqNum(r));
        }
        self
    }
}
