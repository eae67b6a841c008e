//! Advice from repeated runs of a workload and its candidate fixes (pure): the candidates to
//! run (`candidates`), their runs round-robin through the caller's runner and pooled
//! (`session`, `pool`), the bootstrap confidence intervals of the latency quantiles (`stats`),
//! their ranking and the decision among tied ones (`rank`), the recommendation in words
//! (`text`) and the code of a fix in the user's language (`code`). The runs, time and
//! randomness come from the caller; nothing here touches the OS.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod candidates;
pub mod code;
pub mod pool;
pub mod rank;
pub mod request;
pub mod session;
pub mod stats;
pub mod text;

pub use candidates::{candidates, Candidate};
pub use code::{caveat, change_size, snippet, Lang, UnknownLang};
pub use pool::Pooled;
pub use rank::{decide, rank, Decision, Rule, Scored, RULES};
pub use request::{parse_side, source_notes, RequestError};
pub use session::{conclude, measure, Advice, AdviseError, Ending, FirstRun, NothingToRank, Request, Runner, Runs};
pub use stats::{bootstrap_quantiles, quantile, Interval};
