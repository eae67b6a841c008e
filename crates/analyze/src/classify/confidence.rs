//! What a confidence means: named levels, and the bands they fall in.
//!
//! Each rule gives its verdict one of these levels, and caveats (what the capture point or a
//! missing handshake hides) scale it down by the factors below. The bands are calibrated on a
//! labelled set (docs/explain.md, "Calibration"; the test `calibration` in
//! crates/model/tests/calibration.rs holds the table): the top band needs the write times
//! (kernel evidence, or the lab's and the model's own record of the writes).

/// The mechanism's signature and the write times: the bytes were written before the wait
/// began (kernel `sendmsg`, or the lab's/model's write record) and the signature is whole.
pub const WRITES_AND_SIGNATURE: f64 = 0.95;
/// The whole packet signature of a mechanism: a resend at the timer's own interval, a small
/// segment held behind an unacknowledged small one and released by an ACK at a delayed-ACK
/// timer's interval, a window closed and reopened just before the release.
pub const SIGNATURE: f64 = 0.85;
/// The signature with one part unmeasured or off its usual value (the ACK's delay not at a
/// timer interval, a hole filled rather than a range resent).
pub const SIGNATURE_PARTIAL: f64 = 0.7;
/// A mechanism consistent with the packets, with other explanations not excluded.
pub const CONSISTENT: f64 = 0.55;
/// Several explanations fit equally: ambiguous, not counted as a stall.
pub const AMBIGUOUS: f64 = 0.35;
/// Nothing names a mechanism.
pub const NO_SIGNATURE: f64 = 0.25;

/// A gap where nothing was held, shown by the writer's own clock or an ACK of everything.
pub const GAP_SHOWN: f64 = 0.8;
/// A gap where nothing was held, inferred (the packets show no hold).
pub const GAP_INFERRED: f64 = 0.6;

/// Caveat factors.
pub mod factor {
    /// No handshake: the path RTT (and so every ACK delay) is estimated from ACK timing.
    pub const NO_HANDSHAKE: f64 = 0.85;
    /// GRO/TSO super-packets hide segment boundaries.
    pub const SUPER_PACKETS: f64 = 0.85;
    /// The releasing ACK was stamped just after the data it released.
    pub const ACK_AFTER_RELEASE: f64 = 0.95;
    /// The capture point is unknown.
    pub const UNKNOWN_CAPTURE_POINT: f64 = 0.95;
}

/// A stall record is counted as a stall only at or above this confidence; below it, the
/// record is ambiguous.
pub const STALL_MIN: f64 = 0.5;

/// The confidence bands of the calibration table (docs/explain.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Band {
    /// Below [`STALL_MIN`]: ambiguous.
    Low,
    /// [0.5, 0.75): a mechanism consistent with the packets.
    Medium,
    /// [0.75, 0.9): the packet signature.
    High,
    /// [0.9, 1]: the signature with the write times.
    Top,
}

impl Band {
    pub const ALL: [Band; 4] = [Band::Top, Band::High, Band::Medium, Band::Low];

    pub fn of(confidence: f64) -> Band {
        if confidence >= 0.9 {
            Band::Top
        } else if confidence >= 0.75 {
            Band::High
        } else if confidence >= STALL_MIN {
            Band::Medium
        } else {
            Band::Low
        }
    }

    pub fn range(self) -> &'static str {
        match self {
            Band::Top => "0.90-1.00",
            Band::High => "0.75-0.89",
            Band::Medium => "0.50-0.74",
            Band::Low => "0.00-0.49",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_fall_in_their_bands() {
        assert_eq!(Band::of(WRITES_AND_SIGNATURE), Band::Top);
        assert_eq!(Band::of(SIGNATURE), Band::High);
        assert_eq!(Band::of(SIGNATURE_PARTIAL), Band::Medium);
        assert_eq!(Band::of(CONSISTENT), Band::Medium);
        assert_eq!(Band::of(AMBIGUOUS), Band::Low);
        // A packet signature never reaches the top band, whatever the caveats.
        assert!(SIGNATURE < 0.9);
    }
}
