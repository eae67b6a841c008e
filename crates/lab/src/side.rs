//! One side of a row, run by the same code whether the other side is a thread of this process
//! (`pair.rs`) or another host (`tcpstall serve` and `lab --remote`, crates/remote): its rounds
//! on a connected socket (`serve_rounds`, `client_rounds`; a stream's `stream_server`,
//! `stream_client`), what it measured (`SideOut`, `ClientOut`, `PacketsOut`), and the
//! row made from both sides' records (`row`).
//!
//! `two_hosts` holds what a row whose sides run on two hosts needs besides (the far side's
//! record, each host's own packets); only round programs (request/response) run that way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use report::Applied;
use scenario::{RoundProgram, Sample, SideOpts, SideProgram, Step};
use socket2::Socket;
use sys::tcpinfo::TcpInfo;

mod capture;
mod rounds;
pub(crate) mod row;
mod two_hosts;

pub use capture::{CaptureError, FrameRecord, HostCapture};
pub(crate) use rounds::{setup_with, RoundsCfg, Sync};
pub use two_hosts::{
    assemble, client_side, finish_capture, host_events, linktype_of, packed, program_bytes, round_program, serve_side,
    ClientPackets, ClientSide, ProgramError, SideRecord,
};

use crate::capture::{Captured, KernelRecords};
use crate::measure::{self, Recorder};
use crate::{exec, netstat, Cancel, LabError};
use rounds::{applied, bufs, info, read_counters, run_rounds, runner, settle};

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
    /// What the row's notes should say of this side's run (a stream's end not awaited).
    pub note: Option<String>,
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

/// Run the server's side of round program `p` on `sock` (connected and set up): its measured
/// rounds end when the client says so (`cfg.sync`, [`Sync::WaitForClient`]).
pub(crate) fn serve_rounds(
    sock: &Socket,
    p: &RoundProgram,
    opts: &SideOpts,
    io_timeout: Duration,
    cfg: RoundsCfg<'_>,
) -> Result<SideOut, LabError> {
    let (sbuf, rbuf) = bufs(&p.server, 0);
    let mut r = runner("server", sock, opts, &sbuf, rbuf, io_timeout);
    Ok(run_rounds(&mut r, &p.server, p, opts, None, cfg)?.into())
}

/// Run the client's side of round program `p` on `sock` (connected and set up), timing each
/// round (or each read); `cfg.sync` ([`Sync::TellServer`]) is told when the measured rounds
/// are over.
pub(crate) fn client_rounds(
    sock: &Socket,
    p: &RoundProgram,
    opts: &SideOpts,
    io_timeout: Duration,
    cfg: RoundsCfg<'_>,
) -> Result<ClientOut, LabError> {
    let (sbuf, rbuf) = bufs(&p.client, 0);
    let per_round = p.client.round.iter().filter(|s| matches!(s, Step::Recv(_))).count().max(1);
    let samples = match p.sample {
        Sample::ClientRound => p.rounds as usize,
        Sample::ClientRecv => p.rounds as usize * per_round,
    };
    let mut rec = Recorder::with_capacity(samples, samples * 4 + 1024);
    let mut r = runner("client", sock, opts, &sbuf, rbuf, io_timeout);
    // The unrecorded run (the one run under a watchdog) keeps only its timing.
    r.round_clock = cfg.cancel.is_watched() && p.sample == Sample::ClientRound;
    let o = run_rounds(&mut r, &p.client, p, opts, Some(&mut rec), cfg)?;
    let (wall, window_real) = (o.wall, o.real);
    Ok(ClientOut { side: o.into(), rec, wall, rounds: u64::from(p.rounds), stream: None, window_real })
}

