//! Peak memory and speed of `tcpstall explain` on (a) one flow of 10,000,000 packets and (b)
//! 1,000,000 short flows (SYN, SYN-ACK, ACK, request, ACK, FIN, FIN, ACK), issue 9 item 6;
//! issue 25 adds (c) the same 8-packet flows dense, about 40 open at a time (57,000 new a
//! second of capture time), and (d) a SYN scan: 1,000,000 two-packet flows (SYN, RST-ACK) at
//! 100,000 a second. (c) and (d) keep half a million closed pairs through the 5 s close linger.
//! Targets: peak RSS <= 64 MB for (a) and <= 150 MB for (b), (c), (d), and no loss of speed against the
//! explain of the code base before flows were freed (pass its binary as BASE_TCPSTALL_BIN to
//! measure it in the same run; tshark is measured too when installed).
//!
//!   cargo build --release -p tcpstall
//!   cargo bench -p tcpstall-analyze --bench memory
//!   BASE_TCPSTALL_BIN=/path/to/old/tcpstall ONE_FLOW=10000000 SHORT_FLOWS=1000000 \
//!       FLOW_RATE=10000 cargo bench -p tcpstall-analyze --bench memory
//!   NO_TSHARK=1 skips tshark; KEEP_FILES=1 keeps the captures (for perf); CASES=2,3 runs
//!   only cases (c) and (d) (0-based).
//!
//! Frames are cut at 54 bytes (Ethernet + IPv4 + TCP headers, as `tcpdump -s 54` writes them;
//! the payload length comes from the IP header), so the files stay small: ~70 bytes a packet.
//! Short flows start FLOW_RATE per second of capture time (default 10,000/s, a busy web
//! server) and last ~1 ms each. Peak RSS is `/usr/bin/time`'s maximum resident set size of the
//! child process (getrusage RUSAGE_CHILDREN ru_maxrss); speed is packets per CPU second (user +
//! system) of the child, the best of RUNS runs: on a shared machine wall time measures the
//! other builders too.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const RUNS: usize = 3;

struct Pcap {
    w: BufWriter<std::fs::File>,
    frame: [u8; 54],
    packets: u64,
}

impl Pcap {
    fn create(path: &Path) -> std::io::Result<Pcap> {
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        // pcap header: microseconds, version 2.4, snaplen 54, Ethernet.
        w.write_all(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 1, 0, 0, 0])?;
        let mut frame = [0u8; 54];
        frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        frame[12] = 0x08;
        frame[14] = 0x45;
        frame[22] = 64;
        frame[23] = 6;
        frame[46] = 0x50;
        Ok(Pcap { w, frame, packets: 0 })
    }

    /// One packet from `src` to `dst` at `t_us` carrying `len` payload bytes (cut off).
    #[allow(clippy::too_many_arguments)]
    fn packet(
        &mut self,
        t_us: u64,
        src: ([u8; 4], u16),
        dst: ([u8; 4], u16),
        seq: u32,
        ack: u32,
        flags: u8,
        len: u32,
        ip_id: u16,
    ) -> std::io::Result<()> {
        let f = &mut self.frame;
        f[16..18].copy_from_slice(&((40 + len) as u16).to_be_bytes());
        f[18..20].copy_from_slice(&ip_id.to_be_bytes());
        f[26..30].copy_from_slice(&src.0);
        f[30..34].copy_from_slice(&dst.0);
        f[34..36].copy_from_slice(&src.1.to_be_bytes());
        f[36..38].copy_from_slice(&dst.1.to_be_bytes());
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        f[42..46].copy_from_slice(&ack.to_be_bytes());
        f[47] = flags;
        f[48..50].copy_from_slice(&65535u16.to_be_bytes());
        let rec = [(t_us / 1_000_000) as u32, (t_us % 1_000_000) as u32, 54, 54 + len];
        for v in rec {
            self.w.write_all(&v.to_le_bytes())?;
        }
        self.w.write_all(&self.frame)?;
        self.packets += 1;
        Ok(())
    }
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const FIN_ACK: u8 = 0x11;
const RST: u8 = 0x04;

