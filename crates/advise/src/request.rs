//! advise's flags as a typed [`Request`]: the side the user owns (`--side`), the workload's
//! overrides (`--set`, `--rounds`) and the runs per candidate (`--reps`). Pure: the workload
//! itself (a built-in, a file, a capture) is found by the caller.
//!
//! The error messages name the flag a value came from: they are what the user reads.

use scenario::{OverrideError, Overrides, Side};

use crate::Request;

/// A flag of advise that does not parse or does not fit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("--side {0}: expected client or server")]
    Side(String),
    /// A `--set` or `--rounds` the workload refuses (the message names it).
    #[error(transparent)]
    Overrides(#[from] OverrideError),
    #[error("--reps {0}: expected 1 to 100 runs per candidate")]
    Reps(u32),
}

/// `--side`: client or server.
pub fn parse_side(s: &str) -> Result<Side, RequestError> {
    match s {
        "client" => Ok(Side::Client),
        "server" => Ok(Side::Server),
        o => Err(RequestError::Side(o.to_string())),
    }
}

/// The notes that open the advice: where a workload derived from the capture `file` came from
/// (`derived`), and the emulated link the runs go behind.
pub fn source_notes(derived: Option<(&str, &scenario::derive::Derived)>, link: Option<&str>) -> Vec<String> {
    let mut notes: Vec<String> = derived
        .map(|(file, d)| {
            format!(
                "the workload is derived from {file} (flow {}, {} repetitions): {}; check it with `tcpstall replay {file}`",
                d.key,
                d.reps,
                d.exchange.inline()
            )
        })
        .into_iter()
        .collect();
    if let Some((_, d)) = derived {
        notes.extend(d.kept.iter().map(|k| format!("{k}: the workload runs so as written")));
    }
    notes.extend(link.map(|l| format!("runs behind an emulated link: {l}")));
    notes
}

impl Request {
    /// This request with `sets` (`--set KEY=VALUE`, in order), then its `rounds`, applied to its
    /// scenario, its `reps` checked (1 to 100), and on the model when it names a peer profile.
    pub fn with_overrides(mut self, sets: &[String]) -> Result<Request, RequestError> {
        self.scenario.apply(&Overrides { sets, rounds: Some(self.rounds), ..Overrides::default() })?;
        if !(1..=100).contains(&self.reps) {
            return Err(RequestError::Reps(self.reps));
        }
        self.model |= self.peer_profile.is_some();
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Lang;
    use scenario::Scenario;

    fn request(scenario: Scenario, sets: &[String], rounds: u32, reps: u32) -> Result<Request, RequestError> {
        Request {
            scenario,
            rounds,
            reps,
            model: false,
            peer_profile: Some("macos".into()),
            own: Side::Server,
            lang: Lang::C,
            seed: 1,
            keep_first: false,
            separate_replies: Vec::new(),
            budget_s: None,
        }
        .with_overrides(sets)
    }

    #[test]
    fn sets_then_rounds_then_reps() {
        let mw = || Scenario::builtin("multi-write").unwrap();
        let r = request(mw(), &["response=7".into()], 9, 5).unwrap();
        assert_eq!(r.scenario.workload.params_json()["requests"], 9);
        assert_eq!(r.scenario.workload.params_json()["response"], 7);
        assert!(r.model, "a peer profile runs on the model");
        let e = request(mw(), &["bogus=1".into()], 9, 0).unwrap_err().to_string();
        assert!(e.starts_with("--set bogus: "), "{e}");
        let e = request(mw(), &[], 9, 101).unwrap_err().to_string();
        assert_eq!(e, "--reps 101: expected 1 to 100 runs per candidate");
        let e = request(Scenario::builtin("stream").unwrap(), &[], 9, 5).unwrap_err();
        assert_eq!(e, RequestError::Overrides(OverrideError::RoundsOfStream));
    }

    #[test]
    fn notes_say_where_the_workload_came_from_and_the_link() {
        assert!(source_notes(None, None).is_empty());
        assert_eq!(source_notes(None, Some("rtt=20ms")), ["runs behind an emulated link: rtt=20ms"]);
    }

    #[test]
    fn side_is_client_or_server() {
        assert_eq!(parse_side("server"), Ok(Side::Server));
        assert_eq!(parse_side("both").unwrap_err().to_string(), "--side both: expected client or server");
    }
}
