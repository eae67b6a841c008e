//! Output helpers shared by `lab` and `simulate`: the format flag, writing a report where the
//! user asked, and the progress bar.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned table for people.
    Table,
    /// The stable JSON contract (docs/json-schema.md).
    Json,
    /// One row per strategy, RFC 4180 quoting.
    Csv,
    /// A Markdown table.
    #[value(alias = "md")]
    Markdown,
}

impl From<OutputFormat> for report::Format {
    fn from(f: OutputFormat) -> Self {
        match f {
            OutputFormat::Table => report::Format::Table,
            OutputFormat::Json => report::Format::Json,
            OutputFormat::Csv => report::Format::Csv,
            OutputFormat::Markdown => report::Format::Markdown,
        }
    }
}

/// Write `report` in `format` to `output` (a file) or to stdout.
pub fn emit(report: &report::Report, format: OutputFormat, output: Option<&Path>) -> anyhow::Result<()> {
    let bytes = report::export(report, format.into());
    write_bytes(&bytes, output)
}

/// Write bytes to a file or stdout. A closed stdout (`| head`) is not an error worth a message.
pub fn write_bytes(bytes: &[u8], output: Option<&Path>) -> anyhow::Result<()> {
    match output {
        Some(p) => std::fs::write(p, bytes).with_context(|| format!("cannot write {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(bytes).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("cannot write to stdout"),
            }
        }
    }
}

/// A progress bar over `total` steps on stderr; hidden when `quiet` or stderr is not a
/// terminal, so pipes and CI logs stay clean.
pub fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    // Redraw a few times a second so a long row still shows time passing; the drawing thread
    // sleeps between ticks and does not touch the sockets.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}
