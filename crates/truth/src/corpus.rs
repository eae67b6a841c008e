//! `corpus`: runs every case on real sockets, captures both ends, records the kernel's view,
//! labels the waits and writes `DIR/<case>/{case.json, *.pcap(ng), kernel.jsonl, truth.jsonl}`.

use std::io::{BufRead, BufReader, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::capture::Tcpdump;
use crate::kernel::{KernelRec, Recorder};
use crate::label::{self, Direction, Label, Params};
use crate::log::{read_jsonl, write_jsonl, LogLine, Side};
use crate::net::{Net, Point, Proc};
use crate::packets::{self, Conn};
use crate::shape::{Case, Size};
use crate::views::{self, View};

/// What `DIR/<case>/case.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseMeta {
    #[serde(flatten)]
    pub case: Case,
    /// The server's port (the flow's B port).
    pub port: u16,
    pub client: Ipv4Addr,
    pub server: Ipv4Addr,
    /// The round trip measured on the client's capture (SYN -> SYN-ACK), ns.
    pub rtt_ns: u64,
    /// The programs: `peer` (this crate's) or the third-party program's name.
    pub program: String,
    /// Kernel evidence: what was attached, or why there is none.
    pub kernel: String,
}

/// The capture of a side's own host, and its views, are named `<side>[-<view>].pcap(ng)`.
pub fn capture_name(side: Side, view: Option<View>) -> String {
    match view {
        None => format!("{}.pcap", side.as_str()),
        Some(v) => format!("{}-{}.pcapng", side.as_str(), v.suffix()),
    }
}

/// The capture in the middle of the path (veth path only).
pub const MIDDLE: &str = "middle.pcap";

/// Counts of one case's labels, for the progress line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub waits: usize,
    pub negatives: usize,
}

/// Runs the corpus of `size` with `seed` into `out`.
pub fn generate(size: Size, seed: u64, out: &Path, only: Option<&str>) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("corpus needs root (network namespaces, iptables, tcpdump, eBPF)");
    }
    crate::net::on_signals_clean_up()?;
    let swept = crate::net::sweep();
    if swept > 0 {
        eprintln!("swept {swept} namespaces left by dead runs");
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let rec = Recorder::open();
    eprintln!("kernel evidence: {}", rec.status);
    let exe = std::env::current_exe().context("own executable")?;
    let mut cases = crate::shape::cases(size, seed);
    cases.extend(crate::programs::cases(size, seed));
    if let Some(o) = only {
        cases.retain(|c| c.name.contains(o));
    }
    let started = Instant::now();
    let mut total = Counts::default();
    let n = cases.len();
    for (i, case) in cases.iter().enumerate() {
        let dir = out.join(&case.name);
        let res = run_case(case, &dir, i, &rec, &exe);
        crate::net::cleanup_children();
        match res {
            Ok(c) => {
                total.waits += c.waits;
                total.negatives += c.negatives;
                eprintln!(
                    "[{:>2}/{n}] {:<36} waits {:>4} negatives {:>4} | total waits {} negatives {} | {:.0} s",
                    i + 1,
                    case.name,
                    c.waits,
                    c.negatives,
                    total.waits,
                    total.negatives,
                    started.elapsed().as_secs_f64()
                );
            }
            Err(e) => eprintln!("[{:>2}/{n}] {:<36} FAILED: {e:#}", i + 1, case.name),
        }
    }
    crate::net::cleanup();
    Ok(())
}

/// How long a case may take: its requests' think times and stalls, generously.
fn time_limit(case: &Case) -> Duration {
    let per = u64::from(case.shape.think_ms.1) + 600 + 2 * u64::from(case.rtt_ms);
    Duration::from_millis(30_000 + u64::from(case.shape.requests) * per)
}

