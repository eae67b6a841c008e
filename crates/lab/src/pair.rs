//! One row: a fresh connection between a server thread and a client thread, each in its
//! network namespace, each running its side of the program; then the numbers become a
//! `RunResult`.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use report::{Applied, RunResult};
use scenario::{Program, RoundProgram, Sample, SideOpts, SideProgram, Step, StrategyPair, Workload};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use sys::tcpinfo::{tcp_info, TcpInfo};

use crate::capture::{self, Captured, KernelRecords};
use crate::exec::{self, Clock, Phase, Runner};
use crate::measure::{self, Recorder};
use crate::txstamp::{self, TxLog};
use crate::side::row as result;
use crate::{netstat, LabError, LabOptions, Placement};

/// Run one strategy pair on one workload over a fresh connection.
pub fn run_pair(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<RunResult, LabError> {
    run_pair_noted(workload, pair, place, opts).map(|(r, _, _)| r)
}

/// Like `run_pair`, also returning the classifier's analysis of the row's own packets (None
/// when not captured: `opts.capture` off, behind a link, or without CAP_NET_RAW). Its stalls
/// are `RunResult::stall_records`.
pub fn run_pair_analysed(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<(RunResult, Option<analyze::Analysis>), LabError> {
    run_pair_noted(workload, pair, place, opts).map(|(r, a, _)| (r, a))
}

/// Which namespace the run used.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ns {
    /// A fresh unnamed namespace made for this connection.
    Private,
    /// The caller's namespace; why no private one.
    Caller(String),
    /// The placement's namespaces (the link emulator's).
    Placement,
}

struct Ready {
    addr: SocketAddr,
    netns: Option<File>,
    /// The client shares the server's namespace and reads its TcpExt counters (around the
    /// client's measured rounds, which define the measurement).
    count_shared: bool,
}

/// What a side measured.
pub(crate) struct SideOut {
    pub applied: Applied,
    pub before: TcpInfo,
    pub after: TcpInfo,
    pub netstat: BTreeMap<String, i64>,
    /// Hold time inside TCP of each write of the measured rounds (SO_TIMESTAMPING), if known.
    pub holds: Option<Vec<i64>>,
    /// CPU time of this side's thread over the measured rounds (ns), if read.
    pub cpu_ns: Option<u64>,
}

/// What the client measured on top.
pub(crate) struct ClientOut {
    pub side: SideOut,
    pub rec: Recorder,
    pub wall: Duration,
    pub rounds: u64,
    pub stream: Option<hdrhistogram::Histogram<u64>>,
    /// CLOCK_REALTIME (ns) at the start and the end of the measured rounds: the window on the
    /// packets' clock.
    pub window_real: (u64, u64),
}

/// The row's packets, as the server thread recorded them.
// One value per row, moved once: boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum PacketsOut {
    /// Capture not asked for.
    Off,
    /// Asked for, not possible or failed: why, in words.
    Failed(String),
    /// What the capture recorded (frames of `linktype`, seen at `point`); `origin_ns`
    /// (CLOCK_REALTIME) is the trace's time 0, taken before the client connected;
    /// `server_port` tells the sides apart; `frame_base` is the number of frames before the
    /// row's first in the `--capture` file (so evidence frame numbers are the file's).
    Captured {
        cap: Captured,
        linktype: u32,
        point: String,
        origin_ns: u64,
        server_port: u16,
        frame_base: u64,
        /// The kernel's records of the row's connection (kernel evidence), if on.
        kernel: Option<KernelRecords>,
    },
}

mod recording;
mod unrecorded;
use recording::{start_capture, start_kernel, KernelOut};
pub(crate) use unrecorded::run_pair_noted;

