//! `tcpstall serve`'s flags and their help; the limits they set.

use std::net::SocketAddr;
use std::path::PathBuf;

use remote::Limits;

const EXAMPLES: &str = "\
Examples:
  tcpstall serve --init-key lab.key             write a new key (32 random bytes, hex, mode 0600);
                                                copy it to the client host (scp, mode 0600 there too)
  tcpstall serve --listen 0.0.0.0:7523 --key-file lab.key
                                                serve until Ctrl-C; a client runs
                                                `tcpstall lab multi-write --remote HOST:7523 --key-file lab.key`
  tcpstall serve --listen 127.0.0.1:7523 --insecure-no-auth
                                                no key: loopback only (and the client says --insecure-no-auth)
  tcpstall serve --listen [::]:7523 --key-file lab.key --max-run-secs 30 --max-sessions 2

Every limit is enforced and sent to the client when it connects; a refusal reaches the client as
one line (\"busy\", \"over limit: ...\", \"authentication failed ...\"). Unauthenticated connections
cost one small buffer for at most --handshake-ms and are closed on the first frame that does not
decode. What the key protects and what it does not: docs/remote.md.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ServeArgs {
    /// Write a new key to FILE (mode 0600; an existing file is not replaced) and exit.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["listen", "key_file", "insecure_no_auth"])]
    pub init_key: Option<PathBuf>,
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// The pre-shared key (written by --init-key; refused when group or others may read it).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Run without a key: allowed on a loopback address only.
    #[arg(long, conflicts_with = "key_file")]
    pub insecure_no_auth: bool,
    /// Longest run; a longer one is cut and reported to the client as over the limit.
    #[arg(long, value_name = "S", default_value_t = Limits::default().max_run_secs)]
    pub max_run_secs: u64,
    /// Most payload bytes (both ways) per run, checked before the run starts.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_run_bytes)]
    pub max_run_bytes: u64,
    /// Authenticated sessions at once; further clients get "busy" at once.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_sessions)]
    pub max_sessions: u32,
    /// New connections per source address per minute (control and data connections alike).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_conn_per_minute)]
    pub max_conn_per_minute: u32,
    /// Time from accept to authenticated, at most 2000 ms.
    #[arg(long, value_name = "MS", default_value_t = Limits::default().handshake_ms)]
    pub handshake_ms: u64,
    /// A session silent this long between runs is closed.
    #[arg(long, value_name = "S", default_value_t = Limits::default().idle_secs)]
    pub idle_secs: u64,
    /// Largest authenticated control message (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_message)]
    pub max_message: u32,
    /// Connections in their handshake at once (more are closed at accept).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_pending)]
    pub max_pending: u32,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
}

impl ServeArgs {
    /// The server's limits (each flag's default is `Limits::default()`'s).
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_run_secs: self.max_run_secs,
            max_run_bytes: self.max_run_bytes,
            max_sessions: self.max_sessions,
            max_conn_per_minute: self.max_conn_per_minute,
            handshake_ms: self.handshake_ms,
            idle_secs: self.idle_secs,
            max_message: self.max_message,
            max_pending: self.max_pending,
        }
    }
}
