//! Advice from repeated runs of a workload and its candidate fixes (pure): the bootstrap
//! confidence intervals of the latency quantiles (`stats`), the candidates to run
//! (`candidates`), their ranking and the decision among tied ones (`rank`), and the code of a fix in the user's language (`code`). Time and randomness come
//! from the caller; nothing here touches the OS.

pub mod candidates;
pub mod code;
pub mod rank;
pub mod stats;

pub use candidates::{candidates, Candidate};
pub use code::{caveat, change_size, snippet, Lang};
pub use rank::{decide, rank, Decision, Rule, Scored, RULES};
pub use stats::{bootstrap_quantiles, quantile, Interval};
