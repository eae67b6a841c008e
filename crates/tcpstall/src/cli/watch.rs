//! `tcpstall watch`: find stalls live on a running host. Packets come from a TPACKET_V3 ring
//! (crates/sys ring.rs) through a classic BPF filter compiled for the ports and hosts asked
//! (headers only), go through the same flow table (wire) and the same classifier (analyze) as
//! `explain`, incrementally, and each stall record is printed as soon as it is classified. A
//! flight recorder keeps the last packets of every flow and writes to `--write` only the packets
//! around a stall; `--metrics` serves the counts in the Prometheus text format.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use analyze::{Config, Session, Stall};
use anyhow::{bail, Context};
use serde::Serialize;
use wire::{FlowId, FlowKey, FlowLimits, FlowTable};

use super::watch_kernel::{FlowKernel, KernelFeed, KernelStats, HOLD_NS};
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
pub enum WatchFormat {
    /// A live table on a terminal (refreshed every second), a summary at the end.
    Table,
    /// One JSON stall record per line, flushed per line.
    Jsonl,
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct WatchArgs {
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

/// One line of `--format jsonl`.
#[derive(Serialize)]
struct Line<'a> {
    schema_version: u32,
    kind: &'static str,
    /// The flow: addresses as the flow table ordered them, A first.
    flow: String,
    a: SocketAddr,
    b: SocketAddr,
    interface: String,
    /// The stall's start, ns since the Unix epoch (its `start_ns` counts from the first packet
    /// this watch saw).
    start_unix_ns: u64,
    stall: &'a Stall,
    /// With --kernel: the flow's writes and resends the kernel reported so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<FlowKernel>,
}

/// A flow's recent packets, for the flight recorder.
#[derive(Default)]
struct Recorder {
    /// The handshake's packets (SYN, SYN-ACK), written once with the flow's first stall so that
    /// the capture keeps the MSS, window scale and RTT explain needs.
    syn: Vec<Pkt>,
    recent: VecDeque<Pkt>,
    /// Packets written up to this time (ns, Unix).
    written_to: u64,
    syn_written: bool,
    /// The port the SYN went to: the server's.
    server_port: Option<u16>,
}

#[derive(Clone)]
struct Pkt {
    ts_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

/// What the run counts about itself.
#[derive(Default, Debug, Clone, Serialize)]
struct Health {
    packets_seen: u64,
    packets_not_tcp: u64,
    ring_drops: u64,
    ring_freezes: u64,
    flows_seen: u64,
    flows_tracked: usize,
    flows_evicted: u64,
    stall_records: u64,
    cpu_share_of_one_cpu: f64,
    packets_written: u64,
    /// With --kernel: what the kernel evidence counted.
    kernel: Option<KernelStats>,
}

/// Per-flow figures for the live table.
#[derive(Default, Clone)]
struct FlowStat {
    stalls: u64,
    stall_ns: u64,
    causes: BTreeMap<&'static str, u64>,
    last_unix_ns: u64,
    /// With --kernel: the flow's writes and resends at its last stall.
    kernel: Option<FlowKernel>,
}

fn is_eperm(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied
}

pub fn run(args: WatchArgs) -> anyhow::Result<i32> {
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
    let ifindex = if args.interface == "any" {
        0
    } else {
        nix::net::if_::if_nametoindex(args.interface.as_str())
            .map_err(|_| anyhow::anyhow!("--interface {}: no such interface", args.interface))?
    };
    let lo = nix::net::if_::if_nametoindex("lo").ok();
    let filter = sys::bpf::tcp_l3(&args.ports, &args.hosts, SNAPLEN, lo);
    let mut ring = sys::ring::Ring::open(ifindex, &filter, 1 << 20, 32, 50).map_err(|e| {
        if is_eperm(&e) {
            anyhow::anyhow!("watch needs CAP_NET_RAW to open an AF_PACKET socket (run as root): {e}")
        } else {
            anyhow::anyhow!("cannot open the capture ring on {}: {e}", args.interface)
        }
    })?;
    let mut pcap = match &args.write {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("--write: cannot create {}", p.display()))?;
            let iface = wire::write::Interface {
                name: args.interface.clone(),
                description: "tcpstall watch: the packets around each stall (IP headers, cooked)".into(),
                linktype: LINKTYPE_RAW,
                snaplen: SNAPLEN,
            };
            Some(wire::write::PcapNgWriter::new(std::io::BufWriter::new(f), &[iface]).context("--write")?)
        }
        None => None,
    };
    // Kernel evidence: failing soft, one line on what is missing and what still works.
    let mut kfeed = if args.kernel {
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
    } else {
        None
    };
    let mut kbuf: Vec<wire::FlowEvent> = Vec::new();
    let metrics = match args.metrics {
        Some(addr) => {
            let m = Metrics::serve(addr).with_context(|| format!("--metrics {addr}"))?;
            eprintln!("tcpstall watch: metrics on http://{}/metrics", m.addr);
            Some(m)
        }
        None => None,
    };

