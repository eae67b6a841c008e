//! `tcpstall lab`: run a scenario over real sockets across a matrix of strategies.

use std::path::PathBuf;

use anyhow::{bail, Context};
use lab::LabOptions;
use scenario::Scenario;

use super::common::ScenarioArgs;
use super::output::{self, OutputFormat};

const EXAMPLES: &str = "\
Examples:
  tcpstall lab                                  seed 000 on loopback, every strategy of its matrix
  tcpstall lab chunked --set round=10           fewer rounds
  tcpstall lab multi-write --client cork        one pair: client corks, server default
  tcpstall lab burst --set n=2 --format json    seed 002 with two messages per burst, as JSON
  tcpstall lab bulk-ack --set sweep=99912,100000  seed 004's two sizes
  tcpstall lab --matrix all --rounds 20         every strategy on both sides
  tcpstall lab --config examples/tcp_test.conf  seed 000's configuration file (in the repo)
  tcpstall lab --exchange \"client 275,24,292; server 100\"
                                                your own conversation, inline (turns by side)
  tcpstall scenarios --show multi-write > mine.toml; tcpstall lab mine.toml
                                                a scenario file to edit, then run
  tcpdump -i lo -w seed000.pcap port 8000 & tcpstall lab --port 8000
                                                watch it on the host's loopback
  tcpstall lab multi-write --capture mw.pcapng  the rows' own packets as pcapng (root: one
                                                loopback per row); then tcpstall explain mw.pcapng
  tcpstall lab multi-write --link rtt=20ms,mtu=1500 --capture mw.pcapng
                                                behind an emulated link, with a capture
  tcpstall lab multi-write --remote HOST:7523 --key-file lab.key
                                                the server side on another host (`tcpstall serve`)

As root each row runs in a private network namespace (lo with MTU 1500) so TcpExt counters
belong to the run; --port, --link or no root use the caller's or the link's namespaces.
Ctrl-C stops the row in progress and prints the rows already finished (exit 130).

