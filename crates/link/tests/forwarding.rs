//! Real namespaces, real TUN devices, real sockets: the forwarder carries packets and applies
//! the link. Needs root (or unprivileged user namespaces and a world-writable /dev/net/tun).
//! The harness is `libtest-mimic` (`harness = false`): when no link can be built here, every
//! test is reported `ignored` with the reason; under `CI=true` each fails naming it instead.
//! The tests run one at a time (a lock): they measure delays, and side by side their
//! forwarders would delay each other's packets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Trial};

use tcpstall_link::model::{Dir, DropReason};
use tcpstall_link::netns::{run_in, SERVER_IP};
use tcpstall_link::{Link, LinkError, LinkSpec};

fn open(spec: &str, capture: Option<&std::path::Path>) -> Link {
    let spec: LinkSpec = spec.parse().unwrap();
    Link::open(&spec, capture).unwrap_or_else(|e| panic!("link {spec:?}: {e}"))
}

/// Why no link can be built here (no root, no user namespaces, no TUN), if so.
fn cannot_build_a_link() -> Option<String> {
    match Link::open(&"rtt=1ms".parse::<LinkSpec>().unwrap(), None) {
        Ok(l) => {
            let _ = l.finish();
            None
        }
        Err(LinkError::Privilege(why)) => Some(why.to_string()),
        Err(e) => Some(format!("a link ({e})")),
    }
}

/// A timing check that may miss on a loaded host: tried at most twice, both figures reported.
fn twice(what: &str, mut f: impl FnMut() -> Result<(), String>) {
    if let Err(first) = f() {
        if let Err(second) = f() {
            panic!("{what}: both tries missed\n  first:  {first}\n  second: {second}");
        }
        eprintln!("{what}: the first try missed ({first}); the second met it");
    }
}