    let stop = Arc::new(AtomicBool::new(false));
    let signals = {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut s = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).context("signal handler")?;
        let handle = s.handle();
        let stop = stop.clone();
        // The iterator lives until `close` (dropping it early would leave close writing to a
        // closed pipe); a second signal quits at once.
        let thread = std::thread::spawn(move || {
            for sig in s.forever() {
                if stop.swap(true, Ordering::SeqCst) {
                    std::process::exit(128 + sig);
                }
            }
        });
        (handle, thread)
    };

    let limits = FlowLimits { idle_ns: (args.idle * 1e9) as u64, ..FlowLimits::default() };
    let mut table = FlowTable::with_limits(limits);
    let cfg = Config { min_gap: trace::Duration((args.threshold * 1e6) as u64), timers: lab::kernel_timers() };
    let mut session = Session::new(cfg);
    let mut rec: HashMap<FlowId, Recorder> = HashMap::new();
    let mut last_seen: HashMap<FlowId, u64> = HashMap::new();
    let mut ids: HashMap<FlowKey, FlowId> = HashMap::new();
    let mut stats: HashMap<FlowKey, FlowStat> = HashMap::new();
    let mut health = Health::default();
    let mut by_cause: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let tty = std::io::stdout().is_terminal() && args.format == WatchFormat::Table;
    let started = Instant::now();
    let cpu0 = process_cpu_ns();
    let mut last_tick = Instant::now();
    let mut warned_drops = 0u64;
    let keep_ns = (args.keep_seconds * 1e9) as u64;
    let mut frame_no = 0u64;
    let mut out = std::io::stdout().lock();
    let mut new: Vec<(FlowKey, Stall)> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;

    'main: loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if args.duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
            break;
        }
        let ready = ring.wait(100).context("poll")?;
        // The kernel's records before the packets: a record stamped before a packet was in the
        // ring before that packet was captured.
        if let Some(k) = kfeed.as_mut() {
            k.pull();
        }
        if ready {
            let mut touched: Vec<FlowId> = Vec::new();
            ring.drain(|f| {
                health.packets_seen += 1;
                frame_no += 1;
                let Ok(p) = wire::decode(LINKTYPE_RAW, f.data, f.orig_len) else {
                    health.packets_not_tcp += 1;
                    return;
                };
                let Some(fe) = table.event(&p, f.ts_ns, frame_no, f.ifindex.max(0) as u32) else { return };
                let id = fe.flow;
                if let (Some(k), Some(key), Some(origin)) = (kfeed.as_mut(), table.key(id), table.origin_ns()) {
                    // The flow's kernel events up to this packet, never before its previous one.
                    let floor = last_seen.get(&id).copied().unwrap_or(0);
                    kbuf.clear();
                    k.release(id, &key, f.ts_ns, floor, origin, fe.loopback, &mut kbuf);
                    for ke in &kbuf {
                        session.push(ke, || Some(key));
                    }
                }
                session.push(&fe, || table.key(id));
                last_seen.insert(id, f.ts_ns);
                if !rec.contains_key(&id) {
                    if let Some(k) = table.key(id) {
                        ids.insert(k, id);
                    }
                }
                let r = rec.entry(id).or_default();
                let pkt = Pkt { ts_ns: f.ts_ns, orig_len: f.orig_len, data: f.data.to_vec() };
                if p.segment.flags.syn() && !p.segment.flags.ack() {
                    r.server_port = Some(p.dst.port());
                }
                // The handshake: the flow's packets up to the first one without SYN after a SYN.
                if r.syn.len() < 3 && (p.segment.flags.syn() || r.syn.len() == 2) && r.recent.len() == r.syn.len() {
                    r.syn.push(pkt.clone());
                }
                r.recent.push_back(pkt);
                while r.recent.len() > args.keep_packets
                    || r.recent.front().is_some_and(|x| f.ts_ns.saturating_sub(x.ts_ns) > keep_ns)
                {
                    r.recent.pop_front();
                }
                touched.push(id);
            });
            touched.sort_unstable();
            touched.dedup();
            for id in touched {
                session.take_new_stalls(id, &mut new);
            }
        }
        // Flows the table ended (FIN/RST and linger, idle, reuse): their last records.
        while let Some(end) = table.pop_ended() {
            if let Some(k) = kfeed.as_mut() {
                k.end(&end.key);
            }
            let taken = session.taken(end.flow);
            if let Some(fin) = session.end(&end) {
                new.extend(fin.analysis.stalls.into_iter().skip(taken).map(|s| (fin.key, s)));
            }
            rec.remove(&end.flow);
            last_seen.remove(&end.flow);
            ids.remove(&end.key);
        }
        // Bounded memory: beyond --max-flows, forget the least recently seen.
        while session.live() > args.max_flows {
            let Some((&id, _)) = last_seen.iter().min_by_key(|(_, &t)| t) else { break };
            let key = table.key(id);
            if let Some(key) = key {
                ids.remove(&key);
                let end = wire::FlowEnd { flow: id, key, reason: wire::EndReason::Idle };
                let taken = session.taken(id);
                if let Some(fin) = session.end(&end) {
                    new.extend(fin.analysis.stalls.into_iter().skip(taken).map(|s| (fin.key, s)));
                }
            }
            rec.remove(&id);
            last_seen.remove(&id);
            health.flows_evicted += 1;
        }
        let tick = last_tick.elapsed() >= Duration::from_secs(1);
        if tick {
            // Kernel events of quiet flows: in once no packet can come before them any more.
            if let (Some(k), Some(origin)) = (kfeed.as_mut(), table.origin_ns()) {
                let until = now_unix_ns().saturating_sub(HOLD_NS);
                for (key, &id) in &ids {
                    let floor = last_seen.get(&id).copied().unwrap_or(0);
                    kbuf.clear();
                    // The flow's analyser exists (its packets came first): `loopback` is unused.
                    k.release(id, key, until, floor, origin, false, &mut kbuf);
                    for ke in &kbuf {
                        session.push(ke, || Some(*key));
                    }
                }
            }
            // Quiet flows: settle their pending gaps (a stall is classified about a second
            // after its release at the latest).
            if let Some(origin) = table.origin_ns() {
                let now = trace::Instant(now_unix_ns().saturating_sub(origin));
                session.settle_all(now, &mut new);
            }
        }
        let origin = table.origin_ns().unwrap_or(0);
        for (key, st) in new.drain(..) {
            if !st.shows_a_wait() {
                continue;
            }
            health.stall_records += 1;
            let start_unix = origin + st.start.0;
            let e = by_cause.entry(st.cause.as_str()).or_default();
            e.0 += 1;
            e.1 += st.length.0;
            let fs = stats.entry(key).or_default();
            fs.stalls += 1;
            fs.stall_ns += st.length.0;
            *fs.causes.entry(st.cause.as_str()).or_default() += 1;
            fs.last_unix_ns = start_unix + st.length.0;
            fs.kernel = kfeed.as_ref().map(|k| k.flow(&key));
            if let Some(m) = &metrics {
                let port = ids
                    .get(&key)
                    .and_then(|id| rec.get(id))
                    .and_then(|r| r.server_port)
                    .or_else(|| [key.a.port(), key.b.port()].into_iter().find(|p| args.ports.contains(p)))
                    .unwrap_or_else(|| server_port(&key));
                m.stall(st.cause.as_str(), port, st.length.as_secs_f64());
            }
            if let Some(w) = pcap.as_mut() {
                if let Some(r) = ids.get(&key).and_then(|id| rec.get_mut(id)) {
                    match write_around(w, r, start_unix) {
                        Ok(n) => health.packets_written += n,
                        Err(e) => {
                            failure = Some(anyhow::anyhow!("--write: {e}"));
                            break 'main;
                        }
                    }
                }
            }
            if args.format == WatchFormat::Jsonl {
                let line = Line {
                    schema_version: report::SCHEMA_VERSION,
                    kind: "stall",
                    flow: format!("{}-{}", key.a, key.b),
                    a: key.a,
                    b: key.b,
                    interface: ifname(key.interface),
                    start_unix_ns: start_unix,
                    stall: &st,
                    kernel: kfeed.as_ref().map(|k| k.flow(&key)),
                };
                let text = serde_json::to_string(&line)?;
                // A closed pipe (| head) ends the watch quietly.
                if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
                    break 'main;
                }
            }
            if args.count.is_some_and(|c| health.stall_records >= c) {
                break 'main;
            }
        }
        if tick {
            last_tick = Instant::now();
            let st = ring.statistics().unwrap_or_default();
            health.ring_drops = st.drops;
            health.ring_freezes = st.freezes;
            health.flows_seen = u64::from(table.seen());
            health.flows_tracked = session.live();
            health.cpu_share_of_one_cpu = cpu_share(cpu0, started);
            if let Some(k) = kfeed.as_mut() {
                // After this tick's records are out: the counts of flows gone can go.
                let pairs: std::collections::HashSet<(SocketAddr, SocketAddr)> =
                    ids.keys().flat_map(|k| [(k.a, k.b), (k.b, k.a)]).collect();
                k.tick(now_unix_ns(), |x, y| pairs.contains(&(x, y)));
                health.kernel = Some(k.stats);
            }
            if health.ring_drops > warned_drops {
                eprintln!(
                    "tcpstall: watch: the capture ring dropped {} packets so far (PACKET_STATISTICS): stalls of \
                     those flows may be missed or misnamed; narrow --port/--host",
                    health.ring_drops
                );
                warned_drops = health.ring_drops;
            }
            if let Some(m) = &metrics {
                m.health(health.packets_seen, health.ring_drops, health.flows_tracked as u64);
                if let Some(k) = &health.kernel {
                    m.kernel(k);
                }
            }
            if let Some(w) = pcap.as_mut() {
                if let Err(e) = w.flush() {
                    failure = Some(anyhow::anyhow!("--write: {e}"));
                    break 'main;
                }
            }
            if tty {
                draw_table(&mut out, &stats, &health, started.elapsed());
            }
        }
    }
    signals.0.close();
    let _ = signals.1.join();
    // Flows still alive: their last records (a gap pending at the end is classified now).
    let taken: Vec<(FlowId, usize)> = last_seen.keys().map(|&id| (id, session.taken(id))).collect();
    let taken: HashMap<FlowId, usize> = taken.into_iter().collect();
    let mut tail = 0u64;
    if failure.is_none() && args.count.is_none_or(|c| health.stall_records < c) {
        for fin in session.finish_all() {
            let skip = taken.get(&fin.id).copied().unwrap_or(0);
            for st in fin.analysis.stalls.iter().skip(skip).filter(|s| s.shows_a_wait()) {
                tail += 1;
                health.stall_records += 1;
                let e = by_cause.entry(st.cause.as_str()).or_default();
                e.0 += 1;
                e.1 += st.length.0;
                if args.format == WatchFormat::Jsonl {
                    let origin = table.origin_ns().unwrap_or(0);
                    let line = Line {
                        schema_version: report::SCHEMA_VERSION,
                        kind: "stall",
                        flow: format!("{}-{}", fin.key.a, fin.key.b),
                        a: fin.key.a,
                        b: fin.key.b,
                        interface: ifname(fin.key.interface),
                        start_unix_ns: origin + st.start.0,
                        stall: st,
                        kernel: kfeed.as_ref().map(|k| k.flow(&fin.key)),
                    };
                    let _ = writeln!(out, "{}", serde_json::to_string(&line)?);
                }
            }
        }
    }
    let _ = out.flush();
    let st = ring.statistics().unwrap_or_default();
    health.ring_drops = st.drops;
    health.flows_seen = u64::from(table.seen());
    health.cpu_share_of_one_cpu = cpu_share(cpu0, started);
    if let Some(k) = kfeed.as_mut() {
        k.pull();
        health.kernel = Some(k.stats);
    }
    drop(kfeed);
    if let Some(mut w) = pcap {
        w.flush().context("--write")?;
    }
    drop(ring);
    let secs = started.elapsed().as_secs_f64();
    let causes: Vec<String> =
        by_cause.iter().map(|(c, (n, ns))| format!("{c} {n} ({:.0} ms)", *ns as f64 / 1e6)).collect();
    let summary = format!(
        "tcpstall watch: {:.1} s on {}: {} packets, {} dropped by the ring, {} flows ({} evicted), {} stall records{}{}; \
         {:.1}% of one CPU{}{}",
        secs,
        args.interface,
        health.packets_seen,
        health.ring_drops,
        health.flows_seen,
        health.flows_evicted,
        health.stall_records,
        if causes.is_empty() { String::new() } else { format!(": {}", causes.join(", ")) },
        if tail > 0 { format!(" ({tail} classified at the end)") } else { String::new() },
        100.0 * health.cpu_share_of_one_cpu,
        args.write
            .as_ref()
            .map_or(String::new(), |p| format!("; {} packets written to {}", health.packets_written, p.display())),
        health.kernel.map_or(String::new(), |k| format!(
            "; kernel evidence: {} events ({} writes, {} resends, {} windows), {} lost, {} of unseen connections",
            k.events, k.writes, k.resends, k.windows, k.lost, k.unmatched
        )),
    );
    if args.format == WatchFormat::Table && !tty {
        println!("{summary}");
        for (k, f) in top(&stats, 20) {
            println!(
                "  {}-{}  {} stalls, {:.0} ms: {}{}",
                k.a,
                k.b,
                f.stalls,
                f.stall_ns as f64 / 1e6,
                causes_text(&f.causes),
                f.kernel.map_or(String::new(), |x| format!(" (kernel: {} writes, {} resends)", x.writes, x.resends))
            );
        }
    } else {
        eprintln!("{summary}");
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(0)
}