fn run_pair_once(
    workload: &Workload,
    pair: &StrategyPair,
    place: &Placement,
    opts: &LabOptions,
) -> Result<(RunResult, Option<analyze::Analysis>, Vec<String>), LabError> {
    let mut program = workload.program();
    if let (Some(n), Program::Rounds(p)) = (opts.probe_rounds, &mut program) {
        p.rounds = p.rounds.min(n);
    }
    let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (rounds_tx, rounds_rx) = mpsc::channel::<()>();
    let (srv, cli) = std::thread::scope(|sc| {
        let s = sc.spawn(|| server(&program, &pair.server, place, opts, ready_tx, done_rx, rounds_rx));
        let c = sc.spawn(|| client(&program, &pair.client, place, opts, ready_rx, done_tx, rounds_tx));
        let c = c.join().map_err(|_| LabError::Panic("client")).and_then(|r| r);
        let s = s.join().map_err(|_| LabError::Panic("server")).and_then(|r| r);
        (s, c)
    });
    let ((srv, ns, mut packets, kernel), cli) = match (srv, cli) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(se), Err(ce)) => return Err(if se.is_secondary() { ce } else { se }),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => return Err(e),
    };
    let mut notes = vec![match &ns {
        Ns::Private => format!(
            "private netns per row, lo mtu {}",
            opts.lo_mtu.map_or_else(|| "65536".to_string(), |m| m.to_string())
        ),
        Ns::Caller(why) => format!("caller's namespace: {why}; TcpExt counters not measured"),
        Ns::Placement => String::new(),
    }];
    if let PacketsOut::Failed(why) = &packets {
        notes.push(format!("no packet capture: {why}; stall records not measured"));
    }
    if let PacketsOut::Captured { cap, frame_base, .. } = &mut packets {
        if cap.stats.drops > 0 {
            notes.push(format!(
                "the packet capture lost {} of {} packets (the ring was full: its reader fell behind): stall records may be incomplete",
                cap.stats.drops, cap.stats.packets
            ));
        }
        // Behind a link the link writes the file itself.
        if let (Some(f), None) = (&opts.capture_file, &opts.tap) {
            *frame_base = f.write_row(&pair.label, &cap.frames);
        }
    }
    let kernel = match kernel {
        KernelOut::Off => None,
        KernelOut::Unavailable(why) => {
            notes.push(why);
            None
        }
        KernelOut::Records(k) => {
            // The same line for every row: said once per run.
            notes.push(k.status.clone());
            if k.counts.lost() > 0 {
                notes.push(format!(
                    "kernel evidence lost {} records (ring buffer full or unread): the rows' writes and resends may be incomplete",
                    k.counts.lost()
                ));
            }
            Some(k)
        }
    };
    if let PacketsOut::Captured { kernel: k, .. } = &mut packets {
        *k = kernel;
    }
    let margin = opts.stall_margin();
    let trace = result::classified(packets, margin, cli.window_real, opts.keep_packets);
    if let Some(late) = trace.0.as_ref().map(|t| t.late).filter(|&n| n > 0) {
        notes.push(format!(
            "{late} packet or kernel events reached the classifier after later ones (the capture reader fell behind by more than {} ms): they were classified out of order",
            capture::REORDER_MARGIN.as_millis()
        ));
    }
    let (row, analysis) = result::assemble(&program, pair, place, opts, srv, cli, trace);
    Ok((row, analysis, notes))
}

/// Move this thread into the network namespace of `f`; `what` names it in the error.
fn set_netns(f: &File, side: &'static str, what: String) -> Result<(), LabError> {
    nix::sched::setns(f.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| LabError::Netns { side, what, source: e.into() })
}

fn enter(path: &std::path::Path, side: &'static str) -> Result<(), LabError> {
    let f =
        File::open(path).map_err(|e| LabError::Netns { side, what: format!("open {}", path.display()), source: e })?;
    set_netns(&f, side, format!("setns {}", path.display()))
}

/// Enter the server's namespace: the placement's, a fresh private one, or stay.
fn server_ns(place: &Placement, opts: &LabOptions) -> Result<(Ns, Option<File>), LabError> {
    let side = "server";
    if let Some(p) = &place.server_netns {
        enter(p, side)?;
        return Ok((Ns::Placement, None));
    }
    if place.client_netns.is_some() || !opts.own_netns {
        let why = if opts.own_netns { "the client has its own namespace" } else { "private namespace not requested" };
        return Ok((Ns::Caller(why.into()), None));
    }
    match nix::sched::unshare(CloneFlags::CLONE_NEWNET) {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) => return Ok((Ns::Caller("not root".into()), None)),
        Err(e) => return Err(LabError::Netns { side, what: "unshare(CLONE_NEWNET)".into(), source: e.into() }),
    }
    // A new namespace has only `lo`, down (net/core/net_namespace.c; loopback_net_init).
    sys::tun::set_up("lo").map_err(|e| LabError::Netns { side, what: "bring lo up".into(), source: e })?;
    if let Some(mtu) = opts.lo_mtu {
        sys::tun::set_mtu("lo", mtu).map_err(|e| LabError::Netns { side, what: format!("lo mtu {mtu}"), source: e })?;
    }
    // /proc/thread-self: the namespace of this thread, not of the process (/proc/self).
    let f = File::open("/proc/thread-self/ns/net").map_err(|e| LabError::Netns {
        side,
        what: "open /proc/thread-self/ns/net".into(),
        source: e,
    })?;
    Ok((Ns::Private, Some(f)))
}

