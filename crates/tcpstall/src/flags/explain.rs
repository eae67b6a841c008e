//! `tcpstall explain`'s flags and their help; `--flow`'s syntax.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;

use super::common::{MarginArg, OutputFormat};

const EXAMPLES: &str = "\
Examples:
  tcpdump -i lo -w x.pcap port 8000 &   ...   tcpstall explain x.pcap
  tcpstall explain x.pcapng --port 8000
  tcpstall explain x.pcap --flow 10.0.0.1:5000-10.0.0.2:80 --format json
  tcpstall explain x.pcap --report x.html
  tcpstall explain client.pcapng server.pcapng   one connection captured at both ends, merged
  tcpdump -i any -w - port 8000 | tcpstall explain -

Reads pcap (micro- or nanosecond, FCS flag) and pcapng (any number of interfaces), link types
Ethernet, Linux cooked v1/v2 (tcpdump -i any), raw IP, BSD loopback, PPP, PPPoE and Cisco HDLC;
IPv4 and IPv6, inside VLAN/QinQ, MPLS, PPPoE, GRE/ERSPAN, VXLAN, Geneve, GTP-U or IP-in-IP. A stall is a gap in
a connection's data flow longer than the path RTT plus --min-gap; each gets a cause:
nagle-delayed-ack, delayed-ack, cwnd-limited, rwnd-limited, retransmission-timeout, probe-timer or
application. Exit status: 0 done, 1 the file is damaged after some packets (the valid prefix is
analysed and printed), 2 not readable at all, or no TCP packet decoded because of its link type.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ExplainArgs {
    /// Capture file (pcap or pcapng), as written by tcpdump, tshark, Wireshark or tcpstall;
    /// `-` reads standard input
    pub file: PathBuf,
    /// A second capture of the same connections, taken at their other end: one merged verdict
    /// per connection, each stall's time split by host (docs/remote.md)
    #[arg(value_name = "FILE2")]
    pub peer: Option<PathBuf>,
    /// Only the flow between these two endpoints: ADDR:PORT-ADDR:PORT (IPv6 as [ADDR]:PORT)
    #[arg(long, value_name = "A-B")]
    pub flow: Option<String>,
    /// Only flows with this port at either end
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    #[command(flatten)]
    pub margin: MarginArg,
    /// Output format: the text for people (`text` works too), one JSON document
    /// (docs/json-schema.md, "Explain"), or one CSV/Markdown row per record
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Also list the records that are not stalls, counted apart: ambiguous pauses (several
    /// explanations fit; each says which, and what would settle it) and application gaps (the
    /// writer had not written yet)
    #[arg(long, visible_alias = "all")]
    pub app_gaps: bool,
    /// Also write a self-contained HTML report: stall table, ladder of each stall's packets,
    /// zoomable time-sequence graphs (the most stalled flows first, downsampled when big)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Replaced by --report (its time-sequence graphs have axes, zoom and the stall table)
    #[arg(long, value_name = "FILE.svg", hide = true)]
    pub plot: Option<PathBuf>,
}

impl ExplainArgs {
    /// `--min-gap` as the classifier's margin beyond the path RTT.
    pub(crate) fn min_gap(&self) -> anyhow::Result<trace::Duration> {
        self.margin.ms_within(0.0, 60_000.0)?;
        Ok(self.margin.gap())
    }
}

/// Parses `ADDR:PORT-ADDR:PORT` (IPv6 in brackets).
pub(crate) fn parse_flow(s: &str) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    // Split at a '-' that follows a port digit and precedes an address.
    for (i, _) in s.match_indices('-') {
        if let (Ok(a), Ok(b)) = (s[..i].parse::<SocketAddr>(), s[i + 1..].parse::<SocketAddr>()) {
            return Ok((a, b));
        }
    }
    bail!("--flow '{s}': expected ADDR:PORT-ADDR:PORT, e.g. 127.0.0.1:5000-127.0.0.1:8000 or [::1]:5000-[::1]:80")
}

#[cfg(test)]
mod tests {
    use super::parse_flow;

    #[test]
    fn flow_pairs_parse_for_ipv4_and_ipv6() {
        let (a, b) = parse_flow("127.0.0.1:5000-10.0.0.2:80").unwrap();
        assert_eq!((a.port(), b.to_string().as_str()), (5000, "10.0.0.2:80"));
        let (a, b) = parse_flow("[::1]:5000-[2001:db8::1]:443").unwrap();
        assert_eq!((a.port(), b.port()), (5000, 443));
        assert!(parse_flow("127.0.0.1:5000").is_err());
        assert!(parse_flow("a-b").is_err());
    }
}
