//! The server's side of one connection as a pure state machine: frames in, actions out. The
//! caller supplies the time (`now_ns`) and the random nonce, so the machine is deterministic and
//! the fuzz test drives it with any bytes. Any unexpected message ends the session with a
//! reason; nothing a peer sends can make it panic or allocate beyond the frame it already read.

use crate::auth::{self, Channel, Key, Role, NONCE_LEN};
use crate::msg::{self, Auth, Challenge, Limits, Opening, RunRequest, ToClient, ToServer, MAGIC, VERSION};

/// Where the connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Waiting for the first frame (Hello or a data token).
    First,
    /// Challenge sent; waiting for the client's proof.
    AwaitAuth { nc: [u8; NONCE_LEN] },
    /// Authenticated, no run in progress.
    Ready,
    /// Run `run` set up or running.
    Running { run: u32, rounds_done: bool },
    /// Over: nothing more is read.
    Closed,
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this frame body.
    Send(Vec<u8>),
    /// The connection is a data connection presenting this token: hand it to its run.
    Data([u8; 32]),
    /// Authenticated: the session holds a slot from now on.
    Authenticated,
    /// Start this run (already checked against the limits); answer with `run_ready`.
    Start(RunRequest),
    /// The client's measured rounds of the run are over.
    RoundsDone,
    /// The client said goodbye.
    Bye,
}

/// The session is over: why, and the last frame to send the peer (when there is one to send).
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub reason: String,
    pub reply: Option<Vec<u8>>,
}

/// Whether a new session may start (`serve`'s session count).
pub trait Slots {
    /// A slot is free now (checked at Hello: "busy" at once).
    fn free(&self) -> bool;
    /// Take one (at authentication); false when taken meanwhile.
    fn take(&mut self) -> bool;
}

/// Slots that are always free (tests, fuzzing).
pub struct Unlimited;
impl Slots for Unlimited {
    fn free(&self) -> bool {
        true
    }
    fn take(&mut self) -> bool {
        true
    }
}

/// The server's machine for one connection.
pub struct ServerMachine {
    state: State,
    key: Key,
    limits: Limits,
    kernel: String,
    nonce: [u8; NONCE_LEN],
    chan: Option<Channel>,
    next_run: u32,
}

fn refuse_plain(reason: &str) -> Vec<u8> {
    msg::to_body(&Challenge::Refused { reason: reason.to_string() })
}