/// Writes the flow's packets from shortly before the stall's start (the two packets before it:
/// the last data and the ACK before the gap) up to the newest, after the flow's handshake if
/// not written yet. Returns the packets written.
fn write_around<W: Write>(
    w: &mut wire::write::PcapNgWriter<W>,
    r: &mut Recorder,
    start_unix: u64,
) -> std::io::Result<u64> {
    let mut n = 0;
    let before = r.recent.iter().rposition(|p| p.ts_ns <= start_unix).map_or(0, |i| i.saturating_sub(2));
    let first = r.recent.iter().skip(before).find(|p| p.ts_ns > r.written_to).map_or(u64::MAX, |p| p.ts_ns);
    if !r.syn_written {
        // The handshake first: its MSS, window scale and round trip are what the capture's
        // reader needs to classify the same way.
        for p in r.syn.iter().filter(|p| p.ts_ns < first) {
            w.packet(0, p.ts_ns, &p.data, p.orig_len)?;
            n += 1;
        }
        r.syn_written = true;
    }
    for p in r.recent.iter().skip(before).filter(|p| p.ts_ns > r.written_to) {
        w.packet(0, p.ts_ns, &p.data, p.orig_len)?;
        n += 1;
    }
    if let Some(last) = r.recent.back() {
        r.written_to = r.written_to.max(last.ts_ns);
    }
    Ok(n)
}

