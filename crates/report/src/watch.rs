//! `tcpstall watch`: its JSONL line (one stall record per line, docs/json-schema.md "Watch"),
//! the counts a watch keeps about itself and its flows, and their text forms for people (the
//! live table redrawn on a terminal, and the summary at the end).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use serde::Serialize;

use crate::owner::Owner;
use crate::ExportError;

/// One line of `watch --format jsonl`: a stall record with its flow and wall-clock time.
#[derive(Debug, Clone, Serialize)]
pub struct WatchLine<'a> {
    pub schema_version: u32,
    /// Always "stall".
    pub kind: &'static str,
    /// The flow: addresses as the flow table ordered them, A first (`A-B`).
    pub flow: String,
    pub a: SocketAddr,
    pub b: SocketAddr,
    /// The capture interface's name (its index when it has none any more).
    pub interface: String,
    /// The stall's start, ns since the Unix epoch (its `start_ns` counts from the first packet
    /// this watch saw).
    pub start_unix_ns: u64,
    pub stall: &'a analyze::Stall,
    /// With --kernel: the flow's writes and resends the kernel reported so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<FlowKernel>,
    /// With --kernel, when known: the owner of the socket whose bytes were held (the stall's
    /// `held` end): the process that stalls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<&'a Owner>,
    /// The owner of the other end's socket, when it is on this host and known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_owner: Option<&'a Owner>,
}

impl WatchLine<'_> {
    /// The line's JSON, compact, without the newline.
    pub fn to_jsonl(&self) -> Result<String, ExportError> {
        serde_json::to_string(self).map_err(|source| ExportError::Json { command: "watch", source })
    }
}

/// Per flow, what the kernel reported (the table's `kernel w/r` column, the line's `kernel`).
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct FlowKernel {
    pub writes: u64,
    pub resends: u64,
}

/// What the kernel evidence counted, for the table, the summary and the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelStats {
    /// Kernel events given to the analysers.
    pub events: u64,
    /// Of those: writes (`tcp:tcp_sendmsg_locked`, one per call), resends
    /// (`tcp:tcp_retransmit_skb`), window states (`tcp:tcp_probe`).
    pub writes: u64,
    pub resends: u64,
    pub windows: u64,
    /// Records lost before they reached the analysers: ring buffer full (counted in the
    /// kernel), unparsed, or not kept.
    pub lost: u64,
    /// Records of connections the capture never showed a packet of.
    pub unmatched: u64,
}

/// What a watch counts about itself.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WatchHealth {
    pub packets_seen: u64,
    pub packets_not_tcp: u64,
    pub ring_drops: u64,
    pub ring_freezes: u64,
    pub flows_seen: u64,
    pub flows_tracked: usize,
    pub flows_evicted: u64,
    pub stall_records: u64,
    /// Stall records left out by `--pid`, `--comm` or `--cgroup` (no socket of their flow had
    /// such an owner, or its owner was not known).
    pub stalls_of_other_owners: u64,
    /// Of those, classified when the watch ended (a gap pending at the end).
    pub classified_at_end: u64,
    pub cpu_share_of_one_cpu: f64,
    /// Packets the flight recorder handed out for `--write`.
    pub packets_written: u64,
    /// With --kernel: what the kernel evidence counted.
    pub kernel: Option<KernelStats>,
}

/// Stall records of one cause: how many and their total length.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CauseTotal {
    pub records: u64,
    pub length_ns: u64,
}

/// One flow's stall figures (a row of the live table and of the summary).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchFlowRow {
    pub a: SocketAddr,
    pub b: SocketAddr,
    pub stalls: u64,
    pub stall_ns: u64,
    pub causes: BTreeMap<&'static str, u64>,
    /// The end of its last stall, ns since the Unix epoch.
    pub last_unix_ns: u64,
    /// With --kernel: the flow's writes and resends at its last stall.
    pub kernel: Option<FlowKernel>,
    /// With --kernel: the held end's owner at its last stall, when known.
    pub owner: Option<Owner>,
}

