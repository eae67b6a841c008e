//! `tcpstall simulate`: run a scenario on the deterministic model of other TCP stacks
//! (crates/model), printing the same table and JSON as `tcpstall lab`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context};
use model::{Outcome, Profile, RunSpec};
use scenario::{LinkSpec, Scenario};
use trace::{Endpoint, Event, EventKind};

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
pub struct SimulateArgs {
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
    /// Also write the simulated connections as a pcap file (one connection per row, client port
    /// 40000 + row), for Wireshark or `tcpstall explain`
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

/// `--profile`: one name, `all`, or CLIENT:SERVER. Era names contain a colon themselves
/// (`linux:5.10`): an item that names one profile is that profile on both sides; otherwise it is
/// split at the colon that leaves a profile on each side (`linux:5.10:macos`).
pub fn profiles(spec: &str) -> anyhow::Result<Vec<(Profile, Profile)>> {
    if spec == "all" {
        return Ok(Profile::all().into_iter().map(|p| (p.clone(), p)).collect());
    }
    let mut here = None;
    let mut out = Vec::new();
    for one in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(p) = resolve(one, &mut here)? {
            out.push((p.clone(), p));
            continue;
        }
        let mut found = None;
        for (i, _) in one.match_indices(':') {
            let (c, sv) = (&one[..i], &one[i + 1..]);
            if let (Some(c), Some(sv)) = (resolve(c, &mut here)?, resolve(sv, &mut here)?) {
                found = Some((c, sv));
                break;
            }
        }
        match found {
            Some(pair) => out.push(pair),
            // No split works: report the error of the whole item, or of its first half.
            None => {
                let first = one.split(':').next().unwrap_or(one);
                profile(first)?;
                profile(one)?;
            }
        }
    }
    if out.is_empty() {
        bail!("--profile: expected a profile name, all, or CLIENT:SERVER");
    }
    Ok(out)
}

/// A profile if `name` names one (`linux:here` runs `tcpstall kernel`'s experiments once).
fn resolve(name: &str, here: &mut Option<Profile>) -> anyhow::Result<Option<Profile>> {
    if name == "linux:here" {
        if here.is_none() {
            *here = Some(super::kernel::here_profile()?);
        }
        return Ok(here.clone());
    }
    if name.ends_with(".toml") {
        return profile(name).map(Some);
    }
    Ok(Profile::builtin(name).ok())
}

/// A built-in profile by name, or a profile file (a path ending in .toml, same keys as
/// crates/model/profiles/*.toml).
fn profile(name: &str) -> anyhow::Result<Profile> {
    if name.ends_with(".toml") {
        let text = std::fs::read_to_string(name).with_context(|| format!("--profile: cannot read {name}"))?;
        return Ok(Profile::from_toml(name, &text)?);
    }
    Ok(Profile::builtin(name)?)
}

/// `--link`: the lab's SPEC; without rtt/delay keys, loopback's delay is kept.
pub fn link(spec: Option<&str>) -> anyhow::Result<(LinkSpec, String)> {
    // The lab's loopback: MTU 1500 in its private namespace; the rate stands for the copy cost
    // of the loopback path (a stream would otherwise be infinitely fast).
    let mut lo = LinkSpec { mtu: 1500, ..model::loopback_link() };
    let Some(spec) = spec else {
        return Ok((lo.clone(), format!("loopback (model: {lo})")));
    };
    let l: LinkSpec = spec.parse::<LinkSpec>().map_err(|e| anyhow::anyhow!("--link: {e}"))?;
    if spec.contains("rtt") || spec.contains("delay") {
        return Ok((l, spec.to_string()));
    }
    let (up, down, rate) = (lo.delay_up_ns, lo.delay_down_ns, lo.rate_bps);
    lo = l;
    lo.delay_up_ns = up;
    lo.delay_down_ns = down;
    lo.rate_bps = lo.rate_bps.or(rate);
    let label = format!("{lo}");
    Ok((lo, label))
}

/// The scenario and its strategy pairs from the flags.
pub fn scenario_from(args: &SimulateArgs) -> anyhow::Result<Scenario> {
    // --scenario NAME and the positional name conflict: at most one is set.
    let base = args.scenario_flag.as_deref().map(Scenario::builtin).transpose()?;
    args.common.build(base)
}

