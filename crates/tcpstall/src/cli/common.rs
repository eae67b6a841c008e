//! Flags shared by the subcommands that run a scenario (`lab`, `simulate`): which scenario,
//! its parameter overrides, the strategy matrix, and where the report goes.

use std::path::PathBuf;

use anyhow::bail;
use scenario::{Opt, Scenario, SideOpts, StrategyPair, Workload};

use super::output::OutputFormat;

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

impl ScenarioArgs {
    /// The scenario to run: `base` when the subcommand found it elsewhere (lab's --config,
    /// simulate's --scenario), else the built-in named by the positional argument (default
    /// chunked); then --set, --rounds, and the strategy pairs of --client/--server or --matrix.
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
        s.apply_sets(&self.sets)?;
        if let Some(n) = self.rounds {
            let key = rounds_key(&s.workload)?;
            s.apply_sets(&[format!("{key}={n}")]).map_err(|e| anyhow::anyhow!("--rounds: {e}"))?;
        }
        if self.client.is_some() || self.server.is_some() {
            if self.matrix != Matrix::Default {
                bail!("--client/--server run one pair; they cannot go with --matrix {}", self.matrix);
            }
            let pair =
                StrategyPair::new(side("client", self.client.as_deref())?, side("server", self.server.as_deref())?);
            s.matrix = vec![pair];
        } else {
            match self.matrix {
                Matrix::Default => {}
                Matrix::All => s.matrix = matrix_all(),
                Matrix::Seed003 => {
                    bail!("--matrix seed003 is seed 003's table: `tcpstall lab stream --matrix seed003`")
                }
            }
        }
        Ok(s)
    }
}

/// The workload to run: an inline exchange, a scenario file, or a built-in by name.
pub(crate) fn load(name: Option<&str>, exchange: Option<&str>) -> anyhow::Result<Scenario> {
    if let Some(ex) = exchange {
        if let Some(n) = name {
            bail!("--exchange is the workload; drop the scenario '{n}'");
        }
        let e = scenario::Exchange::parse_inline(ex)?;
        return Ok(Scenario::from_exchange("exchange", &format!("--exchange \"{}\"", e.inline()), e));
    }
    let name = name.unwrap_or("chunked");
    if super::replay::is_capture(name) {
        bail!("{name} is a capture: `tcpstall replay {name}` derives the exchange it carried, `tcpstall advise {name}` advises on it");
    }
    if is_file(name) {
        let text =
            std::fs::read_to_string(name).map_err(|e| anyhow::anyhow!("cannot read scenario file {name}: {e}"))?;
        return Ok(Scenario::from_toml(name, &text)?);
    }
    Ok(Scenario::builtin(name)?)
}

/// A scenario argument names a file when it ends in .toml or has a path separator.
pub(crate) fn is_file(name: &str) -> bool {
    name.ends_with(".toml") || name.contains('/')
}

/// The parameter that counts rounds in each workload.
pub(crate) fn rounds_key(w: &Workload) -> anyhow::Result<&'static str> {
    Ok(match w {
        Workload::Chunked(_) => "round",
        Workload::MultiWrite(_) => "requests",
        Workload::Burst(_) | Workload::BulkAck(_) | Workload::Rr(_) | Workload::Exchange(_) => "rounds",
        Workload::Stream(_) => bail!("--rounds: the stream scenario runs for a time; use --set duration_ms=N"),
    })
}

fn side(flag: &str, list: Option<&str>) -> anyhow::Result<SideOpts> {
    SideOpts::parse_list(list.unwrap_or("none")).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

/// `--matrix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Matrix {
    /// The scenario's own strategy pairs
    Default,
    /// The default, then each strategy on both sides
    All,
    /// Seed 003's table (`tcpstall lab stream --matrix seed003` only)
    Seed003,
}

impl std::fmt::Display for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = clap::ValueEnum::to_possible_value(self);
        f.write_str(v.as_ref().map_or("", |v| v.get_name()))
    }
}

/// Lets code that compared the old string flag (`matrix == "seed003"`) keep compiling.
impl PartialEq<&str> for Matrix {
    fn eq(&self, other: &&str) -> bool {
        clap::ValueEnum::to_possible_value(self).is_some_and(|v| v.get_name() == *other)
    }
}

/// `--matrix all`: the default, then every single strategy applied on both sides.
pub(crate) fn matrix_all() -> Vec<StrategyPair> {
    let mut m = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    for o in Opt::ALL {
        let side = SideOpts::new(vec![o]).unwrap_or_default();
        m.push(StrategyPair { label: o.as_str().to_string(), client: side.clone(), server: side });
    }
    m
}
