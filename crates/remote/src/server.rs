//! `tcpstall serve`: the listener, the limits, one thread per connection. The protocol's
//! decisions are the pure `ServerMachine`'s; this file only moves bytes and time.
//!
//! What an unauthenticated peer can cost: a connection counted against its source's rate, one
//! of `max_pending` handshake threads with a small stack, one frame buffer of at most
//! `frame::PREAUTH_MAX` bytes, for at most `handshake_ms`. The first frame that does not decode
//! closes the connection.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::auth::{self, Key, KeyError};
use crate::frame::{self, FrameError};
use crate::machine::{Action, Ended, ServerMachine, Slots, State};
use crate::msg::{LimitError, Limits, RunRequest};

/// Stack of a connection's thread: the handshake and the session loop need little; a run's
/// own thread gets the default.
const CONN_STACK: usize = 256 << 10;
/// Rate-limiter entries kept at most (oldest sources forgotten first): bounded memory under a
/// flood from many addresses.
const RATE_SOURCES: usize = 4096;

/// Why the server, a connection or a session stopped: one line for the log or the user.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Limits(#[from] LimitError),
    #[error("--insecure-no-auth binds to loopback only ({0} is not): give --key-file to listen on a network")]
    InsecureOffLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("listener: {0}")]
    Listener(std::io::Error),
    #[error("cannot install the Ctrl-C handler: {0}")]
    Signals(std::io::Error),
    /// A socket or thread call on a connection.
    #[error("{0}")]
    Socket(std::io::Error),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("handshake not finished within {0} ms: closed")]
    HandshakeTimeout(u64),
    #[error("closed before authentication: {0}")]
    BeforeAuth(FrameError),
    #[error("refused: {0}")]
    Refused(String),
    #[error("write: {0}")]
    Write(std::io::Error),
    #[error("session ended: {0}")]
    SessionEnded(Box<ServerError>),
    #[error("token table poisoned")]
    TokensPoisoned,
    #[error("refused: data connection with an unknown token")]
    UnknownToken,
    #[error("data connection: {0}")]
    Data(std::io::Error),
    #[error("the run gave up waiting for its data connection")]
    GaveUp,
    #[error("reader stopped")]
    ReaderStopped,
    #[error("client gone ({0})")]
    ClientGone(FrameError),
}

/// Why the server's side of a run failed: the reason the client is told.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lab's reason the workload cannot run remotely.
    #[error("{0}")]
    Program(String),
    #[error("no data connection within {0} ms")]
    NoData(u128),
    #[error("over limit: the run was cut after {0} s (the server's --max-run-secs)")]
    Cut(u64),
    #[error(transparent)]
    Lab(#[from] lab::LabError),
}

/// How the server runs.
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// None = `--insecure-no-auth` (the all-zero key), allowed on loopback only.
    pub key: Option<Key>,
    pub limits: Limits,
    /// A side that makes no progress this long fails its run (the lab's I/O timeout).
    pub io_timeout: Duration,
    /// One line per event (connections refused, sessions, runs), e.g. to stderr.
    pub log: Box<dyn Fn(&str) + Send + Sync>,
}

struct Shared {
    key: Key,
    limits: Limits,
    kernel: String,
    io_timeout: Duration,
    sessions: AtomicU32,
    pending: AtomicU32,
    tokens: Mutex<HashMap<[u8; 32], mpsc::SyncSender<TcpStream>>>,
    rate: Mutex<Rate>,
    stop: Arc<AtomicBool>,
    log: Box<dyn Fn(&str) + Send + Sync>,
    /// No key (`--insecure-no-auth`): said when the server starts.
    insecure: bool,
}

/// A bound server.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
    /// The address asked for (the bound one, `local_addr`, says which port 0 became).
    listen: SocketAddr,
}

/// Connections per source address in the last minute.
#[derive(Default)]
struct Rate {
    seen: HashMap<IpAddr, VecDeque<Instant>>,
    order: VecDeque<IpAddr>,
}

impl Rate {
    fn admit(&mut self, ip: IpAddr, now: Instant, max: u32) -> bool {
        if !self.seen.contains_key(&ip) {
            if self.order.len() >= RATE_SOURCES {
                if let Some(old) = self.order.pop_front() {
                    self.seen.remove(&old);
                }
            }
            self.order.push_back(ip);
        }
        let q = self.seen.entry(ip).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60)) {
            q.pop_front();
        }
        if q.len() >= max as usize {
            return false;
        }
        q.push_back(now);
        true
    }
}

