//! `lab --remote`: the client. It opens every connection (control, then one data connection
//! per row), so it works from behind NAT; it plays the client's side of each row and the server
//! plays the other; the row is assembled from both hosts' records by the lab's own code.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::Duration;

use lab::{LabOptions, Placement, Progress};
use report::{Report, RunResult};
use scenario::{Scenario, StrategyPair, Workload};

use crate::auth::{self, Channel, Key, OpenError, Role};
use crate::clock::{self, Offset, Sample};
use crate::frame::{self, FrameError};
use crate::msg::{self, Auth, Challenge, Limits, Malformed, Opening, RunRequest, ToClient, ToServer, MAGIC, VERSION};
use sys::clock::realtime_ns;

/// The data socket's local port (0 when unknown).
fn sock_port(sock: &socket2::Socket) -> u16 {
    sock.local_addr().ok().and_then(|a| a.as_socket()).map_or(0, |a| a.port())
}

/// Ping-pongs for the clock offset, before the first row.
pub const PINGS: usize = 24;

/// Why `HOST[:PORT]` gave no address.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("cannot resolve: {0}")]
    Lookup(std::io::Error),
    #[error("no address")]
    NoAddress,
}

/// `HOST[:PORT]` (a name, an IPv4 or IPv6 address, `[v6]:port`) to one address, the first the
/// resolver gives; without a port, the server's default ([`crate::DEFAULT_PORT`]).
pub fn resolve(s: &str) -> Result<SocketAddr, ResolveError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, crate::DEFAULT_PORT));
    }
    let with_port = if s.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        s.to_string()
    } else {
        format!("{s}:{}", crate::DEFAULT_PORT)
    };
    with_port.to_socket_addrs().map_err(ResolveError::Lookup)?.next().ok_or(ResolveError::NoAddress)
}

/// An authenticated control session with a server.
pub struct Session {
    addr: SocketAddr,
    stream: TcpStream,
    chan: Channel,
    pub limits: Limits,
    pub kernel: String,
    pub tool_version: String,
    next_run: u32,
    io_timeout: Duration,
    /// The clock offset, once measured (`clock`).
    pub offset: Option<Offset>,
}

/// Why a session or a row failed: one line for people.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A socket call, with what it was for.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(transparent)]
    Key(#[from] auth::KeyError),
    #[error("{addr} did not answer as a tcpstall server ({source})")]
    NotAServer { addr: SocketAddr, source: FrameError },
    #[error("{addr}: {source}")]
    BadAnswer { addr: SocketAddr, source: Malformed },
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("the server refused: {0}")]
    Refused(String),
    #[error("the server speaks protocol version {0}, this client {VERSION}")]
    Version(u32),
    #[error("the server sent a malformed nonce")]
    BadNonce,
    #[error("authentication failed: {0} does not hold this key (wrong --key-file, or not the server you meant)")]
    AuthFailed(SocketAddr),
    #[error("the server closed the session ({0})")]
    Closed(FrameError),
    #[error("the server's first message failed authentication")]
    FirstMessageAuth,
    #[error("unexpected first message from the server: {0}")]
    UnexpectedFirst(&'static str),
    #[error("expected {expected}, got {got}")]
    Unexpected { expected: &'static str, got: &'static str },
    #[error("control connection: {0}")]
    Control(FrameError),
    #[error("control connection: {0}")]
    ControlAuth(OpenError),
    #[error("the server ended the session: {0}")]
    Ended(String),
    #[error("the server could not run it: {0}")]
    RunFailed(String),
    /// The server's reason a run failed, prefixed `server:`.
    #[error("{0}")]
    Server(String),
    /// The server's reason first: the client's error is usually its echo.
    #[error("{server} (here: {here})")]
    Both { server: Box<ClientError>, here: lab::LabError },
    /// The lab's reason a workload cannot run against a server (a stream).
    #[error("{0}")]
    Lab(String),
    /// This side of the row failed (the lab's error).
    #[error(transparent)]
    Here(lab::LabError),
    #[error("the forwarding thread panicked")]
    ForwardPanicked,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> ClientError + '_ {
    move |source| ClientError::Io { what: what.to_string(), source }
}

