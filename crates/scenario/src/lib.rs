//! Scenarios as data: a workload, its default strategy matrix, and where it comes from.
//!
//! The built-in catalogue lives in `data/*.toml` (one file a scenario, unknown keys rejected),
//! compiled into the binary. `--set key=value` overrides a workload parameter by editing the
//! parsed TOML and deserialising again, so an override is validated exactly like the file.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
mod conf;
pub mod derive;
mod exchange;
mod limits;
mod link_spec;
mod overrides;
mod program;
mod strategy;
mod workload;

pub use conf::{parse_tcp_test_conf, TcpTestConf};
pub use exchange::{format_duration, CallKind, Connection, Exchange, Side, Turn};
pub use limits::{
    MAX_BURST_BYTES, MAX_BURST_N, MAX_BYTES, MAX_DEPTH, MAX_DURATION_MS, MAX_INTERVAL_MS, MAX_SAMPLES, MAX_VARIANTS,
    MAX_WARMUP, MAX_WRITES,
};
pub use link_spec::{
    parse_duration_ns, AckDir, DurationError, LinkSpec, LinkSpecError, LinkValueError, QueueLimit, MAX_MTU, MIN_MTU,
    TUN_MAX_MTU,
};
pub use overrides::{is_capture, is_file, matrix_all, LoadError, Matrix, OverrideError, Overrides};
pub use program::{Program, RoundProgram, Sample, SideProgram, Step};
pub use strategy::{Call, MessagePlan, Opt, SideOpts, SockOp, StrategyError, StrategyPair};
pub use workload::{split, BulkAck, Burst, Chunked, MultiWrite, Rr, Stream, Workload};

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
    #[serde(default)]
    pub summary: String,
    /// What the seed found, in one sentence, for `tcpstall scenarios`.
    #[serde(default)]
    pub finding: String,
    pub workload: Workload,
    /// The strategy pairs to run; a user's file may leave it out (the default pair alone).
    #[serde(default = "default_matrix")]
    pub matrix: Vec<StrategyPair>,
}

