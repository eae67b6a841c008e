//! advise's flags as a typed [`Request`]: the side the user owns (`--side`), the workload's
//! overrides (`--set`, `--rounds`) and the runs per candidate (`--reps`). Pure: the workload
//! itself (a built-in, a file, a capture) is found by the caller.
//!
//! The error messages name the flag a value came from: they are what the user reads.

use scenario::{OverrideError, Overrides, Scenario, Side};

use crate::{Lang, Request};

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
    notes.extend(link.map(|l| format!("runs behind an emulated link: {l}")));
    notes
}

/// The flags besides the workload, parsed.
#[derive(Debug, Clone)]
pub struct Settings<'a> {
    /// `--set KEY=VALUE`, in order.
    pub sets: &'a [String],
    /// Measured rounds per run (the workload's round-count parameter).
    pub rounds: u32,
    pub reps: u32,
    pub model: bool,
    pub peer_profile: Option<String>,
    pub own: Side,
    pub lang: Lang,
    pub seed: u64,
    pub keep_first: bool,
}

impl Request {
    /// The request for `scenario`: --set, then --rounds applied to it, then --reps checked (1
    /// to 100). A peer profile runs on the model.
    pub fn new(mut scenario: Scenario, s: Settings) -> Result<Request, RequestError> {
        scenario.apply(&Overrides { sets: s.sets, rounds: Some(s.rounds), ..Overrides::default() })?;
        if !(1..=100).contains(&s.reps) {
            return Err(RequestError::Reps(s.reps));
        }
        Ok(Request {
            scenario,
            reps: s.reps,
            rounds: s.rounds,
            model: s.model || s.peer_profile.is_some(),
            peer_profile: s.peer_profile,
            own: s.own,
            lang: s.lang,
            seed: s.seed,
            keep_first: s.keep_first,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(sets: &[String], rounds: u32, reps: u32) -> Settings<'_> {
        Settings {
            sets,
            rounds,
            reps,
            model: false,
            peer_profile: Some("macos".into()),
            own: Side::Server,
            lang: Lang::C,
            seed: 1,
            keep_first: false,
        }
    }

    #[test]
    fn sets_then_rounds_then_reps() {
        let mw = || Scenario::builtin("multi-write").unwrap();
        let r = Request::new(mw(), settings(&["response=7".into()], 9, 5)).unwrap();
        assert_eq!(r.scenario.workload.params_json()["requests"], 9);
        assert_eq!(r.scenario.workload.params_json()["response"], 7);
        assert!(r.model, "a peer profile runs on the model");
        let e = Request::new(mw(), settings(&["bogus=1".into()], 9, 0)).unwrap_err().to_string();
        assert!(e.starts_with("--set bogus: "), "{e}");
        let e = Request::new(mw(), settings(&[], 9, 101)).unwrap_err().to_string();
        assert_eq!(e, "--reps 101: expected 1 to 100 runs per candidate");
        let e = Request::new(Scenario::builtin("stream").unwrap(), settings(&[], 9, 5)).unwrap_err();
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