impl WatchFlowRow {
    fn flow(&self) -> String {
        format!("{}-{}", self.a, self.b)
    }
}

fn causes_text(c: &BTreeMap<&'static str, u64>) -> String {
    c.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
}

/// The live table (a terminal only: it starts by clearing the screen): the run's health and
/// `rows` (the top flows by stall time). `up_s`: seconds since the watch began; `now_unix_ns`
/// dates the `last ago` column.
pub fn watch_live_table(h: &WatchHealth, rows: &[WatchFlowRow], up_s: f64, now_unix_ns: u64) -> String {
    let mut s = String::from("\x1b[H\x1b[2J");
    let _ = write!(
        s,
        "tcpstall watch  {:.0} s  packets {}  ring drops {}  flows {} tracked, {} evicted  stalls {}  cpu {:.1}%\n\n",
        up_s,
        h.packets_seen,
        h.ring_drops,
        h.flows_tracked,
        h.flows_evicted,
        h.stall_records,
        100.0 * h.cpu_share_of_one_cpu
    );
    if let Some(k) = h.kernel {
        let _ = write!(
            s,
            "kernel evidence  events {}  writes {}  resends {}  windows {}  lost {}\n\n",
            k.events, k.writes, k.resends, k.windows, k.lost
        );
    }
    let kcol = h.kernel.is_some();
    let _ = writeln!(
        s,
        "{:<47} {:>7} {:>10} {:>10}{}  causes",
        "flow",
        "stalls",
        "stall ms",
        "last ago",
        if kcol { format!(" {:>13} {:<24}", "kernel w/r", "owner") } else { String::new() }
    );
    for f in rows {
        let owner = f.owner.as_ref().map_or("-".to_string(), Owner::short);
        let kc = match (kcol, f.kernel) {
            (true, Some(x)) => format!(" {:>13} {owner:<24}", format!("{}/{}", x.writes, x.resends)),
            (true, None) => format!(" {:>13} {owner:<24}", "-"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{:<47} {:>7} {:>10.0} {:>9.1}s{}  {}",
            f.flow(),
            f.stalls,
            f.stall_ns as f64 / 1e6,
            now_unix_ns.saturating_sub(f.last_unix_ns) as f64 / 1e9,
            kc,
            causes_text(&f.causes)
        );
    }
    s
}

/// The warning of the one-second tick when the capture ring dropped packets (`drops` so far).
pub fn ring_drops_warning(drops: u64) -> String {
    format!(
        "tcpstall: watch: the capture ring dropped {drops} packets so far (PACKET_STATISTICS): stalls of those \
         flows may be missed or misnamed; narrow --port/--host"
    )
}

/// The end of a watch, for people: one summary line, and the top flows.
#[derive(Debug, Clone)]
pub struct WatchSummary<'a> {
    pub seconds: f64,
    pub interface: &'a str,
    pub health: &'a WatchHealth,
    pub by_cause: &'a BTreeMap<&'static str, CauseTotal>,
    /// `--write`'s file, when given.
    pub written_to: Option<String>,
}

