//! Forwarding capacity and added delay of the emulator, each beside a veth pair measured in
//! the same run. Needs root (namespaces, veth via `ip`). `cargo bench -p tcpstall-link`.
//!
//! - packets/s: one sender blasts 64-byte UDP payloads for a few seconds, the receiver counts;
//! - bulk: one TCP stream, Gbit/s of payload at the receiver;
//! - added delay: sequential UDP ping-pongs through a link with delay=1ms (rtt 2 ms), the
//!   forwarder's own histogram of lateness against its deadlines, and the round trips over
//!   2 ms beside the veth round trip; for several spin/priority settings.
//!
//! Targets (issue 36, each a ratio or difference to veth in the same run, "meets"/"misses"
//! printed): 64-byte UDP flat out >= 0.7x veth ([`PPS_TARGET`]), one TCP stream >= 0.8x veth
//! with its offloads on, the configuration users run ([`BULK_TARGET`]), the rtt=20ms round trip
//! within +100 us of 20 ms plus veth's own at p50 and +200 us at p99 ([`RTT_P50_TARGET_US`],
//! [`RTT_P99_TARGET_US`]); no TUN queue drop paced below the emulator's own rate; never a round
//! trip under the link's. Results and the bounds of this 2-vCPU machine: docs/link.md, "Issue 36".
//!
//! `-- --variants base,napi,tnapi,busy20,rps1-2,pin0-1,fifo --rounds 4` instead compares
//! forwarder variants (`LinkOptions`, see [`variant`]) round by round against veth: packets/s,
//! Gbit/s, lateness and round trip of each, medians at the end (docs/link.md, "Packet rate").

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use report::stats;
use tcpstall_link::forward::Priority;
use tcpstall_link::model::Dir;
use tcpstall_link::netns::{run_in, SERVER_IP};
use tcpstall_link::{Link, LinkOptions, LinkSpec};

/// Issue 36's targets, each against veth in the same run: 64-byte UDP packets/s...
const PPS_TARGET: f64 = 0.7;
/// ...one TCP stream's Gbit/s, veth with its offloads...
const BULK_TARGET: f64 = 0.8;
/// ...and the rtt=20ms round trip beyond 20 ms and veth's own round trip, at p50 and p99 (us).
const RTT_P50_TARGET_US: f64 = 100.0;
const RTT_P99_TARGET_US: f64 = 200.0;

fn new_namespace() -> OwnedFd {
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net").unwrap())
    })
    .join()
    .unwrap()
}

fn ip_in(ns: BorrowedFd<'_>, args: &str) {
    cmd_in(ns, "ip", args);
}

fn cmd_in(ns: BorrowedFd<'_>, program: &str, args: &str) {
    let mut c = Command::new(program);
    c.args(args.split_whitespace()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    sys::process::enter_netns_on_spawn(&mut c, ns);
    let st = c.status().expect(program);
    assert!(st.success(), "{program} {args}");
}

/// Two namespaces joined by a veth pair, same addresses and MTU as the emulator.
fn veth() -> (OwnedFd, OwnedFd) {
    let (c, s) = (new_namespace(), new_namespace());
    let mut holder = Command::new("sleep");
    holder.arg("600");
    sys::process::enter_netns_on_spawn(&mut holder, s.as_fd());
    let mut h = holder.spawn().unwrap();
    ip_in(c.as_fd(), &format!("link add va mtu 1500 type veth peer name vb netns {}", h.id()));
    let _ = h.kill();
    let _ = h.wait();
    for (ns, dev, addr) in [(&c, "va", "198.18.0.1/24"), (&s, "vb", "198.18.0.2/24")] {
        ip_in(ns.as_fd(), "link set lo up");
        ip_in(ns.as_fd(), &format!("addr add {addr} dev {dev}"));
        ip_in(ns.as_fd(), &format!("link set {dev} up"));
    }
    (c, s)
}

fn pps(c: BorrowedFd<'_>, s: BorrowedFd<'_>, secs: f64) -> f64 {
    pps_at(c, s, secs, None).0
}

/// CPU time of the calling thread (ns), CLOCK_THREAD_CPUTIME_ID.
fn thread_cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).expect("thread CPU clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// User + system CPU time of this process (ns), getrusage(RUSAGE_SELF): the sender, the
/// receiver and the forwarder threads (and softirq work the kernel charged to them).
fn process_cpu_ns() -> u64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let ns = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000;
    ns(u.user_time()) + ns(u.system_time())
}

