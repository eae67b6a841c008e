//! Emulated links: two network namespaces joined by TUN devices, packets carried between them
//! by a userspace forwarder that applies a [`LinkSpec`] with nanosecond deadlines.
//!
//! - [`model`]: the link as a pure function (no clock, no OS): the `linkmodel` crate, which the
//!   simulator (`model`) runs too;
//! - [`netns`]: the namespaces and TUN devices; [`userns`]: root or an unprivileged user namespace;
//! - [`forward`]: the per-direction forwarder threads; [`capture`]: the pcapng tap;
//! - [`sweep`]: removal of what a killed run left behind; [`report`]: counters and summary lines;
//! - [`session`]: `tcpstall shell`, a command in the client namespace behind the link.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod calibrate;
pub mod capture;
pub mod forward;
/// The link model both the forwarder and the simulator run (crates/linkmodel).
pub use linkmodel as model;
pub use linkmodel::gso;
pub mod netns;
pub mod probe;
pub mod report;
pub mod session;
mod stamp;
pub mod sweep;
pub mod userns;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::sys::eventfd::{EfdFlags, EventFd};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
pub use scenario::LinkSpec;

use crate::capture::{Capture, IFACE_CLIENT, IFACE_SERVER};
use crate::forward::DirectionIo;
use crate::model::{Dir, DirectionModel, LinkModel};
use crate::netns::End;
use crate::report::DirReport;
pub use crate::report::LinkReport;
use crate::userns::Privilege;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Missing privilege, with the reason and what to do.
    #[error("{0}")]
    Privilege(String),
    /// An OS error, with what was being done (the error is part of the message, not a source,
    /// so chains print it once).
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("{0}")]
    Setup(String),
    #[error("forwarder: {0}")]
    Forwarder(forward::ForwardError),
    /// The command of `tcpstall shell` could not be started (exec failed).
    #[error("cannot run {command}: {}", describe_exec_error(err))]
    NotStarted { command: String, err: std::io::Error },
}

impl LinkError {
    /// The exit status a shell gives when it cannot start a command (POSIX, "Command Search
    /// and Execution"): 127 if it is not found, 126 if it is found but cannot be executed.
    pub fn shell_exit_code(&self) -> Option<i32> {
        match self {
            LinkError::NotStarted { err, .. } if err.kind() == std::io::ErrorKind::NotFound => Some(127),
            LinkError::NotStarted { .. } => Some(126),
            _ => None,
        }
    }
}

fn describe_exec_error(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "command not found".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied (not executable?)".into(),
        _ => err.to_string(),
    }
}

/// Tuning knobs of the forwarder (defaults suit everything but experiments; the forwarder
/// bench's `--variants` compares them, docs/link.md has the numbers).
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// Spin this long before a deadline instead of sleeping...
    pub spin_ns: u64,
    /// ...or longer, up to this, when the timer wakes the forwarder later than that (a quiet
    /// VM's halted vCPUs: `forward::spin`); at most `spin_ns` keeps the spin fixed.
    pub spin_max_ns: u64,
    /// Seed of the loss/jitter random numbers; None = from the OS.
    pub seed: Option<u64>,
    /// Scheduling of the forwarder threads.
    pub priority: forward::Priority,
    /// After the input device runs dry, keep polling it this long before sleeping.
    pub busy_poll_ns: u64,
    /// Setup of the client's and the server's TUN device.
    pub devices: [netns::DeviceOptions; 2],
    /// Pin the client->server and server->client threads to these CPUs.
    pub cpus: Option<[usize; 2]>,
    /// Keep a [`capture::Tap`] of the server side's packets (`Link::tap`), with or without a
    /// capture file: the lab's row traces behind a link come from it.
    pub tap: bool,
    /// Carry TSO/GSO super-packets whole (IFF_VNET_HDR) when no decision of the link is per
    /// segment (no loss, ACK loss or ACK thinning): the rate and queue count their segments and
    /// wire bytes. With such a decision the kernel segments before the forwarder sees them.
    pub gso: bool,
    /// Measure the path's fixed overhead at start with probes through the link
    /// ([`calibrate`]) and add it to the emulator's printed error.
    pub calibrate: bool,
    /// The TUN devices' transmit queue (packets the kernel holds for the forwarder, the
    /// tun_struct ring of dev->tx_queue_len); 0 = the kernel's default, 500. Needs root, except
    /// for the default ([`netns::DEFAULT_TXQUEUELEN`], left at 500 without it).
    pub txqueuelen: u32,
}

