//! Kernel records of a case, from the project's eBPF source (crates/kevidence: tcp_sendmsg_locked,
//! tcp_retransmit_skb, tcp_probe near a window limit, tcp_cong_state_set), on the realtime
//! clock (kevidence's ClockMap: CLOCK_MONOTONIC stamps + the measured offset). They serve twice:
//! as truth (each resend with the congestion state it happened in) and as the kernel evidence a
//! `watch --kernel` run would have joined to the packets.

use std::collections::HashMap;
use std::net::SocketAddr;

use kevidence::{ClockMap, Converter, Filter, Kind, Reader, Source};
use serde::{Deserialize, Serialize};
use trace::KernelEvent;

/// One kernel record on the realtime clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelRec {
    pub t_ns: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub event: KernelEvent,
    /// For a resend: the socket's congestion state then (enum tcp_ca_state), from its last
    /// tcp_cong_state_set (or tcp_probe) record; 0 (Open) before any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_state: Option<u8>,
}

/// The eBPF source, attached once for the whole run; each case restarts its filter.
pub struct Recorder {
    reader: Option<Reader>,
    /// What is attached, or why there is no kernel evidence.
    pub status: String,
}

impl Recorder {
    /// Loads and attaches the programs (fails soft: `status` says why not).
    pub fn open() -> Recorder {
        match Source::open(&Filter { ports: vec![1], netns: None, reads: false, owners: false }) {
            Ok(src) => {
                let status = src.status();
                match Reader::spawn(src) {
                    Ok(r) => Recorder { reader: Some(r), status },
                    Err(e) => Recorder { reader: None, status: format!("no kernel evidence: reader thread: {e}") },
                }
            }
            Err(e) => Recorder { reader: None, status: e.to_string() },
        }
    }

    pub fn available(&self) -> bool {
        self.reader.is_some()
    }

    /// Reports the sockets with `port` from now on (records before are discarded).
    pub fn start(&self, port: u16) -> anyhow::Result<()> {
        if let Some(r) = &self.reader {
            r.restart(&Filter { ports: vec![port], netns: None, reads: false, owners: false })
                .map_err(|e| anyhow::anyhow!("kernel evidence filter: {e}"))?;
        }
        Ok(())
    }

    /// The records since [`Recorder::start`], in time order.
    pub fn take(&self) -> Vec<KernelRec> {
        let Some(r) = &self.reader else { return Vec::new() };
        std::thread::sleep(std::time::Duration::from_millis(30));
        convert(r.take(), &r.clock())
    }
}

/// Records to kernel events (one per write, kevidence's Converter), each resend with the
/// congestion state of its socket then.
pub fn convert(mut recs: Vec<kevidence::Record>, clock: &ClockMap) -> Vec<KernelRec> {
    recs.sort_by_key(|r| r.mono_ns);
    let mut conv = Converter::new();
    let mut state: HashMap<u64, u8> = HashMap::new();
    let mut out = Vec::new();
    for r in &recs {
        match r.kind {
            Kind::Cong { state: s } => {
                state.insert(r.sk, s);
            }
            Kind::Probe { ca_state, .. } => {
                state.insert(r.sk, ca_state);
            }
            _ => {}
        }
        let Some(event) = conv.event(r) else { continue };
        let ca_state = matches!(event, KernelEvent::Retransmit { .. }).then(|| state.get(&r.sk).copied().unwrap_or(0));
        out.push(KernelRec { t_ns: clock.to_realtime(r.mono_ns), local: r.local, remote: r.remote, event, ca_state });
    }
    out
}