/// CPU time per packet (ns) of a [`pps_at`] run: the sending thread per packet sent, the
/// receiving thread per packet received, the rest of the process (the forwarder's threads;
/// about 0 over veth) per packet received: what a packet that arrives costs, none wasted.
#[derive(Clone, Copy, Default)]
struct PacketCpu {
    sender: f64,
    receiver: f64,
    rest: f64,
}

impl PacketCpu {
    fn total(&self) -> f64 {
        self.sender + self.receiver + self.rest
    }
}

/// [`pps`] with the sender paced to `rate` packets/s (None: as fast as it can); also the CPU
/// time per packet over the whole run.
fn pps_at(c: BorrowedFd<'_>, s: BorrowedFd<'_>, secs: f64, rate: Option<f64>) -> (f64, PacketCpu) {
    let rx = run_in(s, || UdpSocket::bind((SERVER_IP, 9000)).unwrap()).unwrap();
    let tx = run_in(c, || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (c2, d2) = (count.clone(), done.clone());
    let r = std::thread::spawn(move || {
        let cpu0 = thread_cpu_ns();
        let mut b = [0u8; 2048];
        while !d2.load(Ordering::Relaxed) {
            if rx.recv(&mut b).is_ok() {
                c2.fetch_add(1, Ordering::Relaxed);
            }
        }
        thread_cpu_ns() - cpu0
    });
    let (proc0, send0) = (process_cpu_ns(), thread_cpu_ns());
    let payload = [0u8; 64];
    let start = Instant::now();
    let mut marked = None;
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        if let Some(r) = rate {
            if sent as f64 > r * start.elapsed().as_secs_f64() {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
        }
        let _ = tx.send_to(&payload, (SERVER_IP, 9000));
        sent += 1;
        if marked.is_none() && start.elapsed() > Duration::from_millis(300) {
            marked = Some((Instant::now(), count.load(Ordering::Relaxed)));
        }
    }
    let (t0, n0) = marked.unwrap();
    let total = count.load(Ordering::Relaxed);
    let n = total - n0;
    let dt = t0.elapsed().as_secs_f64();
    let sender = thread_cpu_ns() - send0;
    done.store(true, Ordering::Relaxed);
    // The receiver's last recv waits out its 100 ms timeout: idle, not CPU.
    let receiver = r.join().unwrap();
    let all = process_cpu_ns().saturating_sub(proc0);
    let per = |ns: u64| ns as f64 / total.max(1) as f64;
    let cpu = PacketCpu {
        sender: sender as f64 / sent.max(1) as f64,
        receiver: per(receiver),
        rest: per(all.saturating_sub(sender + receiver)),
    };
    (n as f64 / dt, cpu)
}

fn bulk_gbps(c: BorrowedFd<'_>, s: BorrowedFd<'_>, secs: f64) -> f64 {
    bulk_cpu(c, s, secs).0
}

/// [`bulk_gbps`] and the CPU time per byte received over the whole run (ns per MB: the sending
/// thread, the receiving thread, the rest of the process: the forwarder).
fn bulk_cpu(c: BorrowedFd<'_>, s: BorrowedFd<'_>, secs: f64) -> (f64, PacketCpu) {
    let l = run_in(s, || TcpListener::bind((SERVER_IP, 9001)).unwrap()).unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let c2 = count.clone();
    let r = std::thread::spawn(move || {
        let cpu0 = thread_cpu_ns();
        let (mut k, _) = l.accept().unwrap();
        let mut b = vec![0u8; 1 << 18];
        while let Ok(n) = k.read(&mut b) {
            if n == 0 {
                break;
            }
            c2.fetch_add(n as u64, Ordering::Relaxed);
        }
        thread_cpu_ns() - cpu0
    });
    let (proc0, send0) = (process_cpu_ns(), thread_cpu_ns());
    let mut w = run_in(c, || TcpStream::connect((SERVER_IP, 9001)).unwrap()).unwrap();
    let chunk = vec![1u8; 1 << 18];
    let start = Instant::now();
    let mut marked = None;
    while start.elapsed().as_secs_f64() < secs {
        w.write_all(&chunk).unwrap();
        if marked.is_none() && start.elapsed() > Duration::from_millis(300) {
            marked = Some((Instant::now(), count.load(Ordering::Relaxed)));
        }
    }
    let (t0, n0) = marked.unwrap();
    let n = count.load(Ordering::Relaxed) - n0;
    let dt = t0.elapsed().as_secs_f64();
    let sender = thread_cpu_ns() - send0;
    drop(w);
    let receiver = r.join().unwrap();
    let all = process_cpu_ns().saturating_sub(proc0);
    let mb = count.load(Ordering::Relaxed).max(1) as f64 / 1e6;
    let cpu = PacketCpu {
        sender: sender as f64 / mb,
        receiver: receiver as f64 / mb,
        rest: all.saturating_sub(sender + receiver) as f64 / mb,
    };
    (n as f64 * 8.0 / dt / 1e9, cpu)
}

/// Sequential UDP round trips, 300 us apart; returns sorted RTTs in ns.
fn rtts(c: BorrowedFd<'_>, s: BorrowedFd<'_>, n: usize) -> Vec<u64> {
    rtts_gap(c, s, n, Duration::from_micros(300))
}

/// [`rtts`] with the client asleep `gap` between round trips.
fn rtts_gap(c: BorrowedFd<'_>, s: BorrowedFd<'_>, n: usize, gap: Duration) -> Vec<u64> {
    let srv = run_in(s, || UdpSocket::bind((SERVER_IP, 9002)).unwrap()).unwrap();
    let cli = run_in(c, || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    cli.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let e = std::thread::spawn(move || {
        let mut b = [0u8; 64];
        for _ in 0..n {
            let (k, from) = srv.recv_from(&mut b).unwrap();
            srv.send_to(&b[..k], from).unwrap();
        }
    });
    let mut out = Vec::with_capacity(n);
    let mut b = [0u8; 64];
    for _ in 0..n {
        let t = Instant::now();
        cli.send_to(&[1], (SERVER_IP, 9002)).unwrap();
        cli.recv(&mut b).unwrap();
        out.push(t.elapsed().as_nanos() as u64);
        std::thread::sleep(gap);
    }
    e.join().unwrap();
    out.sort_unstable();
    out
}

/// "meets" or "misses" its target.
fn meets(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

fn q(v: &[u64], p: f64) -> u64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn open(spec: &str, opts: &LinkOptions) -> Link {
    Link::open_with(&spec.parse::<LinkSpec>().unwrap(), None, opts).expect("link")
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        println!("SKIP forwarder bench: needs root for namespaces and veth");
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    // `--cpu-latency-0`: for the whole run (veth and emulator alike), ask the idle CPUs not to
    // halt (a PM QoS request of 0 us through /dev/cpu_dma_latency, held while the file is
    // open: cpuidle then polls instead of halting the vCPU), to see what the halted vCPUs'
    // wake-ups cost each path.
    let _qos = std::env::args().any(|a| a == "--cpu-latency-0").then(|| {
        let mut f = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency").expect("/dev/cpu_dma_latency");
        f.write_all(&0i32.to_ne_bytes()).expect("PM QoS request");
        println!("idle CPUs asked not to halt (/dev/cpu_dma_latency = 0 us) for this run");
        f
    });
    let rounds = || arg_value("--rounds").map_or(3, |r| r.parse().expect("--rounds N"));
    if let Some(list) = arg_value("--variants") {
        compare_variants(&list, rounds());
        return;
    }
    let secs = if quick { 1.5 } else { 3.0 };
    // `--with NAME`: the defaults replaced by a variant (see [`variant`]).
    let opts = arg_value("--with").map_or_else(LinkOptions::default, |v| variant(&v));
    if let Some(list) = arg_value("--pps") {
        pps_variants(&list, rounds(), secs);
        return;
    }
    if let Some(n) = arg_value("--rtt20") {
        // Only the rtt=20ms figures, N times.
        let (vc, vs) = veth();
        for _ in 0..n.parse::<usize>().expect("--rtt20 N") {
            rtt20_at(&vc, &vs, &opts, quick, arg_value("--rtt-ms").map_or(20, |m| m.parse().expect("--rtt-ms N")));
        }
        return;
    }
    println!(
        "forwarder bench ({} cores online, load average {}, defaults: spin {} us, {:?})",
        num_cpus(),
        loadavg(),
        opts.spin_ns / 1000,
        opts.priority
    );
    let (vc, vs) = veth();
    bench_pps(&vc, &vs, &opts, secs);
    bench_bulk(&vc, &vs, &opts, secs);
    // The exact windows the tests do not assert (they keep separations that hold on a loaded
    // host): a 20 ms round trip shows as 20.0-20.5 ms, a 50 Mbit/s rate within 10%.
    // Probes through rtt=20ms against the configured round trip; the emulator's own report
    // of its lateness (both directions) against what the probes saw beyond veth's round trip.
    rtt20(&vc, &vs, &opts, quick);
    bench_rate50(&opts, secs);
    bench_added_delay(&vc, &vs, &opts, quick);
    println!("load average at the end: {}", loadavg());
}

/// The first three fields of /proc/loadavg.
fn loadavg() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// `--pps LIST`: only the 64-byte rate, against veth, for each forwarder variant asked (see
/// [`variant`], plus `qN` for a TUN txqueuelen of N), `rounds` times interleaved: where the
/// packets are lost (the TUN device's queue, the receiving socket's buffer).
fn pps_variants(list: &str, rounds: usize, secs: f64) {
    let (vc, vs) = veth();
    let mut ratios: Vec<Vec<f64>> = list.split(',').map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let sock0 = udp_rcvbuf_errors(vs.as_fd());
        let v = pps(vc.as_fd(), vs.as_fd(), secs);
        let vsock = udp_rcvbuf_errors(vs.as_fd()) - sock0;
        println!("round {round} veth {:.0}k, receiving socket drops {vsock} (load {})", v / 1e3, loadavg());
        for (name, acc) in list.split(',').zip(ratios.iter_mut()) {
            let link = open("mtu=1500", &variant(name));
            let e = pps(link.client().netns(), link.server().netns(), secs);
            let sock = udp_rcvbuf_errors(link.server().netns());
            let rep = link.finish().unwrap();
            let up = &rep.dirs[0].counters;
            let dev = rep.device_drops[0].unwrap_or(0);
            println!(
                "round {round} {name:<12} {:.0}k x{:.2} veth; forwarder read {} (wrote {}), TUN queue drops {dev}, receiving socket drops {sock}",
                e / 1e3,
                e / v,
                up.packets_in,
                up.delivered,
            );
            acc.push(e / v);
        }
    }
    for (name, r) in list.split(',').zip(&ratios) {
        println!("median over {rounds} rounds: {name} x{:.2} veth", stats::median(r.to_vec()).unwrap_or(f64::NAN));
    }
}

/// 64-byte UDP flat out against veth, then paced below what the emulator carried.
fn bench_pps(vc: &OwnedFd, vs: &OwnedFd, opts: &LinkOptions, secs: f64) {
    let (v_pps, v_cpu) = pps_at(vc.as_fd(), vs.as_fd(), secs, None);
    let link = open("mtu=1500", opts);
    let (e_pps, e_cpu) = pps_at(link.client().netns(), link.server().netns(), secs, None);
    let rep = link.finish().unwrap();
    let up = &rep.dir(Dir::Up).unwrap().counters;
    println!(
        "packets/s, 64-byte UDP flat out: veth {:.0}k  emulator {:.0}k  ratio {:.2}  (target >= {PPS_TARGET}: {}; forwarder read {} delivered {}, TUN queue drops {:?})",
        v_pps / 1e3,
        e_pps / 1e3,
        e_pps / v_pps,
        meets(e_pps / v_pps >= PPS_TARGET),
        up.packets_in,
        up.delivered,
        rep.device_drops[0]
    );
    // The sender paced below what the emulator carried as fast as it could (its stated
    // capacity): no queue drop is the target there.
    let paced = (0.8 * e_pps / 1e4).floor() * 1e4;
    let link = open("mtu=1500", opts);
    let (p_pps, _) = pps_at(link.client().netns(), link.server().netns(), secs, Some(paced));
    let sock = udp_rcvbuf_errors(link.server().netns());
    let rep = link.finish().unwrap();
    println!(
        "  paced at {:.0}k/s: received {:.0}k/s, TUN queue drops {:?} (target none: {}), receiving socket drops {sock}",
        paced / 1e3,
        p_pps / 1e3,
        rep.device_drops[0],
        meets(rep.device_drops.iter().all(|d| *d == Some(0)))
    );
    // What a packet costs in CPU, flat out (the sender per packet sent, none counted for the
    // dropped ones), and the most each path could carry at that cost on two CPUs, whatever the
    // scheduling and before the other jobs on the machine take their share: a thread uses at
    // most one CPU (veth's sender runs the receiving stack too; the emulator's one forwarder
    // thread per direction reads each packet and writes it, its write(2) running the receiving
    // stack), and all of them together at most two.
    let cap = |threads: &[f64]| {
        let one = threads.iter().copied().fold(0.0, f64::max);
        (1e9 / one).min(2e9 / threads.iter().sum::<f64>())
    };
    let (v_cap, e_cap) = (cap(&[v_cpu.sender, v_cpu.receiver]), cap(&[e_cpu.sender, e_cpu.rest, e_cpu.receiver]));
    println!(
        "  CPU per packet flat out, sender + receiver (+ forwarder): veth {:.0} + {:.0} = {:.0} ns, emulator {:.0} + {:.0} + {:.0} = {:.0} ns; \
         at these costs two CPUs carry at most {:.0}k/s over veth, {:.0}k/s through the emulator: {:.2}x",
        v_cpu.sender,
        v_cpu.receiver,
        v_cpu.total(),
        e_cpu.sender,
        e_cpu.receiver,
        e_cpu.rest,
        e_cpu.total(),
        v_cap / 1e3,
        e_cap / 1e3,
        e_cap / v_cap
    );
}

/// One TCP stream against veth with and without its offloads, and without GSO.
fn bench_bulk(vc: &OwnedFd, vs: &OwnedFd, opts: &LinkOptions, secs: f64) {
    let (v_bulk, v_cpu) = bulk_cpu(vc.as_fd(), vs.as_fd(), secs);
    let link = open("mtu=1500", opts);
    let (e_bulk, e_cpu) = bulk_cpu(link.client().netns(), link.server().netns(), secs);
    let drops = link.finish().map(|r| r.device_drops).unwrap_or_default();
    // The same veth with its offloads off: every segment crosses it on its own.
    for (ns, dev) in [(vc, "va"), (vs, "vb")] {
        cmd_in(ns.as_fd(), "ethtool", &format!("-K {dev} tso off gso off gro off tx off rx off"));
    }
    let v_bulk_off = bulk_gbps(vc.as_fd(), vs.as_fd(), secs);
    for (ns, dev) in [(vc, "va"), (vs, "vb")] {
        cmd_in(ns.as_fd(), "ethtool", &format!("-K {dev} tso on gso on gro on tx on rx on"));
    }
    println!(
        "bulk TCP, mtu 1500 (GSO super-packets carried whole): emulator {e_bulk:.2} Gbit/s, veth {v_bulk:.2} with offloads, \
         {v_bulk_off:.2} without; ratios {:.2} (target >= {BULK_TARGET} of veth with offloads: {}) and {:.2}; TUN queue drops {drops:?}",
        e_bulk / v_bulk,
        meets(e_bulk / v_bulk >= BULK_TARGET),
        e_bulk / v_bulk_off,
    );
    // As for the packets: CPU per MB received, and the most two CPUs carry at those costs (a
    // thread at most one CPU, all together two).
    let cap = |t: &[f64]| (1e9 / t.iter().copied().fold(0.0, f64::max)).min(2e9 / t.iter().sum::<f64>()) * 8e6 / 1e9;
    let (v_cap, e_cap) = (cap(&[v_cpu.sender, v_cpu.receiver]), cap(&[e_cpu.sender, e_cpu.rest, e_cpu.receiver]));
    println!(
        "  CPU per MB received, sender + receiver (+ forwarder): veth {:.0} + {:.0} = {:.0} us, emulator {:.0} + {:.0} + {:.0} = {:.0} us; \
         at these costs two CPUs carry at most {v_cap:.1} Gbit/s over veth, {e_cap:.1} through the emulator: {:.2}x",
        v_cpu.sender / 1e3,
        v_cpu.receiver / 1e3,
        v_cpu.total() / 1e3,
        e_cpu.sender / 1e3,
        e_cpu.receiver / 1e3,
        e_cpu.rest / 1e3,
        e_cpu.total() / 1e3,
        e_cap / v_cap
    );
    let o_nogso = LinkOptions { gso: false, ..opts.clone() };
    let link = open("mtu=1500", &o_nogso);
    let e_nogso = bulk_gbps(link.client().netns(), link.server().netns(), secs);
    drop(link);
    println!("  the same emulator without GSO (segments as the kernel cuts them): {e_nogso:.2} Gbit/s");
}

/// One TCP stream through rate=50mbit: within 10% of 50 Mbit/s of IP packets.
fn bench_rate50(opts: &LinkOptions, secs: f64) {
    let link = open("rate=50mbit,rtt=2ms", opts);
    let r50 = bulk_gbps(link.client().netns(), link.server().netns(), secs) * 1e3;
    drop(link);
    // The rate counts IP packets; payload is 1448 of every 1500 bytes at MSS 1448.
    let want = 50.0 * 1448.0 / 1500.0;
    println!(
        "bulk TCP at rate=50mbit: {r50:.1} Mbit/s of payload  (target {want:.1} +-10%: {})",
        meets((r50 - want).abs() <= 0.1 * want)
    );
}

/// Sequential UDP round trips through delay=1ms against veth's, for spin/priority settings.
fn bench_added_delay(vc: &OwnedFd, vs: &OwnedFd, opts: &LinkOptions, quick: bool) {
    let n = if quick { 1000 } else { 3000 };
    let v = rtts(vc.as_fd(), vs.as_fd(), n);
    println!("round trip, veth: p50 {:.1} us p99 {:.1} us", q(&v, 0.5) as f64 / 1e3, q(&v, 0.99) as f64 / 1e3);
    let settings: Vec<(u64, Priority)> = if quick {
        vec![(opts.spin_ns, opts.priority)]
    } else {
        vec![
            (0, Priority::Normal),
            (0, Priority::Nice(-10)),
            (100_000, Priority::Normal),
            (100_000, Priority::Nice(-10)),
            (100_000, Priority::Fifo(1)),
        ]
    };
    for (spin, prio) in settings {
        // Spin 0 stays 0 (the sleep's own lateness); spin 100 follows the timer as the default.
        let spin_max_ns = if spin == 0 { 0 } else { opts.spin_max_ns };
        let o = LinkOptions { spin_ns: spin, spin_max_ns, priority: prio, ..opts.clone() };
        let link = open("delay=1ms", &o);
        let e = rtts(link.client().netns(), link.server().netns(), n);
        let rep = link.finish().unwrap();
        let mut h = rep.dirs[0].overhead.clone();
        h.add(&rep.dirs[1].overhead).unwrap();
        let over = |p: f64| (q(&e, p) as f64 - 2e6 - q(&v, p) as f64) / 1e3;
        println!(
            "added delay, delay=1ms, spin {:>2} us, {:<10}: printed emulator error p50 {:.1} us p99 {:.1} us per direction; round trip - 2 ms - veth: p50 {:.1} us p99 {:.1} us  (rtt=20ms's targets, p50 <= {RTT_P50_TARGET_US}: {}, p99 <= {RTT_P99_TARGET_US}: {})",
            spin / 1000,
            format!("{prio:?}"),
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            over(0.5),
            over(0.99),
            meets(over(0.5) <= RTT_P50_TARGET_US),
            meets(over(0.99) <= RTT_P99_TARGET_US),
        );
    }
}

/// Probes through rtt=20ms against the configured round trip; the emulator's own report of
/// its lateness (both directions) against what the probes saw beyond veth's round trip.
fn rtt20(vc: &OwnedFd, vs: &OwnedFd, opts: &LinkOptions, quick: bool) {
    rtt20_at(vc, vs, opts, quick, 20);
}

/// [`rtt20`] with another round trip (`--rtt20 N --rtt-ms M`).
fn rtt20_at(vc: &OwnedFd, vs: &OwnedFd, opts: &LinkOptions, quick: bool, ms: u64) {
    let n = if quick { 100 } else { 300 };
    let vbase = rtts(vc.as_fd(), vs.as_fd(), if quick { 300 } else { 1000 });
    // Veth's round trips paced as the link's are (one every `ms`): on this VM a path that ran
    // ~10 ms ago is slower than one that ran 300 us ago (docs/link.md "Issue 36").
    let vpaced = rtts_gap(vc.as_fd(), vs.as_fd(), n, Duration::from_millis(ms));
    let link = open(&format!("rtt={ms}ms"), opts);
    let cal = link.calibration().ok().cloned();
    let r20 = rtts(link.client().netns(), link.server().netns(), n);
    let rep = link.finish().unwrap();
    let late = |p: f64| rep.dirs.iter().map(|d| d.overhead_at(p).unwrap_or(0)).sum::<u64>() as f64 / 1e3;
    let us = |v: &[u64], p: f64| q(v, p) as f64 / 1e3;
    let (p50, p99) = (us(&r20, 0.5) - ms as f64 * 1e3, us(&r20, 0.99) - ms as f64 * 1e3);
    // Beyond veth's own round trip at the same quantile.
    let (probe_late, late99) = (p50 - us(&vbase, 0.5), p99 - us(&vbase, 0.99));
    let (paced50, paced99) = (p50 - us(&vpaced, 0.5), p99 - us(&vpaced, 0.99));
    // The shortest round trip: a link must never beat its delay (docs/link.md "Never early").
    let min = us(&r20, 0.0) - ms as f64 * 1e3;
    println!(
        "round trip at rtt={ms}ms (load {}), beyond {ms} ms: min {min:+.0} us (never under: {}), p50 +{p50:.0} us, p99 +{p99:.0} us; \
         beyond it and veth's own (p50 {:.0} us, p99 {:.0} us): p50 +{probe_late:.0} us (target <= {RTT_P50_TARGET_US}: {}), \
         p99 +{late99:.0} us (target <= {RTT_P99_TARGET_US}: {}); \
         beyond veth's paced one every {ms} ms (p50 {:.0} us, p99 {:.0} us): p50 +{paced50:.0} us ({}), p99 +{paced99:.0} us ({}); \
         printed lateness p50 {:.0} us against the probes' {probe_late:.0} us beyond veth's round trip (within 20: {})",
        loadavg(),
        if min >= 0.0 { "yes" } else { "NO" },
        us(&vbase, 0.5),
        us(&vbase, 0.99),
        meets(probe_late <= RTT_P50_TARGET_US),
        meets(late99 <= RTT_P99_TARGET_US),
        us(&vpaced, 0.5),
        us(&vpaced, 0.99),
        meets(paced50 <= RTT_P50_TARGET_US),
        meets(paced99 <= RTT_P99_TARGET_US),
        late(0.5),
        meets((late(0.5) - probe_late).abs() <= 20.0)
    );
    for (d, r) in Dir::BOTH.iter().zip(&rep.dirs) {
        println!(
            "  probes' packets {}: write p50 {:.1} us, run_delay after a wake-up p50 {:.1} us, printed p50 {:.1} us; \
             the timer woke the thread p50 {:.1} us p90 {:.1} us late, spin {:.0} us",
            d.label(),
            r.write_time.value_at_quantile(0.5) as f64 / 1e3,
            r.wake_late.value_at_quantile(0.5) as f64 / 1e3,
            r.overhead_at(0.5).unwrap_or(0) as f64 / 1e3,
            r.timer_late.value_at_quantile(0.5) as f64 / 1e3,
            r.timer_late.value_at_quantile(0.9) as f64 / 1e3,
            r.spin_ns as f64 / 1e3
        );
    }
    if let Some(cal) = cal {
        for (d, c) in Dir::BOTH.iter().zip(&cal.dirs) {
            let us = |ns: u64| ns as f64 / 1e3;
            println!(
                "  calibration {}: {} probes; unseen {:.1} us - direct path {:.1} = fixed {:.1} us (wake-up {:.1}, shortest {:.1}, + rest {:.1}; ends {:.1}); send->queue {:.1}, send->read {:.1} (run_delay {:.1}), late {:.1}, write {:.1} (shortest {:.1}), write->recv {:.1}",
                d.label(),
                c.probes,
                us(c.unseen_ns),
                us(c.direct_ns),
                us(c.fixed_ns),
                us(c.wake_ns),
                us(c.wake_min_ns),
                us(c.rest_ns),
                c.ends_ns as f64 / 1e3,
                us(c.to_queue_ns),
                us(c.to_read_ns),
                us(c.run_delay_ns),
                us(c.late_ns),
                us(c.write_ns),
                us(c.write_min_ns),
                us(c.to_recv_ns)
            );
        }
    }
}

/// Medians over rounds of one variant: packets/s, emulator/veth pps ratio, Gbit/s, lateness
/// p99 (us), round trip - 2 ms - veth p50 and p99 (us).
#[derive(Default)]
struct Samples {
    pps: Vec<f64>,
    ratio: Vec<f64>,
    gbps: Vec<f64>,
    late99: Vec<f64>,
    rtt50: Vec<f64>,
    rtt99: Vec<f64>,
}

/// `--variants base,napi,busy20,rps1-2,pin1-0,fifo --rounds N`: every variant of the forwarder
/// (see [`variant`]) measured in each round right after the veth pair, interleaved, so slow
/// phases of a shared machine hit all of them alike; medians at the end.
fn compare_variants(list: &str, rounds: usize) {
    let names: Vec<&str> = list.split(',').collect();
    let (vc, vs) = veth();
    let mut all: Vec<Samples> = names.iter().map(|_| Samples::default()).collect();
    let mut veth_pps = Vec::new();
    let mut veth_gbps = Vec::new();
    for round in 0..rounds {
        let v_pps = pps(vc.as_fd(), vs.as_fd(), 2.0);
        let v_bulk = bulk_gbps(vc.as_fd(), vs.as_fd(), 2.0);
        let v_rtt = rtts(vc.as_fd(), vs.as_fd(), 1000);
        veth_pps.push(v_pps);
        veth_gbps.push(v_bulk);
        println!("round {round} veth: {:.0}k packets/s, {v_bulk:.2} Gbit/s", v_pps / 1e3);
        for (name, acc) in names.iter().zip(all.iter_mut()) {
            let o = variant(name);
            let link = open("mtu=1500", &o);
            let e_pps = pps(link.client().netns(), link.server().netns(), 2.0);
            let drops = link.finish().unwrap().device_drops[0];
            let link = open("mtu=1500", &o);
            let e_bulk = bulk_gbps(link.client().netns(), link.server().netns(), 2.0);
            drop(link);
            let link = open("delay=1ms", &o);
            let e = rtts(link.client().netns(), link.server().netns(), 1000);
            let rep = link.finish().unwrap();
            let mut h = rep.dirs[0].overhead.clone();
            h.add(&rep.dirs[1].overhead).unwrap();
            let over = |p: f64| (q(&e, p) as f64 - 2e6 - q(&v_rtt, p) as f64) / 1e3;
            let late99 = h.value_at_quantile(0.99) as f64 / 1e3;
            println!(
                "round {round} {name:<14} {:>4.0}k packets/s (x{:.2} veth, device drops {drops:?}), {e_bulk:.2} Gbit/s, lateness p99 {late99:.1} us, round trip - 2 ms - veth p50 {:.1} p99 {:.1} us",
                e_pps / 1e3,
                e_pps / v_pps,
                over(0.5),
                over(0.99)
            );
            acc.pps.push(e_pps);
            acc.ratio.push(e_pps / v_pps);
            acc.gbps.push(e_bulk);
            acc.late99.push(late99);
            acc.rtt50.push(over(0.5));
            acc.rtt99.push(over(0.99));
        }
    }
    println!(
        "medians over {rounds} rounds; veth {:.0}k packets/s, {:.2} Gbit/s",
        stats::median(veth_pps.clone()).unwrap_or(f64::NAN) / 1e3,
        stats::median(veth_gbps.clone()).unwrap_or(f64::NAN)
    );
    println!("| variant | packets/s | x veth | Gbit/s | lateness p99 | rtt excess p50 | rtt excess p99 |");
    for (name, a) in names.iter().zip(&all) {
        println!(
            "| {name} | {:.0}k | {:.2} | {:.2} | {:.1} us | {:.1} us | {:.1} us |",
            stats::median(a.pps.clone()).unwrap_or(f64::NAN) / 1e3,
            stats::median(a.ratio.clone()).unwrap_or(f64::NAN),
            stats::median(a.gbps.clone()).unwrap_or(f64::NAN),
            stats::median(a.late99.clone()).unwrap_or(f64::NAN),
            stats::median(a.rtt50.clone()).unwrap_or(f64::NAN),
            stats::median(a.rtt99.clone()).unwrap_or(f64::NAN)
        );
    }
}

fn arg_value(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1).cloned())
}

