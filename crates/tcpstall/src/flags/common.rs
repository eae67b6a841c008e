//! Flags shared by the subcommands: those of every command that runs a scenario (`lab`,
//! `simulate`: which scenario, its parameter overrides, the strategy matrix, where the report
//! goes), `--format` (`OutputFormat`, every command that prints results), `--min-gap`
//! (`MarginArg`, every command that finds stalls: lab, explain, watch), and `load`, the
//! workload a scenario name, file or inline exchange names (lab, simulate, advise).

use std::path::PathBuf;

use anyhow::bail;
use scenario::{Overrides, Scenario};

#[derive(Debug, clap::Args)]
pub(crate) struct ScenarioArgs {
    /// Scenario to run: a built-in name (`tcpstall scenarios` lists them) or a scenario FILE.toml
    /// (`tcpstall scenarios --show multi-write` prints one to start from) [default: chunked]
    pub scenario: Option<String>,
    /// Run this exchange instead of a scenario: turns separated by `;`, each `SIDE SIZES
    /// [think=DURATION] [gather] [noread]`, e.g. "client 275,24,292; server 100"
    #[arg(long, value_name = "TURNS")]
    pub exchange: Option<String>,
    /// Override a workload parameter (repeatable), e.g. --set round=10 --set writes=275,24,292
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Client strategies, comma-separated (nodelay, quickack-once, quickack-each, cork, msg-more,
    /// writev, buffer, nodelay-then-cork, none): run this one pair instead of the matrix
    #[arg(long, value_name = "LIST")]
    pub client: Option<String>,
    /// Server strategies (as --client)
    #[arg(long, value_name = "LIST")]
    pub server: Option<String>,
    /// Strategy matrix
    #[arg(long, value_enum, value_name = "NAME", default_value_t = Matrix::Default)]
    pub matrix: Matrix,
    /// Shortcut for the scenario's round-count parameter (--set round=N for chunked, ...)
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Write the output to FILE instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// After the table, list every stall record of every row (time, length, sides, cause,
    /// confidence, evidence); JSON always carries them in `stall_records`
    #[arg(long)]
    pub stalls: bool,
}

/// The stall margin, one flag for every command that finds stalls (lab, explain, watch):
/// `--min-gap`, with lab's old `--stall-threshold` and watch's old `--threshold` kept as
/// aliases. The default is the classifier's (`analyze::DEFAULT_MIN_GAP`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct MarginArg {
    /// A wait is a stall when it exceeds the path's round trip by more than MS milliseconds
    #[arg(
        long = "min-gap",
        visible_aliases = ["stall-threshold", "threshold"],
        value_name = "MS",
        default_value_t = analyze::DEFAULT_MIN_GAP.0 as f64 / 1e6
    )]
    pub min_gap: f64,
}

impl MarginArg {
    /// The margin in milliseconds when it lies in `min..=max` (each command's own bounds),
    /// else one line on what is wrong.
    pub(crate) fn ms_within(&self, min: f64, max: f64) -> anyhow::Result<f64> {
        if !(self.min_gap.is_finite() && (min..=max).contains(&self.min_gap)) {
            bail!("--min-gap {}: expected milliseconds between {min} and {max}", self.min_gap);
        }
        Ok(self.min_gap)
    }

    /// The margin as the classifier's `analyze::Config::min_gap` (checked by `ms_within`).
    pub(crate) fn gap(&self) -> trace::Duration {
        trace::Duration((self.min_gap * 1e6) as u64)
    }
}

impl ScenarioArgs {
    /// The scenario to run: `base` when the subcommand found it elsewhere (lab's --config,
    /// simulate's --scenario), else the built-in named by the positional argument (default
    /// chunked); then the overrides (scenario::Overrides: --set, --rounds, --client/--server or
    /// --matrix).
    pub(crate) fn build(&self, base: Option<Scenario>) -> anyhow::Result<Scenario> {
        let mut s = match base {
            Some(s) => {
                if self.exchange.is_some() {
                    bail!("--exchange is the workload; it cannot go with another scenario source");
                }
                s
            }
            None => load(self.scenario.as_deref(), self.exchange.as_deref())?,
        };
        s.apply(&Overrides {
            sets: &self.sets,
            rounds: self.rounds,
            client: self.client.as_deref(),
            server: self.server.as_deref(),
            matrix: self.matrix.into(),
        })?;
        Ok(s)
    }
}

/// The workload to run: an inline exchange, a scenario file (read here), or a built-in by name.
pub(crate) fn load(name: Option<&str>, exchange: Option<&str>) -> anyhow::Result<Scenario> {
    Ok(Scenario::load(name, exchange, |f| std::fs::read_to_string(f))?)
}

/// `--matrix` (scenario::Matrix, with each value's help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Matrix {
    /// The scenario's own strategy pairs
    Default,
    /// The default, then each strategy on both sides
    All,
    /// Seed 003's table (`tcpstall lab stream --matrix seed003` only)
    Seed003,
}

impl From<Matrix> for scenario::Matrix {
    fn from(m: Matrix) -> scenario::Matrix {
        match m {
            Matrix::Default => scenario::Matrix::Default,
            Matrix::All => scenario::Matrix::All,
            Matrix::Seed003 => scenario::Matrix::Seed003,
        }
    }
}

impl std::fmt::Display for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(scenario::Matrix::from(*self).as_str())
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// Aligned table (or text) for people.
    #[value(alias = "text")]
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
