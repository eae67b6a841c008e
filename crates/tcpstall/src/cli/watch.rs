//! `tcpstall watch`: find stalls live on a running host. Packets come from a TPACKET_V3 ring
//! (crates/sys ring.rs) through a classic BPF filter compiled for the ports and hosts asked
//! (headers only) and go to the watch's session (crates/watch: the same flow table and
//! classifier as `explain`, incrementally, a flight recorder per flow, health and eviction);
//! each stall record it yields is printed at once (crates/report, `report::watch`), its
//! packets written to `--write`, its counts served by `--metrics` in the Prometheus text
//! format. This file opens the sources and the outputs, and keeps the clock.

use std::io::{IsTerminal, StdoutLock, Write};
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::watch::{Frame, Record, Watcher};
use anyhow::{bail, Context};
use report::watch::{watch_live_table, WatchHealth, WatchLine, WatchSummary};

use super::watch_kernel::KernelFeed;
use super::watch_metrics::Metrics;

const EXAMPLES: &str = "\
Examples:
  tcpstall watch --port 8080                    stalls of port 8080 on every interface, live
  tcpstall watch -i lo --format jsonl | jq .    one stall record per line, as explain's JSON
  tcpstall watch --port 443 --write stalls.pcapng --duration 3600
      an hour of watching leaves a capture of the stalls alone (tcpstall explain reads it)
  tcpstall watch --metrics 127.0.0.1:9464       serve stall counts to Prometheus
  tcpstall watch --port 8080 --kernel           with kernel evidence: each write, resend and
      window from eBPF on TCP tracepoints joins the packets (root; else one line says why)

Needs CAP_NET_RAW (root). The kernel filters TCP on the ports and hosts asked and copies
headers only (128 bytes); a packet the filter drops never reaches user space. Flows are
forgotten on FIN/RST, after --idle seconds without a packet, or (least recently seen first)
beyond --max-flows; each is counted. A stall is printed when the packet after its release
settles it, or about a second after its release when the flow goes quiet.";

/// Bytes kept of each packet: IPv6 (40) or IPv4 with options (60) plus TCP with options (60).
const SNAPLEN: u32 = 128;
/// LINKTYPE_RAW: the ring is cooked, every packet starts at its IP header.
const LINKTYPE_RAW: u32 = 101;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WatchFormat {
    /// A live table on a terminal (refreshed every second), a summary at the end.
    Table,
    /// One JSON stall record per line, flushed per line.
    Jsonl,
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct WatchArgs {
    /// Interface to watch (any: every interface of this network namespace)
    #[arg(long, short = 'i', value_name = "IF", default_value = "any")]
    pub interface: String,
    /// Only packets to or from this port (repeatable)
    #[arg(long = "port", value_name = "P")]
    pub ports: Vec<u16>,
    /// Only packets to or from this address (repeatable)
    #[arg(long = "host", value_name = "H")]
    pub hosts: Vec<IpAddr>,
    /// Shortest wait reported as a stall, ms (the classifier's minimum gap beyond the path RTT)
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub threshold: f64,
    /// Output: table (live, for people) or jsonl (one stall record per line)
    #[arg(long, value_enum, default_value = "table")]
    pub format: WatchFormat,
    /// Keep the packets around each stall in this pcapng file (a flight recorder per flow)
    #[arg(long, value_name = "FILE.pcapng")]
    pub write: Option<PathBuf>,
    /// Flight recorder: seconds of packets kept per flow
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub keep_seconds: f64,
    /// Flight recorder: packets kept per flow at most
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub keep_packets: usize,
    /// Serve Prometheus/OpenMetrics text on http://ADDR:PORT/metrics
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Stop after this many seconds
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Stop after this many stall records
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Flows analysed at once at most; beyond, the least recently seen is forgotten
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub max_flows: usize,
    /// Forget a flow after this many seconds without a packet
    #[arg(long, value_name = "S", default_value_t = 120.0)]
    pub idle: f64,
    /// Add kernel evidence: the writes (when the application wrote, how many bytes), resends
    /// and windows of the watched ports' sockets in this network namespace, from eBPF programs
    /// on TCP tracepoints, joined to each flow's packets before the classifier reads them.
    /// Needs root (CAP_BPF and CAP_PERFMON) and a kernel with BTF; without them one line says
    /// what is missing and the packets are analysed alone
    #[arg(long)]
    pub kernel: bool,
    /// With --kernel, also record the application's reads (tcp:tcp_rcv_space_adjust): off by
    /// default, as no rule uses them and a request/response flow makes one per message
    #[arg(long, requires = "kernel")]
    pub kernel_reads: bool,
}

pub(crate) fn run(args: WatchArgs) -> anyhow::Result<i32> {
    check(&args)?;
    let ring = open_ring(&args)?;
    let pcap = open_pcap(&args)?;
    let kfeed = open_kernel(&args);
    let metrics = open_metrics(&args)?;
    let signals = Signals::install()?;
    let format = args.format;
    let tty = std::io::stdout().is_terminal() && format == WatchFormat::Table;
    let out = Output { stdout: std::io::stdout().lock(), format, tty, open: true, pcap, metrics };
    let mut live = Live {
        w: Watcher::new(config(&args, kfeed.is_some())),
        ring,
        kfeed,
        out,
        started: Instant::now(),
        cpu0: lab::cpu::process_cpu_ns(),
        last_tick: Instant::now(),
        warned_drops: 0,
        recs: Vec::new(),
    };
    let mut failure = live.run(&args, &signals.stop).err();
    signals.close();
    if failure.is_none() {
        // Flows still alive: their last records (a gap pending at the end is classified now).
        live.w.finish(&mut live.recs);
        failure = live.emit().err();
    }
    if let Some(p) = live.out.pcap.as_mut() {
        if let Err(e) = p.flush() {
            failure = failure.or(Some(anyhow::anyhow!("--write: {e}")));
        }
    }
    if let Some(k) = live.kfeed.as_mut() {
        k.pull(&mut live.w);
    }
    let health = live.health();
    let summary = WatchSummary {
        seconds: live.started.elapsed().as_secs_f64(),
        interface: &args.interface,
        health: &health,
        by_cause: live.w.by_cause(),
        written_to: args.write.as_ref().map(|p| p.display().to_string()),
    };
    if format == WatchFormat::Table && !tty {
        let _ = live.out.stdout.write_all(summary.text(&live.w.top(20)).as_bytes());
        let _ = live.out.stdout.flush();
    } else {
        eprintln!("{}", summary.line());
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(0),
    }
}

/// The flags' values: one line each on what is wrong, before anything is opened.
fn check(args: &WatchArgs) -> anyhow::Result<()> {
    if !(args.threshold.is_finite() && (1.0..=60_000.0).contains(&args.threshold)) {
        bail!("--threshold {}: expected milliseconds between 1 and 60000", args.threshold);
    }
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration {d}: expected seconds above 0");
        }
    }
    if !(args.keep_seconds.is_finite() && args.keep_seconds > 0.0) {
        bail!("--keep-seconds {}: expected seconds above 0", args.keep_seconds);
    }
    if !(args.idle.is_finite() && args.idle >= 1.0) {
        bail!("--idle {}: expected at least 1 second", args.idle);
    }
    if args.max_flows == 0 || args.keep_packets == 0 {
        bail!("--max-flows and --keep-packets: expected at least 1");
    }
    Ok(())
}

