//! Seed 003's direct path: `tcpstall lab stream --path veth` against iperf3 on the same veth
//! pair (same namespaces, same pinned CPUs, alternating, same run). Target: >= 0.9 of iperf3.
//! Needs root and iperf3.
//!
//!     cargo bench -p tcpstall-lab --bench veth [-- SECONDS REPEATS]

use std::process::{Command, Stdio};
use std::time::Duration;

use report::stats;
use scenario::{SideOpts, StrategyPair, Workload};
use tcpstall_lab::veth::{Knobs, VethPath};
use tcpstall_lab::{self as lab, LabOptions};

fn iperf3(path: &VethPath, secs: f64) -> Option<f64> {
    let (tx, rx) = path.namespaces();
    let mut server = Command::new("ip")
        .args(["netns", "exec", rx, "iperf3", "-s", "-1", "-p", "5299", "-A", &path.cpus.1.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("ip")
        .args(["netns", "exec", tx, "iperf3", "-c", "10.203.0.2", "-p", "5299", "-J", "-t"])
        .arg(format!("{secs}"))
        .args(["-A", &path.cpus.0.to_string()])
        .output()
        .ok()?;
    let _ = server.wait();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    j["end"]["sum_received"]["bits_per_second"].as_f64()
}

fn tcpstall(path: &VethPath, secs: f64) -> f64 {
    let w = Workload::Stream(scenario::Stream { duration_ms: (secs * 1e3) as u32, write_size: 131_072 });
    let pair = StrategyPair::new(SideOpts::none(), SideOpts::none());
    let opts =
        LabOptions { own_netns: false, capture: false, lo_mtu: None, pin: Some(path.cpus), ..LabOptions::default() };
    let r = lab::run_pair(&w, &pair, &path.placement("bench"), &opts).expect("lab stream over veth");
    // Payload received by the server: the same as iperf3's sum_received.
    r.wire.client.bytes_sent as f64 * 8.0 / r.wall_s
}

fn main() {
    let args: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let secs = args.first().copied().unwrap_or(3.0);
    let reps = args.get(1).copied().unwrap_or(3.0) as usize;
    if !nix::unistd::geteuid().is_root() {
        println!("veth bench: needs root: not run");
        return;
    }
    link::sweep::sweep_all();
    let path = VethPath::open(&Knobs::default()).expect("veth path");
    let (mut i, mut t) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        match iperf3(&path, secs) {
            Some(b) => i.push(b),
            None => {
                println!("veth bench: iperf3 did not run (installed?)");
                return;
            }
        }
        t.push(tcpstall(&path, secs));
    }
    let (i, t) = (stats::median(i).unwrap_or(f64::NAN), stats::median(t).unwrap_or(f64::NAN));
    println!("stream over a veth pair ({}), {secs} s, median of {reps} alternating runs", path.readback);
    println!("  iperf3:                    {:>7.2} Gbit/s", i / 1e9);
    println!("  tcpstall lab --path veth:  {:>7.2} Gbit/s", t / 1e9);
    let r = t / i;
    println!("  ratio tcpstall/iperf3: {r:.3} (target >= 0.90: {})", if r >= 0.9 { "meets" } else { "misses" });
}
