//! Scenarios as data: a workload, its default strategy matrix, and where it comes from.
//!
//! The built-in catalogue lives in `data/*.toml` (one file a scenario, unknown keys rejected),
//! compiled into the binary. `--set key=value` overrides a workload parameter by editing the
//! parsed TOML and deserialising again, so an override is validated exactly like the file.

mod conf;
mod limits;
mod link_spec;
mod strategy;
mod workload;

pub use conf::{parse_tcp_test_conf, TcpTestConf};
pub use limits::{
    MAX_BURST_BYTES, MAX_BURST_N, MAX_BYTES, MAX_DEPTH, MAX_DURATION_MS, MAX_INTERVAL_MS, MAX_SAMPLES, MAX_VARIANTS,
    MAX_WARMUP, MAX_WRITES,
};
pub use link_spec::{parse_duration_ns, AckDir, DurationError, LinkSpec, QueueLimit};
pub use strategy::{Call, MessagePlan, Opt, SideOpts, SockOp, StrategyPair};
pub use workload::{
    split, BulkAck, Burst, Chunked, MultiWrite, Program, RoundProgram, Rr, Sample, SideProgram, Step, Stream, Workload,
};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScenarioError {
    #[error("unknown scenario '{0}' (run `tcpstall scenarios` for the list)")]
    Unknown(String),
    #[error("{0}")]
    Invalid(String),
    #[error("scenario file {file}: {msg}")]
    Parse { file: String, msg: String },
    #[error("--set {0}: expected key=value")]
    BadSet(String),
    #[error("--set {key}: {msg}")]
    SetRejected { key: String, msg: String },
    #[error("{file}:{line}: {msg}")]
    Conf { file: String, line: usize, msg: String },
}

/// A scenario: a workload with its default strategy matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// The seed report this reproduces ("000" .. "004"), if any.
    #[serde(default)]
    pub seed: Option<String>,
    pub summary: String,
    /// What the seed found, in one sentence, for `tcpstall scenarios`.
    #[serde(default)]
    pub finding: String,
    pub workload: Workload,
    pub matrix: Vec<StrategyPair>,
}

const BUILTIN: &[(&str, &str)] = &[
    ("chunked.toml", include_str!("../data/chunked.toml")),
    ("multi-write.toml", include_str!("../data/multi-write.toml")),
    ("burst.toml", include_str!("../data/burst.toml")),
    ("bulk-ack.toml", include_str!("../data/bulk-ack.toml")),
    ("stream.toml", include_str!("../data/stream.toml")),
    ("rr.toml", include_str!("../data/rr.toml")),
];

impl Scenario {
    /// Parse a scenario file's text; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text)
            .map_err(|e| ScenarioError::Parse { file: file.into(), msg: one_line(&e.to_string()) })?;
        s.workload.validate().map_err(|e| ScenarioError::Parse { file: file.into(), msg: e.to_string() })?;
        if s.matrix.is_empty() {
            return Err(ScenarioError::Parse {
                file: file.into(),
                msg: "matrix must list at least one strategy".into(),
            });
        }
        Ok(s)
    }

    /// The built-in catalogue, in display order.
    pub fn catalogue() -> Vec<Scenario> {
        BUILTIN
            .iter()
            .map(|(f, t)| Scenario::from_toml(f, t).unwrap_or_else(|e| panic!("built-in scenario is invalid: {e}")))
            .collect()
    }

    pub fn builtin(name: &str) -> Result<Scenario, ScenarioError> {
        Scenario::catalogue()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ScenarioError::Unknown(name.to_string()))
    }

    /// Apply `key=value` overrides to the workload's parameters. Values are TOML values;
    /// a bare comma list (`275,24,292`) is read as an array of integers.
    pub fn apply_sets<S: AsRef<str>>(&mut self, sets: &[S]) -> Result<(), ScenarioError> {
        for set in sets {
            let set = set.as_ref();
            let (key, value) = set.split_once('=').ok_or_else(|| ScenarioError::BadSet(set.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(ScenarioError::BadSet(set.to_string()));
            }
            let parsed = parse_value(value);
            let kind = self.workload.kind();
            let mut doc = toml::Value::try_from(&self.workload)
                .map_err(|e| ScenarioError::SetRejected { key: key.into(), msg: e.to_string() })?;
            let params = doc.get_mut(kind).and_then(|v| v.as_table_mut()).ok_or_else(|| {
                ScenarioError::SetRejected { key: key.into(), msg: "workload has no parameters".into() }
            })?;
            if !params.contains_key(key) && !optional_key(kind, key) {
                let mut known: Vec<_> = params.keys().cloned().collect();
                known.sort();
                return Err(ScenarioError::SetRejected {
                    key: key.into(),
                    msg: format!("{} has no parameter '{key}' (it has: {})", self.name, known.join(", ")),
                });
            }
            params.insert(key.to_string(), parsed);
            let w: Workload = doc.try_into().map_err(|e: toml::de::Error| ScenarioError::SetRejected {
                key: key.into(),
                msg: one_line(e.message()),
            })?;
            w.validate().map_err(|e| ScenarioError::SetRejected { key: key.into(), msg: e.to_string() })?;
            self.workload = w;
        }
        Ok(())
    }
}

