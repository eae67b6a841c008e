//! `tcpstall watch --metrics ADDR:PORT`: the watch's counts in the Prometheus / OpenMetrics text
//! exposition format (encoded by the `prometheus-client` crate), served on GET /metrics by a
//! plain HTTP/1.1 responder on one thread. A std TcpListener is enough for a scrape every few
//! seconds; a web framework would add a runtime for one route.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StallLabels {
    pub cause: String,
    /// The flow's server port (below the ephemeral range).
    pub port: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PortLabel {
    pub port: u16,
}

/// The metrics, shared with the HTTP thread.
pub(crate) struct Metrics {
    stalls: Family<StallLabels, Counter>,
    stall_seconds: Family<StallLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    lengths: Family<PortLabel, Histogram>,
    packets: Counter,
    drops: Gauge,
    flows: Gauge,
    /// With --kernel: kernel events by kind (write, resend, window, other) and records lost.
    kernel: Family<KindLabel, Counter>,
    kernel_lost: Gauge,
    pub addr: SocketAddr,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: &'static str,
}

impl Metrics {
    /// Registers the metrics and serves them on `addr` (port 0: any free port, see `addr`).
    pub(crate) fn serve(addr: SocketAddr) -> std::io::Result<Metrics> {
        let mut reg = Registry::with_prefix("tcpstall_watch");
        let stalls = Family::<StallLabels, Counter>::default();
        reg.register("stalls", "Stall records classified, by cause and server port", stalls.clone());
        let stall_seconds = Family::<StallLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        reg.register("stall_seconds", "Time spent stalled, by cause and server port", stall_seconds.clone());
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
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let reg = Arc::new(Mutex::new(reg));
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let reg = reg.clone();
                let _ = respond(conn, &reg);
            }
        });
        Ok(Metrics { stalls, stall_seconds, lengths, packets, drops, flows, kernel, kernel_lost, addr })
    }

    pub(crate) fn stall(&self, cause: &str, port: u16, secs: f64) {
        let l = StallLabels { cause: cause.to_string(), port };
        self.stalls.get_or_create(&l).inc();
        self.stall_seconds.get_or_create(&l).inc_by(secs);
        self.lengths.get_or_create(&PortLabel { port }).observe(secs);
    }

    pub(crate) fn health(&self, packets: u64, drops: u64, flows: u64) {
        let seen = self.packets.get();
        if packets > seen {
            self.packets.inc_by(packets - seen);
        }
        self.drops.set(drops as i64);
        self.flows.set(flows as i64);
    }

    /// The kernel evidence's counts so far (--kernel).
    pub(crate) fn kernel(&self, k: &report::watch::KernelStats) {
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
}

/// One request: GET /metrics gets the exposition, anything else a 404.
fn respond(conn: std::net::TcpStream, reg: &Mutex<Registry>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Skip the headers.
    let mut h = String::new();
    while reader.read_line(&mut h)? > 2 {
        h.clear();
    }
    let mut conn = conn;
    let path = line.split_whitespace().nth(1).unwrap_or("");
    if !line.starts_with("GET ") || !(path == "/metrics" || path.starts_with("/metrics?")) {
        let body = "not found: GET /metrics\n";
        return write!(
            conn,
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    let mut body = String::new();
    {
        let reg = reg.lock().unwrap_or_else(|e| e.into_inner());
        encode(&mut body, &reg).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
