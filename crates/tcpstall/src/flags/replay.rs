//! `tcpstall replay`'s flags and their help.

use std::path::PathBuf;

use super::common::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall replay capture.pcapng                 the flow with the most stall time, run in the lab
  tcpstall replay capture.pcapng --emit mine.toml --no-run
                                                 save the derived exchange to edit it
  tcpstall replay capture.pcapng --port 8000 --model
                                                 run it on the model (causes classified)
  tcpstall replay capture.pcapng --report replay.html
                                                 the capture's flow and the run side by side
  tcpstall advise mine.toml                      then: which fix, on which side

The derivation: the client is the side that sent the SYN (else the first to send data); a
turn is a run of data segments in one direction; a segment with PSH ends a write (Linux sets
PSH at the end of each send call it transmits whole, tcp_push(); writes Nagle or a cork
coalesced cannot be told apart and come out as one); resent bytes are skipped; a turn's think
time is the gap before it (from the previous turn's last segment, less the path RTT) when no
TCP stall record of the classifier overlaps it and it is at least 1 ms; the conversation's period is the shortest repeating sequence
of (side, bytes) turns.

Ctrl-C (or SIGTERM) during the run stops it at once: the exchange derived (printed, and saved
with --emit) is kept, and the exit status is 128 + the signal (130, 143). --report says where it
wrote the page.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ReplayArgs {
    /// A pcap or pcapng capture
    pub file: PathBuf,
    /// The flow to replay: ADDR:PORT-ADDR:PORT (default: the flow with the most stall time)
    #[arg(long, value_name = "FLOW")]
    pub flow: Option<String>,
    /// Only flows with this port
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Save the derived exchange as a scenario file
    #[arg(long, value_name = "FILE.toml")]
    pub emit: Option<PathBuf>,
    /// Print (and save) the exchange without running it
    #[arg(long)]
    pub no_run: bool,
    /// Run it on the model instead of real sockets (the stalls' causes are classified)
    #[arg(long)]
    pub model: bool,
    /// Rounds to run (default: the capture's, at most 100)
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Write a self-contained HTML report to FILE: the captured flow and the reproduced run
    /// side by side (stall records, ladders, time-sequence graphs)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Output format: the text for people (`text` works too), or one JSON document (the
    /// exchange, the capture's stall records and the run's report; docs/json-schema.md,
    /// "Replay"). The run's rows as CSV or Markdown: `--emit FILE`, then `tcpstall lab FILE
    /// --format csv`
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}
