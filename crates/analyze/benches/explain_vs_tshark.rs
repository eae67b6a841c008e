//! Throughput of `tcpstall explain` against `tshark -r FILE -q -z conv,tcp` on the same
//! synthetic capture, measured in the same run (target: >= 20x tshark).
//!
//!   cargo bench -p tcpstall-analyze --bench explain_vs_tshark            # 1,000,000 packets
//!   PACKETS=3000000 cargo bench -p tcpstall-analyze --bench explain_vs_tshark
//!
//! It measures (1) the decode + analysis pipeline in-process, (2) the release `tcpstall`
//! binary when it is found (TCPSTALL_BIN, or $CARGO_TARGET_DIR/release/tcpstall; build it with
//! `cargo build --release -p tcpstall`), (3) tshark when installed. Each runs 3 times after the
//! file is in the page cache and the best wall time counts; packets per second = packets / time.
//! The capture (about 145 MB for a million packets) is removed at the end, also after a panic;
//! KEEP_FILES=1 keeps it and prints where.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use tcpstall_analyze::Config;
use wire::{Decoder, FlowFilter};

/// Writes an Ethernet/IPv4/TCP pcap of `n` packets: 16 interleaved flows doing 100-byte
/// requests and 200-byte replies with pure ACKs, and a 40 ms Nagle/delayed-ACK stall every
/// 100 exchanges. Returns the path.
fn make_capture(n: u64) -> std::io::Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("tcpstall-bench-{n}-{}.pcap", std::process::id()));
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
    w.write_all(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0])?;
    let flows = 16u64;
    let mut seq = vec![[1000u32, 9000u32]; flows as usize];
    let mut t_us: u64 = 1_700_000_000_000_000;
    let mut frame = vec![0u8; 54 + 200];
    let mut written = 0;
    let mut k = 0u64;
    while written < n {
        let f = (k % flows) as usize;
        let round = k / flows;
        let stall = round % 100 == 99;
        // (from A?, payload, flags)
        let steps: [(bool, u32); 4] = [(true, 100), (false, 0), (false, 200), (true, 0)];
        for (i, (from_a, len)) in steps.into_iter().enumerate() {
            if written >= n {
                break;
            }
            t_us += if stall && i == 1 { 40_000 } else { 20 };
            let (s, d) = if from_a { (0, 1) } else { (1, 0) };
            let hdr = &mut frame[..54];
            hdr[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            hdr[12] = 0x08;
            hdr[13] = 0x00;
            let ip = &mut hdr[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((40 + len) as u16).to_be_bytes());
            ip[8] = 64;
            ip[9] = 6;
            let ca = [10, 0, (f >> 8) as u8, f as u8];
            let sa = [10, 1, 0, 1];
            let (src, dst) = if from_a { (ca, sa) } else { (sa, ca) };
            ip[12..16].copy_from_slice(&src);
            ip[16..20].copy_from_slice(&dst);
            let tcp = &mut hdr[34..54];
            let (sp, dp) = if from_a { (40000 + f as u16, 80u16) } else { (80, 40000 + f as u16) };
            tcp[0..2].copy_from_slice(&sp.to_be_bytes());
            tcp[2..4].copy_from_slice(&dp.to_be_bytes());
            tcp[4..8].copy_from_slice(&seq[f][s].to_be_bytes());
            tcp[8..12].copy_from_slice(&seq[f][d].to_be_bytes());
            tcp[12] = 0x50;
            tcp[13] = if len > 0 { 0x18 } else { 0x10 };
            tcp[14..16].copy_from_slice(&512u16.to_be_bytes());
            seq[f][s] = seq[f][s].wrapping_add(len);
            let caplen = 54 + len;
            let ts = [(t_us / 1_000_000) as u32, (t_us % 1_000_000) as u32, caplen, caplen];
            for v in ts {
                w.write_all(&v.to_le_bytes())?;
            }
            w.write_all(&frame[..caplen as usize])?;
            written += 1;
        }
        k += 1;
    }
    w.flush()?;
    Ok(path)
}

fn in_process(path: &Path) -> (u64, usize, f64) {
    let start = Instant::now();
    let file = std::fs::File::open(path).expect("open");
    let mut dec = Decoder::new(std::io::BufReader::with_capacity(1 << 16, file), FlowFilter::default()).expect("pcap");
    let mut stalls = 0;
    tcpstall_analyze::session::run(&mut dec, Config::default(), |_| {}, |f| stalls += f.analysis.stalls.len())
        .expect("decode");
    (dec.stats().frames, stalls, start.elapsed().as_secs_f64())
}

/// Best wall time of `RUNS` runs (the machine is shared: the best run is the least disturbed).
fn run(mut make: impl FnMut() -> Command) -> Option<f64> {
    let mut best: Option<f64> = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let st = make().stdout(Stdio::null()).stderr(Stdio::null()).status().ok()?;
        if !st.success() {
            return None;
        }
        let t = start.elapsed().as_secs_f64();
        best = Some(best.map_or(t, |b: f64| b.min(t)));
    }
    best
}

const RUNS: usize = 3;

/// Removes the synthetic capture when dropped (the end of main, or a panic), unless KEEP_FILES.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if std::env::var_os("KEEP_FILES").is_some() {
            println!("capture kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn main() {
    let n: u64 = std::env::var("PACKETS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let path = make_capture(n).expect("write the synthetic capture");
    let _cleanup = Cleanup(path.clone());
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("capture: {} ({n} packets, {:.1} MB)", path.display(), size as f64 / 1e6);
    let _ = std::fs::read(&path); // page cache
    let (frames, stalls, secs) =
        (0..RUNS).map(|_| in_process(&path)).min_by(|a, b| a.2.total_cmp(&b.2)).expect("RUNS > 0");
    let ours = frames as f64 / secs;
    println!("in-process decode+analyze: {frames} packets in {secs:.3} s = {:.2} Mpps, {stalls} stalls", ours / 1e6);

    let bin = std::env::var_os("TCPSTALL_BIN").map(PathBuf::from).unwrap_or_else(|| {
        let t = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        t.join("release/tcpstall")
    });
    let mut best = ours;
    if bin.exists() {
        match run(|| {
            let mut c = Command::new(&bin);
            c.arg("explain").arg(&path);
            c
        }) {
            Some(s) => {
                best = n as f64 / s;
                println!("tcpstall explain ({}): {s:.3} s = {:.2} Mpps", bin.display(), best / 1e6);
            }
            None => println!("tcpstall explain ({}) failed", bin.display()),
        }
    } else {
        println!("release binary not found at {} (cargo build --release -p tcpstall); using in-process", bin.display());
    }
    match run(|| {
        let mut c = Command::new("tshark");
        c.arg("-r").arg(&path).args(["-q", "-z", "conv,tcp"]);
        c
    }) {
        Some(s) => {
            let theirs = n as f64 / s;
            println!("tshark -q -z conv,tcp: {s:.3} s = {:.3} Mpps", theirs / 1e6);
            let ratio = best / theirs;
            println!(
                "ratio tcpstall/tshark: {ratio:.1}x (target >= 20x: {})",
                if ratio >= 20.0 { "meets" } else { "misses" }
            );
        }
        None => println!("tshark not found or failed: no baseline in this run"),
    }
}
