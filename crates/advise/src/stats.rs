//! Quantiles and their bootstrap confidence intervals over repeated runs: owned by
//! `report::stats` (the one owner of every printed statistic), re-exported here for advise's
//! modules.

pub use report::stats::{bootstrap_quantiles, quantile, Interval};
