//! Does measuring disturb what is measured? Runs the rr scenario (1-byte request/response) through
//! `lab::run_pair` (clock read after every socket call, samples stored, tcp_info read before
//! and after) and through a bare ping-pong of two std TcpStreams with no measurement at all, in
//! the same process, alternating, and prints both rates and their ratio. Target: >= 0.95.
//!
//! Then the wake-up: the busy-poll strategy (both readers spin on MSG_DONTWAIT) against a bare
//! C ping-pong whose two ends spin the same way (benches/c/pingpong.c, compiled here with `cc`),
//! and the lab's blocking rr against the same C program blocking; alternating, same run.
//! Target for busy-poll: >= 0.97 of the bare C spin.
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

/// Round trips per second of the lab's rr with `opts` on both sides (no capture).
fn lab_with(rounds: u32, opt: &str) -> f64 {
    let w = Workload::Rr(Rr { size: 1, rounds });
    let side = SideOpts::parse_list(opt).expect("strategy");
    let pair = StrategyPair::new(side.clone(), side);
    let opts = LabOptions { own_netns: false, capture: false, ..LabOptions::default() };
    let r = lab::run_pair(&w, &pair, &Placement::loopback(), &opts).expect("lab rr");
    r.rounds as f64 / r.wall_s
}

/// The bare C ping-pong, compiled once; None when there is no C compiler.
fn c_binary() -> Option<std::path::PathBuf> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/pingpong.c");
    let out = std::env::temp_dir().join(format!("tcpstall-pingpong-{}", std::process::id()));
    let ok = std::process::Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(out)
}

fn c_rate(bin: &std::path::Path, rounds: u32, mode: &str) -> f64 {
    let out = std::process::Command::new(bin).arg(rounds.to_string()).arg(mode).output().expect("run pingpong");
    assert!(out.status.success(), "pingpong: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("pingpong rate")
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
    wakeup(rounds, repeats);
}

/// Busy-poll against bare C spinning, blocking against bare C blocking, alternating.
fn wakeup(rounds: u32, repeats: u32) {
    let Some(bin) = c_binary() else {
        println!("\nwake-up: no C compiler (cc): busy-poll against bare C not measured");
        return;
    };
    c_rate(&bin, rounds / 10 + 1, "spin");
    lab_with(rounds / 10 + 1, "busy-poll");
    let (mut cs, mut ls, mut cb, mut lb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        cs.push(c_rate(&bin, rounds, "spin"));
        ls.push(lab_with(rounds, "busy-poll"));
        cb.push(c_rate(&bin, rounds, "block"));
        lb.push(lab_with(rounds, "none"));
    }
    let _ = std::fs::remove_file(&bin);
    let (cs, ls, cb, lb) = (median(cs), median(ls), median(cb), median(lb));
    println!("\nwake-up: rr 1 byte, {rounds} round trips, median of {repeats} alternating runs");
    println!("  bare C, both ends spinning on MSG_DONTWAIT: {cs:>10.0} round trips/s");
    println!("  tcpstall lab rr, busy-poll both sides:      {ls:>10.0} round trips/s");
    println!("  bare C, blocking recv:                      {cb:>10.0} round trips/s");
    println!("  tcpstall lab rr, default (blocking):        {lb:>10.0} round trips/s");
    let r = ls / cs;
    println!("  ratio busy-poll/bare C spin: {r:.3} (target >= 0.97: {})", if r >= 0.97 { "meets" } else { "misses" });
    let r = lb / cb;
    println!(
        "  ratio blocking/bare C blocking: {r:.3} (target >= 0.95: {})",
        if r >= 0.95 { "meets" } else { "misses" }
    );
    println!("  what spinning buys here: {:.2}x the blocking round-trip rate (bare C)", cs / cb);
}