// long: one case from start to end: path, captures, programs, kernel records, labels, views.
fn run_case(case: &Case, dir: &Path, i: usize, rec: &Recorder, exe: &Path) -> anyhow::Result<Counts> {
    std::fs::create_dir_all(dir)?;
    // Ports differ between runs too: the eBPF filter is by port, in every namespace.
    let port = 20_000 + (std::process::id() % 100) as u16 * 300 + i as u16;
    let net = Net::open(case.rtt_ms, &case.loss, case.seed, &format!("{}", i % 100))?;
    let (client, server) = (crate::net::CLIENT_IP, net.server_ip());
    let mut caps = Vec::new();
    for (side, point) in [(Side::Client, Point::Client), (Side::Server, Point::Server)] {
        let iface = net.interface(point).context("no interface")?;
        caps.push(Tcpdump::start(&net, point, &iface, &dir.join(capture_name(side, None)))?);
    }
    // The middle of the veth path: the router's interface toward the client (before the
    // FORWARD chain's drops for the client's packets, after them for the server's).
    if let Some(iface) = net.interface(Point::Router) {
        caps.push(Tcpdump::start(&net, Point::Router, &iface, &dir.join(MIDDLE))?);
    }
    rec.start(port)?;
    let mut meta = CaseMeta {
        case: case.clone(),
        port,
        client,
        server,
        rtt_ns: 0,
        program: "peer".into(),
        kernel: rec.status.clone(),
    };
    let case_file = dir.join("case.json");
    std::fs::write(&case_file, serde_json::to_string_pretty(&meta)?)?;
    let addr = SocketAddr::new(server.into(), port);
    let logs = [dir.join("client.log.jsonl"), dir.join("server.log.jsonl")];
    if case.shape.name.starts_with("prog-") {
        crate::programs::run(case, &net, addr, dir, &logs)?;
        meta.program = case.shape.name.trim_start_matches("prog-").to_string();
    } else {
        run_peers(case, &net, exe, &case_file, addr, &logs)?;
    }
    std::thread::sleep(Duration::from_millis(100));
    for c in &mut caps {
        c.stop();
    }
    net.stop_programs();
    let kernel = rec.take();
    write_jsonl(&dir.join("kernel.jsonl"), &kernel)?;
    let a = conn(dir, Side::Client, port)?;
    meta.rtt_ns = handshake_rtt(&a).unwrap_or(0).max(u64::from(case.rtt_ms) * 1_000_000);
    std::fs::write(&case_file, serde_json::to_string_pretty(&meta)?)?;
    let labels = relabel_case(dir)?;
    for side in [Side::Client, Side::Server] {
        let own = if side == Side::Client { client } else { server };
        for v in View::ALL {
            views::write(&dir.join(capture_name(side, None)), &dir.join(capture_name(side, Some(v))), v, own)?;
        }
    }
    Ok(Counts {
        waits: labels.iter().filter(|l| l.kind == label::Kind::Wait).count(),
        negatives: labels.iter().filter(|l| l.kind == label::Kind::Negative).count(),
    })
}

fn run_peers(
    case: &Case,
    net: &Net,
    exe: &Path,
    case_file: &Path,
    addr: SocketAddr,
    logs: &[PathBuf; 2],
) -> anyhow::Result<()> {
    let peer = |p: Point, role: &str, log: &Path| {
        let mut c = net.command(p, &exe.to_string_lossy());
        c.args(["peer", "--role", role, "--addr", &addr.to_string(), "--case"]).arg(case_file).arg("--log").arg(log);
        c.stdin(Stdio::null());
        c
    };
    let mut sc = peer(Point::Server, "server", &logs[1]);
    sc.stdout(Stdio::piped());
    let mut server = Proc::spawn(sc)?;
    let out = server.0.as_mut().and_then(|c| c.stdout.take()).context("server stdout")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.trim() != "ready" {
        server.wait(Duration::from_secs(5), "the server peer")?;
        bail!("the server peer did not start");
    }
    let mut client = Proc::spawn(peer(Point::Client, "client", &logs[0]))?;
    let limit = time_limit(case);
    client.wait(limit, "the client peer")?;
    server.wait(Duration::from_secs(10), "the server peer")?;
    std::io::stderr().flush().ok();
    Ok(())
}