fn default_matrix() -> Vec<StrategyPair> {
    vec![StrategyPair::new(SideOpts::none(), SideOpts::none())]
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
        let s: Scenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse { file: file.into(), msg: toml_error(text, &e) })?;
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

    /// The file text of a built-in scenario (what `tcpstall scenarios --show NAME` prints).
    pub fn builtin_text(name: &str) -> Result<&'static str, ScenarioError> {
        BUILTIN
            .iter()
            .find(|(f, _)| f.strip_suffix(".toml") == Some(name))
            .map(|(_, t)| *t)
            .ok_or_else(|| ScenarioError::Unknown(name.to_string()))
    }

    /// A built-in as a file to start from (`tcpstall scenarios --show NAME`): conversations
    /// (chunked, multi-write, rr) in the exchange form with the same matrix, the others as their
    /// own file; a comment heading says which.
    pub fn builtin_as_file(name: &str) -> Result<String, ScenarioError> {
        let s = Scenario::builtin(name)?;
        let Some(e) = s.workload.as_exchange() else {
            return Ok(format!(
                "# built-in scenario '{name}' ({} is not a turn-by-turn exchange, so it keeps its kind)\n{}",
                s.workload.kind(),
                Scenario::builtin_text(name)?
            ));
        };
        let file = Scenario { workload: Workload::Exchange(e), ..s };
        Ok(format!(
            "# built-in scenario '{name}' as an exchange: the same programs as `tcpstall lab {name}`.\n\
             # Edit the turns (side, writes, call = write|send|sendmsg-gathered, think = \"1ms\", peer_reads)\n\
             # and run it with `tcpstall lab FILE.toml`, `tcpstall simulate FILE.toml` or `tcpstall advise FILE.toml`.\n{}",
            file.to_toml()?
        ))
    }

    /// A scenario running one exchange with the default pair (`--exchange`, `replay`).
    pub fn from_exchange(name: &str, summary: &str, e: Exchange) -> Scenario {
        Scenario {
            name: name.into(),
            seed: None,
            summary: summary.into(),
            finding: String::new(),
            workload: Workload::Exchange(e),
            matrix: default_matrix(),
        }
    }

    /// The scenario as a file of the same format the built-ins and users' files are in.
    pub fn to_toml(&self) -> Result<String, ScenarioError> {
        toml::to_string(self).map_err(|e| ScenarioError::Invalid(one_line(&e.to_string())))
    }

    pub fn builtin(name: &str) -> Result<Scenario, ScenarioError> {
        Scenario::catalogue()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ScenarioError::Unknown(name.to_string()))
    }

    /// Apply `key=value` overrides to the workload's parameters. A number parameter takes a
    /// whole number; a list parameter (`writes`, `sweep`, `depths`) a comma list (`275,24,292`,
    /// brackets optional) or one number (a one-element list). For bulk-ack, a list for `depth`
    /// is a depth sweep (`depths`). Each value is checked against its limits (crate::limits) as
    /// it is set; then the result is validated exactly like a scenario file. On error the
    /// scenario is left as it was.
    pub fn apply_sets<S: AsRef<str>>(&mut self, sets: &[S]) -> Result<(), ScenarioError> {
        let mut workload = self.workload.clone();
        for set in sets {
            let set = set.as_ref();
            let (key, value) = set.split_once('=').ok_or_else(|| ScenarioError::BadSet(set.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(ScenarioError::BadSet(set.to_string()));
            }
            let rejected = |msg: String| ScenarioError::SetRejected { key: key.into(), msg };
            let kind = workload.kind();
            let mut doc = toml::Value::try_from(&workload).map_err(|e| rejected(one_line(&e.to_string())))?;
            let params = doc
                .get_mut(kind)
                .and_then(|v| v.as_table_mut())
                .ok_or_else(|| rejected("workload has no parameters".into()))?;
            let optional = optional_keys(kind);
            // `round` (seed 000's own name, in chunked) and `rounds` (the other scenarios) name
            // the same thing: either is taken for the one the scenario has.
            let key = match key {
                "rounds" if params.contains_key("round") => "round",
                "round" if params.contains_key("rounds") => "rounds",
                k => k,
            };
            if !params.contains_key(key) && !optional.contains(&key) {
                let mut known: Vec<_> = params.keys().cloned().chain(optional.iter().map(|k| k.to_string())).collect();
                known.sort();
                known.dedup();
                return Err(rejected(format!("{} has no parameter '{key}' (it has: {})", self.name, known.join(", "))));
            }
            let is_list = |k: &str| optional.contains(&k) || params.get(k).is_some_and(|v| v.is_array());
            // Bulk-ack's depth takes a list too: the depths to sweep.
            let depth_sweep = kind == "bulk-ack" && key == "depth" && (value.contains(',') || value.starts_with('['));
            let (field, parsed) = if depth_sweep {
                ("depths", list_value(key, "depths", value)?)
            } else if is_list(key) {
                (key, list_value(key, key, value)?)
            } else if params.get(key).is_some_and(|v| v.is_integer()) {
                (key, int_value(key, value)?)
            } else {
                (key, parse_toml_value(value))
            };
            params.insert(field.to_string(), parsed);
            if kind == "bulk-ack" && key == "depth" && !depth_sweep {
                params.remove("depths");
            }
            let w: Workload = doc.try_into().map_err(|e: toml::de::Error| rejected(one_line(e.message())))?;
            workload = w;
        }
        // Between parameters (n x size, n_chunk <= send, ...) only once all are set, so the
        // order of the --set flags does not matter; the message names the parameters.
        workload.validate()?;
        self.workload = workload;
        Ok(())
    }
}

/// Parameters a workload may leave out of its file (list parameters that default to empty).
fn optional_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "bulk-ack" => &["depths", "sweep"],
        _ => &[],
    }
}

/// A whole number: `100000`, `100_000`.
fn whole(v: &str) -> Option<i128> {
    v.trim().replace('_', "").parse::<i128>().ok()
}

/// A number parameter's value, checked against its bounds.
fn int_value(key: &str, value: &str) -> Result<toml::Value, ScenarioError> {
    let rejected = |msg: String| ScenarioError::SetRejected { key: key.into(), msg };
    let n = whole(value).ok_or_else(|| rejected(format!("'{value}' is not a whole number")))?;
    limits::check(key, n).map_err(|e| rejected(e.to_string()))?;
    let n = i64::try_from(n).map_err(|_| rejected(format!("'{value}' is out of range")))?;
    Ok(toml::Value::Integer(n))
}

