//! The programs' own records of what they did on their sockets, one JSON object a line: the
//! `peer` workload writes them itself; third-party programs get them from strace.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// Which end: the client opened the connection (trace::Endpoint::A), the server accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }
    pub fn endpoint(self) -> trace::Endpoint {
        match self {
            Side::Client => trace::Endpoint::A,
            Side::Server => trace::Endpoint::B,
        }
    }
    pub fn of(e: trace::Endpoint) -> Side {
        match e {
            trace::Endpoint::A => Side::Client,
            trace::Endpoint::B => Side::Server,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// One line of a program's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LogLine {
    /// One write call: `len` bytes at stream offset `offset` (0 = the first data byte),
    /// called at `t_ns` (CLOCK_REALTIME), with the socket's options at that moment.
    Write {
        t_ns: u64,
        side: Side,
        local: String,
        remote: String,
        offset: u64,
        len: u32,
        /// MSG_MORE on this call.
        more: bool,
        /// TCP_NODELAY on the socket.
        nodelay: bool,
        /// TCP_CORK on the socket.
        cork: bool,
    },
    /// A socket option set (`opt` as tcp(7) names it, without the TCP_ prefix).
    Opt { t_ns: u64, side: Side, opt: String, value: i64 },
}

impl LogLine {
    pub fn t_ns(&self) -> u64 {
        match self {
            LogLine::Write { t_ns, .. } | LogLine::Opt { t_ns, .. } => *t_ns,
        }
    }
}

/// CLOCK_REALTIME now, ns since the Unix epoch (the captures' clock, tcpdump `-j host`).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Reads a JSON-lines file of `T`; a bad line is an error naming the file and line.
pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?);
    }
    Ok(out)
}

/// Writes `items` as JSON lines.
pub fn write_jsonl<T: Serialize>(path: &Path, items: &[T]) -> anyhow::Result<()> {
    let f = std::fs::File::create(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    for it in items {
        serde_json::to_writer(&mut w, it)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(())
}