impl Session {
    /// Connect, authenticate and measure the clock offset ([`PINGS`] ping-pongs): a session
    /// ready for its rows (`lab --remote`, `advise --remote`).
    pub fn open(addr: SocketAddr, key: &Key, io_timeout: Duration) -> Result<Session, ClientError> {
        let mut s = Session::connect(addr, key, io_timeout)?;
        s.clock(PINGS)?;
        Ok(s)
    }

    /// Connect and authenticate (mutually: the server proves the key first).
    pub fn connect(addr: SocketAddr, key: &Key, io_timeout: Duration) -> Result<Session, ClientError> {
        let mut stream = TcpStream::connect_timeout(&addr, io_timeout).map_err(io(&format!("connect {addr}")))?;
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(io_timeout)).map_err(io("SO_RCVTIMEO"))?;
        stream.set_write_timeout(Some(io_timeout)).map_err(io("SO_SNDTIMEO"))?;
        let nc = auth::random()?;
        let hello = Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&nc) };
        frame::write_frame(&mut stream, &msg::to_body(&hello)).map_err(io("send hello"))?;
        let f = frame::read_frame(&mut stream, frame::PREAUTH_MAX)
            .map_err(|source| ClientError::NotAServer { addr, source })?;
        let (ns, proof) = match msg::from_body::<Challenge>(&f)
            .map_err(|source| ClientError::BadAnswer { addr, source })?
        {
            Challenge::Refused { reason } => return Err(ClientError::Refused(reason)),
            Challenge::Challenge { version, .. } if version != VERSION => return Err(ClientError::Version(version)),
            Challenge::Challenge { nonce, proof, .. } => (nonce, proof),
        };
        let ns = auth::unhex::<32>(&ns).ok_or(ClientError::BadNonce)?;
        let ok = auth::unhex::<32>(&proof).is_some_and(|p| auth::verify_server(key, &nc, &ns, &p));
        if !ok {
            return Err(ClientError::AuthFailed(addr));
        }
        let p = auth::client_proof(key, &nc, &ns);
        frame::write_frame(&mut stream, &msg::to_body(&Auth::Auth { proof: auth::hex(&p) }))
            .map_err(io("send proof"))?;
        let mut chan = Channel::new(key, Role::Client, &nc, &ns);
        let mut s = Session {
            addr,
            stream,
            chan: Channel::new(key, Role::Client, &nc, &ns),
            limits: Limits::default(),
            kernel: String::new(),
            tool_version: String::new(),
            next_run: 1,
            io_timeout,
            offset: None,
        };
        // The Welcome: the first sealed message (a refusal before it is plain).
        let f = frame::read_frame(&mut s.stream, 1 << 20).map_err(ClientError::Closed)?;
        let m = match chan.open(&f) {
            Ok(b) => msg::from_body::<ToClient>(b)?,
            Err(_) => match msg::from_body::<Challenge>(&f) {
                Ok(Challenge::Refused { reason }) => return Err(ClientError::Refused(reason)),
                _ => return Err(ClientError::FirstMessageAuth),
            },
        };
        s.chan = chan;
        match m {
            ToClient::Welcome { kernel, tool_version, limits } => {
                s.kernel = kernel;
                s.tool_version = tool_version;
                s.limits = limits;
                Ok(s)
            }
            other => Err(ClientError::UnexpectedFirst(kind(&other))),
        }
    }

    fn send(&mut self, m: &ToServer) -> Result<(), ClientError> {
        let b = self.chan.seal(&msg::to_body(m));
        frame::write_frame(&mut self.stream, &b).map_err(io("control connection"))
    }

    fn recv(&mut self, timeout: Duration) -> Result<ToClient, ClientError> {
        let _ = self.stream.set_read_timeout(Some(timeout));
        let f = frame::read_frame(&mut self.stream, self.limits.max_message.max(1 << 20) as usize)
            .map_err(ClientError::Control)?;
        let b = self.chan.open(&f).map_err(ClientError::ControlAuth)?;
        match msg::from_body::<ToClient>(b)? {
            ToClient::Refused { reason } => Err(ClientError::Ended(reason)),
            m => Ok(m),
        }
    }

    /// The clock offset from `n` ping-pongs (RFC 5905 section 8; clock.rs).
    pub fn clock(&mut self, n: usize) -> Result<Option<Offset>, ClientError> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t1 = realtime_ns();
            self.send(&ToServer::Ping { t1_ns: t1 })?;
            match self.recv(self.io_timeout)? {
                ToClient::Pong { t1_ns, t2_ns, t3_ns } if t1_ns == t1 => {
                    v.push(Sample { t1, t2: t2_ns, t3: t3_ns, t4: realtime_ns() })
                }
                other => return Err(ClientError::Unexpected { expected: "a pong", got: kind(&other) }),
            }
        }
        self.offset = clock::estimate(&v);
        Ok(self.offset)
    }

    /// Run one row: the server plays `pair.server`, this host `pair.client`.
    pub fn run_row(
        &mut self,
        workload: &Workload,
        pair: &StrategyPair,
        place: &Placement,
        lab: &LabOptions,
    ) -> Result<RunResult, ClientError> {
        let p = lab::side::round_program(workload).map_err(|e| ClientError::Lab(e.to_string()))?;
        let run = self.next_run;
        self.next_run += 1;
        let (sock, capture) = self.data_socket(lab)?;
        let data_port = capture.as_ref().map_or(0, |_| sock_port(&sock));
        let token = self.request_run(run, workload, pair, data_port)?;
        self.open_data(&sock, token)?;
        let (cli, forwarded) = self.play_client(run, &p, pair, &sock, lab);
        let _ = sock.shutdown(std::net::Shutdown::Write);
        // The server closes after our FIN: its FIN and the last ACKs end both captures.
        let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
        let mut b = [0u8; 64];
        let _ = (&sock).read(&mut b);
        let packets = capture.and_then(|c| {
            let point = c.point.clone();
            let origin_ns = c.origin_ns;
            c.finish().map(|(frames, drops)| lab::side::ClientPackets {
                frames,
                drops,
                origin_ns,
                point,
                server_port: self.addr.port(),
            })
        });
        let theirs = forwarded.and_then(|_| self.server_record(run));
        let cli = match (cli, theirs) {
            (Ok(c), Ok(side)) => (c, side),
            (Ok(_), Err(e)) => return Err(e),
            // The server's reason first: the client's error is usually its echo.
            (Err(here), Err(s)) => return Err(ClientError::Both { server: Box::new(s), here }),
            (Err(e), Ok(_)) => return Err(ClientError::Here(e)),
        };
        let (cli, side) = cli;
        let server_frames = side.frames.clone();
        let server_note = side.capture_note.clone();
        let origin_ns = packets.as_ref().map_or(0, |c| c.origin_ns);
        let mut row = lab::side::assemble(&p, pair, place, lab, side, cli, packets);
        crate::attribute::attribute(&mut row, &server_frames, &server_note, origin_ns, self.addr.port(), self.offset);
        Ok(row)
    }

    /// The data socket, bound first: its port names the connection in both hosts' captures;
    /// the capture of that port starts before the connection does.
    #[allow(clippy::type_complexity)]
    fn data_socket(
        &self,
        lab: &LabOptions,
    ) -> Result<(socket2::Socket, Result<lab::side::HostCapture, lab::side::CaptureError>), ClientError> {
        let sock = socket2::Socket::new(socket2::Domain::for_address(self.addr), socket2::Type::STREAM, None)
            .map_err(io("data socket"))?;
        let any: SocketAddr = match self.addr {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        sock.bind(&any.into()).map_err(io("data socket bind"))?;
        let capture = if lab.capture {
            lab::side::HostCapture::start(sock_port(&sock), self.addr.ip().is_loopback())
        } else {
            Err("packet capture off (--no-capture)".into())
        };
        Ok((sock, capture))
    }

    /// Ask the server for run `run`; its token for the data connection.
    fn request_run(
        &mut self,
        run: u32,
        workload: &Workload,
        pair: &StrategyPair,
        data_port: u16,
    ) -> Result<String, ClientError> {
        self.send(&ToServer::Run(RunRequest {
            run,
            label: pair.label.clone(),
            workload: workload.clone(),
            client: pair.client.clone(),
            server: pair.server.clone(),
            data_port,
        }))?;
        match self.recv(self.io_timeout)? {
            ToClient::RunReady { run: r, token } if r == run => Ok(token),
            ToClient::RunFailed { reason, .. } => Err(ClientError::RunFailed(reason)),
            other => Err(ClientError::Unexpected { expected: "run-ready", got: kind(&other) }),
        }
    }

    /// Connect the data socket and present the run's token; the server's one byte accepts it.
    fn open_data(&self, sock: &socket2::Socket, token: String) -> Result<(), ClientError> {
        sock.connect_timeout(&self.addr.into(), self.io_timeout).map_err(io("data connection"))?;
        let mut data = sock;
        frame::write_frame(&mut data, &msg::to_body(&Opening::Data { token })).map_err(io("data connection"))?;
        sock.set_read_timeout(Some(self.io_timeout)).map_err(io("data connection"))?;
        let mut ok = [0u8; 1];
        data.read_exact(&mut ok).map_err(io("the server did not accept the data connection"))
    }

    /// The client's side of the row here; its "rounds done" goes to the server over the
    /// control connection as soon as it happens (the server's last tcp_info waits for it).
    /// Returns this side's result and whether that message went out.
    fn play_client(
        &mut self,
        run: u32,
        p: &scenario::RoundProgram,
        pair: &StrategyPair,
        sock: &socket2::Socket,
        lab: &LabOptions,
    ) -> (Result<lab::side::ClientSide, lab::LabError>, Result<(), ClientError>) {
        let (tx, rx) = mpsc::channel::<()>();
        let cancel = lab.cancel.clone();
        let io_timeout = lab.io_timeout;
        let me = &mut *self;
        std::thread::scope(|sc| {
            let fwd = sc.spawn(move || {
                if rx.recv().is_ok() {
                    return me.send(&ToServer::RoundsDone { run });
                }
                Ok(())
            });
            let r = lab::side::client_side(p, &pair.client, sock, io_timeout, &tx, &cancel);
            drop(tx);
            let f = fwd.join().unwrap_or(Err(ClientError::ForwardPanicked));
            (r, f)
        })
    }

    /// The server's record of run `run` (or its reason), within its own run limit.
    fn server_record(&mut self, run: u32) -> Result<lab::side::SideRecord, ClientError> {
        let wait = Duration::from_secs(self.limits.max_run_secs.min(600)) + self.io_timeout;
        match self.recv(wait)? {
            ToClient::RunDone { run: r, side } if r == run => Ok(*side),
            ToClient::RunFailed { reason, .. } if reason.starts_with("server:") => Err(ClientError::Server(reason)),
            ToClient::RunFailed { reason, .. } => Err(ClientError::Server(format!("server: {reason}"))),
            other => Err(ClientError::Unexpected { expected: "the server's record", got: kind(&other) }),
        }
    }

    /// Say goodbye (best effort).
    pub fn bye(mut self) {
        let _ = self.send(&ToServer::Bye);
    }
}

