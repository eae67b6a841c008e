//! What every run of one candidate measured, pooled: the latency samples of each run (for the
//! two-stage bootstrap), the stalls, the wire and the CPU.

use std::collections::BTreeMap;

use report::advise::StallSource;
use report::RunResult;

/// One candidate's runs, pooled.
#[derive(Debug, Default, Clone)]
pub struct Pooled {
    /// Each run's latency samples (ns).
    pub runs: Vec<Vec<u64>>,
    pub rounds: u64,
    pub stalls: u64,
    /// Stall records by cause (classified rows only).
    pub causes: BTreeMap<String, u64>,
    /// Rows whose stalls are slow samples (no stall records: the lab without capture).
    pub unclassified_rows: u32,
    pub segs: u64,
    pub wire_bytes: u64,
    pub rows: u32,
    /// Both sides' CPU (µs) and the rounds it covers, from rows that measured it (lab).
    pub cpu_us: f64,
    pub cpu_rounds: u64,
}

impl Pooled {
    /// Add one row of a run whose report has `mode` ("lab", "simulate").
    pub fn add(&mut self, r: &RunResult, mode: &str) {
        self.runs.push(r.samples_ns.clone());
        self.rounds += r.rounds;
        self.rows += 1;
        self.segs += r.wire.client.segs_out + r.wire.server.segs_out;
        self.wire_bytes += r.wire.client.wire_bytes + r.wire.server.wire_bytes;
        if let Some(c) = &r.cpu {
            self.cpu_us += c.client_cpu_us + c.server_cpu_us;
            self.cpu_rounds += r.rounds;
        }
        // A lab row without its packets (no capture) has no stall records: its stall count is
        // its slow samples. Stalls whose mechanism the packets do not show (`unknown`) do not
        // count against a candidate, as they make no verdict key.
        let classified = mode != "lab" || r.capture.is_some();
        if classified {
            for c in &r.stall_summary.by_cause {
                if c.cause.names_a_mechanism() {
                    self.stalls += c.count;
                    *self.causes.entry(c.cause.as_str().to_string()).or_default() += c.count;
                }
            }
        } else {
            self.stalls += r.slow_samples;
            self.unclassified_rows += 1;
        }
    }

    /// `v` per measured round (0 without rounds).
    pub fn per_round(&self, v: u64) -> f64 {
        if self.rounds > 0 {
            v as f64 / self.rounds as f64
        } else {
            0.0
        }
    }

    /// Both sides' CPU per round (µs), when a row measured it.
    pub fn cpu_us_per_round(&self) -> Option<f64> {
        (self.cpu_rounds > 0).then(|| self.cpu_us / self.cpu_rounds as f64)
    }

    /// Slow samples when any row had no packets to classify, else stall records.
    pub fn stall_source(&self) -> StallSource {
        if self.unclassified_rows > 0 {
            StallSource::SlowSamples
        } else {
            StallSource::StallRecords
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_per_round_and_the_stall_source() {
        let p = Pooled { rounds: 10, stalls: 2, unclassified_rows: 1, ..Pooled::default() };
        assert_eq!(p.per_round(p.stalls), 0.2);
        assert_eq!(p.stall_source(), StallSource::SlowSamples);
        let m = Pooled { cpu_us: 50.0, cpu_rounds: 10, ..Pooled::default() };
        assert_eq!((m.stall_source(), m.per_round(3)), (StallSource::StallRecords, 0.0));
        assert_eq!(m.cpu_us_per_round(), Some(5.0));
    }
}