pub(crate) fn applied(sock: &Socket, opts: &SideOpts) -> Applied {
    Applied {
        busy_poll_us: sys::sockopt::busy_poll(sock.as_fd()).ok(),
        strategies: opts.opts().iter().map(|o| o.as_str().to_string()).collect(),
        nodelay: sock.nodelay().ok(),
        cork: sock.cork().ok(),
        quickack_state: sock.quickack().ok(),
        mss: sock.mss().ok(),
        congestion: sock.tcp_congestion().ok().map(|b| String::from_utf8_lossy(&b).trim_end_matches('\0').to_string()),
    }
}

/// Keeps the calling thread on one CPU (sched_setaffinity(2) on thread 0 = the caller).
fn pin_to(cpu: usize, side: &'static str) -> Result<(), LabError> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| LabError::Io { side, what: format!("cpu {cpu}"), source: e.into() })?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(|e| LabError::Io {
        side,
        what: format!("sched_setaffinity cpu {cpu}"),
        source: e.into(),
    })
}

pub(crate) fn info(sock: &Socket, side: &'static str) -> Result<TcpInfo, LabError> {
    tcp_info(sock.as_fd()).map_err(|e| LabError::Io { side, what: "getsockopt(TCP_INFO)".into(), source: e })
}

pub(crate) fn setup(sock: &Socket, opts: &SideOpts, side: &'static str, io_timeout: Duration) -> Result<(), LabError> {
    setup_with(sock, opts, side, Some(io_timeout))
}

/// `setup`, with per-call socket timeouts only when `io_timeout` is given (a run under a
/// watchdog, [`crate::Cancel::watched`], has none).
fn setup_with(
    sock: &Socket,
    opts: &SideOpts,
    side: &'static str,
    io_timeout: Option<Duration>,
) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::Io { side, what: what.into(), source: e };
    // Set either way: without them the accepted socket would keep the listener's, which it
    // inherits (sk_clone_lock copies sk_rcvtimeo and sk_sndtimeo, net/core/sock.c).
    sock.set_read_timeout(io_timeout).map_err(|e| io("SO_RCVTIMEO", e))?;
    sock.set_write_timeout(io_timeout).map_err(|e| io("SO_SNDTIMEO", e))?;
    for op in opts.setup_ops() {
        exec::apply(sock, op).map_err(|e| io("setsockopt after connect", e))?;
    }
    if opts.busy_poll() {
        // The reads spin whatever this says; SO_BUSY_POLL adds polling the device from the
        // read where permitted (EPERM without CAP_NET_ADMIN: the spin alone, read back as 0).
        match sys::sockopt::set_busy_poll(sock.as_fd(), BUSY_POLL_US) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(io("SO_BUSY_POLL", e)),
        }
    }
    Ok(())
}

/// SO_BUSY_POLL asked for by the busy-poll strategy (µs): the kernel documentation's
/// suggested value for net.core.busy_read (Documentation/admin-guide/sysctl/net.rst).
const BUSY_POLL_US: u32 = 50;

