//! Does `tcpstall watch` keep up? On loopback, with watch (and, in the same run, tcpdump)
//! capturing the traffic's port: a bulk transfer and a small-packet load of many flows (1-byte
//! writes with TCP_NODELAY). Prints the traffic's rate, the packets watch saw and its ring
//! dropped, tcpdump's kernel drops on the same traffic, and watch's CPU, each against its
//! target with "meets" or "misses". Needs root (CAP_NET_RAW) and tcpdump.
//!
//!     cargo bench -p tcpstall --bench watch [-- SECONDS]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A traffic generator: the listener, a stop flag, a byte counter; its threads.
type Traffic = fn(TcpListener, Arc<AtomicBool>, Arc<AtomicU64>) -> Vec<std::thread::JoinHandle<()>>;

/// Runs `traffic` for `secs` on a fresh port while watch and tcpdump capture it; returns
/// (traffic bytes, watch packets, watch ring drops, watch cpu share, tcpdump packets, tcpdump drops).
fn measure(secs: f64, traffic: Traffic) -> (u64, u64, u64, f64, u64, u64) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let watch = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(["watch", "-i", "lo", "--port", &port, "--format", "jsonl", "--duration", &format!("{}", secs + 2.0)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpstall watch");
    let dump = Command::new("tcpdump")
        .args(["-i", "lo", "-s", "128", "-w", "/dev/null", "tcp", "port", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(1000));
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let threads = traffic(l, stop.clone(), bytes.clone());
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(dump.id() as i32), nix::sys::signal::Signal::SIGINT);
    let d = dump.wait_with_output().unwrap();
    let w = watch.wait_with_output().unwrap();
    let werr = String::from_utf8_lossy(&w.stderr).to_string();
    let derr = String::from_utf8_lossy(&d.stderr).to_string();
    let num_before = |text: &str, what: &str| -> u64 {
        text.find(what)
            .and_then(|i| text[..i].split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    };
    let seen = num_before(&werr, " packets,");
    let drops = num_before(&werr, " dropped by the ring");
    let cpu: f64 = werr
        .find("% of one CPU")
        .and_then(|i| werr[..i].split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(f64::NAN)
        / 100.0;
    let dpk = num_before(&derr, " packets captured");
    let dd = num_before(&derr, " packets dropped by kernel");
    (bytes.load(Ordering::SeqCst), seen, drops, cpu, dpk, dd)
}

fn bulk(l: TcpListener, stop: Arc<AtomicBool>, bytes: Arc<AtomicU64>) -> Vec<std::thread::JoinHandle<()>> {
    let addr = l.local_addr().unwrap();
    let s = stop.clone();
    let server = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        drop(s);
    });
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        let buf = vec![7u8; 1 << 16];
        while !stop.load(Ordering::Relaxed) {
            if c.write_all(&buf).is_err() {
                break;
            }
        }
    });
    vec![client, server]
}

/// Many flows of 1-byte writes with TCP_NODELAY: one segment per write.
fn small(l: TcpListener, stop: Arc<AtomicBool>, bytes: Arc<AtomicU64>) -> Vec<std::thread::JoinHandle<()>> {
    const FLOWS: usize = 8;
    let addr = l.local_addr().unwrap();
    let b = bytes.clone();
    let server = std::thread::spawn(move || {
        let mut conns: Vec<TcpStream> = (0..FLOWS).map(|_| l.accept().unwrap().0).collect();
        for c in &conns {
            c.set_nonblocking(true).unwrap();
        }
        let mut buf = vec![0u8; 1 << 16];
        let mut open = FLOWS;
        while open > 0 {
            open = 0;
            for c in conns.iter_mut() {
                match c.read(&mut buf) {
                    Ok(0) => {}
                    Ok(n) => {
                        b.fetch_add(n as u64, Ordering::Relaxed);
                        open += 1;
                    }
                    Err(_) => open += 1,
                }
            }
            if conns.is_empty() {
                break;
            }
            std::thread::yield_now();
        }
    });
    let client = std::thread::spawn(move || {
        let mut cs: Vec<TcpStream> = (0..FLOWS).map(|_| TcpStream::connect(addr).unwrap()).collect();
        for c in &cs {
            c.set_nodelay(true).unwrap();
        }
        'run: while !stop.load(Ordering::Relaxed) {
            for _ in 0..64 {
                for c in cs.iter_mut() {
                    if c.write_all(&[1u8]).is_err() {
                        break 'run;
                    }
                }
            }
        }
    });
    vec![client, server]
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

fn main() {
    let secs: f64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(4.0);
    if !nix::unistd::geteuid().is_root() {
        println!("watch bench: needs root (CAP_NET_RAW): not run");
        return;
    }
    let (bytes, seen, drops, cpu, dpk, dd) = measure(secs, bulk);
    let gbit = bytes as f64 * 8.0 / secs / 1e9;
    println!("watch on loopback, {secs} s per load, tcpdump on the same traffic in the same run");
    println!("bulk: {gbit:.2} Gbit/s through one flow; watch saw {seen} packets, ring drops {drops}, {:.1}% of one CPU; tcpdump {dpk} packets, {dd} dropped by kernel", cpu * 100.0);
    println!("  >= 1 Gbit/s with zero ring drops: {}", verdict(gbit >= 1.0 && drops == 0));
    let (_, seen, drops, cpu, dpk, dd) = measure(secs, small);
    let pps = seen as f64 / (secs + 2.0);
    let pps_load = seen as f64 / secs;
    println!("small: 8 flows of 1-byte writes (TCP_NODELAY); watch saw {seen} packets (~{:.0}k/s during the load), ring drops {drops}, {:.1}% of one CPU; tcpdump {dpk} packets, {dd} dropped by kernel", pps_load / 1e3, cpu * 100.0);
    println!(
        "  >= 300k packets/s with zero ring drops: {} ({:.0}k/s)",
        verdict(pps_load >= 300e3 && drops == 0),
        pps_load / 1e3
    );
    // CPU per packet from this run, scaled to 100k packets/s (cpu is over the whole run).
    let at_100k = if pps > 0.0 { cpu / pps * 100e3 } else { f64::NAN };
    println!(
        "  CPU at 100k packets/s (scaled from this run): {:.1}% of one CPU (target < 10%: {})",
        at_100k * 100.0,
        verdict(at_100k < 0.10)
    );
}
