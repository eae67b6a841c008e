//! One side of a row on a connection some other code set up: the pieces `tcpstall serve` and
//! `lab --remote` (crates/remote) need, so that a row whose two sides run on two hosts is
//! measured by the same code as a row whose two sides are two threads here (`pair.rs`).
//!
//! Only round programs (request/response) run this way: a stream's length is a duration, not
//! a byte count a server could check against its limit before running it.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use report::{Applied, RunResult};
use scenario::{Program, RoundProgram, SideOpts, Step, StrategyPair, Workload};
use serde::{Deserialize, Serialize};
use socket2::Socket;
use sys::tcpinfo::TcpInfo;

use super::rounds::setup;
use super::{
    client_rounds, serve_rounds, CaptureError, ClientOut, FrameRecord, HostCapture, PacketsOut, RoundsCfg, SideOut,
    Sync,
};
use crate::{Cancel, LabError, LabOptions, Placement};

/// What the far host measured on its side of a row, returned to the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SideRecord {
    /// `uname -r` of the host that ran this side.
    pub kernel: String,
    pub applied: Applied,
    /// tcp_info as it travels between hosts: `sys::tcpinfo::TcpInfo` serialised as it is.
    pub before: TcpInfo,
    pub after: TcpInfo,
    /// TcpExt deltas of this side's namespace over its measured rounds, names prefixed "server:".
    pub netstat: BTreeMap<String, i64>,
    pub cpu_ns: Option<u64>,
    /// This host's packets of the data connection (CLOCK_REALTIME stamps of this host), when
    /// captured and within the size the server returns.
    pub frames: Vec<FrameRecord>,
    /// Why `frames` is empty or partial ("" when complete).
    pub capture_note: String,
}

/// The client host's own packets of a row, for `assemble`.
pub struct ClientPackets {
    pub frames: Vec<sys::packet::Frame>,
    pub drops: u64,
    pub origin_ns: u64,
    pub point: String,
    pub server_port: u16,
}

/// A host capture's frames in the lab's packed buffer.
pub fn packed(frames: &[sys::packet::Frame]) -> crate::capture::Frames {
    let mut out = crate::capture::Frames::with_capacity(frames.len());
    for f in frames {
        out.push(f.ts_ns, f.orig_len, &f.data);
    }
    out
}

/// The link type of a host capture's frames: Ethernet-style headers on `lo`, raw IP from the
/// cooked capture on every other interface: whichever decodes more of the connection's TCP
/// packets.
pub fn linktype_of(frames: &[sys::packet::Frame], server_port: u16) -> u32 {
    let frames = packed(frames);
    let tcp = |lt| crate::capture::events(&frames, lt, server_port, 0, 0).0.len();
    if tcp(wire::linktype::RAW) > tcp(wire::linktype::ETHERNET) {
        wire::linktype::RAW
    } else {
        wire::linktype::ETHERNET
    }
}

/// A host capture's frames as the trace of the connection whose server listens on
/// `server_port` (in their own link type, [`linktype_of`]): endpoint A is the client, times
/// are ns since `origin_ns` on the frames' clock.
pub fn host_events(frames: &[sys::packet::Frame], server_port: u16, origin_ns: u64) -> Vec<trace::Event> {
    let lt = linktype_of(frames, server_port);
    crate::capture::events(&packed(frames), lt, server_port, origin_ns, 0).0
}

/// Stop a capture and keep at most `max_frames` of its frames as records (None: not captured,
/// with why).
pub fn finish_capture(c: Result<HostCapture, CaptureError>, max_frames: usize) -> (Vec<FrameRecord>, String) {
    match c.and_then(|c| c.finish()) {
        Ok((f, _)) if f.len() > max_frames => {
            (Vec::new(), format!("{} frames captured, over the {max_frames} the server returns: not returned", f.len()))
        }
        Ok((f, drops)) => {
            let note = if drops > 0 { format!("the capture lost {drops} packets") } else { String::new() };
            (f.iter().map(FrameRecord::from).collect(), note)
        }
        Err(e) => (Vec::new(), e.to_string()),
    }
}

/// What the client measured on its side of a remote row (opaque: `assemble` reads it).
pub struct ClientSide(ClientOut);

/// Why a workload cannot run between two hosts.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error(
        "the {kind} workload is a stream (its length is a duration): only request/response workloads run against a \
         remote server"
    )]
    Stream { kind: &'static str },
}

/// The round program of a workload, or why it cannot run between two hosts.
pub fn round_program(w: &Workload) -> Result<RoundProgram, ProgramError> {
    match w.program() {
        Program::Rounds(p) => Ok(p),
        Program::Stream { .. } => Err(ProgramError::Stream { kind: w.kind() }),
    }
}

/// Payload bytes both sides of `p` hand to TCP in all (prologue, warm-up, measured rounds,
/// epilogue): what a server checks against its per-run byte limit before running it.
pub fn program_bytes(p: &RoundProgram) -> u64 {
    let sent = |steps: &[Step]| -> u64 {
        steps
            .iter()
            .map(|s| match s {
                Step::Send(w) => w.iter().map(|&x| u64::from(x)).sum(),
                _ => 0,
            })
            .fold(0u64, u64::saturating_add)
    };
    let rounds = u64::from(p.warmup_rounds).saturating_add(u64::from(p.rounds));
    [&p.client, &p.server]
        .iter()
        .map(|s| {
            sent(&s.prologue).saturating_add(sent(&s.round).saturating_mul(rounds)).saturating_add(sent(&s.epilogue))
        })
        .fold(0u64, u64::saturating_add)
}

