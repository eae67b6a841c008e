//! `watch --metrics ADDR:PORT`: the watch's counts in the Prometheus / OpenMetrics text
//! exposition format (encoded by the `prometheus-client` crate), and the answer to one HTTP
//! request for them over a stream the caller accepted (the binary binds the port and runs the
//! accept loop on a thread of its own). One route, a scrape every few seconds: a plain
//! HTTP/1.1 answer with `Connection: close` is enough, a web framework would add a runtime.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use report::watch::KernelStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StallLabels {
    cause: String,
    /// The flow's server port (below the ephemeral range).
    port: u16,
    /// The held end's owner's command and cgroup path; empty when no owner is known (without
    /// `--kernel`, or a socket no process was seen on), which Prometheus reads as the label
    /// being absent (docs: "a label with an empty label value is considered equivalent to a
    /// label that does not exist"), so no made-up value is reported; `other` past the cap on
    /// distinct owners.
    comm: Option<String>,
    cgroup: Option<String>,
}

/// Distinct (comm, cgroup) label pairs at most by default: a host with thousands of short
/// lived commands must not make thousands of series (Prometheus keeps each one for hours).
pub(crate) const MAX_OWNER_LABELS: usize = 100;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabel {
    port: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

/// The metrics: updated by the watch, read by the HTTP thread (share it in an `Arc`).
pub struct Metrics {
    registry: Mutex<Registry>,
    stalls: Family<StallLabels, Counter>,
    stall_seconds: Family<StallLabels, Counter<f64, AtomicU64>>,
    lengths: Family<PortLabel, Histogram>,
    packets: Counter,
    drops: Gauge,
    flows: Gauge,
    /// With --kernel: kernel events by kind (write, resend, window, other) and records lost.
    kernel: Family<KindLabel, Counter>,
    kernel_lost: Gauge,
    /// The (comm, cgroup) pairs given a series of their own, and the cap.
    owner_labels: Mutex<HashSet<(String, String)>>,
    max_owner_labels: usize,
    /// Stall records counted under `other` because the cap was reached.
    folded: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers the metrics, all at zero (at most `MAX_OWNER_LABELS` owners).
    pub fn new() -> Metrics {
        Self::with_owner_cap(MAX_OWNER_LABELS)
    }

    /// Registers the metrics; beyond `cap` distinct (comm, cgroup) pairs, stalls are counted
    /// under comm and cgroup `other`, and counted in `owner_labels_folded`.
    pub fn with_owner_cap(cap: usize) -> Metrics {
        let mut reg = Registry::with_prefix("tcpstall_watch");
        let stalls = Family::<StallLabels, Counter>::default();
        reg.register(
            "stalls",
            "Stall records classified, by cause, server port and the held end's owner (comm, cgroup)",
            stalls.clone(),
        );
        let stall_seconds = Family::<StallLabels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "stall_seconds",
            "Time spent stalled, by cause, server port and the held end's owner (comm, cgroup)",
            stall_seconds.clone(),
        );
        let folded = Counter::default();
        reg.register(
            "owner_labels_folded",
            "Stall records counted under comm and cgroup \"other\": the cap on distinct owner labels was reached",
            folded.clone(),
        );
        let lengths = Family::<PortLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.01, 0.02, 0.04, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0].into_iter())
        });
        reg.register("stall_length_seconds", "Length of each stall, by server port", lengths.clone());
        let packets = Counter::default();
        reg.register("packets_seen", "Packets the filter passed and the ring delivered", packets.clone());
        let drops = Gauge::default();
        reg.register("ring_dropped_packets", "Packets the capture ring dropped (PACKET_STATISTICS)", drops.clone());
        let flows = Gauge::default();
        reg.register("flows_tracked", "Flows analysed now", flows.clone());
        let kernel = Family::<KindLabel, Counter>::default();
        reg.register(
            "kernel_events",
            "Kernel evidence (--kernel) given to the analysers, by kind: write, resend, window, other",
            kernel.clone(),
        );
        let kernel_lost = Gauge::default();
        reg.register(
            "kernel_lost_records",
            "Kernel evidence records lost (ring buffer full or unread)",
            kernel_lost.clone(),
        );
        let registry = Mutex::new(reg);
        Metrics {
            registry,
            stalls,
            stall_seconds,
            lengths,
            packets,
            drops,
            flows,
            kernel,
            kernel_lost,
            owner_labels: Mutex::new(HashSet::new()),
            max_owner_labels: cap,
            folded,
        }
    }

    /// One stall record of `cause`, `secs` long, on a flow whose server port is `port`, held by
    /// a socket of `owner` (comm, cgroup path) when known.
    pub fn stall(&self, cause: &str, port: u16, owner: Option<(&str, &str)>, secs: f64) {
        let (comm, cgroup) = self.owner_labels(owner);
        let l = StallLabels { cause: cause.to_string(), port, comm, cgroup };
        self.stalls.get_or_create(&l).inc();
        self.stall_seconds.get_or_create(&l).inc_by(secs);
        self.lengths.get_or_create(&PortLabel { port }).observe(secs);
    }

    /// The labels for `owner`: its own while under the cap (or already given), else `other`.
    fn owner_labels(&self, owner: Option<(&str, &str)>) -> (Option<String>, Option<String>) {
        let Some((comm, cgroup)) = owner else { return (None, None) };
        let pair = (comm.to_string(), cgroup.to_string());
        let mut seen = self.owner_labels.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&pair) {
            return (Some(pair.0), Some(pair.1));
        }
        if seen.len() < self.max_owner_labels {
            seen.insert(pair.clone());
            return (Some(pair.0), Some(pair.1));
        }
        self.folded.inc();
        (Some("other".into()), Some("other".into()))
    }

    /// The watch's counts so far (the packet counter only moves up).
    pub fn health(&self, packets: u64, drops: u64, flows: u64) {
        let seen = self.packets.get();
        if packets > seen {
            self.packets.inc_by(packets - seen);
        }
        self.drops.set(drops as i64);
        self.flows.set(flows as i64);
    }

    /// The kernel evidence's counts so far (--kernel).
    pub fn kernel(&self, k: &KernelStats) {
        let other = k.events.saturating_sub(k.writes + k.resends + k.windows);
        for (kind, n) in [("write", k.writes), ("resend", k.resends), ("window", k.windows), ("other", other)] {
            let c = self.kernel.get_or_create(&KindLabel { kind });
            let seen = c.get();
            if n > seen {
                c.inc_by(n - seen);
            }
        }
        self.kernel_lost.set(k.lost as i64);
    }

    /// The text exposition (OpenMetrics 1.0.0).
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        encode(&mut body, &reg)?;
        Ok(body)
    }

    /// Answers one HTTP request read from `req`, written to `resp`: GET /metrics gets the
    /// exposition, anything else a 404; the connection is closed after.
    pub fn respond(&self, mut req: impl BufRead, mut resp: impl Write) -> std::io::Result<()> {
        let mut line = String::new();
        req.read_line(&mut line)?;
        // Skip the headers.
        let mut h = String::new();
        while req.read_line(&mut h)? > 2 {
            h.clear();
        }
        let path = line.split_whitespace().nth(1).unwrap_or("");
        if !line.starts_with("GET ") || !(path == "/metrics" || path.starts_with("/metrics?")) {
            let body = "not found: GET /metrics\n";
            return write!(
                resp,
                "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        let body = self.render().map_err(|e| std::io::Error::other(e.to_string()))?;
        write!(
            resp,
            "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(m: &Metrics, req: &str) -> String {
        let mut out = Vec::new();
        m.respond(req.as_bytes(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_exposition_names_every_metric_with_its_labels_and_counts() {
        let m = Metrics::new();
        m.stall("nagle-delayed-ack", 8080, None, 0.04);
        m.stall("nagle-delayed-ack", 8080, None, 0.04);
        m.health(100, 2, 3);
        m.health(90, 2, 3);
        m.kernel(&KernelStats { events: 7, writes: 4, resends: 1, windows: 1, lost: 5, unmatched: 0 });
        let t = m.render().unwrap();
        for want in [
            "# TYPE tcpstall_watch_stalls counter\n",
            "tcpstall_watch_stalls_total{cause=\"nagle-delayed-ack\",port=\"8080\",comm=\"\",cgroup=\"\"} 2\n",
            "tcpstall_watch_stall_seconds_total{cause=\"nagle-delayed-ack\",port=\"8080\",comm=\"\",cgroup=\"\"} 0.08\n",
            "tcpstall_watch_stall_length_seconds_bucket{le=\"0.04\",port=\"8080\"} 2\n",
            "tcpstall_watch_stall_length_seconds_bucket{le=\"0.02\",port=\"8080\"} 0\n",
            "tcpstall_watch_packets_seen_total 100\n",
            "tcpstall_watch_ring_dropped_packets 2\n",
            "tcpstall_watch_flows_tracked 3\n",
            "tcpstall_watch_kernel_events_total{kind=\"write\"} 4\n",
            "tcpstall_watch_kernel_events_total{kind=\"other\"} 1\n",
            "tcpstall_watch_kernel_lost_records 5\n",
        ] {
            assert!(t.contains(want), "{want:?} in\n{t}");
        }
        assert!(t.ends_with("# EOF\n"), "{t}");
    }

    #[test]
    fn owners_past_the_cap_fold_into_other_and_are_counted() {
        let m = Metrics::with_owner_cap(2);
        for (comm, cg) in [("a", "/x"), ("b", "/y"), ("a", "/x"), ("c", "/z"), ("d", "/w")] {
            m.stall("nagle-delayed-ack", 80, Some((comm, cg)), 0.04);
        }
        let t = m.render().unwrap();
        let l = |comm: &str, cg: &str, n: u32| {
            format!("tcpstall_watch_stalls_total{{cause=\"nagle-delayed-ack\",port=\"80\",comm=\"{comm}\",cgroup=\"{cg}\"}} {n}\n")
        };
        for want in [l("a", "/x", 2), l("b", "/y", 1), l("other", "other", 2)] {
            assert!(t.contains(&want), "{want:?} in\n{t}");
        }
        assert!(!t.contains("comm=\"c\""), "{t}");
        assert!(t.contains("tcpstall_watch_owner_labels_folded_total 2\n"), "{t}");
    }

    #[test]
    fn get_metrics_is_answered_and_anything_else_is_not_found() {
        let m = Metrics::new();
        let ok = get(&m, "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
        let (head, body) = ok.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text"), "{ok}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())) && body.ends_with("# EOF\n"), "{ok}");
        for req in ["GET / HTTP/1.1\r\n\r\n", "POST /metrics HTTP/1.1\r\n\r\n", ""] {
            assert!(get(&m, req).ends_with("Connection: close\r\n\r\nnot found: GET /metrics\n"), "{req:?}");
        }
    }
}