/// How the two sides line up the end of their measured rounds.
pub(crate) enum Sync<'a> {
    /// Client: say the measured rounds are over.
    TellServer(&'a mpsc::Sender<()>),
    /// Server: wait for the client to say so.
    WaitForClient(&'a mpsc::Receiver<()>, Duration),
}

/// What one side's round program measured.
pub(crate) struct RoundsOut {
    pub(crate) before: TcpInfo,
    pub(crate) after: TcpInfo,
    pub(crate) wall: Duration,
    /// Options read back right after the measured rounds (so TCP_QUICKACK shows whether
    /// quick-ACK mode survived the exchange, `tcp_in_quickack_mode`).
    pub(crate) held: Applied,
    /// Hold time inside TCP (ns) of the writes of the measured rounds, when SO_TIMESTAMPING
    /// worked.
    pub(crate) holds: Option<Vec<i64>>,
    /// TcpExt deltas over the measured rounds (empty when this side does not count).
    pub(crate) netstat: BTreeMap<String, i64>,
    /// CLOCK_REALTIME (ns) at the start and the end of the measured rounds.
    pub(crate) real: (u64, u64),
    /// This thread's CPU time over the measured rounds (ns).
    pub(crate) cpu_ns: Option<u64>,
}

impl From<RoundsOut> for SideOut {
    /// A side's record from its measured rounds (the wall time and the window stay the caller's).
    fn from(o: RoundsOut) -> SideOut {
        SideOut {
            applied: o.held,
            before: o.before,
            after: o.after,
            netstat: o.netstat,
            holds: o.holds,
            cpu_ns: o.cpu_ns,
        }
    }
}

/// How long a snapshot waits for written bytes to leave the socket (see `settle`).
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// tcp_info once every byte written has left the socket (tcpi_notsent_bytes == 0, i.e.
/// write_seq == snd_nxt, tcp_get_info in net/ipv4/tcp.c), waiting at most `SETTLE_LIMIT`. Taken
/// outside the timed rounds, so that a snapshot never cuts a message in two: with messages in
/// flight at the ends of the measured rounds (bulk-ack depth >= 2) the byte and segment deltas
/// would otherwise depend on how much of them had been sent at that instant.
fn settle(sock: &Socket, side: &'static str, cancel: &crate::Cancel) -> Result<TcpInfo, LabError> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let i = info(sock, side)?;
        if i.notsent_bytes.unwrap_or(0) == 0 || Instant::now() >= deadline || cancel.is_cancelled() {
            return Ok(i);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What `run_rounds` does besides running the rounds.
pub(crate) struct RoundsCfg<'a> {
    pub(crate) sync: Sync<'a>,
    /// Time writes with SO_TIMESTAMPING.
    pub(crate) stamps: bool,
    /// Read this thread's namespace TcpExt counters around the measured rounds, names prefixed so.
    pub(crate) count: Option<&'static str>,
    pub(crate) cancel: &'a crate::Cancel,
}

fn read_counters(count: Option<&'static str>) -> Option<BTreeMap<String, i64>> {
    count.and_then(|_| sys::host::netstat_thread().ok())
}

/// Run a round program on one side: tcp_info before and after the measured rounds, wall time,
/// and per-write hold times when `stamps`.
// long: the measured loop with its reads before and after (tcp_info, counters, CPU) on one
// socket; one function, so nothing is called between the clock reads and the loop.
pub(crate) fn run_rounds(
    r: &mut Runner<'_>,
    side: &SideProgram,
    p: &RoundProgram,
    opts: &SideOpts,
    mut rec: Option<&mut Recorder>,
    cfg: RoundsCfg<'_>,
) -> Result<RoundsOut, LabError> {
    let RoundsCfg { sync, stamps, count, cancel } = cfg;
    let reads = rec.is_some() && p.sample == Sample::ClientRecv;
    let prologue = exec::compile(&side.prologue, opts, r.sbuf, false);
    let round = exec::compile(&side.round, opts, r.sbuf, reads);
    let epilogue = exec::compile(&side.epilogue, opts, r.sbuf, false);
    if stamps && txstamp::enable(r.sock).is_ok() {
        let per_round = exec::send_calls(&round);
        let calls = per_round * (p.warmup_rounds + p.rounds) as usize
            + exec::send_calls(&prologue)
            + exec::send_calls(&epilogue);
        r.tx = Some(TxLog::with_capacity((calls + 64).min(1 << 22)));
    }
    let drain = |r: &mut Runner<'_>| {
        if let Some(tx) = r.tx.as_mut() {
            // Evidence only: an error here (never expected) leaves fewer stamps, not a failed run.
            let _ = tx.drain(r.sock);
        }
    };
    // Waits in the prologue and the epilogue are not timed: they are no samples, and the row's
    // packets show any stall there (the classifier's records outside the measured window).
    let mut clk = Clock::start();
    r.run(&prologue, Phase::Prologue, &mut clk, None)?;
    drain(r);
    for w in 0..u64::from(p.warmup_rounds) {
        r.run(&round, Phase::Warmup(w), &mut clk, None)?;
        drain(r);
    }
    let before = settle(r.sock, r.side, cancel)?;
    // Counters from here to the end of the measured rounds: warm-up rounds are not counted.
    let ns_before = read_counters(count);
    let real0 = sys::clock::realtime_ns();
    let cpu0 = sys::host::thread_cpu_ns();
    let t0 = Instant::now();
    // A round starts where the one before ended (the clock read after its last call): one clock
    // read per socket call and none between rounds. With write stamps the drain between rounds
    // is left out of the rounds by a fresh read.
    let mut prev = t0;
    for i in 0..u64::from(p.rounds) {
        let mut clk = if r.tx.is_some() { Clock::start() } else { Clock { prev, slept: Duration::ZERO } };
        let start = clk.prev;
        r.run(&round, Phase::Round(i), &mut clk, rec.as_deref_mut())?;
        if !reads {
            if let Some(rec) = rec.as_deref_mut() {
                rec.sample((clk.prev.duration_since(start).saturating_sub(clk.slept)).as_nanos() as u64);
            }
        }
        prev = clk.prev;
        // Between rounds, outside the timed part: the error queue holds only so many stamps.
        drain(r);
    }
    let t1 = Instant::now();
    let cpu_ns = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
    let real = (real0, sys::clock::realtime_ns());
    let wall = t1.duration_since(t0);
    if let Sync::WaitForClient(rx, timeout) = &sync {
        // Data the server's last send left in its queue (Nagle) is on the wire only once the
        // client has read it all: take the server's figures after the client's last round.
        let _ = rx.recv_timeout(*timeout);
    }
    let after = settle(r.sock, r.side, cancel)?;
    let netstat = match (ns_before, read_counters(count), count) {
        (Some(b), Some(a), Some(prefix)) => netstat::delta(&b, &a, prefix),
        _ => BTreeMap::new(),
    };
    let held = applied(r.sock, opts);
    if let Sync::TellServer(tx) = &sync {
        let _ = tx.send(());
    }
    drain(r);
    let holds = r.tx.take().map(|tx| {
        let (a, b) = (tx.epoch.mono_ns(t0), tx.epoch.mono_ns(t1));
        txstamp::holds(&tx.writes, &tx.stamps)
            .into_iter()
            .filter(|&(tw, _)| (a..=b).contains(&tw))
            .map(|(_, h)| h)
            .collect()
    });
    let mut clk = Clock::start();
    r.run(&epilogue, Phase::Epilogue, &mut clk, None)?;
    Ok(RoundsOut { before, after, wall, held, holds, netstat, real, cpu_ns })
}

/// A runner for one side's connected socket, no SO_TIMESTAMPING log yet.
pub(crate) fn runner<'a>(
    side: &'static str,
    sock: &'a Socket,
    opts: &SideOpts,
    sbuf: &'a [u8],
    rbuf: Vec<u8>,
    io_timeout: Duration,
) -> Runner<'a> {
    let after_recv = opts.after_recv_ops();
    Runner { side, sock, after_recv, spin: opts.busy_poll(), sbuf, rbuf, io_timeout, tx: None, round_clock: false }
}