/// The receiving side of a stream: read until the sender shuts its side down, with tcp_info,
/// the TcpExt counters (`count`) and CPU time around the whole stream. `sender_done` hears
/// from the sender when it has finished; if the end of the stream is then still missing
/// [`exec::STREAM_DRAIN`] later, the reads stop and `SideOut::note` says why.
pub(crate) fn stream_server(
    sock: &Socket,
    opts: &SideOpts,
    io_timeout: Duration,
    count: Option<&'static str>,
    sender_done: &std::sync::mpsc::Receiver<()>,
) -> Result<SideOut, LabError> {
    let side = "server";
    // Reads as large as iperf3's (128 KiB): fewer system calls per byte.
    let (sbuf, rbuf) = bufs(&SideProgram::default(), 131_072);
    sock.set_read_timeout(Some(exec::STREAM_POLL)).map_err(|e| LabError::Io {
        side,
        what: "SO_RCVTIMEO".into(),
        source: e,
    })?;
    let mut r = runner(side, sock, opts, &sbuf, rbuf, io_timeout);
    let before = info(sock, side)?;
    let ns_before = read_counters(count);
    let cpu0 = sys::host::thread_cpu_ns();
    let (_, cut) = r.stream_recv(sender_done)?;
    let cpu_ns = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
    let netstat = match (ns_before, read_counters(count), count) {
        (Some(b), Some(a), Some(prefix)) => netstat::delta(&b, &a, prefix),
        _ => BTreeMap::new(),
    };
    let after = info(sock, side)?;
    let note = cut.then(|| {
        format!(
            "the stream's end (the sender's FIN) had not arrived {} s after the sender finished: its last \
             segments were waiting on a retransmission timer that backs off (RFC 6298 5.5), as when the \
             link drops the ACKs; the receiver stopped waiting, and the row counts what was sent in the stream",
            exec::STREAM_DRAIN.as_secs()
        )
    });
    Ok(SideOut { applied: applied(sock, opts), before, after, netstat, holds: None, cpu_ns, note })
}

/// The sending side of a stream: `stream` = (how long, bytes per write); writes as fast as
/// the socket takes them, each write's time in a histogram, then shuts its side down.
pub(crate) fn stream_client(
    sock: &Socket,
    opts: &SideOpts,
    io_timeout: Duration,
    count: Option<&'static str>,
    cancel: &Cancel,
    stream: (Duration, usize),
) -> Result<ClientOut, LabError> {
    let side = "client";
    let (duration, ws) = stream;
    let (sbuf, rbuf) = bufs(&SideProgram::default(), ws);
    sock.set_write_timeout(Some(exec::STREAM_POLL)).map_err(|e| LabError::Io {
        side,
        what: "SO_SNDTIMEO".into(),
        source: e,
    })?;
    let mut r = runner(side, sock, opts, &sbuf, rbuf, io_timeout);
    let mut h = measure::histogram();
    let before = info(sock, side)?;
    let ns_before = read_counters(count);
    let real0 = sys::clock::realtime_ns();
    let cpu0 = sys::host::thread_cpu_ns();
    let t0 = Instant::now();
    let writes = r.stream_send(ws, duration, &mut h)?;
    let wall = t0.elapsed();
    let cpu_ns = sys::host::thread_cpu_ns().zip(cpu0).map(|(a, b)| a.saturating_sub(b));
    let window_real = (real0, sys::clock::realtime_ns());
    let after = info(sock, side)?;
    // Retransmission timeouts while the send queue drains belong to the stream too.
    settle(sock, side, cancel)?;
    let netstat = match (ns_before, read_counters(count), count) {
        (Some(b), Some(a), Some(prefix)) => netstat::delta(&b, &a, prefix),
        _ => BTreeMap::new(),
    };
    let applied = applied(sock, opts);
    // The stream is measured; a receiver that already closed (its read timed out on a
    // starved host and the connection was reset: ENOTCONN) leaves nothing to signal,
    // and must not lose the measurement.
    match sock.shutdown(std::net::Shutdown::Write) {
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTCONN) => {}
        r => r.map_err(|e| LabError::Io { side, what: "shutdown".into(), source: e })?,
    }
    let side = SideOut { applied, before, after, netstat, holds: None, cpu_ns, note: None };
    Ok(ClientOut { side, rec: Recorder::with_capacity(0, 0), wall, rounds: writes, stream: Some(h), window_real })
}