/// The flow's server port as a metric label when its SYN was not seen and neither port is one
/// asked for: the port below the ephemeral range (32768, net.ipv4.ip_local_port_range's default
/// start) when one is, else the lower one.
fn server_port(k: &FlowKey) -> u16 {
    let (a, b) = (k.a.port(), k.b.port());
    match (a < 32768, b < 32768) {
        (true, false) => a,
        (false, true) => b,
        _ => a.min(b),
    }
}

fn ifname(index: u32) -> String {
    nix::net::if_::if_indextoname(index).map(|c| c.to_string_lossy().into_owned()).unwrap_or_else(|_| index.to_string())
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn process_cpu_ns() -> u64 {
    lab::cpu::process_cpu_ns()
}

fn cpu_share(cpu0: u64, started: Instant) -> f64 {
    let wall = started.elapsed().as_nanos() as f64;
    if wall > 0.0 {
        process_cpu_ns().saturating_sub(cpu0) as f64 / wall
    } else {
        0.0
    }
}

fn causes_text(c: &BTreeMap<&'static str, u64>) -> String {
    c.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
}

fn top(stats: &HashMap<FlowKey, FlowStat>, n: usize) -> Vec<(FlowKey, FlowStat)> {
    let mut v: Vec<(FlowKey, FlowStat)> = stats.iter().map(|(k, f)| (*k, f.clone())).collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.1.stall_ns));
    v.truncate(n);
    v
}