/// Run the server's side of `p` on `sock` (connected, accepted by the caller). `rounds_done`
/// receives the client's word that its measured rounds are over (over the control
/// connection), so the server's last tcp_info is taken after the client read everything.
/// `cancel` shuts the socket down (the run's time limit, a vanished client).
pub fn serve_side(
    p: &RoundProgram,
    opts: &SideOpts,
    sock: &Socket,
    io_timeout: Duration,
    rounds_done: &mpsc::Receiver<()>,
    cancel: &Cancel,
    capture: (Result<HostCapture, CaptureError>, usize),
) -> Result<SideRecord, LabError> {
    let side = "server";
    let _watch = cancel.watch(sock);
    setup(sock, opts, side, io_timeout)?;
    let sync = Sync::WaitForClient(rounds_done, io_timeout);
    let o = serve_rounds(sock, p, opts, io_timeout, RoundsCfg { sync, stamps: false, count: Some("server:"), cancel })?;
    // The client reads the last bytes after its rounds: wait for its close (bounded) so the
    // capture holds the final ACKs.
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    let mut b = [0u8; 64];
    let _ = std::io::Read::read(&mut &*sock, &mut b);
    let (frames, capture_note) = finish_capture(capture.0, capture.1);
    Ok(SideRecord {
        kernel: sys::host::kernel_release(),
        applied: o.applied,
        before: o.before,
        after: o.after,
        netstat: o.netstat,
        cpu_ns: o.cpu_ns,
        frames,
        capture_note,
    })
}

/// Run the client's side of `p` on `sock` (connected by the caller); `rounds_done` is told
/// when the measured rounds are over (the caller forwards it to the server).
pub fn client_side(
    p: &RoundProgram,
    opts: &SideOpts,
    sock: &Socket,
    io_timeout: Duration,
    rounds_done: &mpsc::Sender<()>,
    cancel: &Cancel,
) -> Result<ClientSide, LabError> {
    let side = "client";
    let _watch = cancel.watch(sock);
    setup(sock, opts, side, io_timeout)?;
    let sync = Sync::TellServer(rounds_done);
    let cfg = RoundsCfg { sync, stamps: false, count: Some("client:"), cancel };
    // No hold times from a remote row (its writes are not stamped: `stamps: false`).
    Ok(ClientSide(client_rounds(sock, p, opts, io_timeout, cfg)?))
}

/// One row from the two sides' records, by the lab's own `result::assemble`: latency from the
/// client's clock, wire cost from each host's own tcp_info, TcpExt from each host's namespace,
/// stall records from the client host's packets (kept in `RunResult::packets`), or why not.
pub fn assemble(
    p: &RoundProgram,
    pair: &StrategyPair,
    place: &Placement,
    lab: &LabOptions,
    srv: SideRecord,
    cli: ClientSide,
    packets: Result<ClientPackets, CaptureError>,
) -> RunResult {
    let srv = SideOut {
        applied: srv.applied,
        before: srv.before,
        after: srv.after,
        netstat: srv.netstat,
        holds: None,
        cpu_ns: srv.cpu_ns,
        note: None,
    };
    let program = Program::Rounds(p.clone());
    // A capture that saw none of the connection's packets says nothing about stalls: say why
    // instead of reporting none.
    let packets = packets.and_then(|c| {
        let lt = linktype_of(&c.frames, c.server_port);
        if crate::capture::events(&packed(&c.frames), lt, c.server_port, 0, 0).0.is_empty() {
            Err(CaptureError::SawNone)
        } else {
            Ok(c)
        }
    });
    let packets = match packets {
        Ok(c) => PacketsOut::Captured {
            linktype: linktype_of(&c.frames, c.server_port),
            cap: crate::capture::Captured {
                frames: packed(&c.frames),
                stats: crate::capture::Stats { packets: 0, drops: c.drops },
                reader_cpu_ns: None,
                reader_wakeups: 0,
                reader_cpus: None,
                stream: None,
            },
            point: c.point,
            origin_ns: c.origin_ns,
            server_port: c.server_port,
            frame_base: 0,
            // Kernel evidence of the far host is not collected over --remote (docs/remote.md).
            kernel: None,
        },
        Err(why) => PacketsOut::Failed(why.to_string()),
    };
    let lab = LabOptions { keep_packets: true, ..lab.clone() };
    let trace = super::row::classified(packets, lab.stall_margin(), cli.0.window_real, lab.keep_packets);
    super::row::assemble(&program, pair, place, &lab, srv, cli.0, trace).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_000_moves_its_bytes_both_ways_every_round() {
        let s = scenario::Scenario::builtin("chunked").unwrap();
        let p = round_program(&s.workload).unwrap();
        let rounds = u64::from(p.rounds + p.warmup_rounds);
        assert!(program_bytes(&p) >= 2 * 1000 * rounds, "{}", program_bytes(&p));
    }

    #[test]
    fn a_stream_is_refused_by_name() {
        let s = scenario::Scenario::builtin("stream").unwrap();
        assert!(round_program(&s.workload).unwrap_err().to_string().contains("stream"));
    }

    #[test]
    fn tcp_info_round_trips_through_its_record() {
        let i = TcpInfo { ato: 40_000, segs_out: Some(9), bytes_sent: Some(5), ..Default::default() };
        let j = serde_json::to_string(&i).unwrap();
        assert_eq!(serde_json::from_str::<TcpInfo>(&j).unwrap(), i);
    }
}
