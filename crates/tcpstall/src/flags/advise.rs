//! `tcpstall advise`'s flags and their help.

use super::common::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall advise --exchange \"client 275,24,292; server 100\"
      seed 001's request on a reused connection: which fix, on which side
  tcpstall advise multi-write --lang go     the same built-in, the code in Go
  tcpstall advise my-service.toml --fail-on-stall
      a CI guard: exit 3 when the write pattern as written stalls
  tcpstall advise chunked --model --peer-profile macos
      the peer is a macOS stack (model): advice for the Linux side
  tcpstall advise burst --format json       the whole ranking as JSON
  tcpstall advise multi-write --report advise.html
      the ranking with its intervals as error bars, the code, and each candidate's first run

Every candidate (the workload as written, each strategy alone on the side it applies to, and
the pairs that make sense) runs --reps times, round-robin, so drift hits all alike. Latency
intervals are 95% two-stage bootstrap intervals over runs and rounds. Ranking: stalls removed
first, then p99; candidates whose p99 intervals overlap the best one's are a declared tie, and
among them the smallest change comes first, by these rules in order: no busy-poll unless it
alone removes the wait; fewest sides changed; a gathered write before a socket option; portable
(TCP_NODELAY, writev) before Linux/FreeBSD-only (MSG_MORE) before Linux-only (TCP_CORK,
TCP_QUICKACK, busy-poll); less CPU per round; fewer segments; the smaller code change. The
output names the tie and the rule that chose. Stalls are the classifier's stall records when
the rows carry them (model; lab with capture), else the lab's slow samples (waits over the
stall threshold), and the output says which. Ctrl-C (or SIGTERM) stops the run in progress and
ranks the runs finished (exit 128 + the signal: 130, 143).";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct AdviseArgs {
    /// Workload: a built-in scenario name, a scenario FILE.toml, or a CAPTURE (.pcap/.pcapng:
    /// its exchange is derived as `tcpstall replay` does) [default: multi-write]
    pub scenario: Option<String>,
    /// With a CAPTURE: the flow to use, ADDR:PORT-ADDR:PORT (default: the most stall time)
    #[arg(long, value_name = "FLOW")]
    pub flow: Option<String>,
    /// With a CAPTURE: only flows with this port
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Run behind an emulated link (the lab's SPEC; with a CAPTURE whose RTT is above 1 ms the
    /// default is rtt=THAT)
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,
    /// The workload inline: turns separated by `;`, e.g. "client 275,24,292; server 100"
    #[arg(long, value_name = "TURNS")]
    pub exchange: Option<String>,
    /// Override a workload parameter (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Measured rounds per run (each candidate runs --reps times)
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub rounds: u32,
    /// Runs per candidate at most, interleaved round-robin with the other candidates; fewer
    /// once the ranking's first place holds from one pass to the next (after 2), or when the
    /// next pass would end past --budget
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub reps: u32,
    /// The side whose several writes are separate replies the program cannot gather (a broker's
    /// delivery and its acknowledgement): writev or one buffer there ranks after any fix of the
    /// same stall tier it can make (repeatable)
    #[arg(long = "separate-replies", value_name = "client|server")]
    pub separate_replies: Vec<String>,
    /// Seconds to spend measuring: no pass of the candidates starts that would end past it
    /// (0: no budget, every --reps pass runs)
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub budget: u64,
    /// Run on the model (crates/model) instead of real sockets
    #[arg(long)]
    pub model: bool,
    /// The other side is this stack (macos, windows, freebsd, rfc-classic, linux-2.6): it runs in
    /// the model, and only fixes on --side are tried
    #[arg(long, value_name = "NAME")]
    pub peer_profile: Option<String>,
    /// The side you can change when the peer is not yours (with --peer-profile)
    #[arg(long, value_name = "client|server", default_value = "client")]
    pub side: String,
    /// Language of the code shown: c, go, rust, python, java, node
    #[arg(long, value_name = "LANG", default_value = "c")]
    pub lang: String,
    /// Exit 3 when the workload as written stalls: any classified stall record, or slow samples
    /// in more than 2% of its rounds (the lab without capture)
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Seed of the bootstrap's random resampling
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Output format: table or json
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
    /// Write a self-contained HTML report to FILE: the ranking with its 95% intervals as error
    /// bars, the recommendation and its code, and each candidate's first run (latency CDF, wire
    /// cost, stall records with ladders)
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub remote: super::remote::RemoteArgs,
}