fn conn(dir: &Path, side: Side, port: u16) -> anyhow::Result<Conn> {
    let conns = packets::read(&dir.join(capture_name(side, None)))?;
    packets::the_conn(conns, port).with_context(|| format!("no connection to port {port} in the {side:?} capture"))
}

/// Labels a case from its files (case.json, both captures, the logs, kernel.jsonl) and writes
/// truth.jsonl: the labeler is pure, so a corpus can be labelled again without running it.
pub fn relabel_case(dir: &Path) -> anyhow::Result<Vec<Label>> {
    let text = std::fs::read_to_string(dir.join("case.json")).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let meta: CaseMeta =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}/case.json: {e}", dir.display()))?;
    let (a, b) = (conn(dir, Side::Client, meta.port)?, conn(dir, Side::Server, meta.port)?);
    let mut log: Vec<LogLine> = Vec::new();
    for name in ["client.log.jsonl", "server.log.jsonl"] {
        if dir.join(name).exists() {
            log.extend(read_jsonl::<LogLine>(&dir.join(name))?);
        }
    }
    let kernel: Vec<KernelRec> =
        if dir.join("kernel.jsonl").exists() { read_jsonl(&dir.join("kernel.jsonl"))? } else { Vec::new() };
    let labels = labels_of(&a, &b, &log, &kernel, meta.rtt_ns);
    write_jsonl(&dir.join("truth.jsonl"), &labels)?;
    Ok(labels)
}

/// Labels every case under `dir` again; returns (cases, waits).
pub fn relabel(dir: &Path) -> anyhow::Result<(usize, usize)> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").exists())
        .collect();
    cases.sort();
    let mut waits = 0;
    for c in &cases {
        waits += relabel_case(c)?.iter().filter(|l| l.kind == label::Kind::Wait).count();
    }
    Ok((cases.len(), waits))
}

/// SYN -> SYN-ACK at the client: the path's round trip (RFC 6298 3: only from a SYN sent once).
pub fn handshake_rtt(a: &Conn) -> Option<u64> {
    let syns: Vec<_> = a.pkts.iter().filter(|p| p.seg.flags.syn() && !p.seg.flags.ack()).collect();
    let synack = a.pkts.iter().find(|p| p.seg.flags.syn() && p.seg.flags.ack())?;
    (syns.len() == 1).then(|| synack.t_ns.saturating_sub(syns[0].t_ns))
}

/// Both directions' labels.
pub fn labels_of(a: &Conn, b: &Conn, log: &[LogLine], kernel: &[KernelRec], rtt_ns: u64) -> Vec<Label> {
    let mut out = Vec::new();
    let addr = [a.a, a.b];
    for side in [Side::Client, Side::Server] {
        let (mine, theirs) = if side == Side::Client { (a, b) } else { (b, a) };
        let me = addr[side.index()];
        let d = Direction {
            writes: log
                .iter()
                .filter_map(|l| match *l {
                    LogLine::Write { t_ns, side: s, offset, len, more, nodelay, cork, .. } if s == side => {
                        Some(label::Write { t_ns, offset, len, more, nodelay, cork })
                    }
                    _ => None,
                })
                .collect(),
            at_sender: mine.pkts.clone(),
            at_receiver: theirs.pkts.clone(),
            resends: kernel
                .iter()
                .filter(|k| k.local == me)
                .filter_map(|k| match k.event {
                    trace::KernelEvent::Retransmit { seq, len } => {
                        Some(label::Resend { t_ns: k.t_ns, seq, len, ca_state: k.ca_state.unwrap_or(0) })
                    }
                    _ => None,
                })
                .collect(),
            cwnd: kernel
                .iter()
                .filter(|k| k.local == me)
                .filter_map(|k| match k.event {
                    trace::KernelEvent::State(s) => Some(label::Cwnd { t_ns: k.t_ns, cwnd: s.snd_cwnd }),
                    _ => None,
                })
                .collect(),
        };
        out.extend(label::label(side, &d, &Params::new(rtt_ns)));
    }
    out.sort_by_key(|l| l.left_at);
    out
}
