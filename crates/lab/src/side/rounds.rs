//! The measured part of one side: its socket set up, its step program compiled and run round
//! after round with the reads around the measured rounds (tcp_info, TcpExt counters, CPU time,
//! CLOCK_REALTIME), and the two sides lined up at the end of them.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use report::Applied;
use scenario::{RoundProgram, Sample, SideOpts, SideProgram};
use socket2::Socket;
use sys::tcpinfo::{tcp_info, TcpInfo};

use super::SideOut;
use crate::exec::{self, Clock, Phase, Runner};
use crate::measure::Recorder;
use crate::txstamp::{self, TxLog};
use crate::{netstat, LabError};

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

pub(crate) fn info(sock: &Socket, side: &'static str) -> Result<TcpInfo, LabError> {
    tcp_info(sock.as_fd()).map_err(|e| LabError::Io { side, what: "getsockopt(TCP_INFO)".into(), source: e })
}

pub(crate) fn setup(sock: &Socket, opts: &SideOpts, side: &'static str, io_timeout: Duration) -> Result<(), LabError> {
    setup_with(sock, opts, side, Some(io_timeout))
}

/// `setup`, with per-call socket timeouts only when `io_timeout` is given (a run under a
/// watchdog, [`crate::Cancel::watched`], has none).
pub(crate) fn setup_with(
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
            note: None,
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
pub(super) fn settle(sock: &Socket, side: &'static str, cancel: &crate::Cancel) -> Result<TcpInfo, LabError> {
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

pub(super) fn read_counters(count: Option<&'static str>) -> Option<BTreeMap<String, i64>> {
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
