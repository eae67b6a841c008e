//! Sequence numbers: the one place that says how tcpstall orders and measures them.
//!
//! A TCP sequence number is a point on a circle of 2^32 (RFC 9293 3.4: "all arithmetic dealing
//! with sequence numbers must be performed modulo 2^32"). There is no global "less than" on a
//! circle; RFC 9293 3.4 (after RFC 1982's serial-number arithmetic) uses the local one: `a < b`
//! when going forward from `a` reaches `b` in fewer than 2^31 steps, that is when
//! `(b - a) mod 2^32` lies in `1..2^31`. Written as a signed 32-bit difference,
//! `(a - b) as i32 < 0`.
//!
//! **Why that order is correct here.** A sender never has more than 2^31 bytes of its own
//! sequence space in play at once: the window is at most 2^30 bytes (RFC 7323 2.3: the scale
//! shift is at most 14, 65535 << 14 < 2^30), and both ends refuse segments outside it. So any two
//! numbers the analyser compares (a segment against `snd_nxt`, an ACK against `snd_una`, a SACK
//! edge against the ACK) are less than 2^31 apart, and on that half circle the local order is a
//! total order that agrees with the order the bytes were sent in, across the wrap from
//! `u32::MAX` to 0.
//!
//! **Its limit.** Two numbers exactly 2^31 apart are each "less" than the other, and the order
//! is not transitive over more than half the circle (a < b < c < a is possible). The `Ord`
//! below is therefore a total order only on a set of numbers spanning less than 2^31. Do not
//! sort, or key a `BTreeMap` by, numbers that may span more than that (a whole long capture);
//! compare numbers of one window, as TCP does. A capture that jumps by 2^30 or more between
//! two segments is not a window's worth of progress: the analyser treats such a jump as a
//! fresh start (see `analyze`'s `plausible_advance`).
//!
//! The arithmetic is as smoltcp's `TcpSeqNumber`, except that nothing panics: `a + n` and
//! `a - n` move along the circle, and `b - a` is the distance forward from `a` to `b`,
//! modulo 2^32 (meaningful as a byte count when `a <= b`).

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A TCP sequence (or acknowledgement, or SACK edge) number, ordered and measured modulo 2^32
/// (see the module doc for why, and the limit of 2^31). Serialises as the plain number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqNum(pub u32);

impl Ord for SeqNum {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0.wrapping_sub(other.0) as i32).cmp(&0)
    }
}

impl PartialOrd for SeqNum {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `n` bytes further along the sequence space.
impl Add<u32> for SeqNum {
    type Output = SeqNum;
    fn add(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }
}

impl AddAssign<u32> for SeqNum {
    fn add_assign(&mut self, n: u32) {
        *self = *self + n;
    }
}

/// `n` bytes back along the sequence space.
impl Sub<u32> for SeqNum {
    type Output = SeqNum;
    fn sub(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(n))
    }
}

/// The distance forward from `rhs` to `self`, in bytes of sequence space (modulo 2^32).
impl Sub for SeqNum {
    type Output = u32;
    fn sub(self, rhs: SeqNum) -> u32 {
        self.0.wrapping_sub(rhs.0)
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::SeqNum;

    /// RFC 9293 3.4: comparisons are modulo 2^32.
    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(SeqNum(u32::MAX - 5) < SeqNum(10));
        assert!(SeqNum(10) > SeqNum(u32::MAX - 5));
        assert!(SeqNum(7) <= SeqNum(7) && SeqNum(7) >= SeqNum(7));
        assert!(SeqNum(1) < SeqNum(1 << 30));
        assert_eq!(SeqNum(u32::MAX - 5).max(SeqNum(10)), SeqNum(10));
    }

    #[test]
    fn arithmetic_moves_along_the_circle() {
        assert_eq!(SeqNum(u32::MAX - 1) + 3, SeqNum(1));
        assert_eq!(SeqNum(1) - 3, SeqNum(u32::MAX - 1));
        assert_eq!(SeqNum(1) - SeqNum(u32::MAX - 1), 3, "the distance forward, across the wrap");
        let mut s = SeqNum(u32::MAX);
        s += 1;
        assert_eq!(s, SeqNum(0));
    }

    /// The limit: 2^31 apart, each is before the other.
    #[test]
    fn half_the_circle_apart_has_no_order() {
        let (a, b) = (SeqNum(0), SeqNum(1 << 31));
        assert!(a < b && b < a);
    }
}