impl Default for LinkOptions {
    fn default() -> Self {
        LinkOptions {
            spin_ns: forward::DEFAULT_SPIN_NS,
            spin_max_ns: forward::DEFAULT_MAX_SPIN_NS,
            seed: None,
            priority: forward::DEFAULT_PRIORITY,
            busy_poll_ns: forward::DEFAULT_BUSY_POLL_NS,
            devices: [netns::DeviceOptions::default(); 2],
            cpus: None,
            tap: false,
            gso: true,
            calibrate: true,
            txqueuelen: netns::DEFAULT_TXQUEUELEN,
        }
    }
}

type ForwarderThread = JoinHandle<Result<DirReport, forward::ForwardError>>;

/// A running emulated link. Dropping it stops the forwarder; the namespaces disappear when the
/// last thread or process inside them is gone.
pub struct Link {
    spec: LinkSpec,
    privilege: Privilege,
    client: End,
    server: End,
    stop: Arc<EventFd>,
    stopping: Arc<AtomicBool>,
    threads: Vec<ForwarderThread>,
    capture: Option<(Capture, Option<PathBuf>)>,
    calibration: Result<calibrate::CalibrationReport, calibrate::CalibrationError>,
}

impl Link {
    /// Create both namespaces and start forwarding. `capture` writes a pcapng file.
    pub fn open(spec: &LinkSpec, capture: Option<&Path>) -> Result<Link, LinkError> {
        Link::open_with(spec, capture, &LinkOptions::default())
    }

