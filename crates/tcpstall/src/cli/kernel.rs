//! `tcpstall kernel`: fingerprint the running kernel's TCP rules and name the Linux era profile
//! that matches them best.

use std::path::PathBuf;

use clap::Args;
use report::{Export, KernelDoc};

use super::output::{self, OutputFormat};

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

#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct KernelArgs {
    /// Output format (table or json: the document is not a list of rows)
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Write to FILE instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub(crate) fn run(args: KernelArgs) -> anyhow::Result<i32> {
    let format = args.format.into();
    // A format the document has no form in fails now, not after 7 s of experiments.
    if let Err(e @ report::ExportError::Unsupported { .. }) = KernelDoc::<()>::default().export(format) {
        return Err(e.into());
    }
    if let Some(p) = &args.output {
        output::check_writable("--output", p)?;
    }
    let doc = kernel::document(kernel::fingerprint())?;
    output::write_bytes(&doc.export(format)?, args.output.as_deref())?;
    Ok(0)
}

/// The profile `simulate --profile linux:here` uses: this kernel's measured rules (its notes
/// on stderr).
pub(crate) fn here_profile() -> Result<model::Profile, model::ModelError> {
    let (p, notes) = kernel::here_profile()?;
    for n in &notes {
        eprintln!("tcpstall: linux:here: {n}");
    }
    Ok(p)
}