/// (a) One connection: handshake, then request (100 B) / ACK / response (200 B) / ACK rounds,
/// 20 us apart, with a 40 ms Nagle/delayed-ACK wait every 100 rounds.
fn one_flow(path: &Path, n: u64) -> std::io::Result<u64> {
    let mut p = Pcap::create(path)?;
    let (a, b) = (([10, 0, 0, 1], 40000u16), ([10, 1, 0, 1], 80u16));
    let (mut sa, mut sb) = (1000u32, 9000u32);
    let mut t = 1_700_000_000_000_000u64;
    let (mut ida, mut idb) = (0u16, 0u16);
    p.packet(t, a, b, sa, 0, SYN, 0, ida)?;
    p.packet(t + 20, b, a, sb, sa + 1, SYN | ACK, 0, idb)?;
    sa += 1;
    sb += 1;
    p.packet(t + 40, a, b, sa, sb, ACK, 0, ida.wrapping_add(1))?;
    let mut round = 0u64;
    while p.packets < n {
        t += if round % 100 == 99 { 40_000 } else { 20 };
        for (from_a, len) in [(true, 100u32), (false, 0), (false, 200), (true, 0)] {
            t += 20;
            if from_a {
                ida = ida.wrapping_add(1);
                p.packet(t, a, b, sa, sb, if len > 0 { PSH_ACK } else { ACK }, len, ida)?;
                sa = sa.wrapping_add(len);
            } else {
                idb = idb.wrapping_add(1);
                p.packet(t, b, a, sb, sa, if len > 0 { PSH_ACK } else { ACK }, len, idb)?;
                sb = sb.wrapping_add(len);
            }
        }
        round += 1;
    }
    p.w.flush()?;
    Ok(p.packets)
}

/// (b), (c) `flows` connections of 8 packets each, `rate` new ones per second of capture time,
/// each from its own client address and port, packets `step_us` apart (7 steps per flow).
fn short_flows(path: &Path, flows: u64, rate: u64, step_us: u64) -> std::io::Result<u64> {
    let mut p = Pcap::create(path)?;
    let gap = (1_000_000 / rate.max(1)).max(1);
    let srv = ([10, 255, 0, 1], 80u16);
    let t0 = 1_700_000_000_000_000u64;
    // Packets in time order: flow f's packet k is at t0 + f * gap + step_us * k. The heap holds
    // the next packet of each open flow and the next flow's SYN (a few entries).
    let mut next: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new(); // (time, flow, step)
    if flows > 0 {
        next.push(Reverse((t0, 0, 0)));
    }
    while let Some(Reverse((t, f, step))) = next.pop() {
        if step < 7 {
            next.push(Reverse((t + step_us, f, step + 1)));
        }
        if step == 0 && f + 1 < flows {
            next.push(Reverse((t0 + (f + 1) * gap, f + 1, 0)));
        }
        let cli = client(f);
        let (c, s) = (1000u32.wrapping_add(f as u32), 5000u32);
        let id = (f as u16).wrapping_mul(8).wrapping_add(step as u16);
        match step {
            0 => p.packet(t, cli, srv, c, 0, SYN, 0, id)?,
            1 => p.packet(t, srv, cli, s, c + 1, SYN | ACK, 0, id)?,
            2 => p.packet(t, cli, srv, c + 1, s + 1, ACK, 0, id)?,
            3 => p.packet(t, cli, srv, c + 1, s + 1, PSH_ACK, 100, id)?,
            4 => p.packet(t, srv, cli, s + 1, c + 101, ACK, 0, id)?,
            5 => p.packet(t, cli, srv, c + 101, s + 1, FIN_ACK, 0, id)?,
            6 => p.packet(t, srv, cli, s + 1, c + 102, FIN_ACK, 0, id)?,
            _ => p.packet(t, cli, srv, c + 102, s + 2, ACK, 0, id)?,
        }
    }
    p.w.flush()?;
    Ok(p.packets)
}

/// Flow f's client: its own address and port.
fn client(f: u64) -> ([u8; 4], u16) {
    ([10, (f >> 16) as u8, (f >> 8) as u8, f as u8], 1024 + (f % 50_000) as u16)
}

/// (d) A SYN scan answered by a closed port: SYN, then RST-ACK 20 us later (RFC 9293 3.10.7.1),
/// `rate` probes a second of capture time.
fn syn_scan(path: &Path, flows: u64, rate: u64) -> std::io::Result<u64> {
    let mut p = Pcap::create(path)?;
    let gap = (1_000_000 / rate.max(1)).max(1);
    let srv = ([10, 255, 0, 1], 80u16);
    let t0 = 1_700_000_000_000_000u64;
    for f in 0..flows {
        let (t, cli, c) = (t0 + f * gap, client(f), 1000u32.wrapping_add(f as u32));
        p.packet(t, cli, srv, c, 0, SYN, 0, f as u16)?;
        p.packet(t + 20, srv, cli, 0, c + 1, RST | ACK, 0, 0)?;
    }
    p.w.flush()?;
    Ok(p.packets)
}

/// CPU seconds and peak RSS (MB) of one run.
type Run = (f64, f64);

/// CPU time and peak RSS (MB) of one run of `bin explain file`, via `/usr/bin/time`.
fn measure(bin: &Path, file: &Path) -> Option<Run> {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "cpu %U %S rss %M"])
        .arg(bin)
        .arg("explain")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("{} failed: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
        return None;
    }
    // "cpu USER SYS rss KB": CPU seconds, not wall time, measure the speed: the machine is
    // shared with other builders, and a process waiting for a core has not been slow.
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().rev().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    Some((v.first()? + v.get(1)?, v.get(2)? / 1024.0))
}