pub fn run_spec(args: &SimulateArgs) -> anyhow::Result<RunSpec> {
    let (link, link_label) = link(args.link.as_deref())?;
    let timestamps = match args.timestamps.as_deref() {
        None => None,
        Some("on" | "1" | "yes" | "true") => Some(true),
        Some("off" | "0" | "no" | "false") => Some(false),
        Some(o) => bail!("--timestamps {o}: expected on or off"),
    };
    if let Some(m) = args.mss {
        if !(88..=65495).contains(&m) {
            bail!("--mss {m}: expected 88 to 65495 bytes");
        }
        if m + 40 > link.mtu {
            bail!("--mss {m} does not fit the link's MTU {} (at most {})", link.mtu, link.mtu - 40);
        }
    }
    let call_ns = call_cost(&args.call_cost)?;
    Ok(RunSpec {
        profiles: profiles(&args.profile)?,
        link,
        link_label,
        seed: args.seed,
        mss: args.mss,
        timestamps,
        call_ns,
    })
}

/// Longest `--call-cost`: one call taking longer would be a stall of its own.
const MAX_CALL_COST_NS: u64 = 10_000_000;

/// `--call-cost`: a duration with a unit (ns, us, ms or s; bare `0` too), at most 10 ms.
fn call_cost(v: &str) -> anyhow::Result<u64> {
    let v = v.trim();
    if v == "0" {
        return Ok(0);
    }
    scenario::parse_duration_ns(v, MAX_CALL_COST_NS).map_err(|e| anyhow::anyhow!("--call-cost {v}: {e}"))
}

