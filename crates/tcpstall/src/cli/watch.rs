//! `tcpstall watch`: find stalls live on a running host. Packets come from a TPACKET_V3 ring
//! (crates/sys ring.rs) through a classic BPF filter compiled for the ports and hosts asked
//! (headers only) and go to the watch running (crates/watch `Live`: the same flow table and
//! classifier as `explain`, incrementally, a flight recorder per flow, health and eviction;
//! each stall record printed at once through `report::watch`, its packets written to
//! `--write`, its counts served by `--metrics` in the Prometheus text format). Kernel evidence
//! comes from crates/kevidence's `Feed`. This file opens the sources and the outputs, serves
//! the metrics' port, takes the signals and keeps the clock.

use std::io::{BufReader, IsTerminal};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::watch::{Clock, Frame, KernelRecord, Live, Metrics, Mode, Outputs, Watcher};
use anyhow::Context;
use kevidence::Feed;

use crate::cli::procsock::Owners;

use crate::flags::watch::{check, WatchArgs, WatchFormat};

/// Bytes kept of each packet: IPv6 (40) or IPv4 with options (60) plus TCP with options (60).
const SNAPLEN: u32 = 128;
/// LINKTYPE_RAW: the ring is cooked, every packet starts at its IP header.
const LINKTYPE_RAW: u32 = 101;

pub(crate) fn run(args: WatchArgs) -> anyhow::Result<i32> {
    check(&args)?;
    let ring = open_ring(&args)?;
    let pcap = open_pcap(&args)?;
    let kfeed = open_kernel(&args);
    let metrics = open_metrics(&args)?;
    let stop = on_signals()?;
    let mode = match args.format {
        WatchFormat::Jsonl => Mode::Jsonl,
        WatchFormat::Table if std::io::stdout().is_terminal() => Mode::LiveTable,
        WatchFormat::Table => Mode::Table,
    };
    let (stdout, stderr) = (Box::new(std::io::stdout().lock()), Box::new(std::io::stderr()));
    let out = Outputs { stdout, stderr, mode, pcap, metrics, ifname };
    let mut live = Live::new(Watcher::new(config(&args, kfeed.is_some())), out, sys::host::process_cpu_ns());
    let owners = (kfeed.is_some() && !args.no_owners).then(Owners::new);
    let mut src = Sources { ring, kfeed, owners, started: Instant::now() };
    let failure = src.run(&mut live, &args, &stop).err();
    let end = live.finish(failure.is_none());
    let failure = failure.or(end.err().map(anyhow::Error::from));
    src.pull_kernel(&mut live);
    live.summary(&src.clock(), &args.interface, args.write.as_ref().map(|p| p.display().to_string()));
    failure.map_or(Ok(0), Err)
}

/// The watch's session settings from the flags (the classifier's timers are this kernel's).
fn config(args: &WatchArgs, kernel: bool) -> ::watch::Config {
    ::watch::Config {
        analyze: analyze::Config {
            min_gap: args.margin.gap(),
            timers: analyze::Timers::of_hz(sys::host::kernel_hz().ok()),
        },
        linktype: LINKTYPE_RAW,
        idle_ns: (args.idle * 1e9) as u64,
        max_flows: args.max_flows,
        keep_ns: (args.keep_seconds * 1e9) as u64,
        keep_packets: args.keep_packets,
        record: args.write.is_some(),
        ports: args.ports.clone(),
        count: args.count,
        kernel,
        owners: args.owner_filter(),
    }
}

/// The capture ring on `--interface`, filtered in the kernel to TCP of the ports and hosts asked.
fn open_ring(args: &WatchArgs) -> anyhow::Result<sys::ring::Ring> {
    let ifindex = if args.interface == "any" {
        0
    } else {
        nix::net::if_::if_nametoindex(args.interface.as_str())
            .map_err(|_| anyhow::anyhow!("--interface {}: no such interface", args.interface))?
    };
    let lo = nix::net::if_::if_nametoindex("lo").ok();
    let filter = sys::bpf::tcp_l3(&args.ports, &args.hosts, SNAPLEN, lo);
    sys::ring::Ring::open(ifindex, &filter, 1 << 20, 32, 50).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            anyhow::anyhow!("watch needs CAP_NET_RAW to open an AF_PACKET socket (run as root): {e}")
        } else {
            anyhow::anyhow!("cannot open the capture ring on {}: {e}", args.interface)
        }
    })
}

/// `--write`'s file, its one interface cooked (every packet starts at its IP header).
fn open_pcap(args: &WatchArgs) -> anyhow::Result<Option<wire::write::PcapNgWriter<Box<dyn std::io::Write>>>> {
    let Some(p) = &args.write else { return Ok(None) };
    let f = std::fs::File::create(p).with_context(|| format!("--write: cannot create {}", p.display()))?;
    let iface = wire::write::Interface {
        name: args.interface.clone(),
        description: "tcpstall watch: the packets around each stall (IP headers, cooked)".into(),
        linktype: LINKTYPE_RAW,
        snaplen: SNAPLEN,
    };
    let w: Box<dyn std::io::Write> = Box::new(std::io::BufWriter::new(f));
    Ok(Some(wire::write::PcapNgWriter::new(w, &[iface]).context("--write")?))
}