impl ServerMachine {
    /// `nonce` is this connection's fresh server nonce (auth::random()).
    pub fn new(key: Key, limits: Limits, kernel: String, nonce: [u8; NONCE_LEN]) -> ServerMachine {
        ServerMachine { state: State::First, key, limits, kernel, nonce, chan: None, next_run: 1 }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Largest frame the peer may send now: a small fixed size until authenticated.
    pub fn max_frame(&self) -> usize {
        match self.state {
            State::First | State::AwaitAuth { .. } | State::Closed => crate::frame::PREAUTH_MAX,
            _ => self.limits.max_message as usize,
        }
    }

    /// A sealed message (authenticated sessions only; before that, nothing is sealed).
    pub fn seal(&mut self, m: &ToClient) -> Vec<u8> {
        let body = msg::to_body(m);
        match self.chan.as_mut() {
            Some(c) => c.seal(&body),
            None => body,
        }
    }

    fn end(&mut self, reason: String) -> Ended {
        let reply = match self.state {
            State::First | State::AwaitAuth { .. } => Some(refuse_plain(&reason)),
            State::Closed => None,
            _ => Some(self.seal(&ToClient::Refused { reason: reason.clone() })),
        };
        self.state = State::Closed;
        Ended { reason, reply }
    }

    /// End the session from the caller's side (idle timeout, shutdown, a run that cannot
    /// continue): the reason goes to the peer when it can still be told.
    pub fn close(&mut self, reason: &str) -> Ended {
        self.end(reason.to_string())
    }

    /// The run the caller started is ready for its data connection.
    pub fn run_ready(&mut self, run: u32, token: &[u8; 32]) -> Vec<u8> {
        self.seal(&ToClient::RunReady { run, token: auth::hex(token) })
    }

    /// The run is over: its result goes to the client and the session is ready for the next.
    pub fn run_finished(&mut self, result: Result<lab::side::SideRecord, impl std::fmt::Display>) -> Vec<u8> {
        let run = match self.state {
            State::Running { run, .. } => run,
            _ => self.next_run.saturating_sub(1),
        };
        if matches!(self.state, State::Running { .. }) {
            self.state = State::Ready;
        }
        match result {
            Ok(side) => self.seal(&ToClient::RunDone { run, side: Box::new(side) }),
            Err(reason) => self.seal(&ToClient::RunFailed { run, reason: reason.to_string() }),
        }
    }

    /// One frame from the peer.
    pub fn on_frame(&mut self, frame: &[u8], now_ns: u64, slots: &mut dyn Slots) -> Result<Vec<Action>, Ended> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::First => self.first(frame, slots),
            State::AwaitAuth { nc } => self.auth(frame, nc, slots),
            State::Closed => Err(Ended { reason: "frame after the session ended".into(), reply: None }),
            s @ (State::Ready | State::Running { .. }) => {
                self.state = s;
                self.session(frame, now_ns)
            }
        }
    }

    fn first(&mut self, frame: &[u8], slots: &mut dyn Slots) -> Result<Vec<Action>, Ended> {
        self.state = State::First;
        let open: Opening = msg::from_body(frame).map_err(|e| self.end(e.to_string()))?;
        match open {
            Opening::Data { token } => {
                let t = auth::unhex::<32>(&token).ok_or_else(|| self.end("malformed data token".into()))?;
                self.state = State::Closed;
                Ok(vec![Action::Data(t)])
            }
            Opening::Hello { magic, version, nonce } => {
                if magic != MAGIC {
                    return Err(self.end("not a tcpstall-remote client".into()));
                }
                if version != VERSION {
                    return Err(self.end(format!(
                        "protocol version {version} is not supported: this server speaks version {VERSION} (tcpstall \
                         {})",
                        env!("CARGO_PKG_VERSION")
                    )));
                }
                let nc = auth::unhex::<NONCE_LEN>(&nonce).ok_or_else(|| self.end("malformed nonce".into()))?;
                if !slots.free() {
                    return Err(self.end(busy(&self.limits)));
                }
                let proof = auth::server_proof(&self.key, &nc, &self.nonce);
                self.state = State::AwaitAuth { nc };
                Ok(vec![Action::Send(msg::to_body(&Challenge::Challenge {
                    version: VERSION,
                    nonce: auth::hex(&self.nonce),
                    proof: auth::hex(&proof),
                }))])
            }
        }
    }

    fn auth(&mut self, frame: &[u8], nc: [u8; NONCE_LEN], slots: &mut dyn Slots) -> Result<Vec<Action>, Ended> {
        self.state = State::AwaitAuth { nc };
        let Auth::Auth { proof } = msg::from_body(frame).map_err(|e| self.end(e.to_string()))?;
        let ok = auth::unhex::<32>(&proof).is_some_and(|p| auth::verify_client(&self.key, &nc, &self.nonce, &p));
        if !ok {
            return Err(self.end(
                "authentication failed: the client does not hold this server's key (or replayed an old handshake)"
                    .into(),
            ));
        }
        if !slots.take() {
            return Err(self.end(busy(&self.limits)));
        }
        self.chan = Some(Channel::new(&self.key, Role::Server, &nc, &self.nonce));
        self.state = State::Ready;
        let welcome = self.seal(&ToClient::Welcome {
            kernel: self.kernel.clone(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            limits: self.limits.clone(),
        });
        Ok(vec![Action::Authenticated, Action::Send(welcome)])
    }

    fn session(&mut self, frame: &[u8], now_ns: u64) -> Result<Vec<Action>, Ended> {
        let Some(chan) = self.chan.as_mut() else { return Err(self.end("no session channel".into())) };
        let body = match chan.open(frame) {
            Ok(b) => b,
            Err(e) => return Err(self.end(e.to_string())),
        };
        let m: ToServer = msg::from_body(body).map_err(|e| self.end(e.to_string()))?;
        match (m, self.state.clone()) {
            (ToServer::Ping { t1_ns }, _) => {
                Ok(vec![Action::Send(self.seal(&ToClient::Pong { t1_ns, t2_ns: now_ns, t3_ns: now_ns }))])
            }
            (ToServer::Bye, _) => {
                self.state = State::Closed;
                Ok(vec![Action::Bye])
            }
            (ToServer::Run(r), State::Ready) => {
                self.check_run(&r).map_err(|e| self.end(e.to_string()))?;
                self.next_run += 1;
                self.state = State::Running { run: r.run, rounds_done: false };
                Ok(vec![Action::Start(r)])
            }
            (ToServer::Run(r), State::Running { run, .. }) => {
                Err(self.end(format!("run {} requested while run {run} is in progress", r.run)))
            }
            (ToServer::RoundsDone { run }, State::Running { run: cur, rounds_done: false }) if run == cur => {
                self.state = State::Running { run, rounds_done: true };
                Ok(vec![Action::RoundsDone])
            }
            (ToServer::RoundsDone { run }, _) => Err(self.end(format!("unexpected rounds-done for run {run}"))),
            (m, s) => Err(self.end(format!("unexpected message {m:?} in state {s:?}"))),
        }
    }

    /// A run request against the limits and the types' own rules: one line per refusal.
    fn check_run(&self, r: &RunRequest) -> Result<(), RunRefused> {
        if r.run != self.next_run {
            return Err(RunRefused::OutOfOrder { run: r.run, expected: self.next_run });
        }
        if r.label.len() > 200 {
            return Err(RunRefused::LongLabel);
        }
        r.workload.validate()?;
        for o in [&r.client, &r.server] {
            scenario::SideOpts::new(o.opts().to_vec())?;
        }
        let p = lab::side::round_program(&r.workload).map_err(|e| RunRefused::Program(e.to_string()))?;
        let bytes = lab::side::program_bytes(&p);
        if bytes > self.limits.max_run_bytes {
            return Err(RunRefused::OverLimit { label: r.label.clone(), bytes, max: self.limits.max_run_bytes });
        }
        Ok(())
    }
}

