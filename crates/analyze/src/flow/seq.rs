//! A direction's sequence bookkeeping that needs nothing but its own state: retiring
//! acknowledged segments, RTT samples, duplicate ACKs, resends.

use crate::dir::{ts_before, Dir};
use trace::{Evidence, Instant, Segment, SeqNum};

/// Drops the segments `ack` covers from `dir`'s outstanding list; returns when the earliest of
/// them that was sent once went out, and records the RTT of the one `ack` ends exactly (Karn's
/// rule, RFC 6298 3: no sample from a resent segment).
pub(super) fn retire_acked(dir: &mut Dir, ack: SeqNum, t: Instant) -> Option<Instant> {
    let mut earliest: Option<Instant> = None;
    let mut exact_rtt = None;
    while let Some(s) = dir.outstanding.front().copied() {
        if s.end > ack {
            break;
        }
        dir.outstanding.pop_front();
        dir.out_bytes -= u64::from(s.len);
        dir.out_small -= usize::from(s.small);
        if !s.retx {
            earliest = Some(earliest.map_or(s.t, |e: Instant| e.min(s.t)));
            if s.end == ack {
                exact_rtt = Some(t.since(s.t));
            }
        }
    }
    if let Some(r) = exact_rtt {
        dir.sum.rtt_ack.add(r);
        dir.rtt_lows.add(r);
    }
    earliest
}

/// RFC 7323 4.1: the RTT sample of an echoed TSval (`ecr`), matched against the TSvals `dir`
/// sent; older ones are dropped.
pub(super) fn rtt_from_echo(dir: &mut Dir, ecr: u32, t: Instant) {
    while let Some(&(v, vt)) = dir.tsvals.front() {
        if ts_before(v, ecr) {
            dir.tsvals.pop_front();
        } else {
            if v == ecr {
                dir.sum.rtt_ts.add(t.since(vt));
                dir.tsvals.pop_front();
            }
            break;
        }
    }
}

/// A duplicate ACK of `dir`'s data.
pub(super) fn on_dupack(dir: &mut Dir, seg: &Segment, t: Instant) {
    // RFC 5681 2 (DUPLICATE ACKNOWLEDGMENT), RFC 6675 for SACK blocks.
    dir.dupacks += 1;
    dir.sack_in_dupacks |= seg.sack_blocks > 0;
    // The ACK that triggers fast retransmit (RFC 5681 3.2: the third; with SACK, RFC
    // 6675 5's DupThresh or a SACK block that shows loss, taken here as the first).
    // Each SACK dupack can trigger a resend (RFC 6675 5, RACK RFC 8985 6.2): the latest.
    if seg.sack_blocks > 0 {
        dir.last_sack_dupack = Some(t);
    }
    if dir.third_dupack.is_none() && (dir.dupacks == 3 || (dir.sack_in_dupacks && dir.dupacks >= 1)) {
        dir.third_dupack = Some(t);
    }
}

/// A data segment resending `dir`'s sequence space up to `end`: counted, and the outstanding
/// segments it covers marked resent.
pub(super) fn mark_resent(dir: &mut Dir, seg: &Segment, end: SeqNum, t: Instant, frame: Evidence) {
    dir.sum.retransmissions += 1;
    // Duplicate ACKs count from the head's latest transmission (RFC 5681 3.2): those
    // before a resend of the head did not trigger the next one. Resends of later
    // ranges (SACK recovery, RFC 6675) keep the count: the same dupacks drive them.
    if seg.seq == dir.snd_una {
        dir.dupacks = 0;
        dir.sack_in_dupacks = false;
        dir.third_dupack = None;
        dir.last_sack_dupack = None;
    }
    for s in dir.outstanding.iter_mut() {
        if seg.seq < s.end && s.start() < end {
            s.retx = true;
            s.last_tx = (t, frame);
        }
    }
}
