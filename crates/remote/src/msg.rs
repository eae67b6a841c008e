//! The control protocol's messages: typed, JSON bodies, unknown fields refused. The server
//! runs only what these types describe (a workload, two strategy lists): there is no message
//! that carries a command or a path.

use lab::side::SideRecord;
use scenario::{SideOpts, Workload};
use serde::{Deserialize, Serialize};

/// The protocol this build speaks.
pub const VERSION: u32 = 1;
/// First field of a Hello: a stray client of another protocol is told apart at once.
pub const MAGIC: &str = "tcpstall-remote";
/// The port `serve` listens on when none is given.
pub const DEFAULT_PORT: u16 = 7523;

/// A connection's first frame (plain: nothing is authenticated yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Opening {
    /// A control connection: the client's version and nonce (hex).
    Hello { magic: String, version: u32, nonce: String },
    /// A data connection for a run the control connection set up: the run's one-time token.
    Data { token: String },
}

/// The server's answer to a Hello (plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Challenge {
    /// Its nonce and its proof of the key (auth.rs).
    Challenge { version: u32, nonce: String, proof: String },
    /// No session: why (busy, version, ...). The connection closes after it.
    Refused { reason: String },
}

/// The client's proof (plain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Auth {
    Auth { proof: String },
}

/// One row to run: the workload, both sides' strategies; the server plays `server`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Runs of a session are numbered 1, 2, ... in order.
    pub run: u32,
    pub label: String,
    pub workload: Workload,
    pub client: SideOpts,
    pub server: SideOpts,
    /// The client's port of the data connection it is about to open (bound before connecting),
    /// so the server captures that connection alone from its SYN on; 0 = no capture.
    pub data_port: u16,
}

/// Client to server, after authentication (sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ToServer {
    /// A clock sample: the client's CLOCK_REALTIME when it sent this (ns).
    Ping {
        t1_ns: u64,
    },
    Run(RunRequest),
    /// The client's measured rounds of this run are over (the server's last tcp_info follows).
    RoundsDone {
        run: u32,
    },
    Bye,
}

/// Server to client, after authentication (sealed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ToClient {
    Welcome {
        kernel: String,
        tool_version: String,
        limits: Limits,
    },
    /// RFC 5905's four timestamps less the last: t1 echoed, t2 when the Ping arrived, t3 when
    /// the Pong left (the server's CLOCK_REALTIME, ns).
    Pong {
        t1_ns: u64,
        t2_ns: u64,
        t3_ns: u64,
    },
    /// Open a data connection and present this token (hex) as its first frame.
    RunReady {
        run: u32,
        token: String,
    },
    RunDone {
        run: u32,
        side: Box<SideRecord>,
    },
    RunFailed {
        run: u32,
        reason: String,
    },
    /// The session ends: why.
    Refused {
        reason: String,
    },
}

/// The server's limits, every one set by a `serve` flag and sent to the client at Welcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// A run longer than this is cut (its data connection shut down): `--max-run-secs`.
    pub max_run_secs: u64,
    /// Payload both ways per run, checked before it starts: `--max-run-bytes`.
    pub max_run_bytes: u64,
    /// Authenticated sessions at once; others get "busy": `--max-sessions`.
    pub max_sessions: u32,
    /// New connections per source address per minute: `--max-conn-per-minute`.
    pub max_conn_per_minute: u32,
    /// From accept to authenticated (and a data connection's token), at most 2000: `--handshake-ms`.
    pub handshake_ms: u64,
    /// A session silent this long between runs is closed: `--idle-secs`.
    pub idle_secs: u64,
    /// Largest authenticated control message: `--max-message`.
    pub max_message: u32,
    /// Connections still in their handshake at once (the rest are closed at accept).
    pub max_pending: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_run_secs: 120,
            max_run_bytes: 256 << 20,
            max_sessions: 1,
            max_conn_per_minute: 120,
            handshake_ms: 2000,
            idle_secs: 60,
            max_message: 8 << 20,
            max_pending: 64,
        }
    }
}

/// A limit flag out of its range: one line naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("--handshake-ms {0}: expected 1 to 2000")]
    HandshakeMs(u64),
    #[error("--max-message {0}: expected at least 4096 bytes")]
    MaxMessage(u32),
    #[error("{0} 0: expected at least 1")]
    Zero(&'static str),
}

/// A frame body that is not a message of the expected type.
#[derive(Debug, thiserror::Error)]
#[error("malformed message ({0})")]
pub struct Malformed(#[from] serde_json::Error);

impl Limits {
    /// Check the limits themselves (flags): one line naming the flag.
    pub fn validate(&self) -> Result<(), LimitError> {
        if !(1..=2000).contains(&self.handshake_ms) {
            return Err(LimitError::HandshakeMs(self.handshake_ms));
        }
        if self.max_message < 4096 {
            return Err(LimitError::MaxMessage(self.max_message));
        }
        for (flag, v) in [
            ("--max-run-secs", self.max_run_secs),
            ("--max-run-bytes", self.max_run_bytes),
            ("--max-sessions", u64::from(self.max_sessions)),
            ("--max-conn-per-minute", u64::from(self.max_conn_per_minute)),
            ("--idle-secs", self.idle_secs),
            ("--max-pending", u64::from(self.max_pending)),
        ] {
            if v == 0 {
                return Err(LimitError::Zero(flag));
            }
        }
        Ok(())
    }

    /// One line for the server's start-up message and the client's report.
    pub fn describe(&self) -> String {
        format!(
            "run <= {} s and {} bytes, {} session(s) at once, {} connections/min per source, handshake {} ms, idle {} \
             s, messages <= {} bytes",
            self.max_run_secs,
            self.max_run_bytes,
            self.max_sessions,
            self.max_conn_per_minute,
            self.handshake_ms,
            self.idle_secs,
            self.max_message
        )
    }
}

/// Encode a message as a frame body.
pub fn to_body<T: Serialize>(m: &T) -> Vec<u8> {
    // Serialising these types cannot fail (no maps with non-string keys, no custom Serialize).
    serde_json::to_vec(m).unwrap_or_default()
}

/// Decode a frame body, or say in one line why not (the text is for logs, never echoed raw).
pub fn from_body<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, Malformed> {
    Ok(serde_json::from_slice(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_variants_are_refused() {
        assert!(from_body::<Opening>(br#"{"hello":{"magic":"x","version":1,"nonce":"00","cmd":"sh"}}"#).is_err());
        assert!(from_body::<ToServer>(br#"{"exec":{"cmd":"/bin/sh"}}"#).is_err());
        assert!(from_body::<ToServer>(br#"{"ping":{"t1_ns":5}}"#).is_ok());
    }

    #[test]
    fn a_run_request_round_trips() {
        let s = scenario::Scenario::builtin("multi-write").unwrap();
        let r = RunRequest {
            run: 1,
            label: "default".into(),
            workload: s.workload.clone(),
            client: SideOpts::none(),
            server: SideOpts::parse_list("quickack-each").unwrap(),
            data_port: 0,
        };
        let b = to_body(&ToServer::Run(r.clone()));
        assert_eq!(from_body::<ToServer>(&b).unwrap(), ToServer::Run(r));
    }

    #[test]
    fn default_limits_are_valid_and_a_long_handshake_is_not() {
        Limits::default().validate().unwrap();
        let l = Limits { handshake_ms: 5000, ..Limits::default() };
        assert!(l.validate().unwrap_err().to_string().contains("--handshake-ms"));
    }
}
