//! A row's latency: its percentiles (`latency_us`, [`Latency`]) and the distribution behind
//! them, for the HTML report's CDF and histogram.
//!
//! Every percentile is the nearest-rank quantile of `crate::stats`: exact from the samples
//! when the row kept them ([`Latency::of_samples_ns`]: the lab's rounds, the model, the
//! folded rows of `connection = "new"`), and HdrHistogram's value at that rank, to 3
//! significant digits, when only the histogram was kept ([`Latency::of_histogram_ns`]: the
//! lab's streams, the model's long runs).
//!
//! It rides on [`crate::RunResult`] as a side structure (`latency_dist`, not serialised: the JSON
//! contract keeps its percentiles only). Both producers fill it from an HdrHistogram with the
//! lab's bounds (1 ns to 1 hour, 3 significant digits): the lab from the histogram it already
//! keeps per row, the model from its samples. So the curves are the histogram's, never a sample.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stats::quantile;
use crate::Latency;

/// Log-spaced histogram bins per decade of latency.
pub(crate) const BINS_PER_DECADE: u32 = 20;
/// Quantile steps per half distance to 100 % (HdrHistogram's percentile iterator): about
/// 2 * this * log2(count) points, dense in the tail where p99 and p99.9 live.
const TICKS_PER_HALF_DISTANCE: u32 = 8;

/// A row's latency distribution in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatencyDist {
    /// Samples recorded.
    pub count: u64,
    /// CDF points `[value_us, fraction of samples <= value]`, increasing in both.
    pub cdf: Vec<[f64; 2]>,
    /// Histogram bins `[low_us, high_us, count]`, log-spaced (`BINS_PER_DECADE` per decade),
    /// empty bins left out.
    pub hist: Vec<[f64; 3]>,
}

/// A histogram of nanosecond values from 1 ns to 1 hour, 3 significant digits (the lab's).
pub fn histogram_ns() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds are valid")
}

impl Latency {
    /// Percentiles (µs) of nanosecond samples (any order): nearest rank, the exact maximum
    /// and mean. All zero for no samples.
    pub fn of_samples_ns(samples: &[u64]) -> Latency {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let mean = if n > 0 { sorted.iter().sum::<u64>() as f64 / n as f64 / 1e3 } else { 0.0 };
        let us = |q: f64| quantile(&sorted, q) as f64 / 1e3;
        Latency {
            p50: us(0.50),
            p90: us(0.90),
            p99: us(0.99),
            p999: us(0.999),
            max: sorted.last().map(|&m| m as f64 / 1e3).unwrap_or(0.0),
            mean,
        }
    }

    /// Percentiles (µs) of a histogram of nanosecond values, when the samples themselves were
    /// not kept: HdrHistogram's nearest-rank value (the top of its bucket, 3 significant
    /// digits).
    pub fn of_histogram_ns(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

impl LatencyDist {
    /// From nanosecond samples (recorded into [`histogram_ns`]).
    pub fn from_samples_ns(samples: impl IntoIterator<Item = u64>) -> Self {
        let mut h = histogram_ns();
        for s in samples {
            h.saturating_record(s.max(1));
        }
        Self::from_histogram_ns(&h)
    }

    /// From a histogram of nanosecond values.
    pub fn from_histogram_ns(h: &Histogram<u64>) -> Self {
        let count = h.len();
        if count == 0 {
            return LatencyDist::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut cdf: Vec<[f64; 2]> = Vec::new();
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            let x = us(h.highest_equivalent(v.value_iterated_to()));
            let q = v.quantile();
            match cdf.last_mut() {
                Some(last) if last[0] == x => last[1] = last[1].max(q),
                Some(last) if last[1] >= q => {}
                _ => cdf.push([x, q]),
            }
        }
        if let Some(last) = cdf.last_mut() {
            last[1] = 1.0;
        }
        let mut hist: Vec<[f64; 3]> = Vec::new();
        let per = f64::from(BINS_PER_DECADE);
        for v in h.iter_recorded() {
            let x = us(h.highest_equivalent(v.value_iterated_to())).max(1e-3);
            let k = (x.log10() * per).floor();
            let (lo, hi) = (10f64.powf(k / per), 10f64.powf((k + 1.0) / per));
            let n = v.count_at_value() as f64;
            match hist.last_mut() {
                Some(b) if b[0] == lo => b[2] += n,
                _ => hist.push([lo, hi, n]),
            }
        }
        LatencyDist { count, cdf, hist }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_reaches_one_and_holds_the_tail() {
        // 990 samples at 100 us, 9 at 40 ms, 1 at 200 ms: p99 = 100 us, p99.9 = 40 ms.
        let mut s = vec![100_000u64; 990];
        s.extend([40_000_000; 9]);
        s.push(200_000_000);
        let d = LatencyDist::from_samples_ns(s);
        assert_eq!(d.count, 1000);
        let at = |us: f64| d.cdf.iter().filter(|p| p[0] <= us).map(|p| p[1]).fold(0.0, f64::max);
        assert!((at(101.0) - 0.99).abs() < 1e-9, "{:?}", d.cdf);
        assert!((at(40_100.0) - 0.999).abs() < 1e-9);
        assert_eq!(d.cdf.last().unwrap()[1], 1.0);
        assert!(d.cdf.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] < w[1][1]));
        let total: f64 = d.hist.iter().map(|b| b[2]).sum();
        assert_eq!(total, 1000.0);
        let big = d.hist.iter().find(|b| b[0] <= 40_000.0 && 40_000.0 < b[1]).unwrap();
        assert_eq!(big[2], 9.0);
    }

    #[test]
    fn empty_is_empty() {
        assert_eq!(LatencyDist::from_samples_ns([]), LatencyDist::default());
        assert_eq!(Latency::of_samples_ns(&[]), Latency::default());
        assert_eq!(Latency::of_histogram_ns(&histogram_ns()), Latency::default());
    }

    /// Both paths read the same rank: the histogram's answer is the exact one rounded up to
    /// its bucket (3 significant digits).
    #[test]
    fn samples_and_histogram_agree_to_the_histograms_precision() {
        let s: Vec<u64> = (1..=1000).rev().map(|i| i * 1_001).collect();
        let exact = Latency::of_samples_ns(&s);
        assert_eq!((exact.p50, exact.p99, exact.max), (500.5, 990.99, 1001.0));
        assert!((exact.mean - 501.0005).abs() < 1e-9, "{}", exact.mean);
        let mut h = histogram_ns();
        s.iter().for_each(|&v| h.record(v).unwrap());
        let approx = Latency::of_histogram_ns(&h);
        for (a, e) in
            [(approx.p50, exact.p50), (approx.p90, exact.p90), (approx.p99, exact.p99), (approx.max, exact.max)]
        {
            assert!(a >= e && a <= e * 1.001, "{a} vs {e}");
        }
    }
}