/// Kernel evidence: failing soft, one line on what is missing and what still works.
fn open_kernel(args: &WatchArgs) -> Option<Feed> {
    if !args.kernel {
        return None;
    }
    match Feed::open(&args.ports, args.kernel_reads, !args.no_owners) {
        Ok(k) => {
            eprintln!("tcpstall watch: {}", k.status());
            Some(k)
        }
        Err(why) => {
            eprintln!("tcpstall watch: {why}");
            None
        }
    }
}

/// `--metrics`: the port bound, each connection answered on a thread of its own.
fn open_metrics(args: &WatchArgs) -> anyhow::Result<Option<Arc<Metrics>>> {
    let Some(addr) = args.metrics else { return Ok(None) };
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}"))?;
    let bound = listener.local_addr().with_context(|| format!("--metrics {addr}"))?;
    let metrics = Arc::new(Metrics::new());
    let m = metrics.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let _ = answer(&m, conn);
        }
    });
    eprintln!("tcpstall watch: metrics on http://{bound}/metrics");
    Ok(Some(metrics))
}

fn answer(m: &Metrics, conn: TcpStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    m.respond(BufReader::new(conn.try_clone()?), &conn)
}

/// SIGINT, SIGTERM and SIGHUP end the watch cleanly (its summary printed); a second one quits
/// at once, with exit status 128 + the signal.
fn on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use signal_hook::flag;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // The shutdown first: it sees the flag as the previous signal left it.
        flag::register_conditional_shutdown(sig, 128 + sig, stop.clone()).context("signal handler")?;
        flag::register(sig, stop.clone()).context("signal handler")?;
    }
    Ok(stop)
}

/// The OS side of a watch running: the capture ring, the kernel evidence, the clocks.
struct Sources {
    ring: sys::ring::Ring,
    kfeed: Option<Feed>,
    /// With --kernel (and owners): the kernel's owners as paths, and /proc for the rest.
    owners: Option<Owners>,
    started: Instant,
}

impl Sources {
    /// Until a signal, `--duration`, `--count`, a closed pipe or an error.
    fn run(&mut self, live: &mut Live, args: &WatchArgs, stop: &AtomicBool) -> anyhow::Result<()> {
        let mut last_tick = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) || args.duration.is_some_and(|d| self.started.elapsed().as_secs_f64() >= d) {
                return Ok(());
            }
            let ready = self.ring.wait(100).context("poll")?;
            // The kernel's records before the packets: a record stamped before a packet was in
            // the ring before that packet was captured.
            self.pull_kernel(live);
            if ready {
                self.ring.drain(|f| {
                    let interface = f.ifindex.max(0) as u32;
                    live.push(&Frame { ts_ns: f.ts_ns, orig_len: f.orig_len, data: f.data, interface });
                });
            }
            let tick = (last_tick.elapsed() >= Duration::from_secs(1)).then(|| self.clock());
            if live.step(tick.as_ref())?.is_break() {
                return Ok(());
            }
            if tick.is_some() {
                last_tick = Instant::now();
                if let Some(k) = self.kfeed.as_mut() {
                    k.resample();
                }
            }
        }
    }

    /// The kernel's records so far to the watch, with the count of those lost.
    fn pull_kernel(&mut self, live: &mut Live) {
        if let Some(k) = self.kfeed.as_mut() {
            let w = live.watcher();
            let owners = &mut self.owners;
            let lost = k.pull(|e| {
                let owner = owners.as_mut().and_then(|o| match &e.owner {
                    Some(raw) => Some(o.of_raw(raw)),
                    None => o.of_socket(e.local, e.remote),
                });
                w.kernel_record(KernelRecord {
                    unix_ns: e.unix_ns,
                    local: e.local,
                    remote: e.remote,
                    event: e.event,
                    owner,
                });
            });
            w.set_kernel_lost(lost);
        }
    }

    fn clock(&mut self) -> Clock {
        let st = self.ring.statistics().unwrap_or_default();
        let now_unix_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Clock {
            now_unix_ns,
            up_ns: self.started.elapsed().as_nanos() as u64,
            cpu_ns: sys::host::process_cpu_ns(),
            ring_drops: st.drops,
            ring_freezes: st.freezes,
        }
    }
}

fn ifname(index: u32) -> String {
    nix::net::if_::if_indextoname(index).map(|c| c.to_string_lossy().into_owned()).unwrap_or_else(|_| index.to_string())
}