pub fn run(args: SimulateArgs) -> anyhow::Result<i32> {
    if args.list_profiles {
        output::write_bytes(list_profiles().as_bytes(), args.common.output.as_deref())?;
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
    sink.write(&report::export(&report, args.common.format.into())).context("writing the report")?;
    output::stall_records(&report, &args.common)?;
    if let Some(path) = &args.pcap {
        let traces: Vec<&[trace::Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
        let bytes = model::pcap::to_pcap(&traces)?;
        std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        for (k, row) in report.results.iter().enumerate() {
            let label = row_label(row);
            eprintln!(
                "pcap {}: {label} is 10.0.0.1:{} -> 10.0.0.2:{}",
                path.display(),
                model::pcap::CLIENT_PORT0 as usize + k,
                model::pcap::SERVER.1
            );
        }
    }
    if let Some(path) = &args.report {
        let kernel = format!("model, profile {}", report.profile.as_deref().unwrap_or("?"));
        let header = super::htmlreport::header("simulate", &report.scenario, &report.link, kernel);
        let traces: Vec<&[Event]> = outcomes.iter().map(|o| o.trace.as_slice()).collect();
        let rtt = Some(spec.link.delay_up_ns + spec.link.delay_down_ns);
        let mut page =
            super::htmlreport::rows_page(&report, header, &traces, rtt, "the model recorded no packets", None);
        for (f, o) in page.flows.iter_mut().zip(&outcomes) {
            if o.trace.len() >= model::TRACE_LIMIT {
                f.events_note = Some(format!("the model kept the first {} events only", model::TRACE_LIMIT));
            }
        }
        super::htmlreport::write(path, &page)?;
    }
    if args.common.format == OutputFormat::Table && args.common.output.is_none() {
        // What the numbers rest on: say which profiles carry unchecked values.
        let mut seen = Vec::new();
        for (c, sv) in &spec.profiles {
            for p in [c, sv] {
                if !p.unverified.is_empty() && !seen.contains(&p.name) {
                    seen.push(p.name.clone());
                    println!(
                        "model: profile {} has {} unverified value(s) (tcpstall simulate --list-profiles; docs/model.md)",
                        p.name,
                        p.unverified.len()
                    );
                }
            }
        }
    }
    if args.trace {
        let text = stall_stories(&report, &outcomes);
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

/// `--compare-profiles`: the scenario's strategies on each profile; a row per strategy with
/// each profile's stalls and p50/max latency, marked where the profiles disagree on stalls.
fn compare_profiles(args: &SimulateArgs, s: &scenario::Scenario, list: &str) -> anyhow::Result<i32> {
    let names = if list == "eras" { Profile::era_names().join(",") } else { list.to_string() };
    let pairs = profiles(&names)?;
    let mut cols = Vec::new();
    for (c, sv) in &pairs {
        let mut spec = run_spec(args)?;
        spec.profiles = vec![(c.clone(), sv.clone())];
        let (report, _) = model::report(s, &s.matrix, &spec, false);
        let label = if c.name == sv.name { c.name.clone() } else { format!("{}:{}", c.name, sv.name) };
        cols.push((label, report));
    }
    match args.common.format {
        OutputFormat::Table => {}
        OutputFormat::Json => {
            let v: Vec<serde_json::Value> = cols
                .iter()
                .map(|(name, r)| {
                    let rows: Vec<serde_json::Value> = r
                        .results
                        .iter()
                        .map(|x| {
                            serde_json::json!({
                                "strategy": row_label(x),
                                "stall_count": x.stall_count,
                                "p50_ms": x.latency_us.p50 / 1e3,
                                "max_ms": x.latency_us.max / 1e3,
                                "verdict": x.verdict,
                            })
                        })
                        .collect();
                    serde_json::json!({ "profile": name, "rows": rows })
                })
                .collect();
            let text = serde_json::to_string_pretty(&serde_json::json!({ "scenario": s.name, "profiles": v }))? + "\n";
            output::write_bytes(text.as_bytes(), args.common.output.as_deref())?;
            return Ok(0);
        }
        other => bail!("--compare-profiles prints a table or JSON, not {other:?} (use --format table or json)"),
    }
    let mut out = String::new();
    let _ = writeln!(out, "scenario {}: stalls per run and latency p50/max (ms) on each profile", s.name);
    let rows = cols.first().map_or(0, |(_, r)| r.results.len());
    let lw =
        cols.first().map(|(_, r)| r.results.iter().map(|x| row_label(x).len()).max().unwrap_or(8)).unwrap_or(8).max(8);
    let cw = cols.iter().map(|(n, _)| n.len()).max().unwrap_or(10).max(22);
    let _ = write!(out, "{:<lw$}", "strategy");
    for (n, _) in &cols {
        let _ = write!(out, "  {n:<cw$}");
    }
    out.push('\n');
    let mut differ = 0;
    for i in 0..rows {
        let label = row_label(&cols[0].1.results[i]);
        let stalls: Vec<u64> =
            cols.iter().map(|(_, r)| r.results.get(i).and_then(|x| x.stall_count).unwrap_or(0)).collect(); // the model's rows always classify
                                                                                                           // Differs: a profile stalls where another does not, or in clearly more rounds.
        let (lo, hi) = (stalls.iter().min().copied().unwrap_or(0), stalls.iter().max().copied().unwrap_or(0));
        let differs = (lo == 0) != (hi == 0) || hi > lo + 1;
        differ += usize::from(differs);
        let _ = write!(out, "{label:<lw$}");
        for (_, r) in &cols {
            let cell = r.results.get(i).map_or_else(String::new, |x| {
                format!(
                    "{} stalls {:.2}/{:.1}",
                    x.stall_count.unwrap_or(0),
                    x.latency_us.p50 / 1e3,
                    x.latency_us.max / 1e3
                )
            });
            let _ = write!(out, "  {cell:<cw$}");
        }
        if differs {
            out.push_str("  <- differs");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\n{differ} of {rows} strategies stall on some profiles and not on others, or in clearly more runs; the \
         profiles' differences are listed (with commits) by `tcpstall simulate --list-profiles`"
    );
    output::write_bytes(out.as_bytes(), args.common.output.as_deref())?;
    Ok(0)
}

fn list_profiles() -> String {
    let mut s = String::new();
    for p in Profile::all().into_iter().chain(Profile::eras().into_iter().filter(|p| p.name != "linux")) {
        let _ = writeln!(s, "{}: {}", p.name, p.summary);
        for (k, v) in &p.sources {
            let _ = writeln!(s, "  {k}: {v}");
        }
        if p.unverified.is_empty() {
            let _ = writeln!(s, "  unverified: none");
        }
        for u in &p.unverified {
            let _ = writeln!(s, "  unverified: {u}");
        }
    }
    s
}

/// For every row with a stall, the events of its first stalled round, relative to its start.
fn stall_stories(report: &report::Report, outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for (row, out) in report.results.iter().zip(outcomes) {
        let threshold = (row.slow_sample_threshold_us * 1e3) as u64;
        let Some((k, first)) = out.samples.iter().enumerate().find(|(_, x)| x.latency > threshold) else {
            continue;
        };
        let label = row_label(row);
        let _ = writeln!(
            s,
            "\n== {label}: first stalled sample #{} ({:.3} ms; threshold {:.3} ms) ==",
            k + 1,
            first.latency as f64 / 1e6,
            threshold as f64 / 1e6
        );
        let _ = writeln!(s, "{:>12}  {:<6} event", "t (ms)", "side");
        let events = out.trace.get(first.trace.0..first.trace.1).unwrap_or(&[]);
        let n = events.len();
        let mut i = 0;
        while i < n {
            let text = line(&events[i], first.start);
            let mut j = i + 1;
            while j < n && line(&events[j], first.start) == text {
                j += 1;
            }
            if j - i > 1 {
                let _ = writeln!(s, "{text} (x{})", j - i);
            } else {
                let _ = writeln!(s, "{text}");
            }
            i = j;
        }
        if n == 0 {
            let _ = writeln!(s, "  (no events recorded: the trace keeps the first {} events)", model::TRACE_LIMIT);
        }
        for r in out.releases.iter().filter(|r| r.t >= first.start && r.t <= first.end) {
            let _ = writeln!(
                s,
                "  => {} data held {:.3} ms, released at +{:.3} ms: {}",
                side_name(r.side),
                (r.t - r.since) as f64 / 1e6,
                (r.t - first.start) as f64 / 1e6,
                r.cause.explain()
            );
        }
    }
    if s.is_empty() {
        s.push_str("\nno stalled round to trace\n");
    }
    s
}

/// "strategy variant", as the pcap lines and the stall stories name a row.
fn row_label(row: &report::RunResult) -> String {
    if row.variant.is_empty() {
        row.strategy.clone()
    } else {
        format!("{} {}", row.strategy, row.variant)
    }
}

fn side_name(e: Endpoint) -> &'static str {
    match e {
        Endpoint::A => "client",
        Endpoint::B => "server",
    }
}

fn line(e: &Event, origin: u64) -> String {
    let t = (e.t.0 as f64 - origin as f64) / 1e6;
    let what = match &e.kind {
        EventKind::Write { bytes, more } => format!("write {bytes} B{}", if *more { " (MSG_MORE)" } else { "" }),
        EventKind::Read { bytes } => format!("read {bytes} B"),
        EventKind::Timer(k) => format!("timer fires: {k:?}"),
        EventKind::Kernel(k) => k.describe(),
        EventKind::Icmp(i) => i.describe(),
        EventKind::Segment(seg) => {
            let dir = if e.from == Endpoint::A { "->" } else { "<-" };
            if seg.len == 0 {
                format!("{dir} ACK {}", seg.ack)
            } else {
                format!(
                    "{dir} seq {}:{} ({} B) ack {} [{:?}]",
                    seg.seq,
                    seg.seq.wrapping_add(seg.len),
                    seg.len,
                    seg.ack,
                    seg.flags
                )
            }
        }
    };
    format!("{t:>12.3}  {:<6} {what}", side_name(e.from))
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

    #[test]
    fn profile_specs() {
        assert_eq!(profiles("all").unwrap().len(), 6);
        let p = profiles("linux:macos").unwrap();
        assert_eq!((p[0].0.name.as_str(), p[0].1.name.as_str()), ("linux", "macos"));
        assert!(profiles("solaris").unwrap_err().to_string().contains("unknown profile 'solaris'"));
        // Era names contain a colon: a whole name first, then CLIENT:SERVER splits.
        let p = profiles("linux:5.10").unwrap();
        assert_eq!((p[0].0.name.as_str(), p[0].1.name.as_str()), ("linux:5.10", "linux:5.10"));
        let p = profiles("linux:5.10:macos").unwrap();
        assert_eq!((p[0].0.name.as_str(), p[0].1.name.as_str()), ("linux:5.10", "macos"));
        let p = profiles("macos:linux:6.1").unwrap();
        assert_eq!((p[0].0.name.as_str(), p[0].1.name.as_str()), ("macos", "linux:6.1"));
        assert!(profiles("linux:9.9").is_err());
    }

    /// clap re-wraps a help line longer than the terminal: the examples fit in 80 columns.
    #[test]
    fn examples_fit_80_columns() {
        for l in EXAMPLES.lines() {
            assert!(l.chars().count() < 80, "{} columns: {l}", l.chars().count());
        }
    }

    #[test]
    fn call_cost_is_a_duration_up_to_10ms() {
        assert_eq!(call_cost("2us").unwrap(), 2_000);
        assert_eq!(call_cost(" 0 ").unwrap(), 0);
        assert_eq!(call_cost("10ms").unwrap(), 10_000_000);
        assert!(call_cost("5").unwrap_err().to_string().starts_with("--call-cost 5: needs a unit"));
        assert!(call_cost("11ms").unwrap_err().to_string().contains("out of range (0 to 10 ms)"));
        assert!(call_cost("-1us").is_err());
    }

    #[test]
    fn link_without_delay_keeps_loopback_delay() {
        let (l, _) = link(Some("mtu=9000")).unwrap();
        assert_eq!(l.mtu, 9000);
        assert!(l.delay_up_ns > 0);
        let (l, _) = link(Some("rtt=20ms")).unwrap();
        assert_eq!(l.delay_up_ns, 10_000_000);
        assert!(link(Some("bogus=1")).is_err());
    }
}
