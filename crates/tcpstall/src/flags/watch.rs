//! `tcpstall watch`'s flags and their help; the check of their values.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::bail;

use super::common::MarginArg;

const EXAMPLES: &str = "\
Examples:
  tcpstall watch --port 8080                    stalls of port 8080 on every interface, live
  tcpstall watch -i lo --format jsonl | jq .    one stall record per line, as explain's JSON
  tcpstall watch --port 443 --write stalls.pcapng --duration 3600
      an hour of watching leaves a capture of the stalls alone (tcpstall explain reads it)
  tcpstall watch --metrics 127.0.0.1:9464       serve stall counts to Prometheus
  tcpstall watch --port 8080 --kernel           with kernel evidence: each write, resend and
      window from eBPF on TCP tracepoints joins the packets (root; else one line says why),
      and each stall names the process that stalls (pid, command, cgroup, container)
  tcpstall watch --kernel --comm nginx --format jsonl
      the stalls of nginx's flows only

Needs CAP_NET_RAW (root). The kernel filters TCP on the ports and hosts asked and copies
headers only (128 bytes); a packet the filter drops never reaches user space. Flows are
forgotten on FIN/RST, after --idle seconds without a packet, or (least recently seen first)
beyond --max-flows; each is counted. A stall is printed when the packet after its release
settles it, or about a second after its release when the flow goes quiet.";

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WatchFormat {
    /// A live table on a terminal (refreshed every second), a summary at the end.
    Table,
    /// One JSON stall record per line, flushed per line.
    Jsonl,
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct WatchArgs {
    /// Interface to watch (any: every interface of this network namespace)
    #[arg(long, short = 'i', value_name = "IF", default_value = "any")]
    pub interface: String,
    /// Only packets to or from this port (repeatable)
    #[arg(long = "port", value_name = "P")]
    pub ports: Vec<u16>,
    /// Only packets to or from this address (repeatable)
    #[arg(long = "host", value_name = "H")]
    pub hosts: Vec<IpAddr>,
    #[command(flatten)]
    pub margin: MarginArg,
    /// Output: table (live, for people) or jsonl (one stall record per line)
    #[arg(long, value_enum, default_value = "table")]
    pub format: WatchFormat,
    /// Keep the packets around each stall in this pcapng file (a flight recorder per flow)
    #[arg(long, value_name = "FILE.pcapng")]
    pub write: Option<PathBuf>,
    /// Flight recorder: seconds of packets kept per flow
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub keep_seconds: f64,
    /// Flight recorder: packets kept per flow at most
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub keep_packets: usize,
    /// Serve Prometheus/OpenMetrics text on http://ADDR:PORT/metrics
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Stop after this many seconds
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Stop after this many stall records
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Flows analysed at once at most; beyond, the least recently seen is forgotten
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub max_flows: usize,
    /// Forget a flow after this many seconds without a packet
    #[arg(long, value_name = "S", default_value_t = 120.0)]
    pub idle: f64,
    /// Add kernel evidence: the writes (when the application wrote, how many bytes), resends
    /// and windows of the watched ports' sockets in this network namespace, from eBPF programs
    /// on TCP tracepoints, joined to each flow's packets before the classifier reads them.
    /// Needs root (CAP_BPF and CAP_PERFMON) and a kernel with BTF; without them one line says
    /// what is missing and the packets are analysed alone
    #[arg(long)]
    pub kernel: bool,
    /// With --kernel, also record the application's reads (tcp:tcp_rcv_space_adjust): off by
    /// default, as no rule uses them and a request/response flow makes one per message
    #[arg(long, requires = "kernel")]
    pub kernel_reads: bool,
    /// With --kernel, do not track owners (the socket-to-owner map in the kernel and the
    /// records' pid, command and cgroup): to measure what owner tracking costs
    #[arg(long, requires = "kernel")]
    pub no_owners: bool,
    /// Only stall records of flows with a socket of this process (repeatable; needs --kernel)
    #[arg(long = "pid", value_name = "PID", requires = "kernel")]
    pub pids: Vec<u32>,
    /// Only stall records of flows with a socket of this command (repeatable; needs --kernel)
    #[arg(long = "comm", value_name = "NAME", requires = "kernel")]
    pub comms: Vec<String>,
    /// Only stall records of flows with a socket of a process in this cgroup v2 path or below
    /// (repeatable; needs --kernel), e.g. /system.slice/nginx.service
    #[arg(long = "cgroup", value_name = "PATH", requires = "kernel")]
    pub cgroups: Vec<String>,
}

impl WatchArgs {
    /// `--pid`, `--comm`, `--cgroup`.
    pub(crate) fn owner_filter(&self) -> report::owner::OwnerFilter {
        report::owner::OwnerFilter { pids: self.pids.clone(), comms: self.comms.clone(), cgroups: self.cgroups.clone() }
    }
}

/// The flags' values: one line each on what is wrong, before anything is opened.
pub(crate) fn check(args: &WatchArgs) -> anyhow::Result<()> {
    args.margin.ms_within(1.0, 60_000.0)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration {d}: expected seconds above 0");
        }
    }
    if !(args.keep_seconds.is_finite() && args.keep_seconds > 0.0) {
        bail!("--keep-seconds {}: expected seconds above 0", args.keep_seconds);
    }
    if !(args.idle.is_finite() && args.idle >= 1.0) {
        bail!("--idle {}: expected at least 1 second", args.idle);
    }
    if args.no_owners && !args.owner_filter().is_empty() {
        bail!("--pid, --comm and --cgroup need the owners that --no-owners turns off");
    }
    if let Some(c) = args.cgroups.iter().find(|c| !c.starts_with('/')) {
        bail!("--cgroup {c}: expected a cgroup v2 path from its root, starting with /");
    }
    if args.max_flows == 0 || args.keep_packets == 0 {
        bail!("--max-flows and --keep-packets: expected at least 1");
    }
    Ok(())
}
