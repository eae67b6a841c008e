//! One row: a fresh connection between a server thread and a client thread, each in its
//! network namespace, each running its side of the program; then the numbers become a
//! `RunResult`.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::Duration;

use nix::sched::CloneFlags;
use report::RunResult;
use scenario::{Program, SideOpts, StrategyPair, Workload};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::capture;
use crate::side::row as result;
use crate::side::{self, setup_with, ClientOut, PacketsOut, RoundsCfg, SideOut, Sync};
use crate::{LabError, LabOptions, Placement};

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

mod recording;
mod unrecorded;
use recording::{start_capture, start_kernel, KernelOut};
pub use unrecorded::run_pair_noted;
pub(crate) use unrecorded::{finish, run_recorded, Recorded};

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
    let mut notes = vec![ns_note(&ns, opts)];
    notes.extend(srv.note.clone());
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
    let trace = result::classified(packets, opts.stall_margin(), cli.window_real, opts.keep_packets);
    if let Some(late) = trace.0.as_ref().map(|t| t.late).filter(|&n| n > 0) {
        notes.push(format!(
            "{late} packet or kernel events reached the classifier after later ones (the capture reader fell behind by more than {} ms): they were classified out of order",
            capture::REORDER_MARGIN.as_millis()
        ));
    }
    let (mut row, analysis) = result::assemble(&program, pair, place, opts, srv, cli, trace);
    row.owners = local_owners();
    Ok((row, analysis, notes))
}

/// What the row's notes say of the namespace it ran in (nothing for the placement's own).
fn ns_note(ns: &Ns, opts: &LabOptions) -> String {
    match ns {
        Ns::Private => format!(
            "private netns per row, lo mtu {}",
            opts.lo_mtu.map_or_else(|| "65536".to_string(), |m| m.to_string())
        ),
        Ns::Caller(why) => format!("caller's namespace: {why}; TcpExt counters not measured"),
        Ns::Placement => String::new(),
    }
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

/// Whose TcpExt counters the server reads: (the client shares the server's namespace and
/// counts it, the server's prefix when it counts its own). A namespace the client shares is
/// counted by the client, around its measured rounds; a namespace of the server's own by the
/// server (prefixed when the client has one too).
fn server_counts(ns: &Ns, place: &Placement) -> (bool, Option<&'static str>) {
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
    (shared, count)
}

/// The row's listening socket on `addr` (`port` as asked, for the error).
fn listen(addr: SocketAddr, port: u16) -> Result<Socket, LabError> {
    let io = |what: &str, e| LabError::Io { side: "server", what: what.into(), source: e };
    let listener =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(|e| io("socket", e))?;
    // SO_REUSEADDR lets a fixed --port be reused while the previous row's connection is in
    // TIME_WAIT; a port another socket listens on still fails with EADDRINUSE (inet_csk_get_port).
    listener.set_reuse_address(true).map_err(|e| io("SO_REUSEADDR", e))?;
    listener.bind(&SockAddr::from(addr)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            LabError::PortInUse { ip: addr.ip(), port }
        } else {
            io(&format!("bind {addr}"), e)
        }
    })?;
    listener.listen(1).map_err(|e| io("listen", e))?;
    Ok(listener)
}

/// One side's life in order (namespace, listener, capture and kernel evidence, accept, the
/// rounds, teardown), each step holding the guards the next needs (cancel watches, capture).
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
    let (shared, count) = server_counts(&ns, place);
    let io = |what: &str, e| LabError::Io { side, what: what.into(), source: e };
    let addr = SocketAddr::new(place.server_ip, lab.port);
    let listener = listen(addr, lab.port)?;
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
    let out = match program {
        Program::Rounds(p) => {
            let sync = Sync::WaitForClient(&rounds_done, lab.io_timeout);
            let cfg = RoundsCfg { sync, stamps: lab.tx_timestamps, count, cancel: &lab.cancel };
            side::serve_rounds(&sock, p, opts, lab.io_timeout, cfg)?
        }
        Program::Stream { .. } => side::stream_server(&sock, opts, lab.io_timeout, count, &rounds_done)?,
    };
    // Keep the socket open until the client is done.
    let _ = done.recv_timeout(lab.io_timeout);
    if let Some(r) = running {
        packets = r.finish(local.port());
    }
    if let Some(k) = kernel_row {
        kernel = KernelOut::Records(k.finish());
    }
    Ok((out, ns, packets, kernel))
}

/// The server's counterpart, in the same order (namespace, connect, the rounds, teardown).
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
            let sync = Sync::TellServer(&rounds_done);
            let cfg = RoundsCfg { sync, stamps: lab.tx_timestamps, count, cancel: &lab.cancel };
            side::client_rounds(&sock, p, opts, lab.io_timeout, cfg)?
        }
        Program::Stream { duration_ns, write_size } => {
            let stream = (Duration::from_nanos(*duration_ns), *write_size as usize);
            let out = side::stream_client(&sock, opts, lab.io_timeout, count, &lab.cancel, stream)?;
            // The receiver stops waiting for the stream's end a while after this (`stream_server`).
            let _ = rounds_done.send(());
            out
        }
    };
    let _ = done.send(());
    Ok(out)
}

/// A local row's owners: both sides ran on this process's threads (unnamed: the process's
/// command), so both sockets are this process's (pid, command and cgroup from /proc).
fn local_owners() -> report::owner::FlowOwners {
    let me = own_owner();
    report::owner::FlowOwners { a: me.clone(), b: me }
}

/// This process as an owner.
fn own_owner() -> Option<report::owner::Owner> {
    let pid = std::process::id();
    let (comm, cgroup) = (sys::host::comm(pid)?, sys::host::cgroup_of(pid));
    Some(report::owner::Owner::of_process(pid, comm, cgroup, Vec::new(), report::owner::OwnerSource::Lab))
}