pub(crate) fn bufs(side: &SideProgram, stream_write: usize) -> (Vec<u8>, Vec<u8>) {
    let n = exec::max_len(&[&side.prologue, &side.round, &side.epilogue]).max(stream_write);
    // Send bytes are a pattern, not zeros, so nothing on the path can treat them specially.
    let sbuf: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    (sbuf, vec![0u8; n.clamp(1, 1 << 20).max(65_536)])
}

// long: one side's life in order (namespace, listener, capture and kernel evidence, accept,
// the rounds, teardown), each step holding the guards the next needs (cancel watches, capture).
fn server(
    program: &Program,
    opts: &SideOpts,
    place: &Placement,
    lab: &LabOptions,
    ready: mpsc::Sender<Ready>,
    done: mpsc::Receiver<()>,
    rounds_done: mpsc::Receiver<()>,
) -> Result<(SideOut, Ns, PacketsOut, KernelOut), LabError> {
    let side = "server";
    if let Some((_, cpu)) = lab.pin {
        pin_to(cpu, side)?;
    }
    let (ns, ns_file) = server_ns(place, lab)?;
    // Whose counters: a namespace the client shares is counted by the client, around its
    // measured rounds; a namespace of the server's own by the server (prefixed when the client
    // has one too).
    let shared = match ns {
        Ns::Private => true,
        Ns::Placement => place.client_netns == place.server_netns,
        Ns::Caller(_) => false,
    };
    let count = match ns {
        Ns::Caller(_) => None,
        _ if shared => None,
        _ => Some(if place.client_apart() { "server:" } else { "" }),
    };
    let io = |what: &str, e| LabError::Io { side, what: what.into(), source: e };

    let addr = SocketAddr::new(place.server_ip, lab.port);
    let listener =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(|e| io("socket", e))?;
    // SO_REUSEADDR lets a fixed --port be reused while the previous row's connection is in
    // TIME_WAIT; a port another socket listens on still fails with EADDRINUSE (inet_csk_get_port).
    listener.set_reuse_address(true).map_err(|e| io("SO_REUSEADDR", e))?;
    listener.bind(&SockAddr::from(addr)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            LabError::PortInUse { ip: place.server_ip, port: lab.port }
        } else {
            io(&format!("bind {addr}"), e)
        }
    })?;
    listener.listen(1).map_err(|e| io("listen", e))?;
    // Ctrl-C shuts the listener down: a blocked accept returns.
    let listen_watch = lab.cancel.watch(&listener);
    // accept(2) honours SO_RCVTIMEO (inet_csk_accept uses sock_rcvtimeo).
    listener.set_read_timeout(Some(lab.io_timeout)).map_err(|e| io("SO_RCVTIMEO", e))?;
    let local = listener.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
    // The capture starts before the client connects (the handshake is the path's RTT sample).
    // Kernel evidence first: a streamed capture pulls its records as the row runs.
    let (mut kernel, kernel_row) = start_kernel(lab, &ns, local.port());
    let (mut packets, running) = start_capture(place, lab, local.port(), kernel_row.as_ref());
    // The client may already have failed; then accept times out and it reports why.
    let _ = ready.send(Ready { addr: local, netns: ns_file, count_shared: shared });
    let (sock, _) = listener.accept().map_err(|e| {
        if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
            LabError::Timeout { side, phase: "accept".into(), secs: lab.io_timeout.as_secs() }
        } else {
            io("accept", e)
        }
    })?;
    drop(listen_watch);
    drop(listener);
    let _watch = lab.cancel.watch(&sock);
    setup_with(&sock, opts, side, (!lab.cancel.is_watched()).then_some(lab.io_timeout))?;
    let (before, after, applied, holds, netstat, cpu_ns) = match program {
        Program::Rounds(p) => {
            let (sbuf, rbuf) = bufs(&p.server, 0);
            let mut r = runner(side, &sock, opts, &sbuf, rbuf, lab.io_timeout);
            let o = run_rounds(
                &mut r,
                &p.server,
                p,
                opts,
                None,
                RoundsCfg {
                    sync: Sync::WaitForClient(&rounds_done, lab.io_timeout),
                    stamps: lab.tx_timestamps,
                    count,
                    cancel: &lab.cancel,
                },
            )?;
            (o.before, o.after, o.held, o.holds, o.netstat, o.cpu_ns)
        }
        Program::Stream { .. } => {
            // Reads as large as iperf3's (128 KiB): fewer system calls per byte.
            let (sbuf, rbuf) = bufs(&SideProgram::default(), 131_072);
            let mut r = runner(side, &sock, opts, &sbuf, rbuf, lab.io_timeout);
            let b = info(&sock, side)?;
            let ns_before = read_counters(count);
            let cpu0 = sys::host::thread_cpu_ns();
            r.stream_recv()?;
            let cpu = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
            let netstat = match (ns_before, read_counters(count), count) {
                (Some(b), Some(a), Some(prefix)) => netstat::delta(&b, &a, prefix),
                _ => BTreeMap::new(),
            };
            (b, info(&sock, side)?, applied(&sock, opts), None, netstat, cpu)
        }
    };
    // Keep the socket open until the client is done.
    let _ = done.recv_timeout(lab.io_timeout);
    if let Some(r) = running {
        packets = r.finish(local.port());
    }
    if let Some(k) = kernel_row {
        kernel = KernelOut::Records(k.finish());
    }
    Ok((SideOut { applied, before, after, netstat, holds, cpu_ns }, ns, packets, kernel))
}