fn optional_key(kind: &str, key: &str) -> bool {
    kind == "bulk-ack" && key == "sweep"
}

fn parse_value(v: &str) -> toml::Value {
    if let Ok(i) = v.replace('_', "").parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if v.contains(',') && !v.starts_with('[') {
        let items: Option<Vec<toml::Value>> =
            v.split(',').map(|p| p.trim().replace('_', "").parse::<i64>().ok().map(toml::Value::Integer)).collect();
        if let Some(items) = items {
            return toml::Value::Array(items);
        }
    }
    if let Ok(t) = format!("x = {v}").parse::<toml::Table>() {
        if let Some(x) = t.get("x") {
            return x.clone();
        }
    }
    toml::Value::String(v.to_string())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_has_the_six_scenarios() {
        let names: Vec<_> = Scenario::catalogue().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["chunked", "multi-write", "burst", "bulk-ack", "stream", "rr"]);
    }

    #[test]
    fn seed_000_defaults_match_tcp_test_conf() {
        let s = Scenario::builtin("chunked").unwrap();
        assert_eq!(s.workload, Workload::Chunked(Chunked { send: 1000, n_chunk: 100, round: 100 }));
    }

    #[test]
    fn set_overrides_are_validated_like_the_file() {
        let mut s = Scenario::builtin("multi-write").unwrap();
        s.apply_sets(&["writes=100,200", "requests=5"]).unwrap();
        let Workload::MultiWrite(m) = &s.workload else { panic!() };
        assert_eq!(m.writes, vec![100, 200]);
        assert_eq!(m.requests, 5);
        let e = s.apply_sets(&["bogus=1"]).unwrap_err().to_string();
        assert!(e.contains("no parameter 'bogus'"), "{e}");
        let e = s.apply_sets(&["response=0"]).unwrap_err().to_string();
        assert!(e.contains("response must be at least 1"), "{e}");
        let e = s.apply_sets(&["response=abc"]).unwrap_err().to_string();
        assert!(e.starts_with("--set response:"), "{e}");
        assert!(s.apply_sets(&["noequals"]).is_err());
    }

    #[test]
    fn bulk_ack_sweep_can_be_set() {
        let mut s = Scenario::builtin("bulk-ack").unwrap();
        s.apply_sets(&["sweep=99900,99912,99913,100000"]).unwrap();
        assert_eq!(s.workload.variants().len(), 4);
    }

    /// QA finding 2: `--set round=4000000000` aborted allocating 32 GB; every count of every
    /// workload now has a limit, and the message names the parameter and the limit.
    #[test]
    fn every_count_of_every_workload_has_a_limit() {
        let cases = [
            ("chunked", "round=4000000000", "round = 4000000000 is above the limit of 1000000"),
            ("chunked", "n_chunk=1025", "n_chunk = 1025 is above the limit of 1024"),
            ("multi-write", "requests=4000000000", "requests = 4000000000 is above the limit of 1000000"),
            ("multi-write", "warmup=4000000000", "warmup = 4000000000 is above the limit of 10000"),
            ("multi-write", "writes=67108864,1", "the request (sum of writes) = 67108865 is above the limit"),
            ("burst", "rounds=4000000000", "rounds = 4000000000 is above the limit of 1000000"),
            ("burst", "n=4000000000", "n = 4000000000 is above the limit of 10000"),
            ("burst", "rounds=400000", "n x rounds = 1200000 is above the limit of 1000000"),
            ("bulk-ack", "rounds=4000000000", "rounds = 4000000000 is above the limit of 1000000"),
            ("bulk-ack", "depth=65", "depth = 65 is above the limit of 64"),
            ("rr", "rounds=4000000000", "rounds = 4000000000 is above the limit of 1000000"),
            ("stream", "duration_ms=600001", "duration_ms = 600001 is above the limit of 600000"),
        ];
        for (name, set, want) in cases {
            let mut s = Scenario::builtin(name).unwrap();
            let before = s.workload.clone();
            let e = s.apply_sets(&[set]).unwrap_err().to_string();
            assert!(e.contains(want), "{name} {set}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
            assert_eq!(s.workload, before, "a rejected --set leaves the workload alone");
        }
        // The limits themselves are accepted.
        let mut s = Scenario::builtin("rr").unwrap();
        s.apply_sets(&["rounds=1000000", "size=67108864"]).unwrap();
    }

    #[test]
    fn unknown_keys_in_scenario_files_are_rejected() {
        let text = Scenario::catalogue()[5].clone();
        let mut t = toml::to_string(&text).unwrap();
        t.push_str("\ncolour = \"red\"\n");
        let e = Scenario::from_toml("x.toml", &t).unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn unknown_scenario_names_the_command_that_lists_them() {
        let e = Scenario::builtin("nope").unwrap_err().to_string();
        assert!(e.contains("tcpstall scenarios"));
    }
}
