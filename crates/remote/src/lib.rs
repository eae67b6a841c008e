//! `tcpstall serve` and `tcpstall lab --remote` (issue 23): the far end of a lab row on another
//! host.
//!
//! - `frame`: length-prefixed frames, the size checked before allocation;
//! - `msg`: the typed messages (a workload and strategies as data, never a command or a path);
//! - `auth`: the pre-shared key, the mutual HMAC-SHA256 challenge-response, the per-session
//!   message authentication;
//! - `machine`: the server's pure state machine (any unexpected message ends the session);
//! - `clock`: the hosts' clock offset from ping-pongs (RFC 5905 section 8);
//! - `attribute`: each stall record's time split by host (client, network, server) from both
//!   captures;
//! - `two_ends`: `explain A B`, two captures of the same connections from their two ends;
//! - `server`, `client`: the sockets and threads around them.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod attribute;
pub mod auth;
pub mod client;
pub mod clock;
pub mod frame;
pub mod machine;
pub mod msg;
pub mod server;
pub mod two_ends;

pub use auth::Key;
pub use msg::{Limits, DEFAULT_PORT};