/// The live table (a terminal only): the top flows by stall time and the run's own health.
fn draw_table(out: &mut impl Write, stats: &HashMap<FlowKey, FlowStat>, h: &Health, up: Duration) {
    let mut s = String::from("\x1b[H\x1b[2J");
    s += &format!(
        "tcpstall watch  {:.0} s  packets {}  ring drops {}  flows {} tracked, {} evicted  stalls {}  cpu {:.1}%\n\n",
        up.as_secs_f64(),
        h.packets_seen,
        h.ring_drops,
        h.flows_tracked,
        h.flows_evicted,
        h.stall_records,
        100.0 * h.cpu_share_of_one_cpu
    );
    if let Some(k) = h.kernel {
        s += &format!(
            "kernel evidence  events {}  writes {}  resends {}  windows {}  lost {}\n\n",
            k.events, k.writes, k.resends, k.windows, k.lost
        );
    }
    let kcol = h.kernel.is_some();
    s += &format!(
        "{:<47} {:>7} {:>10} {:>10}{}  causes\n",
        "flow",
        "stalls",
        "stall ms",
        "last ago",
        if kcol { format!(" {:>13}", "kernel w/r") } else { String::new() }
    );
    let now = now_unix_ns();
    for (k, f) in top(stats, 25) {
        let kc = match (kcol, f.kernel) {
            (true, Some(x)) => format!(" {:>13}", format!("{}/{}", x.writes, x.resends)),
            (true, None) => format!(" {:>13}", "-"),
            _ => String::new(),
        };
        s += &format!(
            "{:<47} {:>7} {:>10.0} {:>9.1}s{}  {}\n",
            format!("{}-{}", k.a, k.b),
            f.stalls,
            f.stall_ns as f64 / 1e6,
            now.saturating_sub(f.last_unix_ns) as f64 / 1e9,
            kc,
            causes_text(&f.causes)
        );
    }
    let _ = out.write_all(s.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_port_is_the_one_below_the_ephemeral_range() {
        let k = |a: u16, b: u16| FlowKey {
            a: SocketAddr::from(([127, 0, 0, 1], a)),
            b: SocketAddr::from(([127, 0, 0, 1], b)),
            interface: 1,
        };
        assert_eq!(server_port(&k(45000, 8080)), 8080);
        assert_eq!(server_port(&k(443, 51000)), 443);
        assert_eq!(server_port(&k(40000, 50000)), 40000);
    }
}
