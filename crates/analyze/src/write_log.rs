//! The writer's writes: when the bytes a segment carries existed.
//!
//! A capture cannot see when the application wrote; the lab and the model report their writes
//! (`EventKind::Write`), and kernel evidence reports every `sendmsg` with the sequence number it
//! starts at (`tcp:tcp_sendmsg_locked`, the socket's `write_seq`). With them, "the writer had
//! written" is measured rather than inferred: a gap whose bytes were written before it began is
//! a wait; one whose bytes were written as they left is the application's. Pure.

use std::collections::VecDeque;
use trace::{Evidence, Instant, SeqNum};

/// Writes remembered per direction whose bytes have not all left (memory stays bounded when a
/// trace reports writes the capture never shows leaving).
const MAX_WRITES: usize = 4_096;

/// One write: the sequence space it filled and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WriteRec {
    pub seq: SeqNum,
    pub end: SeqNum,
    pub t: Instant,
    pub source: Evidence,
    pub bytes: u32,
    /// Reported by the kernel (`sendmsg`), not by the application.
    pub kernel: bool,
}

/// One direction's writes.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteLog {
    pending: VecDeque<WriteRec>,
    /// Where the next write without a sequence number (an application-reported `Write`) starts.
    next_seq: Option<SeqNum>,
    /// The trace reports this side's writes.
    pub seen: bool,
}

impl WriteLog {
    /// A write of `bytes` at `t`. `seq`: where it starts, when the kernel said; else it follows
    /// the previous write, or starts at `snd_nxt` (the direction's next new byte: after the SYN,
    /// ISN + 1) for the first.
    pub(crate) fn on_write(
        &mut self,
        t: Instant,
        bytes: u32,
        seq: Option<SeqNum>,
        snd_nxt: Option<SeqNum>,
        source: Evidence,
    ) {
        let Some(seq) = seq.or(self.next_seq).or(snd_nxt) else { return };
        if bytes == 0 {
            return;
        }
        self.seen = true;
        let end = seq + bytes;
        self.next_seq = Some(end);
        if self.pending.len() == MAX_WRITES {
            self.pending.pop_front();
        }
        let kernel = matches!(source, Evidence::Kernel(_));
        self.pending.push_back(WriteRec { seq, end, t, source, bytes, kernel });
    }

    /// The write that filled byte `seq` (the first byte of a segment leaving now). Writes wholly
    /// below it have left and are forgotten.
    pub(crate) fn covering(&mut self, seq: SeqNum) -> Option<WriteRec> {
        while self.pending.front().is_some_and(|w| w.end <= seq) {
            self.pending.pop_front();
        }
        self.pending.front().copied().filter(|w| w.seq <= seq && seq < w.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_writes_follow_each_other_from_the_first_byte() {
        let mut w = WriteLog::default();
        w.on_write(Instant(10), 100, None, Some(SeqNum(1001)), Evidence::Lab);
        w.on_write(Instant(20), 50, None, Some(SeqNum(9999)), Evidence::Lab);
        assert_eq!(w.covering(SeqNum(1001)).map(|r| r.t), Some(Instant(10)));
        assert_eq!(w.covering(SeqNum(1120)).map(|r| r.t), Some(Instant(20)));
        assert_eq!(w.covering(SeqNum(1151)), None, "not written yet");
        assert!(w.seen);
    }

    #[test]
    fn kernel_writes_carry_their_sequence_number() {
        let mut w = WriteLog::default();
        w.on_write(Instant(5), 54, Some(SeqNum(u32::MAX - 10)), None, Evidence::Kernel(1));
        let r = w.covering(SeqNum(u32::MAX - 10)).unwrap();
        assert!(r.kernel && r.bytes == 54);
        assert!(w.covering(SeqNum(40)).is_some(), "wraps around 2^32 (RFC 9293 3.4)");
    }
}
