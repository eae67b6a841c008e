//! The offset between the two hosts' clocks, from ping-pongs on the control connection.
//!
//! Each exchange gives RFC 5905's four timestamps (section 8): t1 the client sent, t2 the
//! server received, t3 the server sent, t4 the client received. Then
//!   offset theta = ((t2 - t1) + (t3 - t4)) / 2   (server clock minus client clock)
//!   delay  delta = (t4 - t1) - (t3 - t2)
//! and the true offset lies within theta +- delta/2 when the clocks do not drift meanwhile. As
//! NTP's clock filter and crusader do, only the fastest samples are trusted: queueing adds
//! delay and skews theta, so the fastest third (by delta) is kept, theta is their median, and
//! the error bound is half the smallest delay among them.

/// One exchange, all in ns (t1, t4 on the client's clock; t2, t3 on the server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

impl Sample {
    pub fn offset_ns(&self) -> i64 {
        ((self.t2 as i128 - self.t1 as i128 + self.t3 as i128 - self.t4 as i128) / 2) as i64
    }
    pub fn delay_ns(&self) -> u64 {
        let d = (self.t4 as i128 - self.t1 as i128) - (self.t3 as i128 - self.t2 as i128);
        d.max(0) as u64
    }
}

/// The estimate: server clock minus client clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    pub offset_ns: i64,
    /// The true offset is within offset_ns +- error_ns.
    pub error_ns: u64,
    /// Samples used (the fastest third) and taken.
    pub used: usize,
    pub of: usize,
}

impl std::fmt::Display for Offset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server clock - client clock = {:+.3} ms +- {:.3} ms (fastest {} of {} ping-pongs)",
            self.offset_ns as f64 / 1e6,
            self.error_ns as f64 / 1e6,
            self.used,
            self.of
        )
    }
}

/// The estimate from `samples` (None when there are none).
pub fn estimate(samples: &[Sample]) -> Option<Offset> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by_key(|x| x.delay_ns());
    let keep = s.len().div_ceil(3);
    let fast = &s[..keep];
    let offs: Vec<i64> = fast.iter().map(Sample::offset_ns).collect();
    let offset_ns = report::stats::median(offs)?;
    Some(Offset { offset_ns, error_ns: fast[0].delay_ns() / 2, used: keep, of: samples.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5905 section 8's formulas on a symmetric path: server 5 ms ahead, 1 ms each way.
    #[test]
    fn symmetric_path_gives_the_true_offset() {
        let s = Sample { t1: 100_000_000, t2: 106_000_000, t3: 106_100_000, t4: 102_100_000 };
        assert_eq!(s.offset_ns(), 5_000_000);
        assert_eq!(s.delay_ns(), 2_000_000);
    }

    #[test]
    fn queued_samples_are_left_out() {
        // Three clean samples (offset 5 ms, delay 2 ms) and six with up to 30 ms of queueing on
        // the way back (offset skewed low).
        let mut v = Vec::new();
        for i in 0..9u64 {
            let q = if i % 3 == 0 { 0 } else { i * 3_000_000 };
            let t1 = i * 1_000_000_000;
            v.push(Sample { t1, t2: t1 + 6_000_000, t3: t1 + 6_000_000, t4: t1 + 2_000_000 + q });
        }
        let o = estimate(&v).unwrap();
        assert_eq!((o.offset_ns, o.error_ns, o.used, o.of), (5_000_000, 1_000_000, 3, 9));
        assert!(o.to_string().starts_with("server clock - client clock = +5.000 ms +- 1.000 ms"));
        assert_eq!(estimate(&[]), None);
    }
}