// long: the server's counterpart, in the same order (namespace, connect, capture, the rounds,
// teardown), each step holding the guards the next needs.
fn client(
    program: &Program,
    opts: &SideOpts,
    place: &Placement,
    lab: &LabOptions,
    ready: mpsc::Receiver<Ready>,
    done: mpsc::Sender<()>,
    rounds_done: mpsc::Sender<()>,
) -> Result<ClientOut, LabError> {
    let side = "client";
    if let Some((cpu, _)) = lab.pin {
        pin_to(cpu, side)?;
    }
    let io = |what: &str, e| LabError::Io { side, what: what.into(), source: e };
    let Ready { addr, netns, count_shared } = ready
        .recv_timeout(lab.io_timeout + Duration::from_secs(5))
        .map_err(|_| LabError::PeerClosed { side, phase: "setup".into(), detail: "the server did not start".into() })?;
    // Own counters only when the client lives in a namespace of its own, apart from the server's.
    let split = place.client_apart();
    if let Some(f) = netns {
        set_netns(&f, side, "setns to the server's namespace".into())?;
    } else if let Some(p) = &place.client_netns {
        enter(p, side)?;
    }
    let count = if split {
        Some("client:")
    } else if count_shared {
        Some("")
    } else {
        None
    };
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(|e| io("socket", e))?;
    let _watch = lab.cancel.watch(&sock);
    sock.connect_timeout(&SockAddr::from(addr), lab.io_timeout).map_err(|e| io(&format!("connect {addr}"), e))?;
    setup_with(&sock, opts, side, (!lab.cancel.is_watched()).then_some(lab.io_timeout))?;

    let out = match program {
        Program::Rounds(p) => {
            let (sbuf, rbuf) = bufs(&p.client, 0);
            let per_round = p.client.round.iter().filter(|s| matches!(s, Step::Recv(_))).count().max(1);
            let samples = match p.sample {
                Sample::ClientRound => p.rounds as usize,
                Sample::ClientRecv => p.rounds as usize * per_round,
            };
            let mut rec = Recorder::with_capacity(samples, samples * 4 + 1024);
            let mut r = runner(side, &sock, opts, &sbuf, rbuf, lab.io_timeout);
            // The unrecorded run (the one run under a watchdog) keeps only its timing.
            r.round_clock = lab.cancel.is_watched() && p.sample == Sample::ClientRound;
            let o = run_rounds(
                &mut r,
                &p.client,
                p,
                opts,
                Some(&mut rec),
                RoundsCfg {
                    sync: Sync::TellServer(&rounds_done),
                    stamps: lab.tx_timestamps,
                    count,
                    cancel: &lab.cancel,
                },
            )?;
            let (wall, window_real) = (o.wall, o.real);
            ClientOut { side: o.into(), rec, wall, rounds: u64::from(p.rounds), stream: None, window_real }
        }
        Program::Stream { duration_ns, write_size } => {
            let ws = *write_size as usize;
            let (sbuf, rbuf) = bufs(&SideProgram::default(), ws);
            let mut r = runner(side, &sock, opts, &sbuf, rbuf, lab.io_timeout);
            let mut h = measure::histogram();
            let before = info(&sock, side)?;
            let ns_before = read_counters(count);
            let real0 = sys::clock::realtime_ns();
            let cpu0 = sys::host::thread_cpu_ns();
            let t0 = Instant::now();
            let writes = r.stream_send(ws, Duration::from_nanos(*duration_ns), &mut h)?;
            let wall = t0.elapsed();
            let cpu_ns = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
            let window_real = (real0, sys::clock::realtime_ns());
            let after = info(&sock, side)?;
            // Retransmission timeouts while the send queue drains belong to the stream too.
            settle(&sock, side, &lab.cancel)?;
            let netstat = match (ns_before, read_counters(count), count) {
                (Some(b), Some(a), Some(prefix)) => netstat::delta(&b, &a, prefix),
                _ => BTreeMap::new(),
            };
            let applied = applied(&sock, opts);
            // The stream is measured; a receiver that already closed (its read timed out on a
            // starved host and the connection was reset: ENOTCONN) leaves nothing to signal,
            // and must not lose the measurement.
            match sock.shutdown(std::net::Shutdown::Write) {
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOTCONN) => {}
                r => r.map_err(|e| io("shutdown", e))?,
            }
            let side = SideOut { applied, before, after, netstat, holds: None, cpu_ns };
            ClientOut { side, rec: Recorder::with_capacity(0, 0), wall, rounds: writes, stream: Some(h), window_real }
        }
    };
    let _ = done.send(());
    Ok(out)
}
