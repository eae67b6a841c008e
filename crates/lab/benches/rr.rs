//! Does measuring disturb what is measured? Runs the rr scenario (1-byte request/response) through
//! `lab::run_pair` (clock read after every socket call, samples stored, tcp_info read before
//! and after) and through a bare ping-pong of two std TcpStreams with no measurement at all, in
//! the same process, alternating, and prints both rates and their ratio. Target: >= 0.95.
//!
//!     cargo bench -p tcpstall-lab --bench rr [-- ROUNDS REPEATS]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use scenario::{Rr, SideOpts, StrategyPair, Workload};
use tcpstall_lab::{self as lab, LabOptions, Placement};

/// Round trips per second of a bare loop: client writes 1 byte, server echoes it.
fn bare(rounds: u32) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut b = [0u8; 1];
        for _ in 0..rounds {
            s.read_exact(&mut b).expect("server read");
            s.write_all(&b).expect("server write");
        }
    });
    // The client is a thread of its own too, as in the lab.
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).expect("connect");
        let mut b = [1u8; 1];
        let t0 = Instant::now();
        for _ in 0..rounds {
            c.write_all(&b).expect("client write");
            c.read_exact(&mut b).expect("client read");
        }
        t0.elapsed().as_secs_f64()
    });
    let secs = client.join().expect("client thread");
    server.join().expect("server thread");
    f64::from(rounds) / secs
}

/// Round trips per second of the lab's rr, from its own measured wall time, with or without
/// the row's packet capture; and the packets the capture lost (None when nothing was captured).
fn lab(rounds: u32, capture: bool) -> (f64, Option<u64>) {
    let w = Workload::Rr(Rr { size: 1, rounds });
    let pair = StrategyPair::new(SideOpts::none(), SideOpts::none());
    // Same namespace as the bare loop, so both use the same loopback.
    let opts = LabOptions { own_netns: false, capture, ..LabOptions::default() };
    let r = lab::run_pair(&w, &pair, &Placement::loopback(), &opts).expect("lab rr");
    (r.rounds as f64 / r.wall_s, r.capture.map(|c| c.kernel_drops))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rounds = args.first().copied().unwrap_or(20_000);
    let repeats = args.get(1).copied().unwrap_or(5).max(1);
    // Warm up both paths (page faults, CPU frequency).
    bare(rounds / 10 + 1);
    lab(rounds / 10 + 1, false);
    lab(rounds / 10 + 1, true);
    let (mut b, mut l, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut drops, mut captured) = (0u64, false);
    for _ in 0..repeats {
        b.push(bare(rounds));
        l.push(lab(rounds, false).0);
        let (rate, d) = lab(rounds, true);
        c.push(rate);
        captured |= d.is_some();
        drops += d.unwrap_or(0);
    }
    let (b, l, c) = (median(b), median(l), median(c));
    println!("rr 1 byte, {rounds} round trips, median of {repeats} alternating runs");
    println!("  bare ping-pong (no measurement): {b:>10.0} round trips/s");
    println!("  tcpstall lab rr --no-capture:    {l:>10.0} round trips/s");
    println!("  tcpstall lab rr (packet capture): {c:>9.0} round trips/s");
    let ratio = l / b;
    println!("  ratio lab/bare: {ratio:.3} (target >= 0.95: {})", if ratio >= 0.95 { "meets" } else { "misses" });
    if captured {
        // Every packet is copied to the capture socket (the filter drops loopback's outgoing
        // copy in the kernel) and read by a thread that sleeps 2 ms between batches.
        let cr = c / l;
        println!(
            "  ratio capture/no-capture: {cr:.3} (target >= 0.80: {}); packets lost by the capture: {drops}",
            if cr >= 0.80 { "meets" } else { "misses" }
        );
    } else {
        println!("  no packet capture (needs CAP_NET_RAW): capture cost not measured");
    }
}