/// A list parameter's value: `1,2,3`, `[1, 2, 3]`, one number, or nothing (an empty list);
/// each element checked against the bounds of `bound`. `key` is what the user typed.
fn list_value(key: &str, bound: &str, value: &str) -> Result<toml::Value, ScenarioError> {
    let rejected = |msg: String| ScenarioError::SetRejected { key: key.into(), msg };
    let inner = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(value).trim();
    if inner.is_empty() {
        return Ok(toml::Value::Array(Vec::new()));
    }
    let items: Option<Vec<i128>> = inner.split(',').map(whole).collect();
    let items = items.ok_or_else(|| rejected(format!("'{value}' is not a list of whole numbers")))?;
    let mut out = Vec::with_capacity(items.len());
    for n in items {
        limits::check(bound, n).map_err(|e| rejected(e.to_string()))?;
        out.push(toml::Value::Integer(i64::try_from(n).map_err(|_| rejected(format!("'{value}' is out of range")))?));
    }
    Ok(toml::Value::Array(out))
}

/// Any other parameter: a TOML value, or else the text as a string.
fn parse_toml_value(v: &str) -> toml::Value {
    if let Ok(t) = format!("x = {v}").parse::<toml::Table>() {
        if let Some(x) = t.get("x") {
            return x.clone();
        }
    }
    toml::Value::String(v.to_string())
}

