//! `tcpstall sockets`: live TCP sockets with their owner and the state that decides stalls
//! (docs/json-schema.md "Sockets"), and their text table.

use std::fmt::Write as _;
use std::net::SocketAddr;

use serde::Serialize;

use crate::owner::Owner;
use crate::ExportError;

/// The document of `tcpstall sockets --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct SocketsDoc {
    pub schema_version: u32,
    /// How the options were read, and what this kernel (or this build) does not allow.
    pub method: String,
    pub not_available: Vec<String>,
    pub sockets: Vec<SocketRow>,
}

/// One socket.
#[derive(Debug, Clone, Serialize)]
pub struct SocketRow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The TCP state (include/net/tcp_states.h), e.g. `ESTABLISHED`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// None when the options could not be read (`unreadable` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<SocketOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// Why the socket is at risk of a stall, one sentence each (empty: none seen).
    pub risks: Vec<String>,
}

/// What getsockopt and tcp_info say of a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SocketOptions {
    /// TCP_NODELAY: Nagle off.
    pub nodelay: bool,
    /// TCP_CORK held now.
    pub cork: bool,
    /// The delayed-ACK engine in interactive (ping-pong) mode (TCP_QUICKACK reads 0).
    pub pingpong: bool,
    /// The delayed-ACK timeout now (µs, tcp_info `tcpi_ato`).
    pub ato_us: u32,
    pub mss: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    pub unacked_segments: u32,
    /// Bytes sent and not acknowledged (tcp_info bytes_sent - bytes_retrans - bytes_acked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unacked_bytes: Option<u64>,
    /// A segment shorter than the MSS is among those unacknowledged (unacked bytes not a whole
    /// number of MSS): Nagle holds the next small write until it is acknowledged.
    pub small_in_flight: bool,
    /// TCP_NOTSENT_LOWAT (0: unset).
    pub notsent_lowat: u32,
    /// Bytes written and not sent yet (tcpi_notsent_bytes).
    pub notsent_bytes: u32,
    pub congestion: String,
    /// Data segments received and sent so far.
    pub data_segs_in: u32,
    pub data_segs_out: u32,
}

impl SocketsDoc {
    pub fn to_json(&self) -> Result<String, ExportError> {
        serde_json::to_string_pretty(self).map_err(|source| ExportError::Json { command: "sockets", source })
    }

    /// The table for people: one line per socket, and one per risk under it.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{:<22} {:<22} {:<11} {:<22} {:>7} {:>4} {:>8} {:>7} {:>5} {:>5} {:>8} {:<7}\n",
            "local",
            "remote",
            "state",
            "owner",
            "nodelay",
            "cork",
            "pingpong",
            "ato ms",
            "mss",
            "cwnd",
            "unacked",
            "cc"
        );
        for r in &self.sockets {
            let owner = r.owner.as_ref().map_or("-".into(), Owner::short);
            let _ = write!(s, "{:<22} {:<22} {:<11} {:<22}", r.local.to_string(), r.remote.to_string(), r.state, owner);
            match (&r.options, &r.unreadable) {
                (Some(o), _) => {
                    let yn = |b: bool| if b { "yes" } else { "no" };
                    let _ = writeln!(
                        s,
                        " {:>7} {:>4} {:>8} {:>7.1} {:>5} {:>5} {:>8} {:<7}",
                        yn(o.nodelay),
                        yn(o.cork),
                        yn(o.pingpong),
                        f64::from(o.ato_us) / 1e3,
                        o.mss,
                        o.cwnd,
                        o.unacked_bytes.map_or("-".into(), |b| b.to_string()),
                        o.congestion
                    );
                }
                (None, why) => {
                    let _ = writeln!(s, " options not read: {}", why.as_deref().unwrap_or("?"));
                }
            }
            for risk in &r.risks {
                let _ = writeln!(s, "  at risk: {risk}");
            }
        }
        for n in &self.not_available {
            let _ = writeln!(s, "not available: {n}");
        }
        s
    }
}
