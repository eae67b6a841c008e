//! What the command line changes in a scenario (`--set`, `--rounds`, `--client`/`--server`,
//! `--matrix`), as one typed [`Overrides`] the scenario applies in that order; and where a
//! scenario comes from (an inline exchange, a file, a built-in name: [`Scenario::load`]).
//!
//! The error messages name the flag a value came from: they are what the user reads.

use std::str::FromStr;

use crate::{Exchange, Opt, Scenario, ScenarioError, SideOpts, StrategyError, StrategyPair, Workload};

/// `--matrix`: which strategy pairs to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Matrix {
    /// The scenario's own strategy pairs.
    #[default]
    Default,
    /// The default, then each strategy on both sides ([`matrix_all`]).
    All,
    /// Seed 003's table: the lab runs it itself, over veth (`lab stream --matrix seed003`).
    Seed003,
}

impl Matrix {
    pub fn as_str(self) -> &'static str {
        match self {
            Matrix::Default => "default",
            Matrix::All => "all",
            Matrix::Seed003 => "seed003",
        }
    }
}

/// A flag's value that does not apply to the scenario.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OverrideError {
    /// A `--set` (the message names it).
    #[error(transparent)]
    Set(#[from] ScenarioError),
    /// (`error`, not `source`: the message already says it, a source would repeat it.)
    #[error("--rounds: {0}")]
    Rounds(ScenarioError),
    #[error("--rounds: the stream scenario runs for a time; use --set duration_ms=N")]
    RoundsOfStream,
    #[error("--client/--server run one pair; they cannot go with --matrix {}", .0.as_str())]
    PairWithMatrix(Matrix),
    #[error("--matrix seed003 is seed 003's table: `tcpstall lab stream --matrix seed003`")]
    Seed003,
    #[error("--{flag}: {error}")]
    Side { flag: &'static str, error: StrategyError },
}

/// The overrides of a scenario, as the flags give them.
#[derive(Debug, Clone, Default)]
pub struct Overrides<'a> {
    /// `--set KEY=VALUE`, in order.
    pub sets: &'a [String],
    /// `--rounds N`: the workload's round-count parameter ([`Workload::rounds_key`]).
    pub rounds: Option<u32>,
    /// `--client LIST` / `--server LIST`: one pair instead of the matrix (`none` when only the
    /// other is given).
    pub client: Option<&'a str>,
    pub server: Option<&'a str>,
    pub matrix: Matrix,
}

impl Scenario {
    /// Apply --set, then --rounds, then the strategy pair of --client/--server or --matrix; the
    /// first that does not apply is the error.
    pub fn apply(&mut self, o: &Overrides) -> Result<(), OverrideError> {
        self.apply_sets(o.sets)?;
        if let Some(n) = o.rounds {
            let key = self.workload.rounds_key().ok_or(OverrideError::RoundsOfStream)?;
            self.apply_sets(&[format!("{key}={n}")]).map_err(OverrideError::Rounds)?;
        }
        if o.client.is_some() || o.server.is_some() {
            if o.matrix != Matrix::Default {
                return Err(OverrideError::PairWithMatrix(o.matrix));
            }
            let side = |flag, list: Option<&str>| {
                list.unwrap_or("none").parse::<SideOpts>().map_err(|error| OverrideError::Side { flag, error })
            };
            self.matrix = vec![StrategyPair::new(side("client", o.client)?, side("server", o.server)?)];
            return Ok(());
        }
        match o.matrix {
            Matrix::Default => {}
            Matrix::All => self.matrix = matrix_all(),
            Matrix::Seed003 => return Err(OverrideError::Seed003),
        }
        Ok(())
    }
}

impl Workload {
    /// The parameter that counts rounds (what `--rounds` sets); none for the stream, which
    /// runs for a time.
    pub fn rounds_key(&self) -> Option<&'static str> {
        match self {
            Workload::Chunked(_) => Some("round"),
            Workload::MultiWrite(_) => Some("requests"),
            Workload::Burst(_) | Workload::BulkAck(_) | Workload::Rr(_) | Workload::Exchange(_) => Some("rounds"),
            Workload::Stream(_) => None,
        }
    }
}

/// `--matrix all`: the default, then every single strategy applied on both sides.
pub fn matrix_all() -> Vec<StrategyPair> {
    let mut m = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    for o in Opt::ALL {
        let side = SideOpts::new(vec![o]).unwrap_or_default();
        m.push(StrategyPair { label: o.as_str().to_string(), client: side.clone(), server: side });
    }
    m
}

/// A strategy list (`--client cork,nodelay`, `none`): [`SideOpts::parse_list`].
impl FromStr for SideOpts {
    type Err = StrategyError;
    fn from_str(s: &str) -> Result<Self, StrategyError> {
        SideOpts::parse_list(s)
    }
}

/// Where a scenario does not come from.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoadError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("--exchange is the workload; drop the scenario '{0}'")]
    ExchangeAndName(String),
    #[error(
        "{0} is a capture: `tcpstall replay {0}` derives the exchange it carried, `tcpstall advise {0}` advises on it"
    )]
    Capture(String),
    /// The file could not be read (the reader's message).
    #[error("cannot read scenario file {file}: {error}")]
    Read { file: String, error: String },
}