impl Server {
    /// Bind, after checking the configuration: no key is refused unless the address is loopback.
    pub fn bind(cfg: ServeConfig) -> Result<Server, ServerError> {
        cfg.limits.validate()?;
        let insecure = cfg.key.is_none();
        let key = match cfg.key {
            Some(k) => k,
            None if cfg.listen.ip().is_loopback() => Key::insecure(),
            None => return Err(ServerError::InsecureOffLoopback(cfg.listen)),
        };
        let listener =
            TcpListener::bind(cfg.listen).map_err(|source| ServerError::Listen { addr: cfg.listen, source })?;
        listener.set_nonblocking(true).map_err(ServerError::Listener)?;
        let shared = Arc::new(Shared {
            key,
            limits: cfg.limits,
            kernel: sys::host::kernel_release(),
            io_timeout: cfg.io_timeout,
            sessions: AtomicU32::new(0),
            pending: AtomicU32::new(0),
            tokens: Mutex::new(HashMap::new()),
            rate: Mutex::new(Rate::default()),
            stop: Arc::new(AtomicBool::new(false)),
            log: cfg.log,
            insecure,
        });
        Ok(Server { listener, shared, listen: cfg.listen })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Setting this flag ends `run` (Ctrl-C) within a fraction of a second; sessions in progress
    /// are told and their runs cut.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.shared.stop.clone()
    }

