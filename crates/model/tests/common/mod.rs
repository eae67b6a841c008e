//! The oracle's matrix, shared by the oracle and calibration tests.

use scenario::{Opt, SideOpts, StrategyPair};

/// A hold longer than this is a stall in the model's own accounting (summary::STALL_MARGIN_NS).
pub const MARGIN_NS: u64 = 10_000_000;

/// `--matrix all`: the default, then each option on both sides.
pub fn matrix_all() -> Vec<StrategyPair> {
    let mut m = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    for o in Opt::ALL {
        let side = SideOpts::new(vec![o]).unwrap_or_default();
        m.push(StrategyPair { label: o.as_str().to_string(), client: side.clone(), server: side });
    }
    m
}

/// Shortened workloads: enough rounds to reach the steady state.
pub fn sets(name: &str) -> &'static [&'static str] {
    match name {
        "chunked" => &["round=4"],
        "multi-write" => &["requests=6"],
        "burst" => &["rounds=5"],
        "bulk-ack" => &["rounds=4"],
        "rr" => &["rounds=50"],
        _ => &[],
    }
}
