//! `tcpstall simulate`: run a scenario on the deterministic model of other TCP stacks
//! (crates/model), printing the same table and JSON as `tcpstall lab`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use model::{Outcome, Profile, ProfileSpec, RunRequest, RunSpec};
use report::simulate::CompareProfilesDoc;
use report::Export;
use scenario::Scenario;
use trace::Event;

use super::common::ScenarioArgs;
use super::output::{self, OutputFormat};

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

/// `--profile`: the pairs it names (parsed by the model; files read here, `linux:here`
/// measured by `tcpstall kernel`'s experiments).
pub(crate) fn profiles(spec: &str) -> anyhow::Result<Vec<(Profile, Profile)>> {
    resolve(&spec.parse()?)
}

fn resolve(spec: &ProfileSpec) -> anyhow::Result<Vec<(Profile, Profile)>> {
    Ok(spec.load(|p| std::fs::read_to_string(p), super::kernel::here_profile)?)
}

/// The scenario and its strategy pairs from the flags.
pub(crate) fn scenario_from(args: &SimulateArgs) -> anyhow::Result<Scenario> {
    // --scenario NAME and the positional name conflict: at most one is set.
    let base = args.scenario_flag.as_deref().map(Scenario::builtin).transpose()?;
    args.common.build(base)
}

/// The run's options besides the profiles.
fn request(args: &SimulateArgs) -> anyhow::Result<RunRequest> {
    let t = args.timestamps.as_deref();
    Ok(RunRequest::parse(args.link.as_deref(), args.mss, t, &args.call_cost, args.seed)?)
}

pub(crate) fn run_spec(args: &SimulateArgs) -> anyhow::Result<RunSpec> {
    let req = request(args)?;
    Ok(req.spec(profiles(&args.profile)?))
}

pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<i32> {
    if args.list_profiles {
        output::write_bytes(model::story::profile_list().as_bytes(), args.common.output.as_deref())?;
        return Ok(0);
    }
    let s = scenario_from(&args)?;
    if let Some(list) = &args.compare_profiles {
        return compare_profiles(&args, &s, list);
    }
    let spec = run_spec(&args)?;
    let pairs = s.matrix.clone();
    // Open the output before simulating, so a path that cannot be written fails first.
    let sink = output::Sink::open(args.common.output.as_deref())?;
    if let Some(p) = &args.pcap {
        output::check_writable("--pcap", p)?;
    }
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    let record = args.trace || args.pcap.is_some() || args.report.is_some();
    // Every sample is kept only for the HTML report's CDF: without it memory stays flat in rounds.
    let keep = model::Keep { trace: record, samples: args.report.is_some() };
    let (report, outcomes) = model::report_kept(&s, &pairs, &spec, keep);
    sink.write(&report.export(args.common.format.into())?).context("writing the report")?;
    output::stall_records(&report, &args.common)?;
    if let Some(path) = &args.pcap {
        write_pcap(path, &report, &outcomes)?;
    }
    if let Some(path) = &args.report {
        write_html(path, &report, &outcomes, &spec)?;
    }
    if args.common.format == OutputFormat::Table && args.common.output.is_none() {
        // What the numbers rest on: say which profiles carry unchecked values.
        for note in model::story::unverified_notes(&spec.profiles) {
            println!("{note}");
        }
    }
    if args.trace {
        let text = model::story::stall_stories(&report, &outcomes);
        if args.common.format == OutputFormat::Table && args.common.output.is_none() {
            output::write_bytes(text.as_bytes(), None)?;
        } else {
            eprint!("{text}");
        }
    }
    if let Some(e) = report.errors.first() {
        eprintln!("tcpstall: {e}");
        return Ok(1);
    }
    Ok(0)
}

/// `--pcap`: the rows' connections as one capture file, and which connection is which row.
fn write_pcap(path: &Path, report: &report::Report, outcomes: &[Outcome]) -> anyhow::Result<()> {
    let traces: Vec<&[trace::Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
    let bytes = model::pcap::to_pcap(&traces)?;
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    let (port0, server_port) = (model::pcap::CLIENT_PORT0, model::pcap::SERVER.1);
    for line in report::simulate::pcap_lines(&path.display().to_string(), report, port0, server_port) {
        eprintln!("{line}");
    }
    Ok(())
}

/// `--report`: the HTML page, with the model's packets as each row's time-sequence graph.
fn write_html(path: &Path, report: &report::Report, outcomes: &[Outcome], spec: &RunSpec) -> anyhow::Result<()> {
    let kernel = format!("model, profile {}", report.profile.as_deref().unwrap_or("?"));
    let header = super::htmlreport::header("simulate", &report.scenario, &report.link, kernel);
    let traces: Vec<&[Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
    let rtt = Some(spec.link.delay_up_ns + spec.link.delay_down_ns);
    let mut page = super::htmlreport::rows_page(report, header, &traces, rtt, "the model recorded no packets", None);
    for (f, o) in page.flows.iter_mut().zip(outcomes) {
        if o.trace.len() >= model::TRACE_LIMIT {
            f.events_note = Some(format!("the model kept the first {} events only", model::TRACE_LIMIT));
        }
    }
    super::htmlreport::write(path, &page)?;
    Ok(())
}

/// `--compare-profiles`: the scenario's strategies on each profile, side by side
/// (report::simulate::CompareProfilesDoc).
fn compare_profiles(args: &SimulateArgs, s: &Scenario, list: &str) -> anyhow::Result<i32> {
    let pairs = resolve(&ProfileSpec::compare_list(list)?)?;
    let cols = request(args)?.compare(s, pairs);
    let doc = CompareProfilesDoc::new(&s.name, env!("CARGO_PKG_VERSION"), &cols);
    output::write_bytes(&doc.export(args.common.format.into())?, args.common.output.as_deref())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> SimulateArgs {
        let mut v = vec!["tcpstall", "simulate"];
        v.extend_from_slice(args);
        match crate::cli::Cli::parse_from(v).command {
            crate::cli::Command::Simulate(a) => a,
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
        assert!(crate::cli::Cli::try_parse_from(both).is_err());
        assert!(scenario_from(&parse(&["--scenario", "nope"])).is_err());
    }

    /// The flags reach the model's parsers: their messages are the user's.
    #[test]
    fn profile_and_link_flags_parse_through_the_model() {
        assert_eq!(profiles("linux:5.10:macos").unwrap()[0].1.name, "macos");
        assert!(profiles("solaris").unwrap_err().to_string().contains("unknown profile 'solaris'"));
        let e = format!("{:#}", profiles("/nonexistent/p.toml").unwrap_err());
        assert!(e.starts_with("--profile: cannot read /nonexistent/p.toml: "), "{e}");
        let e = run_spec(&parse(&["--call-cost", "5"])).unwrap_err().to_string();
        assert_eq!(e, "--call-cost 5: needs a unit (ns, us, ms or s)");
    }

    /// clap re-wraps a help line longer than the terminal: the examples fit in 80 columns.
    #[test]
    fn examples_fit_80_columns() {
        for l in EXAMPLES.lines() {
            assert!(l.chars().count() < 80, "{} columns: {l}", l.chars().count());
        }
    }
}