--config FILE (seed 000's tcp_test.conf; docs/config.md): one `key value` per line, `#` starts a
comment, each key at most once, a missing key keeps its default:
  no_delay 0|1   TCP_NODELAY on both sides                       default 0
  quickack 0|1   TCP_QUICKACK set once after connecting          default 0
  cork 0|1       TCP_CORK around each message                    default 0
  msg_more 0|1   MSG_MORE on all but a message's last write      default 0
  send N         bytes per message, each way (1-67108864)        default 1000
  n_chunk N      writes per message (1-1024, at most send)       default 100
  round N        rounds (1-1000000)                              default 100
It runs the chunked scenario as one row, `config:OPTIONS`; --set/--rounds change the sizes
afterwards; --client/--server/--matrix are refused. An error names the file and line, e.g.
`tcp_test.conf:2: unknown key 'nagle' (known: ...)`, and exits non-zero before measuring.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct LabArgs {
    #[command(flatten)]
    pub common: ScenarioArgs,
    /// Run seed 000's tcp_test.conf (keys no_delay, quickack, cork, msg_more, send, n_chunk, round;
    /// format below and in docs/config.md)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A wait is a stall when it exceeds the round trip by more than MS milliseconds [default: 10]
    #[arg(long, value_name = "MS")]
    pub stall_threshold: Option<f64>,
    /// Server port (default: any free port). Runs in the caller's namespace so tcpdump on the
    /// host sees it; a port in use is an error
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Run behind an emulated link (see `tcpstall shell --help` for SPEC)
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,
    /// Write the rows' packets as pcapng to FILE: on loopback each row's own capture (one
    /// interface per row); behind --link what the emulated link carries (both ends, one
    /// interface each)
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,
    /// Do not record the rows' packets (a TPACKET_V3 ring on the row's loopback, or the link
    /// forwarder's tap): no stall records, less CPU. On loopback without CAP_NET_RAW the
    /// capture is skipped anyway, with a note
    #[arg(long)]
    pub no_capture: bool,
    /// Do not add kernel evidence to the rows' packets. By default, as root, each row's
    /// connection is also traced in the kernel (eBPF on TCP tracepoints: its writes, resends
    /// and windows) and the classifier reads both; without root the report says why not
    #[arg(long)]
    pub no_kernel: bool,
    /// Run the rows one at a time, in the matrix's order. By default (as root, on loopback) the
    /// rows that only wait on kernel timers run side by side, each in its own namespace, and
    /// the others alone after them; the table's header says which
    #[arg(long)]
    pub one_at_a_time: bool,
    /// Time each write's stay inside TCP (SO_TIMESTAMPING SCHED minus write time) and name the
    /// side that held data in the verdict. Off by default: it changes what it measures (on
    /// 6.18 TCP_QUICKACK after each recv stops helping when TX timestamps are on)
    #[arg(long)]
    pub tx_timestamps: bool,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
    /// Also write a self-contained HTML report (tables, latency CDFs from each row's
    /// HdrHistogram, wire cost, stall records) to FILE.html
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub veth: super::seed003::VethArgs,
    #[command(flatten)]
    pub remote: super::remote_lab::RemoteArgs,
}

/// Build the scenario to run from the flags.
pub(crate) fn scenario_from(args: &LabArgs) -> anyhow::Result<Scenario> {
    let base = match &args.config {
        Some(path) => {
            if let Some(name) = &args.common.scenario {
                bail!("--config runs seed 000's chunked scenario from the file; drop the scenario name '{name}'");
            }
            // The file's options are the one pair to run: other strategy flags would replace them.
            let c = &args.common;
            if let Some(flag) = [
                c.client.as_ref().map(|_| "--client"),
                c.server.as_ref().map(|_| "--server"),
                (c.matrix != "default").then_some("--matrix"),
            ]
            .into_iter()
            .flatten()
            .next()
            {
                bail!("--config runs the file's one configuration (its no_delay/quickack/cork/msg_more); drop {flag}");
            }
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            Some(scenario::parse_tcp_test_conf(&path.display().to_string(), &text)?.scenario()?)
        }
        None => None,
    };
    args.common.build(base)
}

pub(crate) fn lab_options(args: &LabArgs) -> anyhow::Result<LabOptions> {
    let mut o = LabOptions {
        tx_timestamps: args.tx_timestamps,
        capture: !args.no_capture,
        parallel: !args.one_at_a_time,
        ..LabOptions::default()
    };
    if args.no_capture && args.capture.is_some() && args.link.is_none() {
        bail!("--capture FILE writes the packets --no-capture turns off: use one or the other");
    }
    if let Some(ms) = args.stall_threshold {
        o.set_stall_threshold_ms(ms).map_err(|e| anyhow::anyhow!("--stall-threshold {e}"))?;
    }
    if let Some(p) = args.port {
        o.set_fixed_port(p);
    }
    Ok(o)
}

/// Ctrl-C from the first row to the last line of output (advise and replay use it too).
pub(crate) use lab::Interrupts;

pub(crate) fn run(args: LabArgs) -> anyhow::Result<i32> {
    let veth = args.veth.veth()?;
    let knobs = args.veth.knobs()?;
    if args.common.matrix == "seed003" {
        let name = args.common.scenario.as_deref().unwrap_or("");
        if name != "stream" || args.link.is_some() {
            bail!(
                "--matrix seed003 is seed 003's table: `tcpstall lab stream --matrix seed003` (over veth, no --link)"
            );
        }
        let mut s = super::common::load(Some("stream"), None)?;
        s.apply_sets(&args.common.sets)?;
        return super::seed003::run_matrix(&args.veth, &s, args.common.format, args.quiet);
    }
    let s = scenario_from(&args)?;
    if args.remote.remote.is_some() {
        return super::remote_lab::run(&args, &s);
    }
    let mut opts = lab_options(&args)?;
    let veth_path = open_veth(&args, veth, &knobs, &mut opts)?;
    // --report draws each row's packets (ladders, time-sequence graphs).
    opts.keep_packets = args.report.is_some();
    // Before measuring: an output path that cannot be written must not cost a run.
    let sink = output::Sink::open(args.common.output.as_deref())?;
    let (link_capture, own_capture) = captures(&args)?;
    opts.capture_file = own_capture.clone();
    if let Some(p) = &args.report {
        output::check_writable("--report", p)?;
    }
    let mut env = super::linkenv::open(args.link.as_deref(), link_capture, opts.capture)?;
    if let Some(p) = &veth_path {
        env.placement = p.placement(&format!("{}; {}", knobs.label(), p.readback));
    }
    opts.tap = env.tap();
    // Kernel evidence (after the link is up: the source starts a reader thread).
    if opts.capture && !args.no_kernel {
        opts.kernel = lab::KernelHandle::open()
            .map_or_else(|e| lab::KernelEvidence::Unavailable(e.to_string()), lab::KernelEvidence::On);
    }
    // The link is up (it may need a single-threaded process): now the signal thread may start.
    // Ctrl-C is listened to from here to the last line of output (`exit_status` stops it).
    let interrupts = Interrupts::start(opts.cancel.clone());
    let mut report = rows(&args, &s, |p| lab::run_scenario(&s, &env.placement, &opts, p));
    let link = env.finish_report();
    if let Some(f) = &own_capture {
        match f.finish() {
            // Rows without packets (no CAP_NET_RAW) say why in the report's link line.
            Ok(n) => eprintln!("tcpstall: wrote {n} packets to {}", f.path().display()),
            Err(e) => report.errors.push(format!("--capture: {e}")),
        }
    }
    let warning = link.as_ref().ok().and_then(Option::as_ref).and_then(|l| untrusted(&mut report, l));
    write(&report, sink, args.common.format)?;
    if let Some(path) = &args.report {
        html_report(path, &args, &report)?;
    }
    output::stall_records(&report, &args.common)?;
    if args.common.format == OutputFormat::Table {
        if let Ok(Some(l)) = &link {
            for l in l.summary_lines() {
                println!("{l}");
            }
        }
    }
    link?;
    if let Some(w) = &warning {
        eprintln!("tcpstall: warning: {w}");
    }
    Ok(exit_status(&report, interrupts))
}

/// The warning when the emulated link dropped packets it was not asked to drop; every row is
/// marked then (the link summarises the whole run, not each row: every row's numbers are suspect).
fn untrusted(report: &mut report::Report, link: &link::LinkReport) -> Option<String> {
    let warning = link.unasked_drops_warning()?;
    for r in &mut report.results {
        r.verdict.push_str(" [not trustworthy: the emulated link dropped packets it was not asked to drop]");
    }
    Some(warning)
}

/// --path veth: two namespaces joined by a veth pair with the seed's knobs (seed 003); the rows
/// run pinned in them, without the loopback capture.
fn open_veth(
    args: &LabArgs,
    veth: bool,
    knobs: &lab::veth::Knobs,
    opts: &mut LabOptions,
) -> anyhow::Result<Option<lab::veth::VethPath>> {
    if !veth {
        return Ok(None);
    }
    if args.link.is_some() {
        bail!("--path veth and --link are two different paths: pick one");
    }
    // What killed runs left was swept at the start (cli::run).
    let p = lab::veth::VethPath::open(knobs).map_err(|e| anyhow::anyhow!("--path veth: {e}"))?;
    opts.set_veth(&p);
    Ok(Some(p))
}

/// --capture FILE: on loopback the lab writes its own capture (created now, so an unwritable
/// path fails before measuring); behind --link the link's tap does (the path for the link).
fn captures(args: &LabArgs) -> anyhow::Result<(Option<&std::path::Path>, Option<lab::CaptureFile>)> {
    if let Some(p) = &args.capture {
        output::check_writable("--capture", p)?;
    }
    Ok(match (&args.link, &args.capture) {
        (Some(_), c) => (c.as_deref(), None),
        (None, Some(p)) => {
            let f = lab::CaptureFile::create(p).with_context(|| format!("--capture: cannot write {}", p.display()))?;
            (None, Some(f))
        }
        (None, None) => (None, None),
    })
}

/// The rows, with a progress bar (lab and lab --remote).
pub(crate) fn rows<R>(args: &LabArgs, s: &Scenario, run: impl FnOnce(&mut dyn FnMut(lab::Progress)) -> R) -> R {
    let bar = output::progress_bar((s.workload.variants().len() * s.matrix.len()) as u64, args.quiet);
    let r = run(&mut output::row_progress(&bar));
    bar.finish_and_clear();
    r
}

/// The report in --format where --output says; an empty table is not written (lab and lab
/// --remote).
pub(crate) fn write(report: &report::Report, sink: output::Sink, format: OutputFormat) -> anyhow::Result<()> {
    if !report.results.is_empty() || format != OutputFormat::Table {
        sink.write(&report::Export::export(report, format.into())?)
    } else {
        sink.discard();
        Ok(())
    }
}

/// --report: the rows' tables, latency CDFs, and each row's packets as ladders and graphs.
fn html_report(path: &std::path::Path, args: &LabArgs, report: &report::Report) -> anyhow::Result<()> {
    let header =
        super::htmlreport::header("lab", &report.scenario, &report.link, report.kernel.clone().unwrap_or_default());
    let packets: Vec<&[trace::Event]> = report.results.iter().map(|r| r.packets.as_slice()).collect();
    let no_packets = "no row recorded its packets (the capture needs CAP_NET_RAW, and --no-capture turns it \
                      off): the ladders and time-sequence graphs need them";
    // On loopback both ends share one clock and no path delay; behind the link the tap
    // stamps at the server's end (its packets as sent, the client's as delivered).
    let (rtt, at) = match args.link.as_deref().map(str::parse::<link::LinkSpec>) {
        Some(Ok(l)) => (Some(l.rtt_ns()), Some(trace::Endpoint::B)),
        Some(Err(_)) => (None, None),
        None => (Some(0), None),
    };
    let page = super::htmlreport::rows_page(report, header, &packets, rtt, no_packets, at);
    super::htmlreport::write(path, &page)
}

/// 128 + the signal that stopped the run, 1 after an error (said in one line; what was
/// measured before it is printed above), else 0.
fn exit_status(report: &report::Report, interrupts: std::io::Result<Interrupts>) -> i32 {
    if let Some(e) = report.errors.first() {
        eprintln!("tcpstall: {e}");
    }
    let signal = interrupts.ok().and_then(Interrupts::stop);
    if signal.is_some() && report.errors.is_empty() {
        eprintln!("tcpstall: interrupted after the last row: every row above is complete");
    }
    exit_code(signal, report)
}

/// 128 + the signal that stopped the run, 1 after an error, else 0 (lab and lab --remote).
pub(crate) fn exit_code(signal: Option<i32>, report: &report::Report) -> i32 {
    match (signal, report.errors.is_empty()) {
        (Some(sig), _) => 128 + sig,
        (None, false) => 1,
        (None, true) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use scenario::Opt;

    fn parse(args: &[&str]) -> LabArgs {
        let mut v = vec!["tcpstall", "lab"];
        v.extend_from_slice(args);
        match crate::cli::Cli::parse_from(v).command {
            crate::cli::Command::Lab(a) => a,
            _ => panic!("not lab"),
        }
    }

    #[test]
    fn one_pair_replaces_the_matrix() {
        let s = scenario_from(&parse(&["multi-write", "--client", "cork"])).unwrap();
        assert_eq!(s.matrix.len(), 1);
        assert_eq!(s.matrix[0].label, "client:cork");
    }

    #[test]
    fn rounds_shortcut_uses_each_workloads_key() {
        let s = scenario_from(&parse(&["--rounds", "7"])).unwrap();
        assert_eq!(s.workload.params_json()["round"], 7);
        let s = scenario_from(&parse(&["multi-write", "--rounds", "7"])).unwrap();
        assert_eq!(s.workload.params_json()["requests"], 7);
        assert!(scenario_from(&parse(&["stream", "--rounds", "7"])).is_err());
    }

    #[test]
    fn matrix_all_has_every_strategy() {
        let s = scenario_from(&parse(&["--matrix", "all"])).unwrap();
        assert_eq!(s.matrix.len(), 1 + Opt::ALL.len());
        // --matrix is a ValueEnum: clap refuses an unknown name.
        assert!(crate::cli::Cli::try_parse_from(["tcpstall", "lab", "--matrix", "some"]).is_err());
        assert!(scenario_from(&parse(&["--matrix", "all", "--client", "cork"])).is_err());
    }

    #[test]
    fn config_refuses_strategy_flags_that_would_drop_its_options() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("tcp_test.conf");
        std::fs::write(&conf, "no_delay 1\nround 3\n").unwrap();
        let c = conf.to_str().unwrap();
        for extra in [&["--client", "cork"][..], &["--server", "nodelay"], &["--matrix", "all"]] {
            let mut a = vec!["--config", c];
            a.extend_from_slice(extra);
            let e = scenario_from(&parse(&a)).unwrap_err().to_string();
            assert!(e.contains(&format!("drop {}", extra[0])), "{e}");
        }
        let s = scenario_from(&parse(&["--config", c, "--set", "round=2"])).unwrap();
        assert_eq!(s.matrix[0].label, "config:nodelay");
    }

    #[test]
    fn port_keeps_the_callers_namespace() {
        let o = lab_options(&parse(&["--port", "8000"])).unwrap();
        assert!(!o.own_netns);
        assert_eq!(o.port, 8000);
        assert!(lab_options(&parse(&["--stall-threshold", "0"])).is_err());
    }
}