fn kind(m: &ToClient) -> &'static str {
    match m {
        ToClient::Welcome { .. } => "welcome",
        ToClient::Pong { .. } => "pong",
        ToClient::RunReady { .. } => "run-ready",
        ToClient::RunDone { .. } => "run-done",
        ToClient::RunFailed { .. } => "run-failed",
        ToClient::Refused { .. } => "refused",
    }
}

/// Every row of `s` against the server at `addr`, as `lab::run_scenario` does locally: the
/// first error stops the run and the rows measured before it stay in the report.
pub fn run_scenario(
    s: &Scenario,
    addr: SocketAddr,
    key: &Key,
    opts: &LabOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, ClientError> {
    for (_, w) in s.workload.variants() {
        lab::side::round_program(&w).map_err(|e| ClientError::Lab(e.to_string()))?;
    }
    let mut session = Session::open(addr, key, opts.io_timeout)?;
    let report = session.run_scenario(s, opts, progress);
    if report.errors.is_empty() {
        session.bye();
    }
    Ok(report)
}

impl Session {
    /// Where the rows ran, for reports: the server, its kernel, the clock offset.
    pub fn placement(&self) -> Placement {
        Placement {
            client_netns: None,
            server_netns: None,
            server_ip: self.addr.ip(),
            link: format!(
                "remote {}: server kernel {}; {}",
                self.addr,
                self.kernel,
                self.offset.map_or_else(|| "clock offset unknown".to_string(), |o| o.to_string())
            ),
        }
    }

    /// Every row of `s` on this session (`advise --remote` runs many on one session).
    pub fn run_scenario(&mut self, s: &Scenario, opts: &LabOptions, progress: &mut dyn FnMut(Progress)) -> Report {
        let session = self;
        let place = session.placement();
        let variants = s.workload.variants();
        let total = variants.len() * s.matrix.len();
        let mut report = Report {
            tool: "tcpstall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            schema_version: report::SCHEMA_VERSION,
            kernel: Some(sys::host::kernel_release()),
            profile: None,
            mode: "lab".into(),
            scenario: s.name.clone(),
            params: s.workload.params_json(),
            link: place.link.clone(),
            results: Vec::new(),
            errors: Vec::new(),
        };
        let mut index = 0;
        'rows: for (variant, workload) in &variants {
            for pair in &s.matrix {
                if opts.cancel.is_cancelled() {
                    report.errors.push(format!("interrupted before row '{}': the rows above are complete", pair.label));
                    break 'rows;
                }
                progress(Progress::Start { index, total, label: pair.label.clone() });
                let r = session.run_row(workload, pair, &place, opts);
                progress(Progress::Done { index, total });
                index += 1;
                match r {
                    Ok(mut row) => {
                        row.variant = variant.clone();
                        report.results.push(row);
                    }
                    // Whatever the sockets said after Ctrl-C shut them down is the cancel's echo.
                    Err(_) if opts.cancel.is_cancelled() => {
                        report.errors.push(format!(
                            "interrupted during row '{}' (abandoned): {} of {total} rows finished and are shown",
                            pair.label,
                            report.results.len()
                        ));
                        break 'rows;
                    }
                    Err(e) => {
                        report.errors.push(format!("{}: {e}", pair.label));
                        break 'rows;
                    }
                }
            }
        }
        lab::add_cost_comparison(&mut report.results);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_without_a_port_gets_the_default() {
        assert_eq!(resolve("127.0.0.1").unwrap().port(), crate::DEFAULT_PORT);
        assert_eq!(resolve("127.0.0.1:9").unwrap().port(), 9);
        assert_eq!(resolve("[::1]:9").unwrap().port(), 9);
        assert_eq!(resolve("::1").unwrap().port(), crate::DEFAULT_PORT);
    }

    /// The typed errors print the one-line texts the String errors printed.
    #[test]
    fn errors_keep_their_one_line_texts() {
        let e = ClientError::Unexpected { expected: "a pong", got: kind(&ToClient::Refused { reason: String::new() }) };
        assert_eq!(e.to_string(), "expected a pong, got refused");
        assert_eq!(ClientError::Version(2).to_string(), "the server speaks protocol version 2, this client 1");
        let e = ClientError::Io { what: "data socket".into(), source: std::io::Error::other("no buffer space") };
        assert_eq!(e.to_string(), "data socket: no buffer space");
        let e = ClientError::Control(FrameError::Timeout);
        assert_eq!(e.to_string(), "control connection: no frame within the time limit");
        let s = ClientError::Server("server: over limit".into());
        let e = ClientError::Both { server: Box::new(s), here: lab::LabError::Panic("client") };
        assert!(e.to_string().starts_with("server: over limit (here: "), "{e}");
    }
}
