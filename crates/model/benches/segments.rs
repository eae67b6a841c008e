//! Benchmark (not a test): simulated segments per second of wall time.
//!
//! Target: >= 5 million segments/s. Three workloads: a long one-way stream (bulk data + ACKs),
//! many 1-byte request/response rounds (rr), and seed 000's chunked rounds (timers, Nagle).
//! Printed with the ratio to the target; the baseline in the same run is the cost of one
//! event-queue push/pop pair, so the engine's overhead per segment is visible.

use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::Instant;

use scenario::{Scenario, StrategyPair};
use tcpstall_model::{loopback_link, simulate, Profile, SimConfig};

const TARGET: f64 = 5e6;

fn run(name: &str, scenario: &str, sets: &[&str], link: scenario::LinkSpec) {
    let mut s = Scenario::builtin(scenario).expect("scenario");
    s.apply_sets(sets).expect("sets");
    let p = Profile::builtin("linux").expect("profile");
    let pair: StrategyPair = s.matrix[0].clone();
    let cfg = SimConfig::new(&p, &p, link);
    // Warm up once, then time the best of three.
    let _ = simulate(&s.workload, &pair, &cfg).expect("run");
    let mut best = f64::MAX;
    let mut segs = 0;
    let mut events = 0;
    let mut writes = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let out = simulate(black_box(&s.workload), &pair, &cfg).expect("run");
        let dt = t.elapsed().as_secs_f64();
        segs = out.segments();
        events = out.events;
        writes = out.writes;
        best = best.min(dt);
    }
    let rate = segs as f64 / best;
    println!(
        "{name:<34} {segs:>10} segments in {:>8.3} ms: {:>6.2} M segments/s ({:.2}x the 5 M/s target: {}); \
         {:.1} M events/s, {:.1} M app writes/s",
        best * 1e3,
        rate / 1e6,
        rate / TARGET,
        if rate >= TARGET { "meets" } else { "misses" },
        events as f64 / best / 1e6,
        writes as f64 / best / 1e6
    );
}

fn heap_baseline() {
    let n = 2_000_000u64;
    let t = Instant::now();
    let mut h = BinaryHeap::new();
    for i in 0..n {
        h.push(std::cmp::Reverse((i * 7919 % 1000, i)));
        if h.len() > 64 {
            black_box(h.pop());
        }
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{:<34} {:>10} push+pop in {:>8.3} ms: {:>6.2} M/s (baseline)",
        "event-queue baseline",
        n,
        dt * 1e3,
        n as f64 / dt / 1e6
    );
}

fn main() {
    heap_baseline();
    let mtu1500 = scenario::LinkSpec { mtu: 1500, ..loopback_link() };
    run("stream 2 s, MTU 1500, 40 Gbit/s", "stream", &["duration_ms=2000"], mtu1500.clone());
    run("rr 1 B x 200,000 rounds", "rr", &["rounds=200000"], mtu1500.clone());
    run("chunked (seed 000) x 2,000 rounds", "chunked", &["round=2000"], mtu1500.clone());
    run("bulk-ack 100 kB x 2,000 rounds", "bulk-ack", &["rounds=2000"], mtu1500);
}