/// A forwarder variant by name, parts joined with '+': `base` (the defaults), `napi` (IFF_NAPI
/// devices), `tnapi` (IFF_NAPI with the poll in a kernel thread), `busyN` (busy-poll N us after the input runs dry), `pinA-B` (up thread on CPU A,
/// down on B), `rpsC-S` (RPS masks of the client's and the server's device; `rpsM` both),
/// `normal` / `fifo` (scheduling instead of nice -10), `spinN` (a fixed spin of N us before a
/// deadline), `spinmaxN` (the spin follows the timer up to N us; after `spinN`: from N).
fn variant(name: &str) -> LinkOptions {
    let mut o = LinkOptions::default();
    for part in name.split('+') {
        if part == "tnapi" {
            for d in &mut o.devices {
                d.napi = true;
                d.threaded_napi = true;
            }
        } else if part == "napi" {
            o.devices[0].napi = true;
            o.devices[1].napi = true;
        } else if let Some(us) = part.strip_prefix("busy") {
            o.busy_poll_ns = us.parse::<u64>().unwrap() * 1000;
        } else if let Some(p) = part.strip_prefix("pin") {
            let (a, b) = p.split_once('-').unwrap();
            o.cpus = Some([a.parse().unwrap(), b.parse().unwrap()]);
        } else if let Some(m) = part.strip_prefix("rps") {
            let (c, s) = m.split_once('-').unwrap_or((m, m));
            o.devices[0].rps_mask = c.parse().unwrap();
            o.devices[1].rps_mask = s.parse().unwrap();
        } else if let Some(us) = part.strip_prefix("spinmax") {
            o.spin_max_ns = us.parse::<u64>().unwrap() * 1000;
        } else if let Some(us) = part.strip_prefix("spin") {
            // A fixed spin of N us.
            o.spin_ns = us.parse::<u64>().unwrap() * 1000;
            o.spin_max_ns = o.spin_ns;
        } else if let Some(n) = part.strip_prefix('q') {
            o.txqueuelen = n.parse().unwrap();
        } else if part == "normal" {
            o.priority = Priority::Normal;
        } else if part == "fifo" {
            o.priority = Priority::Fifo(1);
        }
    }
    o
}

/// UDP receive buffer errors (datagrams dropped at a full socket) in a namespace, from
/// /proc/net/snmp's "Udp:" lines (header, then values).
fn udp_rcvbuf_errors(ns: BorrowedFd<'_>) -> u64 {
    let text = run_in(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap()).unwrap();
    let udp: Vec<&str> = text.lines().filter(|l| l.starts_with("Udp:")).collect();
    let (Some(h), Some(v)) = (udp.first(), udp.get(1)) else { return 0 };
    h.split_whitespace()
        .zip(v.split_whitespace())
        .find(|(k, _)| *k == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
