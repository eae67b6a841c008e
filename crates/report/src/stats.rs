//! The one owner of every statistic the outputs print: the nearest-rank quantile, the median,
//! quantiles with their bootstrap confidence intervals over repeated runs, and the [`Interval`]
//! they come in. `Latency::of_samples_ns` (crate::latency) takes a row's percentiles from here,
//! for the lab, the model and the folded rows of `connection = "new"` alike.
//!
//! Each candidate fix of `advise` is run several times (interleaved with the others, so drift
//! hits all alike); each run gives its rounds' latencies. The interval is a two-stage bootstrap
//! for clustered data (Davison & Hinkley, *Bootstrap Methods and their Application*, 1997,
//! 2.4.2): resample the runs with replacement, then the rounds within each chosen run, pool,
//! take the quantile; the 95% interval is the 2.5th and 97.5th percentile of those replicates
//! (the percentile interval, Efron & Tibshirani 1993, 13.3). Resampling runs first keeps
//! run-to-run drift inside the interval instead of pretending every round is independent.

use std::cmp::Ordering;

use rand::Rng;
use serde::Serialize;

/// A statistic with its 95% confidence interval (same unit as the samples).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Interval {
    pub est: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn overlaps(&self, o: &Interval) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }
}

/// Nearest-rank quantile of sorted samples (Hyndman & Fan 1996, definition 1): the smallest
/// sample with at least `q` of the samples at or below it. 0 for no samples.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Values with a total order, for [`median`]: integers, and floats by `f64::total_cmp`.
pub trait Ordered: Copy {
    fn order(&self, other: &Self) -> Ordering;
}

impl Ordered for u64 {
    fn order(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl Ordered for i64 {
    fn order(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl Ordered for f64 {
    fn order(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

/// The median: the middle value, or the upper of the two middle values of an even count
/// (the sample at index `len / 2` once sorted). None for no values; each caller says what
/// an empty list prints as.
pub fn median<T: Ordered>(mut v: Vec<T>) -> Option<T> {
    v.sort_unstable_by(T::order);
    v.get(v.len() / 2).copied()
}

/// The quantiles `qs` of all runs pooled, each with its two-stage bootstrap 95% interval from
/// `iters` replicates. Runs without samples are ignored. The randomness is the caller's.
pub fn bootstrap_quantiles<R: Rng>(runs: &[Vec<u64>], qs: &[f64], iters: usize, rng: &mut R) -> Vec<Interval> {
    let runs: Vec<&Vec<u64>> = runs.iter().filter(|r| !r.is_empty()).collect();
    let mut pooled: Vec<u64> = runs.iter().flat_map(|r| r.iter().copied()).collect();
    pooled.sort_unstable();
    let est: Vec<f64> = qs.iter().map(|&q| quantile(&pooled, q) as f64).collect();
    if runs.is_empty() || iters == 0 {
        return est.iter().map(|&e| Interval { est: e, lo: e, hi: e }).collect();
    }
    let mut reps: Vec<Vec<f64>> = vec![Vec::with_capacity(iters); qs.len()];
    let mut buf = Vec::with_capacity(pooled.len());
    for _ in 0..iters {
        buf.clear();
        for _ in 0..runs.len() {
            let run = runs[rng.gen_range(0..runs.len())];
            for _ in 0..run.len() {
                buf.push(run[rng.gen_range(0..run.len())]);
            }
        }
        buf.sort_unstable();
        for (k, &q) in qs.iter().enumerate() {
            reps[k].push(quantile(&buf, q) as f64);
        }
    }
    reps.iter_mut()
        .zip(est)
        .map(|(r, est)| {
            r.sort_by(f64::total_cmp);
            let at = |p: f64| r[((p * (r.len() - 1) as f64).round() as usize).min(r.len() - 1)];
            Interval { est, lo: at(0.025), hi: at(0.975) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&s, 0.5), 50);
        assert_eq!(quantile(&s, 0.99), 99);
        assert_eq!(quantile(&s, 0.999), 100);
        assert_eq!(quantile(&s, 1.0), 100);
        assert_eq!(quantile(&s, 0.0), 1);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[7], 0.99), 7);
    }

    #[test]
    fn the_median_is_the_upper_middle_and_none_when_empty() {
        assert_eq!(median(vec![3u64, 1, 2]), Some(2));
        assert_eq!(median(vec![4u64, 1, 3, 2]), Some(3));
        assert_eq!(median(Vec::<u64>::new()), None);
        assert_eq!(median(vec![2.5, -1.0, 9.0, 0.5]), Some(2.5));
        assert_eq!(median(Vec::<f64>::new()), None);
    }

    #[test]
    fn the_interval_contains_the_estimate_and_is_reproducible_for_a_seed() {
        let mut rng = SmallRng::seed_from_u64(7);
        let runs: Vec<Vec<u64>> = (0..5).map(|r| (0..40).map(|i| 1000 + (i * 37 + r * 11) % 200).collect()).collect();
        let a = bootstrap_quantiles(&runs, &[0.5, 0.99], 500, &mut rng);
        for i in &a {
            assert!(i.lo <= i.est && i.est <= i.hi, "{i:?}");
        }
        assert!(a[0].hi - a[0].lo < 100.0, "a median of 200 samples is tight: {:?}", a[0]);
        let b = bootstrap_quantiles(&runs, &[0.5, 0.99], 500, &mut SmallRng::seed_from_u64(7));
        let c = bootstrap_quantiles(&runs, &[0.5, 0.99], 500, &mut SmallRng::seed_from_u64(7));
        assert_eq!(b, c);
    }

    /// A 40 ms stall in 5% of rounds: the p99 is the stall and its interval stays far above a
    /// stall-free candidate's, so the two are told apart; the p50 is not moved by it.
    #[test]
    fn stalls_in_the_tail_separate_the_p99_not_the_p50() {
        let mut rng = SmallRng::seed_from_u64(1);
        let stalled: Vec<Vec<u64>> =
            (0..4).map(|_| (0..50).map(|i| if i % 20 == 0 { 40_000_000 } else { 30_000 }).collect()).collect();
        let clean: Vec<Vec<u64>> = (0..4).map(|_| (0..50).map(|i| 28_000 + i * 100).collect()).collect();
        let s = bootstrap_quantiles(&stalled, &[0.5, 0.99], 1000, &mut rng);
        let c = bootstrap_quantiles(&clean, &[0.5, 0.99], 1000, &mut rng);
        assert_eq!(s[1].est, 40_000_000.0);
        assert!(!s[1].overlaps(&c[1]), "{:?} vs {:?}", s[1], c[1]);
        assert_eq!(s[0].est, 30_000.0);
        assert!(c[1].hi < 40_000.0);
    }

    /// Drift between runs widens the interval: a run-level bootstrap sees that one run was slow.
    #[test]
    fn run_to_run_drift_widens_the_interval() {
        let mut rng = SmallRng::seed_from_u64(3);
        let steady: Vec<Vec<u64>> = (0..6).map(|_| vec![100; 30]).collect();
        let mut drifted = steady.clone();
        drifted[0] = vec![300; 30];
        let a = bootstrap_quantiles(&steady, &[0.75], 500, &mut rng)[0];
        let b = bootstrap_quantiles(&drifted, &[0.75], 500, &mut rng)[0];
        assert_eq!((a.lo, a.hi), (100.0, 100.0));
        assert!(b.hi >= 300.0 && b.lo == 100.0, "{b:?}");
        assert!(bootstrap_quantiles(&[], &[0.5], 10, &mut rng)[0].est == 0.0);
    }
}