fn main() {
    let args = Arguments::from_args();
    let tests: [(&str, fn()); 8] = [
        (
            "calibration_measures_the_path_and_stays_out_of_the_counters",
            calibration_measures_the_path_and_stays_out_of_the_counters,
        ),
        ("tun_queue_drops_are_counted_as_the_emulators_error", tun_queue_drops_are_counted_as_the_emulators_error),
        ("udp_round_trip_takes_the_configured_rtt", udp_round_trip_takes_the_configured_rtt),
        (
            "forwarder_variants_carry_every_packet_no_earlier_than_the_delay",
            forwarder_variants_carry_every_packet_no_earlier_than_the_delay,
        ),
        ("no_delay_link_is_fast", no_delay_link_is_fast),
        ("loss_drops_about_the_configured_fraction", loss_drops_about_the_configured_fraction),
        ("tcp_stream_is_limited_to_the_rate", tcp_stream_is_limited_to_the_rate),
        (
            "capture_records_both_sides_with_nanosecond_timestamps",
            capture_records_both_sides_with_nanosecond_timestamps,
        ),
    ];
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"));
    // Listing (cargo's --list) must not build namespaces.
    let missing = if args.list { None } else { cannot_build_a_link() };
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let trials = tests
        .into_iter()
        .map(|(name, f)| match &missing {
            None => Trial::test(name, move || {
                let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
                f();
                Ok(())
            }),
            Some(why) if ci => {
                let msg = format!("{name} cannot run: it needs {why} (CI is set, so it fails)");
                Trial::test(name, move || Err(msg.into()))
            }
            Some(why) => {
                let msg = format!("not run: needs {why}");
                Trial::test(name, move || Err(msg.into())).with_ignored_flag(true).with_kind("skipped, needs root")
            }
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if let (Some(why), false) = (&missing, ci) {
        println!("{} tests skipped on this machine (set CI=1 to make them fail instead): {why}\n", tests.len());
    }
    conclusion.exit()
}

/// Round trips of `n` one-byte UDP datagrams through the link; returns the RTTs.
fn udp_rtts(link: &Link, n: usize) -> Vec<Duration> {
    let server = run_in(link.server().netns(), || UdpSocket::bind((SERVER_IP, 7000)).unwrap()).unwrap();
    let client = run_in(link.client().netns(), || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let echo = std::thread::spawn(move || {
        let mut b = [0u8; 64];
        for _ in 0..n {
            let (k, from) = server.recv_from(&mut b).unwrap();
            server.send_to(&b[..k], from).unwrap();
        }
    });
    let dst = SocketAddr::from((SERVER_IP, 7000));
    let mut rtts = Vec::new();
    let mut b = [0u8; 64];
    for i in 0..n {
        let t = Instant::now();
        client.send_to(&[i as u8], dst).unwrap();
        client.recv(&mut b).expect("echo came back");
        rtts.push(t.elapsed());
    }
    echo.join().unwrap();
    rtts
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn udp_round_trip_takes_the_configured_rtt() {
    // The link adds 20 ms; the stack and the forwarder add tens of microseconds idle. On a
    // loaded host each of the four wake-ups per round trip can wait for a CPU (medians of 36-42
    // ms with four busy loops on 2 cores), so the robust figure is the fastest round trip:
    // never below 20 ms (the model never delivers early), and below 30 ms. The median's exact
    // window (20.0-20.5 ms) is in the forwarder benchmark.
    twice("fastest udp round trip at rtt=20ms", || {
        let link = open("rtt=20ms", None);
        let rtts = udp_rtts(&link, 30);
        let fastest = *rtts.iter().min().unwrap();
        let report = link.finish().unwrap();
        // No packet leaves before its arrival plus its delay (docs/link.md "Never early"); a
        // packet that would have is counted in `early` and held to its deadline.
        let early: Vec<u64> = report.dirs.iter().map(|d| d.early).collect();
        assert!(
            rtts.iter().all(|r| *r >= Duration::from_millis(20)),
            "a round trip beat the link: {rtts:?} (held back as early per direction: {early:?})"
        );
        let up = report.dir(Dir::Up).unwrap();
        assert_eq!(up.counters.delivered, 30, "{:?}", up.counters);
        assert_eq!(report.dirs[1].counters.delivered, 30);
        if (Duration::from_millis(19)..Duration::from_millis(30)).contains(&fastest) {
            Ok(())
        } else {
            Err(format!("fastest {fastest:?} of 30, median {:?} (want 19-30 ms)", median(rtts)))
        }
    });
}

/// The forwarder variants the bench compares (IFF_NAPI devices, RPS, busy-poll, a pinned
/// thread) change where and when the kernel processes packets, never what the link does:
/// every datagram still crosses, no earlier than the configured delay.
fn forwarder_variants_carry_every_packet_no_earlier_than_the_delay() {
    use tcpstall_link::netns::DeviceOptions;
    use tcpstall_link::LinkOptions;
    let dev = DeviceOptions { napi: true, threaded_napi: true, rps_mask: 1, gso: false, txqueuelen: 0 };
    let opts = LinkOptions { devices: [dev; 2], busy_poll_ns: 20_000, cpus: Some([0, 0]), ..LinkOptions::default() };
    let link = match Link::open_with(&"rtt=2ms".parse::<LinkSpec>().unwrap(), None, &opts) {
        Ok(l) => l,
        Err(e) => panic!("link: {e}"),
    };
    let rtts = udp_rtts(&link, 50);
    assert!(rtts.iter().all(|r| *r >= Duration::from_millis(2)), "a round trip beat the link: {rtts:?}");
    let report = link.finish().unwrap();
    assert_eq!(report.dirs[0].counters.delivered, 50, "{:?}", report.dirs[0].counters);
    assert_eq!(report.dirs[1].counters.delivered, 50, "{:?}", report.dirs[1].counters);
    // SCHED_FIFO forwarder threads (the capacity setting, docs/link.md), also through a blast
    // that overloads them (they leave real-time and come back).
    let opts = LinkOptions { priority: tcpstall_link::forward::Priority::Fifo(1), ..LinkOptions::default() };
    let link = Link::open_with(&"rtt=2ms".parse::<LinkSpec>().unwrap(), None, &opts).expect("link");
    // A socket to blast into, so the server answers with no ICMP port unreachable.
    let _sink = run_in(link.server().netns(), || UdpSocket::bind((SERVER_IP, 9)).unwrap()).unwrap();
    let tx = run_in(link.client().netns(), || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    for _ in 0..20_000 {
        let _ = tx.send_to(&[0u8; 64], (SERVER_IP, 9));
    }
    // While the blast drains, the TUN queue is full and drops what comes (that is overload, not
    // the property here): a request lost that way is sent again; every echo that comes back,
    // matched by its number, took no less than the delay.
    let rtts = udp_rtts_lossy(&link, 50, 400);
    assert_eq!(rtts.len(), 50, "50 echoes within 400 tries");
    assert!(rtts.iter().all(|r| *r >= Duration::from_millis(2)), "a round trip beat the link: {rtts:?}");
    let report = link.finish().unwrap();
    assert!(report.dirs[1].counters.delivered >= 50, "{:?}", report.dirs[1].counters);
}

/// Like `udp_rtts`, for a link that may drop (overloaded): up to `tries` numbered requests, each
/// waiting 500 ms for its own echo (a late echo of an earlier one is skipped), until `n` came
/// back.
fn udp_rtts_lossy(link: &Link, n: usize, tries: u16) -> Vec<Duration> {
    let server = run_in(link.server().netns(), || UdpSocket::bind((SERVER_IP, 7001)).unwrap()).unwrap();
    let client = run_in(link.client().netns(), || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    client.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut b = [0u8; 64];
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((k, from)) = server.recv_from(&mut b) {
                let _ = server.send_to(&b[..k], from);
            }
        }
    });
    let dst = SocketAddr::from((SERVER_IP, 7001));
    let mut rtts = Vec::new();
    let mut b = [0u8; 64];
    for i in 0..tries {
        if rtts.len() == n {
            break;
        }
        let t = Instant::now();
        client.send_to(&i.to_be_bytes(), dst).unwrap();
        while let Ok(k) = client.recv(&mut b) {
            if k == 2 && b[..2] == i.to_be_bytes() {
                rtts.push(t.elapsed());
                break;
            }
            if t.elapsed() > Duration::from_millis(500) {
                break;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echo.join().unwrap();
    rtts
}

/// The probes at link start measure the path (calibrate.rs): each direction has its figures,
/// the parts are ordered as they must be, the probes stay out of the counters and the capture
/// count, and the summary says what was counted.
fn calibration_measures_the_path_and_stays_out_of_the_counters() {
    let link = open("rtt=4ms", None);
    let cal = link.calibration().expect("calibrated").clone();
    for d in &cal.dirs {
        assert!(d.probes >= tcpstall_link::calibrate::ROUNDS as usize / 2, "{cal:?}");
        assert!(d.wake_min_ns <= d.wake_ns && d.wake_ns <= d.fixed_ns, "{cal:?}");
        assert!(d.direct_ns > 0 && d.unseen_ns > 0, "{cal:?}");
    }
    let rtts = udp_rtts(&link, 40);
    assert!(rtts.iter().all(|r| *r >= Duration::from_millis(4)), "a round trip beat the link: {rtts:?}");
    let report = link.finish().unwrap();
    // The probes crossed the forwarder but not the model.
    assert_eq!(report.dirs[0].counters.packets_in, 40, "{:?}", report.dirs[0].counters);
    assert_eq!(report.dirs[1].counters.packets_in, 40, "{:?}", report.dirs[1].counters);
    let lines = report.summary_lines().join("\n");
    assert!(lines.contains("measured at start by") && !lines.contains("made up for"), "{lines}");
}

/// Packets the kernel drops at a TUN device's queue before the forwarder reads them are the
/// emulator's error, counted and printed as such: a sender blasting 64-byte datagrams into a
/// device whose queue holds 8 overruns it (the forwarder cannot read as fast as a sender
/// writes to a TUN device, which costs the sender only the enqueue).
fn tun_queue_drops_are_counted_as_the_emulators_error() {
    use tcpstall_link::LinkOptions;
    let opts = LinkOptions { txqueuelen: 8, ..LinkOptions::default() };
    let link = Link::open_with(&"mtu=1500".parse::<LinkSpec>().unwrap(), None, &opts).unwrap();
    let tx = run_in(link.client().netns(), || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    for _ in 0..50_000 {
        let _ = tx.send_to(&[0u8; 64], (SERVER_IP, 9));
    }
    let report = link.finish().unwrap();
    let dropped = report.device_drops[0].expect("read from /proc/net/dev");
    let c = &report.dirs[0].counters;
    assert!(dropped > 0, "no drop at a queue of 8: {c:?}");
    // Each datagram was read by the forwarder, dropped by the device, or still in its queue
    // of 8 when the forwarder stopped.
    let accounted = c.packets_in + dropped;
    assert!((50_000 - 8..=50_000).contains(&accounted), "{c:?}, {dropped} dropped");
    let lines = report.summary_lines().join("\n");
    assert!(
        lines.contains(&format!("emulator error: {dropped} packets dropped at the TUN devices' queues")),
        "{lines}"
    );
}

fn no_delay_link_is_fast() {
    twice("udp p50 without delay", || {
        let link = open("mtu=1500", None);
        // Idle the median is tens of microseconds; on a loaded host wake-ups add milliseconds,
        // so: the fastest under 5 ms and the median under 30 ms (no round trip waits for a
        // timer).
        let rtts = udp_rtts(&link, 200);
        let _ = link.finish();
        let fastest = *rtts.iter().min().unwrap();
        let p50 = median(rtts);
        if fastest < Duration::from_millis(5) && p50 < Duration::from_millis(30) {
            Ok(())
        } else {
            Err(format!("fastest {fastest:?}, median {p50:?} on a link without delay (want < 5 ms, < 30 ms)"))
        }
    });
}

fn loss_drops_about_the_configured_fraction() {
    let link = open("loss=20%", None);
    let server = run_in(link.server().netns(), || UdpSocket::bind((SERVER_IP, 7001)).unwrap()).unwrap();
    let client = run_in(link.client().netns(), || UdpSocket::bind("0.0.0.0:0").unwrap()).unwrap();
    server.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    // Receive concurrently so the server's socket buffer never overflows.
    let rx = std::thread::spawn(move || {
        let mut got = 0u64;
        let mut b = [0u8; 16];
        while server.recv(&mut b).is_ok() {
            got += 1;
        }
        got
    });
    let n = 2000u64;
    for i in 0..n {
        client.send_to(&i.to_be_bytes(), (SERVER_IP, 7001)).unwrap();
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let got = rx.join().unwrap();
    let report = link.finish().unwrap();
    let c = &report.dir(Dir::Up).unwrap().counters;
    let lost = c.drops_of(DropReason::Loss);
    // On a loaded host the forwarder can fall behind and the TUN device's queue drops datagrams
    // before the forwarder reads them (device_drops): the link's 20% applies to those it read.
    // Binomial(packets_in, 0.2) within 5 sigma (sd = 17.9 for all 2000).
    let read = c.packets_in as f64;
    let sd = (read * 0.2 * 0.8).sqrt();
    assert!((lost as f64 - 0.2 * read).abs() <= 5.0 * sd, "lost {lost} of {read} read ({n} sent) at 20%");
    assert!(read >= n as f64 / 2.0, "the forwarder read only {read} of {n}: {:?}", report.device_drops);
    if let Some(device) = report.device_drops[0] {
        assert_eq!(c.packets_in + device, n, "every datagram is read by the forwarder or dropped by the device");
    }
    assert_eq!(c.delivered + lost, c.packets_in, "every datagram read is either delivered or counted as lost");
    // The receiving socket may overflow too when its thread is descheduled; never more arrive.
    assert!(got <= c.delivered && got > 0, "received {got}, delivered {}", c.delivered);
}

/// Never faster than the link; a userspace forwarder on a loaded host may fall short, so the
/// lower bound is half the rate. The 10% window is the forwarder benchmark's target.
fn tcp_stream_is_limited_to_the_rate() {
    twice("goodput at rate=50mbit", || {
        let link = open("rate=50mbit,rtt=2ms", None);
        let listener = run_in(link.server().netns(), || TcpListener::bind((SERVER_IP, 7002)).unwrap()).unwrap();
        let sink = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut b = vec![0u8; 1 << 16];
            let mut n = 0u64;
            loop {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => return n,
                    Ok(k) => n += k as u64,
                }
            }
        });
        let mut c = run_in(link.client().netns(), || TcpStream::connect((SERVER_IP, 7002)).unwrap()).unwrap();
        let chunk = vec![7u8; 1 << 16];
        // Warm up (slow start), then measure 2 s at steady state.
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(500) {
            c.write_all(&chunk).unwrap();
        }
        let report_before = Instant::now();
        let mut sent = 0u64;
        while report_before.elapsed() < Duration::from_secs(2) {
            c.write_all(&chunk).unwrap();
            sent += chunk.len() as u64;
        }
        let secs = report_before.elapsed().as_secs_f64();
        drop(c);
        sink.join().unwrap();
        let report = link.finish().unwrap();
        assert!(report.dir(Dir::Up).unwrap().counters.delivered > 1000);
        // Bytes accepted by the socket track the link rate once the send buffer is full; the
        // link rate counts IP bytes, so goodput is ~ 1448/1500 of it.
        let goodput = sent as f64 * 8.0 / secs;
        let wire = 50e6 * 1448.0 / 1500.0;
        if (0.5 * wire..1.05 * wire).contains(&goodput) {
            Ok(())
        } else {
            Err(format!("goodput {:.1} Mbit/s, want {:.1}-{:.1}", goodput / 1e6, wire / 2e6, wire * 1.05 / 1e6))
        }
    });
}

fn capture_records_both_sides_with_nanosecond_timestamps() {
    let dir = tempfile_dir();
    let path = dir.join("t.pcapng");
    let link = open("rtt=4ms", Some(&path));
    let _ = udp_rtts(&link, 5);
    let report = link.finish().unwrap();
    let (_, records) = report.capture.clone().unwrap();
    // 5 requests and 5 replies, each recorded where it entered and where it left.
    assert_eq!(records, 20);
    let data = std::fs::read(&path).unwrap();
    let mut reader = pcap_file::pcapng::PcapNgReader::new(&data[..]).unwrap();
    let mut per_iface = [Vec::new(), Vec::new()];
    while let Some(b) = reader.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(p) = b.unwrap() {
            per_iface[p.interface_id as usize].push(p.timestamp);
        }
    }
    assert_eq!(per_iface[0].len(), 10);
    assert_eq!(per_iface[1].len(), 10);
    // A request: client side at read, server side 2 ms (one-way delay) later; never earlier,
    // later only by the forwarder's scheduling (milliseconds on a loaded host, so the bound is
    // the delay plus 10 ms).
    // Requests are the even records of each side (request in, reply out at the client; request
    // out, reply in at the server); the fastest of the five, since scheduling only adds.
    let one_way = (0..5).map(|k| per_iface[1][2 * k] - per_iface[0][2 * k]).min().unwrap();
    assert!(one_way >= Duration::from_millis(2) && one_way < Duration::from_millis(12), "{one_way:?}");
    for k in 0..5 {
        assert!(per_iface[1][2 * k] - per_iface[0][2 * k] >= Duration::from_millis(2), "request {k} beat the link");
    }
    // Timestamps are wall clock (not monotonic since boot) and carry sub-microsecond digits.
    assert!(per_iface[0][0] > Duration::from_secs(1_600_000_000));
    assert!(per_iface[0].iter().any(|t| t.subsec_nanos() % 1000 != 0));
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tcpstall-link-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