/// A toml error in one line: `line N: message` from its span (toml's own rendering spreads the
/// source line and a caret over three lines).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", one_line(e.message()))
        }
        None => one_line(&e.to_string()),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_and_rounds_are_one_parameter() {
        let mut c = Scenario::builtin("chunked").unwrap();
        c.apply_sets(&["rounds=7"]).unwrap();
        assert_eq!(c.workload.params_json()["round"], 7);
        let mut b = Scenario::builtin("burst").unwrap();
        b.apply_sets(&["round=5"]).unwrap();
        assert_eq!(b.workload.params_json()["rounds"], 5);
        let e = Scenario::builtin("multi-write").unwrap().apply_sets(&["rounds=5"]).unwrap_err().to_string();
        assert!(e.contains("no parameter 'rounds'"), "{e}");
    }

    #[test]
    fn builtins_as_files_read_back() {
        let t = Scenario::builtin_as_file("multi-write").unwrap();
        assert!(t.starts_with("# built-in scenario 'multi-write' as an exchange"), "{t}");
        let s = Scenario::from_toml("m.toml", &t).unwrap();
        assert_eq!(s.workload.kind(), "exchange");
        assert_eq!(s.matrix, Scenario::builtin("multi-write").unwrap().matrix);
        let t = Scenario::builtin_as_file("stream").unwrap();
        assert!(t.contains("(stream is not a turn-by-turn exchange"), "{t}");
        assert_eq!(Scenario::from_toml("s.toml", &t).unwrap().workload.kind(), "stream");
        assert!(Scenario::builtin_as_file("nope").is_err());
    }

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
        let mut b = Scenario::builtin("bulk-ack").unwrap();
        let e = b.apply_sets(&["bogus=1"]).unwrap_err().to_string();
        assert!(e.ends_with("(it has: depth, depths, rounds, size, sweep)"), "{e}");
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
            ("bulk-ack", "sweep=1,99999999999", "each size of sweep = 99999999999 is above the limit of 67108864"),
            ("rr", "rounds=4000000000", "rounds = 4000000000 is above the limit of 1000000"),
            ("rr", "size=99999999999999999999", "size = 99999999999999999999 is above the limit of 67108864"),
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
        // Limits between parameters are checked once all are set: the order of --set does not matter.
        let mut s = Scenario::builtin("burst").unwrap();
        s.apply_sets(&["n=10000", "size=104", "rounds=100"]).unwrap();
        let mut s = Scenario::builtin("chunked").unwrap();
        s.apply_sets(&["send=10", "n_chunk=5"]).unwrap();
    }

    /// QA finding 11: values are read as the parameter's type, with our words, not serde's.
    #[test]
    fn set_values_are_whole_numbers_or_lists_in_plain_words() {
        let mut s = Scenario::builtin("bulk-ack").unwrap();
        s.apply_sets(&["sweep=100000"]).unwrap();
        let Workload::BulkAck(b) = &s.workload else { panic!() };
        assert_eq!(b.sweep, vec![100_000]);
        s.apply_sets(&["sweep=[99_912, 100000]"]).unwrap();
        assert_eq!(s.workload.variants().len(), 2);
        s.apply_sets(&["sweep="]).unwrap();
        assert_eq!(s.workload.variants().len(), 1);

        let mut s = Scenario::builtin("multi-write").unwrap();
        let e = s.apply_sets(&["writes=275,abc"]).unwrap_err().to_string();
        assert_eq!(e, "--set writes: '275,abc' is not a list of whole numbers");
        let e = s.apply_sets(&["writes=1.5"]).unwrap_err().to_string();
        assert_eq!(e, "--set writes: '1.5' is not a list of whole numbers");
        let e = s.apply_sets(&["response=abc"]).unwrap_err().to_string();
        assert_eq!(e, "--set response: 'abc' is not a whole number");
        let e = s.apply_sets(&["requests=1.5"]).unwrap_err().to_string();
        assert_eq!(e, "--set requests: '1.5' is not a whole number");
        let e = s.apply_sets(&["requests=-3"]).unwrap_err().to_string();
        assert_eq!(e, "--set requests: requests must be at least 1");
        let e = s.apply_sets(&["writes=275,-1"]).unwrap_err().to_string();
        assert_eq!(e, "--set writes: each of writes must be at least 1");
        s.apply_sets(&["writes=600"]).unwrap();
        let Workload::MultiWrite(m) = &s.workload else { panic!() };
        assert_eq!(m.writes, vec![600]);
        for set in ["writes=x", "response=[1]", "warmup=", "requests=1e3"] {
            let e = s.apply_sets(&[set]).unwrap_err().to_string();
            assert!(!e.contains("invalid type") && !e.contains("expected"), "serde wording in: {e}");
        }
    }

    #[test]
    fn bulk_ack_depth_can_be_swept_with_sizes() {
        let mut s = Scenario::builtin("bulk-ack").unwrap();
        s.apply_sets(&["depth=1,2"]).unwrap();
        let labels: Vec<_> = s.workload.variants().into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, ["size=100000 depth=1", "size=100000 depth=2"]);
        s.apply_sets(&["sweep=99912,100000"]).unwrap();
        let v = s.workload.variants();
        let labels: Vec<_> = v.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["size=99912 depth=1", "size=99912 depth=2", "size=100000 depth=1", "size=100000 depth=2"]);
        // Each variant is one concrete workload: its program sends `depth - 1` messages ahead.
        let Program::Rounds(p) = v[3].1.program() else { panic!() };
        assert_eq!(p.client.prologue, vec![Step::Send(vec![100_000])]);
        assert_eq!(v[3].1.params_json()["depth"], 2);
        assert!(v[3].1.params_json().get("depths").is_none());
        // One depth again ends the depth sweep.
        s.apply_sets(&["depth=2"]).unwrap();
        assert_eq!(s.workload.variants().len(), 2);
        assert!(s.workload.variants().iter().all(|(l, _)| l.ends_with("depth=2")));
        let e = s.apply_sets(&["depth=1,65"]).unwrap_err().to_string();
        assert_eq!(e, "--set depth: each of depths = 65 is above the limit of 64 (messages in flight)");
        let e = s.apply_sets(&["depth=1,x"]).unwrap_err().to_string();
        assert_eq!(e, "--set depth: '1,x' is not a list of whole numbers");
        // A scenario file may list depths too.
        let mut t = toml::to_string(&Scenario::builtin("bulk-ack").unwrap()).unwrap();
        t = t.replace("depth = 1\n", "depth = 1\ndepths = [1, 2]\n");
        assert_eq!(Scenario::from_toml("b.toml", &t).unwrap().workload.variants().len(), 2);
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
