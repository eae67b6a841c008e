//! Seed 000's `tcp_test.conf`: `key value` lines with keys no_delay, quickack, cork, msg_more
//! (0 or 1), send, n_chunk, round. Unknown keys, repeated keys and bad values are errors that
//! name the file and line.

use crate::{limits, Chunked, Opt, Scenario, ScenarioError, SideOpts, StrategyError, StrategyPair, Workload};

/// The parsed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpTestConf {
    pub no_delay: bool,
    pub quickack: bool,
    pub cork: bool,
    pub msg_more: bool,
    pub send: u32,
    pub n_chunk: u32,
    pub round: u32,
}

impl Default for TcpTestConf {
    fn default() -> Self {
        TcpTestConf {
            no_delay: false,
            quickack: false,
            cork: false,
            msg_more: false,
            send: 1000,
            n_chunk: 100,
            round: 100,
        }
    }
}

impl TcpTestConf {
    /// The seed program applies the same options on both sides. `quickack 1` there is set once
    /// after the connection is made, so it maps to `quickack-once`.
    pub fn side_opts(&self) -> Result<SideOpts, StrategyError> {
        let mut v = Vec::new();
        if self.no_delay {
            v.push(Opt::Nodelay);
        }
        if self.quickack {
            v.push(Opt::QuickackOnce);
        }
        if self.cork {
            v.push(Opt::Cork);
        }
        if self.msg_more {
            v.push(Opt::MsgMore);
        }
        SideOpts::new(v)
    }

    /// The chunked scenario with this configuration as its only strategy.
    pub fn scenario(&self) -> Result<Scenario, ScenarioError> {
        let mut s = Scenario::builtin("chunked")?;
        s.workload = Workload::Chunked(Chunked { send: self.send, n_chunk: self.n_chunk, round: self.round });
        s.workload.validate()?;
        let side = self.side_opts().map_err(|e| ScenarioError::Invalid(e.to_string()))?;
        let mut pair = StrategyPair::new(side.clone(), side);
        pair.label = format!("config:{}", pair.client);
        s.matrix = vec![pair];
        Ok(s)
    }
}

/// Parse the text of a tcp_test.conf. `file` names it in errors. Blank lines and `#` comments
/// are allowed.
pub fn parse_tcp_test_conf(file: &str, text: &str) -> Result<TcpTestConf, ScenarioError> {
    let mut c = TcpTestConf::default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |msg: String| ScenarioError::Conf { file: file.to_string(), line: line_no, msg };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let key = parts.next().unwrap_or("");
        let Some(value) = parts.next() else {
            return Err(err(format!("'{key}' has no value (expected `{key} VALUE`)")));
        };
        if parts.next().is_some() {
            return Err(err(format!("'{line}': expected one key and one value")));
        }
        if seen.contains(&key) {
            return Err(err(format!("'{key}' is set twice")));
        }
        let flag = |v: &str| match v {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(err(format!("{key} must be 0 or 1, not '{v}'"))),
        };
        // The same bounds as the scenario files and --set (crate::limits), named by this line.
        let num = |v: &str| -> Result<u32, ScenarioError> {
            let n = v.parse::<i128>().map_err(|_| err(format!("{key} must be a whole number, not '{v}'")))?;
            limits::check(key, n).map_err(|e| err(e.to_string()))?;
            u32::try_from(n).map_err(|_| err(format!("{key} = {n} is out of range")))
        };
        match key {
            "no_delay" => c.no_delay = flag(value)?,
            "quickack" => c.quickack = flag(value)?,
            "cork" => c.cork = flag(value)?,
            "msg_more" => c.msg_more = flag(value)?,
            "send" => c.send = num(value)?,
            "n_chunk" => c.n_chunk = num(value)?,
            "round" => c.round = num(value)?,
            other => {
                return Err(err(format!(
                    "unknown key '{other}' (known: no_delay, quickack, cork, msg_more, send, n_chunk, round)"
                )))
            }
        }
        seen.push(key);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_NODELAY: &str = "no_delay 1\nquickack 0\ncork 0\nmsg_more 0\nsend 1000\nn_chunk 100\nround 100\n";

    #[test]
    fn reads_the_seed_000_file() {
        let c = parse_tcp_test_conf("tcp_test.conf", SEED_NODELAY).unwrap();
        assert!(c.no_delay && !c.quickack);
        let s = c.scenario().unwrap();
        assert_eq!(s.matrix.len(), 1);
        assert_eq!(s.matrix[0].client, SideOpts::parse_list("nodelay").unwrap());
        assert_eq!(s.matrix[0].label, "config:nodelay");
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse_tcp_test_conf("t.conf", "send 1000\nno_dealy 1\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "t.conf:2: unknown key 'no_dealy' (known: no_delay, quickack, cork, msg_more, send, n_chunk, round)"
        );
        let e = parse_tcp_test_conf("t.conf", "cork 2\n").unwrap_err().to_string();
        assert!(e.contains("cork must be 0 or 1"), "{e}");
        let e = parse_tcp_test_conf("t.conf", "send 0\n").unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = parse_tcp_test_conf("t.conf", "round\n").unwrap_err().to_string();
        assert!(e.contains("no value"), "{e}");
        let e = parse_tcp_test_conf("t.conf", "round 1\nround 2\n").unwrap_err().to_string();
        assert!(e.contains("set twice"), "{e}");
        let e = parse_tcp_test_conf("t.conf", "round x\n").unwrap_err().to_string();
        assert_eq!(e, "t.conf:1: round must be a whole number, not 'x'");
    }

    #[test]
    fn counts_have_the_same_limits_as_the_scenario_files() {
        // QA: `round 4000000000` used to abort allocating 32 GB of samples.
        let e = parse_tcp_test_conf("t.conf", "send 1000\nround 4000000000\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "t.conf:2: round = 4000000000 is above the limit of 1000000 (each round keeps a latency sample in memory)"
        );
        let e = parse_tcp_test_conf("t.conf", "n_chunk 2000\n").unwrap_err().to_string();
        assert!(e.starts_with("t.conf:1: n_chunk = 2000 is above the limit of 1024 (UIO_MAXIOV"), "{e}");
        let e = parse_tcp_test_conf("t.conf", "send 99999999999\n").unwrap_err().to_string();
        assert!(e.starts_with("t.conf:1: send = 99999999999 is above the limit of 67108864"), "{e}");
        let c = parse_tcp_test_conf("t.conf", "round 1000000\nn_chunk 1024\nsend 67108864\n").unwrap();
        assert!(c.scenario().is_ok());
        // The --set path says the same.
        let mut s = c.scenario().unwrap();
        let e = s.apply_sets(&["round=4000000000"]).unwrap_err().to_string();
        assert!(e.contains("round = 4000000000 is above the limit of 1000000"), "{e}");
    }

    #[test]
    fn more_chunks_than_bytes_is_rejected() {
        let c = parse_tcp_test_conf("t", "send 10\nn_chunk 20\n").unwrap();
        assert!(c.scenario().is_err());
    }
}