/// The watch's session settings from the flags (the classifier's timers are this kernel's).
fn config(args: &WatchArgs, kernel: bool) -> ::watch::Config {
    ::watch::Config {
        analyze: analyze::Config {
            min_gap: trace::Duration((args.threshold * 1e6) as u64),
            timers: lab::kernel_timers(),
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

type PcapOut = wire::write::PcapNgWriter<std::io::BufWriter<std::fs::File>>;

/// `--write`'s file, its one interface cooked (every packet starts at its IP header).
fn open_pcap(args: &WatchArgs) -> anyhow::Result<Option<PcapOut>> {
    let Some(p) = &args.write else { return Ok(None) };
    let f = std::fs::File::create(p).with_context(|| format!("--write: cannot create {}", p.display()))?;
    let iface = wire::write::Interface {
        name: args.interface.clone(),
        description: "tcpstall watch: the packets around each stall (IP headers, cooked)".into(),
        linktype: LINKTYPE_RAW,
        snaplen: SNAPLEN,
    };
    Ok(Some(wire::write::PcapNgWriter::new(std::io::BufWriter::new(f), &[iface]).context("--write")?))
}

/// Kernel evidence: failing soft, one line on what is missing and what still works.
fn open_kernel(args: &WatchArgs) -> Option<KernelFeed> {
    if !args.kernel {
        return None;
    }
    match KernelFeed::open(&args.ports, args.kernel_reads) {
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

fn open_metrics(args: &WatchArgs) -> anyhow::Result<Option<Metrics>> {
    let Some(addr) = args.metrics else { return Ok(None) };
    let m = Metrics::serve(addr).with_context(|| format!("--metrics {addr}"))?;
    eprintln!("tcpstall watch: metrics on http://{}/metrics", m.addr);
    Ok(Some(m))
}

/// SIGINT, SIGTERM and SIGHUP end the watch cleanly (its summary printed); a second one quits
/// at once.
struct Signals {
    stop: Arc<AtomicBool>,
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut s = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).context("signal handler")?;
        let handle = s.handle();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // The iterator lives until `close` (dropping it early would leave close writing to a
        // closed pipe).
        let thread = std::thread::spawn(move || {
            for sig in s.forever() {
                if flag.swap(true, Ordering::SeqCst) {
                    std::process::exit(128 + sig);
                }
            }
        });
        Ok(Signals { stop, handle, thread })
    }

    fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// Where the records go.
struct Output {
    stdout: StdoutLock<'static>,
    format: WatchFormat,
    /// The live table is drawn (a terminal, `--format table`).
    tty: bool,
    /// Standard output still takes lines (a closed pipe ends the watch quietly).
    open: bool,
    pcap: Option<PcapOut>,
    metrics: Option<Metrics>,
}

/// A watch running: the sources, the session, the outputs and the clock.
struct Live {
    ring: sys::ring::Ring,
    kfeed: Option<KernelFeed>,
    w: Watcher,
    out: Output,
    started: Instant,
    cpu0: u64,
    last_tick: Instant,
    /// Ring drops already warned about.
    warned_drops: u64,
    /// Records yielded, not written yet.
    recs: Vec<Record>,
}

impl Live {
    /// Until a signal, `--duration`, `--count`, a closed pipe or an error.
    fn run(&mut self, args: &WatchArgs, stop: &AtomicBool) -> anyhow::Result<()> {
        loop {
            if stop.load(Ordering::SeqCst) || args.duration.is_some_and(|d| self.started.elapsed().as_secs_f64() >= d) {
                return Ok(());
            }
            let ready = self.ring.wait(100).context("poll")?;
            // The kernel's records before the packets: a record stamped before a packet was in
            // the ring before that packet was captured.
            if let Some(k) = self.kfeed.as_mut() {
                k.pull(&mut self.w);
            }
            if ready {
                let (w, recs) = (&mut self.w, &mut self.recs);
                self.ring.drain(|f| {
                    let frame = Frame {
                        ts_ns: f.ts_ns,
                        orig_len: f.orig_len,
                        data: f.data,
                        interface: f.ifindex.max(0) as u32,
                    };
                    w.push(&frame, recs);
                });
            }
            let tick = self.last_tick.elapsed() >= Duration::from_secs(1);
            if tick {
                self.w.tick(now_unix_ns(), &mut self.recs);
            }
            if self.emit()?.is_break() {
                return Ok(());
            }
            if tick {
                self.tick()?;
            }
        }
    }

    /// Writes the records yielded: metrics, `--write`'s packets, the JSON lines. Break when
    /// the watch is over (the count reached, standard output closed).
    fn emit(&mut self) -> anyhow::Result<ControlFlow<()>> {
        let out = &mut self.out;
        for r in self.recs.drain(..) {
            if let Some(m) = &out.metrics {
                m.stall(r.stall.cause.as_str(), r.port, r.stall.length.as_secs_f64());
            }
            if let Some(p) = out.pcap.as_mut() {
                for pkt in &r.packets {
                    p.packet(0, pkt.ts_ns, &pkt.data, pkt.orig_len).context("--write")?;
                }
            }
            if out.format == WatchFormat::Jsonl && out.open {
                let line = WatchLine {
                    schema_version: report::SCHEMA_VERSION,
                    kind: "stall",
                    flow: format!("{}-{}", r.key.a, r.key.b),
                    a: r.key.a,
                    b: r.key.b,
                    interface: ifname(r.key.interface),
                    start_unix_ns: r.start_unix_ns,
                    stall: &r.stall,
                    kernel: r.kernel,
                };
                let text = line.to_jsonl()?;
                // A closed pipe (| head) ends the watch quietly.
                out.open = writeln!(out.stdout, "{text}").and_then(|_| out.stdout.flush()).is_ok();
            }
        }
        Ok(if self.w.done() || !out.open { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    /// The one-second tick's outputs: the ring's drops warned about, the metrics, `--write`
    /// flushed, the live table redrawn.
    fn tick(&mut self) -> anyhow::Result<()> {
        self.last_tick = Instant::now();
        if let Some(k) = self.kfeed.as_mut() {
            k.resample();
        }
        let h = self.health();
        if h.ring_drops > self.warned_drops {
            eprintln!(
                "tcpstall: watch: the capture ring dropped {} packets so far (PACKET_STATISTICS): stalls of \
                 those flows may be missed or misnamed; narrow --port/--host",
                h.ring_drops
            );
            self.warned_drops = h.ring_drops;
        }
        if let Some(m) = &self.out.metrics {
            m.health(h.packets_seen, h.ring_drops, h.flows_tracked as u64);
            if let Some(k) = &h.kernel {
                m.kernel(k);
            }
        }
        if let Some(p) = self.out.pcap.as_mut() {
            p.flush().context("--write")?;
        }
        if self.out.tty {
            let table = watch_live_table(&h, &self.w.top(25), self.started.elapsed().as_secs_f64(), now_unix_ns());
            let _ = self.out.stdout.write_all(table.as_bytes());
            let _ = self.out.stdout.flush();
        }
        Ok(())
    }

    /// The session's counts with the ring's and the process's own.
    fn health(&mut self) -> WatchHealth {
        let st = self.ring.statistics().unwrap_or_default();
        WatchHealth {
            ring_drops: st.drops,
            ring_freezes: st.freezes,
            cpu_share_of_one_cpu: cpu_share(self.cpu0, self.started),
            ..self.w.health()
        }
    }
}

fn ifname(index: u32) -> String {
    nix::net::if_::if_indextoname(index).map(|c| c.to_string_lossy().into_owned()).unwrap_or_else(|_| index.to_string())
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn cpu_share(cpu0: u64, started: Instant) -> f64 {
    let wall = started.elapsed().as_nanos() as f64;
    if wall > 0.0 {
        lab::cpu::process_cpu_ns().saturating_sub(cpu0) as f64 / wall
    } else {
        0.0
    }
}
