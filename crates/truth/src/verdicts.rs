//! The classifier under test, through its public API: a capture view decoded by crates/wire
//! and analysed by `tcpstall_analyze::Session`, from the packets alone or with the kernel
//! records joined to each flow as `watch --kernel` joins them (crates/watch `KernelJoin`: each
//! record enters its flow just before the first packet stamped after it).

use std::collections::HashMap;
use std::path::Path;

use analyze::{Config, RecordKind, Session};
use trace::{Cause, Endpoint};
use watch::{KernelJoin, KernelRecord, Target};
use wire::{Decoder, FlowFilter, FlowId};

use crate::kernel::KernelRec;

/// One classifier record, on the realtime clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The server port of its flow (B's port).
    pub port: u16,
    pub held: Endpoint,
    /// When the gap ended: the data segment that ended it (realtime ns).
    pub end_ns: u64,
    pub length_ns: u64,
    pub kind: RecordKind,
    pub cause: Cause,
    pub confidence: f64,
}

/// Every record of every flow in `path`; with `kernel`, the records joined to the packets.
// long: the decode loop with the kernel join, as watch's; splitting it passes six locals around.
pub fn classify(path: &Path, kernel: Option<&[KernelRec]>) -> anyhow::Result<Vec<Verdict>> {
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut dec = Decoder::new(std::io::BufReader::new(f), FlowFilter::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut s = Session::new(Config::default());
    let mut join = KernelJoin::default();
    for r in kernel.unwrap_or(&[]) {
        join.add(KernelRecord { unix_ns: r.t_ns, local: r.local, remote: r.remote, event: r.event, owner: None });
    }
    let mut done = Vec::new();
    let mut kbuf = Vec::new();
    let mut floor: HashMap<FlowId, u64> = HashMap::new();
    let mut keys = HashMap::new();
    let mut origin = 0;
    loop {
        let fe = match dec.next_event() {
            Ok(Some(fe)) => fe,
            Ok(None) => break,
            Err(e) => anyhow::bail!("{}: {e}", path.display()),
        };
        while let Some(end) = dec.pop_ended() {
            done.extend(s.end(&end));
        }
        origin = dec.flows().origin_ns().unwrap_or(0);
        let key = dec.flows().key(fe.flow);
        if let (Some(key), true) = (key, kernel.is_some()) {
            keys.insert(fe.flow, (key, fe.loopback));
            let now = origin + fe.event.t.0;
            let fl = floor.get(&fe.flow).copied().unwrap_or(origin);
            let t = Target { id: fe.flow, key: &key, origin_ns: origin, floor_ns: fl, loopback: fe.loopback };
            join.release(&t, now, &mut kbuf);
            for k in kbuf.drain(..) {
                s.push(&k, || Some(key));
            }
            floor.insert(fe.flow, now);
        }
        s.push(&fe, || key);
    }
    // The records after each flow's last packet (a resend the capture never saw, the last
    // writes) still enter it before it finishes.
    for (id, (key, loopback)) in &keys {
        let fl = floor.get(id).copied().unwrap_or(origin);
        let t = Target { id: *id, key, origin_ns: origin, floor_ns: fl, loopback: *loopback };
        join.release(&t, u64::MAX, &mut kbuf);
        for k in kbuf.drain(..) {
            s.push(&k, || Some(*key));
        }
    }
    done.extend(s.finish_all());
    let mut out = Vec::new();
    for f in done {
        for st in &f.analysis.stalls {
            out.push(Verdict {
                port: f.key.b.port(),
                held: st.held,
                end_ns: origin + st.start.0 + st.length.0,
                length_ns: st.length.0,
                kind: st.kind,
                cause: st.cause,
                confidence: st.confidence,
            });
        }
    }
    Ok(out)
}
