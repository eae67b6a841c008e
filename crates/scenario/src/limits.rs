//! Bounds on every workload parameter, in one table shared by the scenario files, `--set` and
//! tcp_test.conf, so all three reject the same values with the same one-line message.
//!
//! The bounds are chosen so that legitimate experiments fit with room to spare, while a typo
//! (an extra zero or three) is rejected before anything is allocated or run:
//! - memory: the lab preallocates, per latency sample, 8 bytes for the sample and room for 4
//!   long waits of 16 bytes (72 bytes); the model keeps a 40-byte record per sample. At
//!   [`MAX_SAMPLES`] that is 72 MB and 40 MB: under ~100 MB either way (measured on this
//!   machine: `simulate rr --rounds 1000000` peaks at 90 MB RSS in 0.9 s).
//! - bytes: one message is at most [`MAX_BYTES`], however many writes it is made of.
//! - time: every count is bounded, so no run is unbounded; warmup, which nobody reads, is
//!   bounded much lower than the measured rounds.

use crate::ScenarioError;

/// Largest single message or write tcpstall accepts (64 MiB): larger sizes are almost certainly
/// a typo and would only exhaust memory. Also the bound on a whole multi-write request.
pub const MAX_BYTES: u32 = 64 << 20;

/// Most latency samples one run records (rounds, or rounds x n for burst, which samples every
/// reply): 72 bytes each in the lab (see the module comment), so at most 72 MB.
pub const MAX_SAMPLES: u64 = 1_000_000;

// The lab's worst case (an 8-byte sample and 4 waits of 16 bytes per sample, crates/lab
// measure.rs Recorder::with_capacity) stays under 100 MB.
const _: () = assert!(MAX_SAMPLES * (8 + 4 * 16) < 100_000_000);

/// Most warmup exchanges. Warmup only has to outlast the kernel's initial quick-ACK budget
/// (TCP_MAX_QUICKACKS = 16, include/net/tcp.h) and reach pingpong mode; 10,000 is far past that.
pub const MAX_WARMUP: u64 = 10_000;

/// Most writes in one message: writev/sendmsg takes at most UIO_MAXIOV = 1024 iovecs
/// (include/uapi/linux/uio.h; more is EINVAL), so the `writev` strategy could not send more as
/// one call. Bounds `n_chunk` and the length of `writes`.
pub const MAX_WRITES: u64 = 1024;

/// Most messages in one burst: a burst compiles to 2 steps per message on each side.
pub const MAX_BURST_N: u64 = 10_000;

/// Most bytes one burst may send before reading a reply (1 MiB). The client writes all `n`
/// messages before it reads any reply, so the replies wait in the server's send buffer and the
/// client's receive buffer, the requests in the client's send buffer and the server's receive
/// buffer; once all four are full both sides block in send(): a deadlock, not a stall. With
/// Linux defaults (tcp_wmem 4096 16384 4194304, tcp_rmem 4096 131072 33554432, net.ipv4
/// sysctls; the client's receive buffer does not autotune while it is not reading,
/// tcp_rcv_space_adjust runs from tcp_recvmsg) this machine's lab deadlocked between 1.06 MB and
/// 2.1 MB of 132-byte messages and passed at 1 MiB for sizes 64 to 65536: 1 MiB keeps about a
/// factor of two.
pub const MAX_BURST_BYTES: u64 = 1 << 20;

/// Deepest bulk-ack pipeline (messages in flight).
pub const MAX_DEPTH: u64 = 64;

/// Most variants one sweep expands to (sizes x depths): every byte across two full-size
/// segments at MTU 1500 (2 x 1448 = 2896) fits.
pub const MAX_VARIANTS: u64 = 4096;

/// Longest pause between burst rounds (1 minute).
pub const MAX_INTERVAL_MS: u64 = 60_000;

/// Longest stream run (10 minutes).
pub const MAX_DURATION_MS: u64 = 600_000;

/// One parameter's bounds: `min..=max`, and why the maximum.
struct Bound {
    min: u64,
    max: u64,
    why: &'static str,
}

const fn bytes() -> Bound {
    Bound { min: 1, max: MAX_BYTES as u64, why: "bytes in one message or write" }
}

const ROUNDS: Bound = Bound { min: 1, max: MAX_SAMPLES, why: "each round keeps a latency sample in memory" };

/// The bounds of a workload parameter, by name (each name means the same thing in every
/// workload that has it); `writes` and `sweep` name their elements, `depth` also the elements of
/// a depth sweep.
fn bound(name: &str) -> Option<Bound> {
    Some(match name {
        "send" | "size" | "response" | "write_size" | "writes" | "sweep" => bytes(),
        "round" | "requests" | "rounds" => ROUNDS,
        "n_chunk" => Bound { min: 1, max: MAX_WRITES, why: "UIO_MAXIOV, the most writev can gather" },
        "warmup" => Bound { min: 0, max: MAX_WARMUP, why: "warmup only has to pass the 16-exchange quick-ACK budget" },
        "n" => Bound { min: 1, max: MAX_BURST_N, why: "messages in one burst" },
        "depth" | "depths" => Bound { min: 1, max: MAX_DEPTH, why: "messages in flight" },
        "interval_ms" => Bound { min: 0, max: MAX_INTERVAL_MS, why: "1 minute" },
        "duration_ms" => Bound { min: 1, max: MAX_DURATION_MS, why: "10 minutes" },
        _ => return None,
    })
}

/// Check one value of parameter `name` against its bounds. Takes `i128` so that `--set` can
/// check what the user typed before it is narrowed to the field's type.
pub(crate) fn check(name: &str, v: i128) -> Result<(), ScenarioError> {
    let Some(b) = bound(name) else { return Ok(()) };
    let what = match name {
        "writes" => "each of writes",
        "sweep" => "each size of sweep",
        "depths" => "each of depths",
        n => n,
    };
    if v < i128::from(b.min) {
        return Err(ScenarioError::Invalid(format!("{what} must be at least {}", b.min)));
    }
    if v > i128::from(b.max) {
        return Err(ScenarioError::Invalid(format!("{what} = {v} is above the limit of {} ({})", b.max, b.why)));
    }
    Ok(())
}

/// `what` (a product or a length) must not exceed `max`; the message says why.
pub(crate) fn at_most(what: &str, v: u64, max: u64, why: &str) -> Result<(), ScenarioError> {
    if v > max {
        return Err(ScenarioError::Invalid(format!("{what} = {v} is above the limit of {max} ({why})")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_has_an_upper_bound_that_names_itself() {
        for name in ["round", "requests", "rounds", "warmup", "n", "n_chunk", "depth", "interval_ms", "duration_ms"] {
            let e = check(name, 4_000_000_000).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{name} = 4000000000 is above the limit of ")), "{e}");
            assert_eq!(e.lines().count(), 1);
        }
        assert_eq!(
            check("round", 1_000_001).unwrap_err().to_string(),
            "round = 1000001 is above the limit of 1000000 (each round keeps a latency sample in memory)"
        );
        assert!(check("round", 1_000_000).is_ok());
        assert!(check("warmup", 0).is_ok());
        assert_eq!(check("round", 0).unwrap_err().to_string(), "round must be at least 1");
        assert_eq!(check("warmup", -1).unwrap_err().to_string(), "warmup must be at least 0");
    }
}
