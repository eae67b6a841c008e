//! `lab --remote`: the client. It opens every connection (control, then one data connection
//! per row), so it works from behind NAT; it plays the client's side of each row and the server
//! plays the other; the row is assembled from both hosts' records by the lab's own code.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use lab::{LabOptions, Placement, Progress};
use report::{Report, RunResult};
use scenario::{Scenario, StrategyPair, Workload};

use crate::auth::{self, Channel, Key, Role};
use crate::clock::{self, Offset, Sample};
use crate::frame;
use crate::msg::{self, Auth, Challenge, Limits, Opening, RunRequest, ToClient, ToServer, MAGIC, VERSION};
use crate::server::realtime_ns;

/// Ping-pongs for the clock offset, before the first row.
pub const PINGS: usize = 24;

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

fn io(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Session {
    /// Connect and authenticate (mutually: the server proves the key first).
    pub fn connect(addr: SocketAddr, key: &Key, io_timeout: Duration) -> Result<Session, String> {
        let mut stream =
            TcpStream::connect_timeout(&addr, io_timeout).map_err(|e| io(&format!("connect {addr}"), e))?;
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(io_timeout)).map_err(|e| io("SO_RCVTIMEO", e))?;
        stream.set_write_timeout(Some(io_timeout)).map_err(|e| io("SO_SNDTIMEO", e))?;
        let nc = auth::random()?;
        let hello = Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&nc) };
        frame::write_frame(&mut stream, &msg::to_body(&hello)).map_err(|e| io("send hello", e))?;
        let f = frame::read_frame(&mut stream, frame::PREAUTH_MAX)
            .map_err(|e| format!("{addr} did not answer as a tcpstall server ({e})"))?;
        let (ns, proof) = match msg::from_body::<Challenge>(&f).map_err(|e| format!("{addr}: {e}"))? {
            Challenge::Refused { reason } => return Err(format!("the server refused: {reason}")),
            Challenge::Challenge { version, .. } if version != VERSION => {
                return Err(format!("the server speaks protocol version {version}, this client {VERSION}"))
            }
            Challenge::Challenge { nonce, proof, .. } => (nonce, proof),
        };
        let ns = auth::unhex::<32>(&ns).ok_or("the server sent a malformed nonce")?;
        let ok = auth::unhex::<32>(&proof).is_some_and(|p| auth::verify_server(key, &nc, &ns, &p));
        if !ok {
            return Err(format!(
                "authentication failed: {addr} does not hold this key (wrong --key-file, or not the server you meant)"
            ));
        }
        let p = auth::client_proof(key, &nc, &ns);
        frame::write_frame(&mut stream, &msg::to_body(&Auth::Auth { proof: auth::hex(&p) }))
            .map_err(|e| io("send proof", e))?;
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
        let f =
            frame::read_frame(&mut s.stream, 1 << 20).map_err(|e| format!("the server closed the session ({e})"))?;
        let m = match chan.open(&f) {
            Ok(b) => msg::from_body::<ToClient>(b)?,
            Err(_) => match msg::from_body::<Challenge>(&f) {
                Ok(Challenge::Refused { reason }) => return Err(format!("the server refused: {reason}")),
                _ => return Err("the server's first message failed authentication".into()),
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
            other => Err(format!("unexpected first message from the server: {}", kind(&other))),
        }
    }

    fn send(&mut self, m: &ToServer) -> Result<(), String> {
        let b = self.chan.seal(&msg::to_body(m));
        frame::write_frame(&mut self.stream, &b).map_err(|e| io("control connection", e))
    }

    fn recv(&mut self, timeout: Duration) -> Result<ToClient, String> {
        let _ = self.stream.set_read_timeout(Some(timeout));
        let f = frame::read_frame(&mut self.stream, self.limits.max_message.max(1 << 20) as usize)
            .map_err(|e| format!("control connection: {e}"))?;
        let b = self.chan.open(&f).map_err(|e| format!("control connection: {e}"))?;
        match msg::from_body::<ToClient>(b)? {
            ToClient::Refused { reason } => Err(format!("the server ended the session: {reason}")),
            m => Ok(m),
        }
    }

    /// The clock offset from `n` ping-pongs (RFC 5905 section 8; clock.rs).
    pub fn clock(&mut self, n: usize) -> Result<Option<Offset>, String> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t1 = realtime_ns();
            self.send(&ToServer::Ping { t1_ns: t1 })?;
            match self.recv(self.io_timeout)? {
                ToClient::Pong { t1_ns, t2_ns, t3_ns } if t1_ns == t1 => {
                    v.push(Sample { t1, t2: t2_ns, t3: t3_ns, t4: realtime_ns() })
                }
                other => return Err(format!("expected a pong, got {}", kind(&other))),
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
    ) -> Result<RunResult, String> {
        let p = lab::remote::round_program(workload).map_err(|e| e.to_string())?;
        let run = self.next_run;
        self.next_run += 1;
        // The data socket is bound first: its port names the connection in both hosts' captures.
        let sock = socket2::Socket::new(socket2::Domain::for_address(self.addr), socket2::Type::STREAM, None)
            .map_err(|e| io("data socket", e))?;
        let any: SocketAddr = match self.addr {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        sock.bind(&any.into()).map_err(|e| io("data socket bind", e))?;
        let port = sock.local_addr().ok().and_then(|a| a.as_socket()).map_or(0, |a| a.port());
        let capture = if lab.capture {
            lab::remote::HostCapture::start(port, self.addr.ip().is_loopback())
        } else {
            Err("packet capture off (--no-capture)".into())
        };
        let data_port = if capture.is_ok() { port } else { 0 };
        self.send(&ToServer::Run(RunRequest {
            run,
            label: pair.label.clone(),
            workload: workload.clone(),
            client: pair.client.clone(),
            server: pair.server.clone(),
            data_port,
        }))?;
        let token = match self.recv(self.io_timeout)? {
            ToClient::RunReady { run: r, token } if r == run => token,
            ToClient::RunFailed { reason, .. } => return Err(format!("the server could not run it: {reason}")),
            other => return Err(format!("expected run-ready, got {}", kind(&other))),
        };
        sock.connect_timeout(&self.addr.into(), self.io_timeout).map_err(|e| io("data connection", e))?;
        let mut data = &sock;
        frame::write_frame(&mut data, &msg::to_body(&Opening::Data { token })).map_err(|e| io("data connection", e))?;
        sock.set_read_timeout(Some(self.io_timeout)).map_err(|e| io("data connection", e))?;
        let mut ok = [0u8; 1];
        data.read_exact(&mut ok).map_err(|e| io("the server did not accept the data connection", e))?;
        let (tx, rx) = mpsc::channel::<()>();
        let cancel = lab.cancel.clone();
        let io_timeout = lab.io_timeout;
        // The client's side here; its "rounds done" goes to the server over the control
        // connection, as soon as it happens (the server's last tcp_info waits for it).
        let me = &mut *self;
        let mine = std::thread::scope(|sc| {
            let fwd = sc.spawn(move || {
                if rx.recv().is_ok() {
                    return me.send(&ToServer::RoundsDone { run });
                }
                Ok(())
            });
            let r = lab::remote::client_side(&p, &pair.client, &sock, io_timeout, &tx, &cancel);
            drop(tx);
            let f = fwd.join().unwrap_or_else(|_| Err("the forwarding thread panicked".into()));
            (r, f)
        });
        let _ = sock.shutdown(std::net::Shutdown::Write);
        // The server closes after our FIN: its FIN and the last ACKs end both captures.
        let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
        let mut b = [0u8; 64];
        let _ = data.read(&mut b);
        let packets = capture.and_then(|c| {
            let point = c.point.clone();
            let origin_ns = c.origin_ns;
            c.finish().map(|(frames, drops)| lab::remote::ClientPackets {
                frames,
                drops,
                origin_ns,
                point,
                server_port: self.addr.port(),
            })
        });
        // The server's record (or its reason), within its own run limit.
        let wait = Duration::from_secs(self.limits.max_run_secs.min(600)) + self.io_timeout;
        let theirs = match mine.1.and_then(|_| self.recv(wait)) {
            Ok(ToClient::RunDone { run: r, side }) if r == run => Ok(*side),
            Ok(ToClient::RunFailed { reason, .. }) if reason.starts_with("server:") => Err(reason),
            Ok(ToClient::RunFailed { reason, .. }) => Err(format!("server: {reason}")),
            Ok(other) => Err(format!("expected the server's record, got {}", kind(&other))),
            Err(e) => Err(e),
        };
        let cli = match (mine.0, &theirs) {
            (Ok(c), _) => c,
            // The server's reason first: the client's error is usually its echo.
            (Err(e), Err(s)) => return Err(format!("{s} (here: {e})")),
            (Err(e), Ok(_)) => return Err(e.to_string()),
        };
        let side = theirs?;
        let server_frames = side.frames.clone();
        let server_note = side.capture_note.clone();
        let origin_ns = packets.as_ref().map_or(0, |c| c.origin_ns);
        let mut row = lab::remote::assemble(&p, pair, place, lab, side, cli, packets);
        crate::merge::attribute(&mut row, &server_frames, &server_note, origin_ns, self.addr.port(), self.offset);
        Ok(row)
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
) -> Result<Report, String> {
    for (_, w) in s.workload.variants() {
        lab::remote::round_program(&w).map_err(|e| e.to_string())?;
    }
    let mut session = Session::connect(addr, key, opts.io_timeout)?;
    session.clock(PINGS)?;
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
            kernel: Some(lab::kernel_release()),
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
