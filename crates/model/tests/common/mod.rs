//! The oracle's matrix, shared by the oracle and calibration tests.

use scenario::{LinkSpec, Opt, Scenario, SideOpts, StrategyPair};
use tcpstall_model::{loopback_link, Profile};

/// A hold longer than this is a stall in the model's own accounting (the classifier's margin, analyze::DEFAULT_MIN_GAP).
pub(crate) const MARGIN_NS: u64 = analyze::DEFAULT_MIN_GAP.0;

/// `--matrix all`: the default, then each option on both sides.
pub(crate) fn matrix_all() -> Vec<StrategyPair> {
    let mut m = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    for o in Opt::ALL {
        let side = SideOpts::new(vec![o]).unwrap_or_default();
        m.push(StrategyPair { label: o.as_str().to_string(), client: side.clone(), server: side });
    }
    m
}

/// Shortened workloads: enough rounds to reach the steady state.
pub(crate) fn sets(name: &str) -> &'static [&'static str] {
    match name {
        "chunked" => &["round=4"],
        "multi-write" => &["requests=6"],
        "burst" => &["rounds=5"],
        "bulk-ack" => &["rounds=4"],
        "rr" => &["rounds=50"],
        _ => &[],
    }
}

/// Every run of the oracle's matrix: each built-in scenario but stream (shortened by [`sets`]),
/// the six stacks and the Linux eras (`linux` is in both), every strategy of `--matrix all`,
/// loopback and a 10 ms path.
pub(crate) fn each_run(mut f: impl FnMut(&Scenario, &StrategyPair, &Profile, &LinkSpec)) {
    let links: [LinkSpec; 2] = [LinkSpec { mtu: 1500, ..loopback_link() }, "rtt=10ms,mtu=1500".parse().unwrap()];
    for scenario in Scenario::catalogue().into_iter().filter(|s| s.name != "stream") {
        let mut s = scenario.clone();
        s.apply_sets(sets(&s.name)).unwrap();
        for p in Profile::all().into_iter().chain(Profile::eras().into_iter().filter(|p| p.name != "linux")) {
            for pair in matrix_all() {
                for link in &links {
                    f(&s, &pair, &p, link);
                }
            }
        }
    }
}