fn tshark(file: &Path) -> Option<f64> {
    let start = Instant::now();
    let st = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-q", "-z", "conv,tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    st.success().then(|| start.elapsed().as_secs_f64())
}

/// Writes a capture to the path, returns its packet count.
type MakeCapture = dyn Fn(&Path) -> std::io::Result<u64>;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Writes case `name`'s capture to `path`, measures this build (and the base) on it, prints.
fn run_case(name: &str, rss_target: f64, make: &MakeCapture, path: &Path, bin: &Path, base: Option<&Path>) {
    let packets = make(path).expect("write the capture");
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    println!("{name}: {packets} packets, {:.0} MB file", size as f64 / 1e6);
    // Read once for the page cache. Runs alternate between this build and the base, so that a busy spell of the shared
    // machine hits both; the best of RUNS each counts.
    let _ = std::fs::read(path);
    let (mut ours, mut theirs): (Option<Run>, Option<Run>) = (None, None);
    let best = |acc: Option<Run>, m: Option<Run>| match (acc, m) {
        (Some((t, r)), Some((t2, r2))) => Some((t.min(t2), r.max(r2))),
        (a, b) => a.or(b),
    };
    for _ in 0..RUNS {
        ours = best(ours, measure(bin, path));
        if let Some(b) = base {
            theirs = best(theirs, measure(b, path));
        }
    }
    let Some((secs, rss)) = ours else { return };
    let pps = packets as f64 / secs;
    println!(
        "  tcpstall explain: {secs:.2} CPU s = {:.2} Mpps, peak RSS {rss:.1} MB (target <= {rss_target} MB): {}",
        pps / 1e6,
        if rss <= rss_target { "meets" } else { "misses" }
    );
    if base.is_some() {
        if let Some((bs, brss)) = theirs {
            let ratio = pps / (packets as f64 / bs);
            // Same machine, same run; 5% is the noise of a shared 2-core machine.
            println!(
                "  base explain:     {bs:.2} CPU s = {:.2} Mpps, peak RSS {brss:.1} MB; speed ratio {ratio:.2} \
                 (target >= 0.95): {}",
                packets as f64 / bs / 1e6,
                if ratio >= 0.95 { "meets" } else { "misses" }
            );
        }
    }
    if std::env::var_os("NO_TSHARK").is_some() {
        // skip: tshark needs ~50 s per million packets here
    } else if let Some(ts) = tshark(path) {
        println!("  tshark -z conv,tcp: {ts:.2} s; tcpstall is {:.1}x tshark", ts / secs);
    }
}

fn main() {
    let bin = std::env::var_os("TCPSTALL_BIN").map(PathBuf::from).unwrap_or_else(|| {
        let t = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        t.join("release/tcpstall")
    });
    if !bin.exists() || !Path::new("/usr/bin/time").exists() {
        println!("needs the release binary ({}) and /usr/bin/time: cargo build --release -p tcpstall", bin.display());
        return;
    }
    let base = std::env::var_os("BASE_TCPSTALL_BIN").map(PathBuf::from).filter(|p| p.exists());
    let dir = std::env::temp_dir().join(format!("tcpstall-membench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let one = env_u64("ONE_FLOW", 10_000_000);
    let short = env_u64("SHORT_FLOWS", 1_000_000);
    let rate = env_u64("FLOW_RATE", 10_000);
    let cases: [(&str, f64, Box<MakeCapture>); 4] = [
        ("(a) one flow", 64.0, Box::new(move |p| one_flow(p, one))),
        ("(b) short flows", 150.0, Box::new(move |p| short_flows(p, short, rate, 100))),
        ("(c) short flows, ~40 open", 150.0, Box::new(move |p| short_flows(p, short, 57_000, 100))),
        ("(d) SYN scan", 150.0, Box::new(move |p| syn_scan(p, short, 100_000))),
    ];
    let only: Option<Vec<usize>> =
        std::env::var("CASES").ok().map(|v| v.split(',').filter_map(|c| c.parse().ok()).collect());
    for (i, (name, rss_target, make)) in cases.iter().enumerate() {
        if only.as_ref().is_some_and(|o| !o.contains(&i)) {
            continue;
        }
        let path = dir.join(format!("case{i}.pcap"));
        run_case(name, *rss_target, make, &path, &bin, base.as_deref());
        if std::env::var_os("KEEP_FILES").is_none() {
            let _ = std::fs::remove_file(&path);
        }
    }
    if std::env::var_os("KEEP_FILES").is_none() {
        let _ = std::fs::remove_dir(&dir);
    } else {
        println!("captures kept in {}", dir.display());
    }
}