    pub fn open_with(spec: &LinkSpec, capture: Option<&Path>, opts: &LinkOptions) -> Result<Link, LinkError> {
        check_mtu(spec)?;
        let privilege = userns::acquire()?;
        // Per-segment decisions (loss, ACK loss, ACK thinning) need the kernel's segments.
        let gso = opts.gso && spec.loss == 0.0 && spec.ack_loss == 0.0 && spec.ack_every.is_none();
        let dev = |d: netns::DeviceOptions| netns::DeviceOptions { gso, txqueuelen: opts.txqueuelen, ..d };
        let client = End::create_with(netns::CLIENT_IP, spec.mtu, dev(opts.devices[0]))?;
        let server = End::create_with(netns::SERVER_IP, spec.mtu, dev(opts.devices[1]))?;
        let stop = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| LinkError::Setup(format!("eventfd: {}", e.desc())))?,
        );
        let stopping = Arc::new(AtomicBool::new(false));
        let capture = start_capture(spec, capture, opts.tap, gso)?;
        let calibs = [Arc::new(probe::Calibration::new()), Arc::new(probe::Calibration::new())];
        let shared =
            Shared { stop: &stop, stopping: &stopping, capture: capture.as_ref().map(|(c, _)| c), calibs: &calibs };
        let threads = spawn_forwarders(spec, opts, gso, [&client, &server], &shared)?;
        let calibration = calibrate(opts, &client, &server, &calibs);
        Ok(Link { spec: spec.clone(), privilege, client, server, stop, stopping, threads, capture, calibration })
    }

    pub fn spec(&self) -> &LinkSpec {
        &self.spec
    }
    pub fn privilege(&self) -> Privilege {
        self.privilege
    }
    /// The server side's packets (with `LinkOptions::tap` or a capture file), for the lab.
    pub fn tap(&self) -> Option<capture::Tap> {
        self.capture.as_ref().map(|(c, _)| c.tap())
    }

    /// What the probes at start measured of the path's fixed overhead, or why there is none.
    pub fn calibration(&self) -> Result<&calibrate::CalibrationReport, &calibrate::CalibrationError> {
        self.calibration.as_ref()
    }

    /// The client end (198.18.0.1).
    pub fn client(&self) -> &End {
        &self.client
    }
    /// The server end (198.18.0.2).
    pub fn server(&self) -> &End {
        &self.server
    }

    /// Stop forwarding and collect what the link did.
    pub fn finish(mut self) -> Result<LinkReport, LinkError> {
        let dirs = self.stop_threads()?;
        let device_drops = [self.client.tun_tx_dropped().ok(), self.server.tun_tx_dropped().ok()];
        let capture = match self.capture.take() {
            None => None,
            Some((c, Some(path))) => Some((path, c.finish()?)),
            Some((c, None)) => {
                c.finish()?;
                None
            }
        };
        let calibration = self.calibration.clone();
        Ok(LinkReport { spec: self.spec.clone(), dirs, capture, device_drops, calibration })
    }

    fn stop_threads(&mut self) -> Result<Vec<DirReport>, LinkError> {
        self.stopping.store(true, Ordering::Relaxed);
        let _ = self.stop.write(1);
        let mut out = Vec::new();
        let mut err = None;
        for h in self.threads.drain(..) {
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => err = Some(LinkError::Forwarder(e)),
                Err(_) => err = Some(LinkError::Forwarder(forward::ForwardError::Panicked)),
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// A TUN device takes at most 65535 bytes (drivers/net/tun.c MAX_MTU); the spec allows
/// loopback's 65536 for `tcpstall simulate`.
fn check_mtu(spec: &LinkSpec) -> Result<(), LinkError> {
    if spec.mtu > scenario::TUN_MAX_MTU {
        return Err(LinkError::Setup(format!(
            "mtu={}: the emulated link's TUN devices take {}-{} (drivers/net/tun.c MAX_MTU); {} is loopback's, \
             for `tcpstall simulate`",
            spec.mtu,
            scenario::MIN_MTU,
            scenario::TUN_MAX_MTU,
            spec.mtu
        )));
    }
    Ok(())
}

/// The capture writer, when a file or a tap is asked for.
fn start_capture(
    spec: &LinkSpec,
    capture: Option<&Path>,
    tap: bool,
    gso: bool,
) -> Result<Option<(Capture, Option<PathBuf>)>, LinkError> {
    if capture.is_none() && !tap {
        return Ok(None);
    }
    let names = [
        format!("client {} {}", netns::TUN_NAME, netns::CLIENT_IP),
        format!("server {} {}", netns::TUN_NAME, netns::SERVER_IP),
    ];
    // With GSO the tap records the super-packets as the kernel handed them over (a TSO packet
    // of up to 64 KB where the wire would carry MSS segments): said in the file.
    let what = if gso { format!("{spec}; TSO/GSO super-packets recorded whole, as carried") } else { spec.to_string() };
    let c = Capture::start(capture, sys::clock::realtime_offset_ns(), names, &what)?;
    Ok(Some((c, capture.map(Path::to_path_buf))))
}

/// What both forwarder threads share with the link.
struct Shared<'a> {
    stop: &'a Arc<EventFd>,
    stopping: &'a Arc<AtomicBool>,
    capture: Option<&'a Capture>,
    /// Index 0 = client->server.
    calibs: &'a [Arc<probe::Calibration>; 2],
}

/// The two directions' models and random numbers (index [`Dir::index`]), as the forwarder
/// threads get them: [`LinkModel::new`] and [`linkmodel::rngs`], as the simulator builds its
/// link, so that with the same seed both meet the same fates (the `model` crate's `one_link`
/// test).
pub fn forwarder_models(spec: &LinkSpec, seed: u64) -> [(DirectionModel, SmallRng); 2] {
    let [up, down] = LinkModel::new(spec).into_directions();
    let [r_up, r_down] = linkmodel::rngs(seed);
    [(up, r_up), (down, r_down)]
}

/// One thread per direction, each with its half of the model and its own random numbers.
fn spawn_forwarders(
    spec: &LinkSpec,
    opts: &LinkOptions,
    vnet: bool,
    [client, server]: [&End; 2],
    shared: &Shared<'_>,
) -> Result<Vec<ForwarderThread>, LinkError> {
    let seed = opts.seed.unwrap_or_else(|| SmallRng::from_entropy().next_u64());
    let mut threads = Vec::new();
    for (dir, (model, rng)) in Dir::BOTH.into_iter().zip(forwarder_models(spec, seed)) {
        let (input, output, iface_in, iface_out) = match dir {
            Dir::Up => (client, server, IFACE_CLIENT, IFACE_SERVER),
            Dir::Down => (server, client, IFACE_SERVER, IFACE_CLIENT),
        };
        let io = DirectionIo {
            model,
            rng,
            input: input.tun_shared(),
            output: output.tun_shared(),
            stop: shared.stop.clone(),
            stopping: shared.stopping.clone(),
            mtu: spec.mtu,
            spin_ns: opts.spin_ns,
            spin_max_ns: opts.spin_max_ns,
            priority: opts.priority,
            busy_poll_ns: opts.busy_poll_ns,
            cpu: opts.cpus.map(|c| c[dir.index()]),
            vnet,
            capture: shared.capture.map(|c| (c.sender(), iface_in, iface_out)),
            calib: shared.calibs[dir.index()].clone(),
        };
        let name = format!("tcpstall-fwd-{}", if dir == Dir::Up { "up" } else { "down" });
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || forward::run_direction(io))
            .map_err(|e| LinkError::Io { what: "spawning a forwarder thread".into(), err: e })?;
        threads.push(h);
    }
    Ok(threads)
}

/// The probes at start ([`calibrate::run`]), if asked for.
fn calibrate(
    opts: &LinkOptions,
    client: &End,
    server: &End,
    calibs: &[Arc<probe::Calibration>; 2],
) -> Result<calibrate::CalibrationReport, calibrate::CalibrationError> {
    if !opts.calibrate {
        return Err(calibrate::CalibrationError::NotAsked);
    }
    calibrate::run(client, server, [&calibs[0], &calibs[1]])
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.stop_threads();
    }
}
