//! A capture file's TCP segments, per connection, with absolute (realtime) times: what the
//! labeler reads of each capture point. The decoding is crates/wire's (a parser, not the
//! classifier).

use std::net::SocketAddr;
use std::path::Path;

use trace::{Endpoint, EventKind, Segment};
use wire::{Decoder, FlowFilter};

/// One segment as captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pkt {
    /// Realtime ns (the capture's stamp).
    pub t_ns: u64,
    /// Sender of the segment: A opened the connection.
    pub from: Endpoint,
    pub seg: Segment,
}

/// One connection's segments in one capture.
#[derive(Debug, Clone)]
pub struct Conn {
    /// A (the opener) and B.
    pub a: SocketAddr,
    pub b: SocketAddr,
    pub pkts: Vec<Pkt>,
}

/// Every connection of the file, in first-seen order.
pub fn read(path: &Path) -> anyhow::Result<Vec<Conn>> {
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut dec = Decoder::new(std::io::BufReader::new(f), FlowFilter::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut conns: Vec<Conn> = Vec::new();
    let mut index: Vec<Option<usize>> = Vec::new();
    while let Some(fe) = dec.next_event().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))? {
        let EventKind::Segment(seg) = fe.event.kind else { continue };
        let origin = dec.flows().origin_ns().unwrap_or(0);
        let id = fe.flow.0 as usize;
        if index.len() <= id {
            index.resize(id + 1, None);
        }
        let i = match index[id] {
            Some(i) => i,
            None => {
                let Some(key) = dec.flows().key(fe.flow) else { continue };
                conns.push(Conn { a: key.a, b: key.b, pkts: Vec::new() });
                index[id] = Some(conns.len() - 1);
                conns.len() - 1
            }
        };
        conns[i].pkts.push(Pkt { t_ns: origin + fe.event.t.0, from: fe.event.from, seg });
    }
    Ok(conns)
}

/// The first packet's timestamp in the file (the analyser's time origin), realtime ns.
pub fn origin_ns(path: &Path) -> anyhow::Result<Option<u64>> {
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut r = wire::CaptureReader::new(std::io::BufReader::new(f)).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(r.next_packet().map_err(|e| anyhow::anyhow!("{e}"))?.map(|p| p.ts_ns))
}

/// The connection between `client` and a server on `port` (the case's connection).
pub fn the_conn(conns: Vec<Conn>, port: u16) -> Option<Conn> {
    conns.into_iter().filter(|c| c.b.port() == port).max_by_key(|c| c.pkts.len())
}
