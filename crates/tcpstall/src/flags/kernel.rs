//! `tcpstall kernel`'s flags and their help.

use std::path::PathBuf;

use super::common::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall kernel                   measure this kernel (about 7 s) and compare with linux:4.19 .. linux
  tcpstall kernel --format json     the measurements, every row and the best match as JSON
  tcpstall simulate --profile linux:here burst
                                    simulate with the rules measured here

As root the experiments run in a private network namespace's loopback; otherwise on this
namespace's loopback (the TcpExt counters then include other connections, and the table says so).
The delayed-ACK maximum needs a round trip above 200 ms: it runs over an emulated 400 ms link
(root, or unprivileged user namespaces), about 5 s of the total.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct KernelArgs {
    /// Output format (table or json: the document is not a list of rows)
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Write to FILE instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}