/// A scenario argument names a file when it ends in .toml or has a path separator.
pub fn is_file(name: &str) -> bool {
    name.ends_with(".toml") || name.contains('/')
}

/// A path that names a capture (by its extension) rather than a scenario file: `.pcap`,
/// `.pcapng`, `.cap`.
pub fn is_capture(name: &str) -> bool {
    [".pcap", ".pcapng", ".cap"].iter().any(|ext| name.ends_with(ext))
}

impl Scenario {
    /// The workload to run: the inline `exchange`, a scenario file (`read` gives its text), or
    /// a built-in by name (default chunked). A capture's name ([`is_capture`]) is refused
    /// with what to run instead.
    pub fn load(
        name: Option<&str>,
        exchange: Option<&str>,
        read: impl FnOnce(&str) -> std::io::Result<String>,
    ) -> Result<Scenario, LoadError> {
        if let Some(ex) = exchange {
            if let Some(n) = name {
                return Err(LoadError::ExchangeAndName(n.to_string()));
            }
            let e = Exchange::parse_inline(ex)?;
            return Ok(Scenario::from_exchange("exchange", &format!("--exchange \"{}\"", e.inline()), e));
        }
        let name = name.unwrap_or("chunked");
        if is_capture(name) {
            return Err(LoadError::Capture(name.to_string()));
        }
        if is_file(name) {
            let text = read(name).map_err(|e| LoadError::Read { file: name.to_string(), error: e.to_string() })?;
            return Ok(Scenario::from_toml(name, &text)?);
        }
        Ok(Scenario::builtin(name)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked() -> Scenario {
        Scenario::builtin("chunked").unwrap()
    }

    #[test]
    fn rounds_uses_each_workloads_key() {
        let mut s = chunked();
        s.apply(&Overrides { rounds: Some(7), ..Overrides::default() }).unwrap();
        assert_eq!(s.workload.params_json()["round"], 7);
        let mut s = Scenario::builtin("multi-write").unwrap();
        s.apply(&Overrides { rounds: Some(7), ..Overrides::default() }).unwrap();
        assert_eq!(s.workload.params_json()["requests"], 7);
        let e = Scenario::builtin("stream").unwrap().apply(&Overrides { rounds: Some(7), ..Overrides::default() });
        assert_eq!(e, Err(OverrideError::RoundsOfStream));
        let e = chunked().apply(&Overrides { rounds: Some(0), ..Overrides::default() }).unwrap_err().to_string();
        assert!(e.starts_with("--rounds: --set round: "), "{e}");
    }

    #[test]
    fn one_pair_or_a_matrix() {
        let mut s = chunked();
        s.apply(&Overrides { client: Some("cork"), ..Overrides::default() }).unwrap();
        assert_eq!(s.matrix.len(), 1);
        assert_eq!(s.matrix[0].label, "client:cork");
        let mut s = chunked();
        s.apply(&Overrides { matrix: Matrix::All, ..Overrides::default() }).unwrap();
        assert_eq!(s.matrix.len(), 1 + Opt::ALL.len());
        let both = Overrides { server: Some("cork"), matrix: Matrix::All, ..Overrides::default() };
        let e = chunked().apply(&both).unwrap_err().to_string();
        assert_eq!(e, "--client/--server run one pair; they cannot go with --matrix all");
        let e = chunked().apply(&Overrides { client: Some("bogus"), ..Overrides::default() }).unwrap_err();
        assert!(e.to_string().starts_with("--client: unknown strategy 'bogus'"), "{e}");
        let e = chunked().apply(&Overrides { matrix: Matrix::Seed003, ..Overrides::default() }).unwrap_err();
        assert_eq!(e, OverrideError::Seed003);
    }

    #[test]
    fn load_an_exchange_a_file_or_a_builtin() {
        let no_file = |_: &str| -> std::io::Result<String> { Err(std::io::ErrorKind::NotFound.into()) };
        let s = Scenario::load(None, Some("client 10; server 5"), no_file).unwrap();
        assert_eq!(s.name, "exchange");
        let e = Scenario::load(Some("rr"), Some("client 10"), no_file).unwrap_err();
        assert_eq!(e, LoadError::ExchangeAndName("rr".into()));
        assert_eq!(Scenario::load(None, None, no_file).unwrap().name, "chunked");
        let e = Scenario::load(Some("x.pcap"), None, no_file).unwrap_err();
        assert!(e.to_string().starts_with("x.pcap is a capture: `tcpstall replay x.pcap`"), "{e}");
        let e = Scenario::load(Some("dir/x.toml"), None, no_file).unwrap_err().to_string();
        assert!(e.starts_with("cannot read scenario file dir/x.toml: "), "{e}");
        let text = Scenario::builtin_text("rr").unwrap();
        assert_eq!(Scenario::load(Some("rr.toml"), None, |_| Ok(text.into())).unwrap().name, "rr");
        assert!(is_file("a/b") && is_file("b.toml") && !is_file("burst"));
    }
}
