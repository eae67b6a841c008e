//! Builders for tests, so a test names only the fields it is about.

use crate::{RecordKind, Stall};
use trace::{Cause, Duration, Endpoint, Instant};

/// A record of `cause` lasting `length` from `start`: A's 10 bytes held, B waiting, confidence
/// 0.9, no evidence, no detail; its kind the one the cause implies (`application` a gap,
/// `unknown` a wait, any other a stall). Change the rest with struct update syntax:
/// `Stall { confidence: 0.95, ..stall(Instant::ZERO, Duration::from_millis(40), cause) }`.
pub fn stall(start: Instant, length: Duration, cause: Cause) -> Stall {
    Stall {
        start,
        length,
        waited: Endpoint::B,
        held: Endpoint::A,
        bytes_held: 10,
        cause,
        confidence: 0.9,
        evidence: Vec::new(),
        ack_delay: None,
        detail: String::new(),
        kind: match cause {
            Cause::Application => RecordKind::Gap,
            Cause::Unknown => RecordKind::Wait,
            _ => RecordKind::Stall,
        },
        alternatives: Vec::new(),
        settle: None,
    }
}
