//! Small running statistics kept per direction (constant memory).

use serde::Serialize;
use trace::Duration;

/// Count, minimum, mean and maximum of a series of durations. Serialised as `count`,
/// `min_ns`, `mean_ns`, `max_ns` (integers that fit JSON; the running sum stays internal).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DurationStats {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub sum_ns: u128,
}

impl DurationStats {
    pub fn add(&mut self, d: Duration) {
        let v = d.as_nanos();
        if self.count == 0 || v < self.min_ns {
            self.min_ns = v;
        }
        self.max_ns = self.max_ns.max(v);
        self.sum_ns += u128::from(v);
        self.count += 1;
    }
    pub fn min(&self) -> Option<Duration> {
        (self.count > 0).then_some(Duration(self.min_ns))
    }
    pub fn max(&self) -> Option<Duration> {
        (self.count > 0).then_some(Duration(self.max_ns))
    }
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration((self.sum_ns / u128::from(self.count)) as u64))
    }
}

impl Serialize for DurationStats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("DurationStats", 4)?;
        st.serialize_field("count", &self.count)?;
        st.serialize_field("min_ns", &self.min().map(|d| d.0))?;
        st.serialize_field("mean_ns", &self.mean().map(|d| d.0))?;
        st.serialize_field("max_ns", &self.max().map(|d| d.0))?;
        st.end()
    }
}

/// Wire cost of one direction: what it put on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WireCost {
    pub packets: u64,
    pub data_segments: u64,
    /// ACK without payload, SYN, FIN or RST (what `tcp_info`'s segs_out - data_segs_out counts,
    /// minus the handshake and teardown).
    pub pure_acks: u64,
    pub payload_bytes: u64,
    /// Bytes on the wire as captured (link + IP + TCP headers + payload).
    pub wire_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sum of many long RTTs overflows u64 (and JSON integers); it is never serialised.
    #[test]
    fn huge_sums_serialise_as_json() {
        let mut s = DurationStats::default();
        for _ in 0..4 {
            s.add(Duration(u64::MAX / 2));
        }
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"count\":4") && j.contains("mean_ns"), "{j}");
    }
}