/// Why a run request is refused: the one line the client is told.
#[derive(Debug, thiserror::Error)]
pub enum RunRefused {
    #[error("run {run} out of order (expected {expected})")]
    OutOfOrder { run: u32, expected: u32 },
    #[error("run label longer than 200 bytes")]
    LongLabel,
    #[error("invalid workload: {0}")]
    Workload(#[from] scenario::ScenarioError),
    #[error("invalid strategy: {0}")]
    Strategy(#[from] scenario::StrategyError),
    /// The lab's reason the workload cannot run remotely (a stream).
    #[error("{0}")]
    Program(String),
    #[error("over limit: run '{label}' moves {bytes} bytes, this server allows {max} per run (--max-run-bytes)")]
    OverLimit { label: String, bytes: u64, max: u64 },
}

fn busy(l: &Limits) -> String {
    format!("busy: this server runs {} session(s) at once (--max-sessions); try again later", l.max_sessions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::client_proof;

    fn machine() -> ServerMachine {
        ServerMachine::new(Key::from_bytes([5; 32]), Limits::default(), "test".into(), [9; 32])
    }

    fn hello(nc: &[u8; 32]) -> Vec<u8> {
        msg::to_body(&Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(nc) })
    }

    fn authenticate(m: &mut ServerMachine, key: &Key) -> Result<Channel, Ended> {
        let nc = [1u8; 32];
        let a = m.on_frame(&hello(&nc), 0, &mut Unlimited)?;
        let Action::Send(b) = &a[0] else { panic!() };
        let Challenge::Challenge { nonce, proof, .. } = msg::from_body(b).unwrap() else { panic!() };
        let ns = auth::unhex::<32>(&nonce).unwrap();
        assert!(auth::verify_server(&Key::from_bytes([5; 32]), &nc, &ns, &auth::unhex::<32>(&proof).unwrap()));
        let p = client_proof(key, &nc, &ns);
        let a = m.on_frame(&msg::to_body(&Auth::Auth { proof: auth::hex(&p) }), 0, &mut Unlimited)?;
        let mut c = Channel::new(key, Role::Client, &nc, &ns);
        let Action::Send(w) = &a[1] else { panic!("{a:?}") };
        assert!(matches!(msg::from_body::<ToClient>(c.open(w).unwrap()), Ok(ToClient::Welcome { .. })));
        Ok(c)
    }

    #[test]
    fn a_wrong_key_ends_the_handshake_with_a_reason() {
        let mut m = machine();
        let e = authenticate(&mut m, &Key::from_bytes([6; 32])).unwrap_err();
        assert!(e.reason.contains("authentication failed"), "{}", e.reason);
        assert_eq!(m.state(), &State::Closed);
    }

    #[test]
    fn a_session_runs_then_refuses_a_second_run_in_progress() {
        let mut m = machine();
        let mut c = authenticate(&mut m, &Key::from_bytes([5; 32])).unwrap();
        let w = scenario::Scenario::builtin("rr").unwrap().workload;
        let req = |run| RunRequest {
            run,
            label: "default".into(),
            workload: w.clone(),
            client: scenario::SideOpts::none(),
            server: scenario::SideOpts::none(),
            data_port: 0,
        };
        let a = m.on_frame(&c.seal(&msg::to_body(&ToServer::Run(req(1)))), 0, &mut Unlimited).unwrap();
        assert!(matches!(&a[0], Action::Start(r) if r.run == 1));
        let e = m.on_frame(&c.seal(&msg::to_body(&ToServer::Run(req(2)))), 0, &mut Unlimited).unwrap_err();
        assert!(e.reason.contains("in progress"), "{}", e.reason);
        // The refusal is sealed: the client can trust it came from the server.
        let reply = e.reply.unwrap();
        assert!(matches!(msg::from_body::<ToClient>(c.open(&reply).unwrap()), Ok(ToClient::Refused { .. })));
    }

    #[test]
    fn an_over_limit_run_is_refused_before_it_starts() {
        let mut m = ServerMachine::new(
            Key::from_bytes([5; 32]),
            Limits { max_run_bytes: 1000, ..Limits::default() },
            "t".into(),
            [9; 32],
        );
        let mut c = authenticate(&mut m, &Key::from_bytes([5; 32])).unwrap();
        let w = scenario::Scenario::builtin("chunked").unwrap().workload;
        let r = RunRequest {
            run: 1,
            label: "default".into(),
            workload: w,
            client: scenario::SideOpts::none(),
            server: scenario::SideOpts::none(),
            data_port: 0,
        };
        let e = m.on_frame(&c.seal(&msg::to_body(&ToServer::Run(r))), 0, &mut Unlimited).unwrap_err();
        assert!(e.reason.starts_with("over limit: run 'default' moves"), "{}", e.reason);
    }

    #[test]
    fn busy_is_said_at_hello() {
        struct None_;
        impl Slots for None_ {
            fn free(&self) -> bool {
                false
            }
            fn take(&mut self) -> bool {
                false
            }
        }
        let e = machine().on_frame(&hello(&[1; 32]), 0, &mut None_).unwrap_err();
        assert!(e.reason.starts_with("busy"));
        let Challenge::Refused { reason } = msg::from_body(&e.reply.unwrap()).unwrap() else { panic!() };
        assert!(reason.starts_with("busy"));
    }
}