    /// Accept until Ctrl-C (SIGINT) or SIGTERM ([`lab::Interrupts`]: the first stops the
    /// server as [`Server::stop_flag`] does, a second ends the process at once), after logging
    /// where it listens and its limits. The signal that stopped it, if any.
    pub fn run_until_signalled(&self) -> Result<Option<i32>, ServerError> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let stop = self.stop_flag();
        let interrupts = lab::Interrupts::on(&[SIGINT, SIGTERM], move || stop.store(true, Ordering::SeqCst))
            .map_err(ServerError::Signals)?;
        let sh = &self.shared;
        let at = self.local_addr().unwrap_or(self.listen);
        let auth = if sh.insecure { "NO AUTHENTICATION (loopback only)" } else { "key required" };
        (sh.log)(&format!("listening on {at}, {auth}; limits: {}; Ctrl-C ends it", sh.limits.describe()));
        let r = self.run();
        let sig = interrupts.stop();
        r.map(|()| sig)
    }

    /// Accept until stopped.
    pub fn run(&self) -> Result<(), ServerError> {
        let sh = &self.shared;
        while !sh.stop.load(Ordering::SeqCst) {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                // Out of descriptors or a connection reset before accept: not the server's end.
                Err(e) => {
                    (sh.log)(&format!("accept: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let admitted = sh
                .rate
                .lock()
                .map(|mut r| r.admit(peer.ip(), Instant::now(), sh.limits.max_conn_per_minute))
                .unwrap_or(false);
            if !admitted {
                (sh.log)(&format!(
                    "{peer}: refused: over {} connections per minute from {} (--max-conn-per-minute)",
                    sh.limits.max_conn_per_minute,
                    peer.ip()
                ));
                continue;
            }
            if sh.pending.fetch_add(1, Ordering::SeqCst) >= sh.limits.max_pending {
                sh.pending.fetch_sub(1, Ordering::SeqCst);
                (sh.log)(&format!("{peer}: refused: {} handshakes already in progress", sh.limits.max_pending));
                continue;
            }
            let sh2 = sh.clone();
            let spawned = std::thread::Builder::new().name("tcpstall-serve-conn".into()).stack_size(CONN_STACK).spawn(
                move || {
                    let mut pending = Pending(&sh2.pending, true);
                    if let Err(e) = connection(stream, peer, &sh2, &mut pending) {
                        (sh2.log)(&format!("{peer}: {e}"));
                    }
                },
            );
            if spawned.is_err() {
                sh.pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

/// The pending-handshake count, released once (authenticated, or the connection ended).
struct Pending<'a>(&'a AtomicU32, bool);
impl Pending<'_> {
    fn release(&mut self) {
        if std::mem::take(&mut self.1) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The session count as the machine's `Slots`; a taken slot is given back on drop.
struct SessionSlot<'a> {
    sh: &'a Shared,
    taken: bool,
}
impl Slots for SessionSlot<'_> {
    fn free(&self) -> bool {
        self.sh.sessions.load(Ordering::SeqCst) < self.sh.limits.max_sessions
    }
    fn take(&mut self) -> bool {
        let max = self.sh.limits.max_sessions;
        let ok =
            self.sh.sessions.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).is_ok();
        self.taken |= ok;
        ok
    }
}
impl Drop for SessionSlot<'_> {
    fn drop(&mut self) {
        if self.taken {
            self.sh.sessions.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn send_end(stream: &mut TcpStream, e: &Ended) {
    if let Some(r) = &e.reply {
        // The peer may be gone: nothing more to do either way.
        let _ = frame::write_frame(stream, r);
    }
}

/// One accepted connection: the handshake within `handshake_ms`, then a data connection is
/// handed to its run, or a control session runs until it ends.
fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    sh: &Shared,
    pending: &mut Pending<'_>,
) -> Result<(), ServerError> {
    stream.set_nonblocking(false).map_err(ServerError::Socket)?;
    // No TCP_NODELAY here: a data connection must start with the kernel's defaults (the
    // strategy sets its own options); the control connection sets it once it is one.
    let deadline = Instant::now() + Duration::from_millis(sh.limits.handshake_ms);
    let mut m = ServerMachine::new(sh.key.clone(), sh.limits.clone(), sh.kernel.clone(), auth::random()?);
    let mut slot = SessionSlot { sh, taken: false };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = stream.set_write_timeout(Some(left.max(Duration::from_millis(1))));
        let f = match frame::read_frame_by(&mut stream, m.max_frame(), deadline) {
            Ok(f) => f,
            Err(FrameError::Timeout) => return Err(ServerError::HandshakeTimeout(sh.limits.handshake_ms)),
            Err(e) => return Err(ServerError::BeforeAuth(e)),
        };
        match m.on_frame(&f, sys::clock::realtime_ns(), &mut slot) {
            Err(e) => {
                send_end(&mut stream, &e);
                return Err(ServerError::Refused(e.reason));
            }
            Ok(actions) => {
                for a in actions {
                    match a {
                        Action::Send(b) => frame::write_frame(&mut stream, &b).map_err(ServerError::Write)?,
                        Action::Data(token) => return data(stream, token, sh),
                        Action::Authenticated => pending.release(),
                        _ => {}
                    }
                }
            }
        }
        if matches!(m.state(), State::Ready) {
            break;
        }
    }
    (sh.log)(&format!("{peer}: session authenticated"));
    let r = session(stream, peer, &mut m, sh);
    drop(slot);
    match r {
        Ok(why) => {
            (sh.log)(&format!("{peer}: session ended: {why}"));
            Ok(())
        }
        Err(e) => Err(ServerError::SessionEnded(Box::new(e))),
    }
}

/// A data connection: its token must name a run waiting for it.
fn data(mut stream: TcpStream, token: [u8; 32], sh: &Shared) -> Result<(), ServerError> {
    let _ = stream.set_nodelay(false);
    let waiting = sh.tokens.lock().map_err(|_| ServerError::TokensPoisoned)?.remove(&token);
    let Some(tx) = waiting else { return Err(ServerError::UnknownToken) };
    // One byte says "accepted": the client starts its program only then.
    stream.write_all(b"k").map_err(ServerError::Data)?;
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(None);
    tx.send(stream).map_err(|_| ServerError::GaveUp)
}

enum Ev {
    Frame(Result<Vec<u8>, FrameError>),
    RunDone(Box<Result<lab::side::SideRecord, RunError>>),
}

struct Running {
    token: [u8; 32],
    cancel: lab::Cancel,
    rounds: Option<mpsc::Sender<()>>,
    thread: std::thread::JoinHandle<()>,
}

impl Running {
    fn stop(mut self, sh: &Shared) {
        forget(sh, &self.token);
        self.rounds.take();
        self.cancel.cancel();
        let _ = self.thread.join();
    }
}

/// A run's token is good for one data connection while the run waits for it, never after.
fn forget(sh: &Shared, token: &[u8; 32]) {
    if let Ok(mut t) = sh.tokens.lock() {
        t.remove(token);
    }
}

/// An authenticated control session: returns why it ended.
fn session(mut stream: TcpStream, peer: SocketAddr, m: &mut ServerMachine, sh: &Shared) -> Result<String, ServerError> {
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(Some(sh.io_timeout));
    // Pongs leave at once (the clock samples), whatever is unacknowledged.
    let _ = stream.set_nodelay(true);
    let (tx, rx) = mpsc::channel::<Ev>();
    spawn_reader(&stream, sh.limits.max_message as usize, tx.clone())?;
    let mut run: Option<Running> = None;
    let idle = Duration::from_secs(sh.limits.idle_secs);
    let mut last = Instant::now();
    let result = loop {
        if sh.stop.load(Ordering::SeqCst) {
            send_end(&mut stream, &m.close("the server is shutting down"));
            break Ok("the server is shutting down".to_string());
        }
        let ev = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => ev,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if run.is_none() && last.elapsed() >= idle {
                    let why = format!("idle for {} s (--idle-secs)", sh.limits.idle_secs);
                    send_end(&mut stream, &m.close(&why));
                    break Ok(why);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(ServerError::ReaderStopped),
        };
        last = Instant::now();
        match ev {
            Ev::Frame(Err(e)) => break Err(ServerError::ClientGone(e)),
            Ev::Frame(Ok(f)) => match m.on_frame(&f, sys::clock::realtime_ns(), &mut crate::machine::Unlimited) {
                Err(e) => {
                    send_end(&mut stream, &e);
                    break Err(ServerError::Refused(e.reason));
                }
                Ok(actions) => {
                    if on_actions(actions, &mut stream, peer, m, sh, &mut run, &tx)? {
                        break Ok("the client said goodbye".into());
                    }
                }
            },
            Ev::RunDone(res) => {
                if let Some(r) = run.take() {
                    forget(sh, &r.token);
                    let _ = r.thread.join();
                }
                let b = m.run_finished(*res);
                frame::write_frame(&mut stream, &b).map_err(ServerError::Write)?;
            }
        }
    };
    if let Some(r) = run.take() {
        r.stop(sh);
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    result
}

/// The control connection's reader: every frame (or the error that ends it) goes to `tx`.
fn spawn_reader(stream: &TcpStream, max: usize, tx: mpsc::Sender<Ev>) -> Result<(), ServerError> {
    let mut reader = stream.try_clone().map_err(ServerError::Socket)?;
    std::thread::Builder::new()
        .name("tcpstall-serve-read".into())
        .stack_size(CONN_STACK)
        .spawn(move || loop {
            let f = frame::read_frame(&mut reader, max);
            let end = f.is_err();
            if tx.send(Ev::Frame(f)).is_err() || end {
                return;
            }
        })
        .map_err(ServerError::Socket)?;
    Ok(())
}

/// Carries out what the machine decided on a frame; true when the client said goodbye.
fn on_actions(
    actions: Vec<Action>,
    stream: &mut TcpStream,
    peer: SocketAddr,
    m: &mut ServerMachine,
    sh: &Shared,
    run: &mut Option<Running>,
    tx: &mpsc::Sender<Ev>,
) -> Result<bool, ServerError> {
    let mut bye = false;
    for a in actions {
        match a {
            Action::Send(b) => {
                frame::write_frame(stream, &b).map_err(ServerError::Write)?;
            }
            Action::Start(req) => {
                let token = auth::random()?;
                // The capture starts before the client may connect (its SYN).
                let capture = if req.data_port != 0 {
                    lab::side::HostCapture::start(req.data_port, peer.ip().is_loopback())
                } else {
                    Err("the client asked for no capture".into())
                };
                *run = Some(start_run(req.clone(), token, sh, tx.clone(), capture)?);
                let b = m.run_ready(req.run, &token);
                frame::write_frame(stream, &b).map_err(ServerError::Write)?;
            }
            Action::RoundsDone => {
                if let Some(r) = run.as_ref().and_then(|r| r.rounds.as_ref()) {
                    let _ = r.send(());
                }
            }
            Action::Bye => bye = true,
            Action::Authenticated | Action::Data(_) => {}
        }
    }
    Ok(bye)
}

/// Start a run's thread: it waits for the data connection, runs the server's side within the
/// run-time limit, and reports on `done`.
fn start_run(
    req: RunRequest,
    token: [u8; 32],
    sh: &Shared,
    done: mpsc::Sender<Ev>,
    capture: Result<lab::side::HostCapture, lab::side::CaptureError>,
) -> Result<Running, ServerError> {
    let (dtx, drx) = mpsc::sync_channel::<TcpStream>(1);
    sh.tokens.lock().map_err(|_| ServerError::TokensPoisoned)?.insert(token, dtx);
    let (rtx, rrx) = mpsc::channel::<()>();
    let cancel = lab::Cancel::new();
    let c2 = cancel.clone();
    let wait = Duration::from_millis(sh.limits.handshake_ms) + Duration::from_secs(3);
    let max_run = Duration::from_secs(sh.limits.max_run_secs);
    let io_timeout = sh.io_timeout;
    // Frames returned at most: each travels as about 400 bytes of JSON.
    let max_frames = (sh.limits.max_message as usize / 400).saturating_sub(100);
    let thread = std::thread::Builder::new()
        .name("tcpstall-serve-run".into())
        .spawn(move || {
            let r = run_side(&req, &drx, &rrx, &c2, (wait, max_run, io_timeout), (capture, max_frames));
            let _ = done.send(Ev::RunDone(Box::new(r)));
        })
        .map_err(ServerError::Socket)?;
    Ok(Running { token, cancel, rounds: Some(rtx), thread })
}

fn run_side(
    req: &RunRequest,
    data: &mpsc::Receiver<TcpStream>,
    rounds: &mpsc::Receiver<()>,
    cancel: &lab::Cancel,
    (wait, max_run, io_timeout): (Duration, Duration, Duration),
    capture: (Result<lab::side::HostCapture, lab::side::CaptureError>, usize),
) -> Result<lab::side::SideRecord, RunError> {
    let p = lab::side::round_program(&req.workload).map_err(|e| RunError::Program(e.to_string()))?;
    let stream = data.recv_timeout(wait).map_err(|_| RunError::NoData(wait.as_millis()))?;
    let sock = socket2::Socket::from(stream);
    // The run's time limit: a watchdog cancels it (shutting the data socket down).
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let c = cancel.clone();
    let cut = Arc::new(AtomicBool::new(false));
    let cut2 = cut.clone();
    let dog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(max_run) {
            cut2.store(true, Ordering::SeqCst);
            c.cancel();
        }
    });
    let r = lab::side::serve_side(&p, &req.server, &sock, io_timeout, rounds, cancel, capture);
    drop(stop_tx);
    let _ = dog.join();
    if cut.load(Ordering::SeqCst) {
        return Err(RunError::Cut(max_run.as_secs()));
    }
    Ok(r?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_per_source_and_per_minute() {
        let mut r = Rate::default();
        let t = Instant::now();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        assert!(r.admit(a, t, 2) && r.admit(a, t, 2));
        assert!(!r.admit(a, t, 2));
        assert!(r.admit(b, t, 2));
        assert!(r.admit(a, t + Duration::from_secs(61), 2));
    }

    /// The typed errors print the one-line texts the String errors printed.
    #[test]
    fn errors_keep_their_one_line_texts() {
        let e = ServerError::SessionEnded(Box::new(ServerError::ClientGone(FrameError::Closed)));
        assert_eq!(e.to_string(), "session ended: client gone (the peer closed the connection)");
        assert_eq!(ServerError::HandshakeTimeout(2000).to_string(), "handshake not finished within 2000 ms: closed");
        assert_eq!(RunError::Cut(1).to_string(), "over limit: the run was cut after 1 s (the server's --max-run-secs)");
        assert_eq!(RunError::NoData(5000).to_string(), "no data connection within 5000 ms");
    }

    #[test]
    fn no_key_is_refused_off_loopback() {
        let cfg = ServeConfig {
            listen: "0.0.0.0:0".parse().unwrap(),
            key: None,
            limits: Limits::default(),
            io_timeout: Duration::from_secs(10),
            log: Box::new(|_| {}),
        };
        let e = Server::bind(cfg).err().unwrap().to_string();
        assert!(e.starts_with("--insecure-no-auth binds to loopback only"), "{e}");
    }
}