impl WatchSummary<'_> {
    /// The summary line (no newline).
    pub fn line(&self) -> String {
        let h = self.health;
        let causes: Vec<String> = self
            .by_cause
            .iter()
            .map(|(c, t)| format!("{c} {} ({:.0} ms)", t.records, t.length_ns as f64 / 1e6))
            .collect();
        let tail = h.classified_at_end;
        let others = h.stalls_of_other_owners;
        format!(
            "tcpstall watch: {:.1} s on {}: {} packets, {} dropped by the ring, {} flows ({} evicted), {} stall records{}{}{}; \
             {:.1}% of one CPU{}{}",
            self.seconds,
            self.interface,
            h.packets_seen,
            h.ring_drops,
            h.flows_seen,
            h.flows_evicted,
            h.stall_records,
            if causes.is_empty() { String::new() } else { format!(": {}", causes.join(", ")) },
            if tail > 0 { format!(" ({tail} classified at the end)") } else { String::new() },
            // --pid/--comm/--cgroup: what they left out.
            if others > 0 { format!("; {others} of other owners left out") } else { String::new() },
            100.0 * h.cpu_share_of_one_cpu,
            self.written_to
                .as_ref()
                .map_or(String::new(), |p| format!("; {} packets written to {p}", h.packets_written)),
            h.kernel.map_or(String::new(), |k| format!(
                "; kernel evidence: {} events ({} writes, {} resends, {} windows), {} lost, {} of unseen connections",
                k.events, k.writes, k.resends, k.windows, k.lost, k.unmatched
            )),
        )
    }

    /// The summary line and one line per flow of `rows`, each ending in a newline.
    pub fn text(&self, rows: &[WatchFlowRow]) -> String {
        let mut s = self.line();
        s.push('\n');
        for f in rows {
            let _ = writeln!(
                s,
                "  {}{}  {} stalls, {:.0} ms: {}{}",
                f.flow(),
                f.owner.as_ref().map_or(String::new(), |o| format!(
                    " {}{}",
                    o.short(),
                    o.cgroup.as_ref().map_or(String::new(), |c| format!(" {c}"))
                )),
                f.stalls,
                f.stall_ns as f64 / 1e6,
                causes_text(&f.causes),
                f.kernel.map_or(String::new(), |x| format!(" (kernel: {} writes, {} resends)", x.writes, x.resends))
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> WatchFlowRow {
        WatchFlowRow {
            a: "127.0.0.1:45000".parse().unwrap(),
            b: "127.0.0.1:8080".parse().unwrap(),
            stalls: 2,
            stall_ns: 80_000_000,
            causes: [("nagle-delayed-ack", 2)].into_iter().collect(),
            last_unix_ns: 1_000_000_000,
            kernel: Some(FlowKernel { writes: 6, resends: 0 }),
            owner: None,
        }
    }

    #[test]
    fn the_summary_names_counts_causes_and_flows() {
        let h = WatchHealth {
            packets_seen: 10,
            flows_seen: 1,
            stall_records: 2,
            classified_at_end: 1,
            kernel: Some(KernelStats { events: 6, writes: 6, ..KernelStats::default() }),
            ..WatchHealth::default()
        };
        let by: BTreeMap<&'static str, CauseTotal> =
            [("nagle-delayed-ack", CauseTotal { records: 2, length_ns: 80_000_000 })].into_iter().collect();
        let s = WatchSummary { seconds: 1.0, interface: "lo", health: &h, by_cause: &by, written_to: None };
        let text = s.text(&[row()]);
        assert!(text.starts_with("tcpstall watch: 1.0 s on lo: 10 packets, 0 dropped by the ring, 1 flows (0 evicted), 2 stall records: nagle-delayed-ack 2 (80 ms) (1 classified at the end); 0.0% of one CPU; kernel evidence: 6 events"), "{text}");
        assert!(text.contains("\n  127.0.0.1:45000-127.0.0.1:8080  2 stalls, 80 ms: nagle-delayed-ack 2 (kernel: 6 writes, 0 resends)\n"), "{text}");
    }

    #[test]
    fn the_drop_warning_says_how_many_and_what_to_do() {
        assert_eq!(
            ring_drops_warning(7),
            "tcpstall: watch: the capture ring dropped 7 packets so far (PACKET_STATISTICS): stalls of those flows \
             may be missed or misnamed; narrow --port/--host"
        );
    }

    #[test]
    fn the_live_table_has_a_kernel_column_only_with_kernel_evidence() {
        let mut h = WatchHealth::default();
        let t = watch_live_table(&h, &[row()], 3.0, 3_000_000_000);
        assert!(!t.contains("kernel w/r") && t.contains("      2.0s  nagle-delayed-ack 2\n"), "{t}");
        h.kernel = Some(KernelStats::default());
        let t = watch_live_table(&h, &[row()], 3.0, 3_000_000_000);
        assert!(t.contains("kernel w/r") && t.contains("6/0"), "{t}");
    }
}
