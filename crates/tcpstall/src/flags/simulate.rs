//! `tcpstall simulate`'s flags and their help; the scenario and the model's run options they
//! name.

use std::path::PathBuf;

use model::RunRequest;
use scenario::Scenario;

use super::common::ScenarioArgs;

/// Shown after the options. clap re-wraps any line longer than the terminal, so every line is
/// kept under 80 columns and reads the same at 80 and 100 (QA finding 14).
const EXAMPLES: &str = "\
Examples:
  tcpstall simulate bulk-ack --profile macos --set size=100000 --link mtu=1500
      seed 004 (100,000 B, then a 1-byte ack) on the macOS model
  tcpstall simulate bulk-ack --profile all --set sweep=99900,100000
      seed 004 on every profile, both sizes side by side
  tcpstall simulate bulk-ack --profile rfc-classic --mss 1460
      Windows' segment size (no timestamps): the segment parity flips
  tcpstall simulate chunked --profile linux --trace --set round=5
      the story of a stall, event by event
  tcpstall simulate multi-write --profile linux:macos
      a Linux client against a macOS server
  tcpstall simulate burst --profile linux:5.10
      seed 002 on Linux 5.10 as released (pingpong threshold 3)
  tcpstall simulate burst --compare-profiles
      seed 002 on every Linux era, where they differ
  tcpstall simulate --list-profiles
      the rules, their sources and what is unverified

The default link is the lab's: loopback with MTU 1500 (5 us each way,
40 Gbit/s). --link takes the lab's SPEC (rtt=20ms,rate=100mbit,loss=1%,...);
without rtt/delay it keeps loopback's delay, without rate loopback's rate.
--call-cost is the time one application call takes (default 2us): on
loopback it decides how small writes group into segments.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct SimulateArgs {
    /// Scenario to run (same as the positional argument)
    #[arg(long = "scenario", value_name = "NAME", conflicts_with = "scenario")]
    pub scenario_flag: Option<String>,
    /// Stack profile: linux, linux-2.6, rfc-classic, macos, freebsd, windows, a Linux era
    /// (linux:4.19, linux:5.4, linux:5.10, linux:5.15, linux:6.1, linux:6.6, linux:6.12), linux:here
    /// (this kernel, measured by `tcpstall kernel`), or a FILE.toml with the same keys; `all` runs the
    /// six stacks; CLIENT:SERVER pairs two (e.g. linux:macos, linux:5.10:linux); commas list several
    #[arg(long, value_name = "NAME", default_value = "linux")]
    pub profile: String,
    #[command(flatten)]
    pub common: ScenarioArgs,
    /// The modelled link (the lab's SPEC syntax)
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,
    /// Force the sender MSS (e.g. 1460: no timestamps on MTU 1500)
    #[arg(long, value_name = "BYTES")]
    pub mss: Option<u32>,
    /// Force the TCP timestamps option on or off for both sides (default: the profiles')
    #[arg(long, value_name = "on|off")]
    pub timestamps: Option<String>,
    /// Time each application call (send, recv, setsockopt) takes before the next one, e.g. 2us;
    /// on loopback it decides how writes group into segments
    #[arg(long, value_name = "DURATION", default_value = "2us")]
    pub call_cost: String,
    /// Seed of the link's loss and jitter
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Print the event-by-event story (write, segment, ACK, timer) of each row's first stalled round
    #[arg(long)]
    pub trace: bool,
    /// Also write the simulated connections as a capture file (pcapng; one connection per row,
    /// client port 40000 + row), for Wireshark or `tcpstall explain`
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Also write a self-contained HTML report (tables, latency CDFs, wire cost, stall ladders,
    /// time-sequence graphs from the model's packets) to FILE.html
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// List the profiles, their rules, sources and unverified values, and exit
    #[arg(long)]
    pub list_profiles: bool,
    /// Run the scenario on several profiles (default: the Linux eras linux:4.19 .. linux) and
    /// show, strategy by strategy, where they differ
    #[arg(long, value_name = "LIST", num_args = 0..=1, default_missing_value = "eras", conflicts_with = "profile")]
    pub compare_profiles: Option<String>,
}

/// The scenario and its strategy pairs from the flags.
pub(crate) fn scenario_from(args: &SimulateArgs) -> anyhow::Result<Scenario> {
    // --scenario NAME and the positional name conflict: at most one is set.
    let base = args.scenario_flag.as_deref().map(Scenario::builtin).transpose()?;
    args.common.build(base)
}

/// The run's options besides the profiles.
pub(crate) fn request(args: &SimulateArgs) -> anyhow::Result<RunRequest> {
    let t = args.timestamps.as_deref();
    Ok(RunRequest::parse(args.link.as_deref(), args.mss, t, &args.call_cost, args.seed)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    pub(crate) fn parse(args: &[&str]) -> SimulateArgs {
        let mut v = vec!["tcpstall", "simulate"];
        v.extend_from_slice(args);
        match crate::flags::Cli::parse_from(v).command {
            crate::flags::Command::Simulate(a) => a,
            _ => panic!("not simulate"),
        }
    }

    #[test]
    fn scenario_by_flag_or_position() {
        let s = scenario_from(&parse(&["--scenario", "multi-write", "--rounds", "7"])).unwrap();
        assert_eq!(s.workload.params_json()["requests"], 7);
        let s = scenario_from(&parse(&["multi-write", "--client", "cork"])).unwrap();
        assert_eq!(s.matrix.len(), 1);
        assert_eq!(s.matrix[0].label, "client:cork");
        let both = ["tcpstall", "simulate", "burst", "--scenario", "rr"];
        assert!(crate::flags::Cli::try_parse_from(both).is_err());
        assert!(scenario_from(&parse(&["--scenario", "nope"])).is_err());
    }

    /// clap re-wraps a help line longer than the terminal: the examples fit in 80 columns.
    #[test]
    fn examples_fit_80_columns() {
        for l in EXAMPLES.lines() {
            assert!(l.chars().count() < 80, "{} columns: {l}", l.chars().count());
        }
    }
}
