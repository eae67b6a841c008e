//! `tcpstall lab`'s flags, their help, and the typed request they make: the scenario to run
//! (`scenario_from`, or `seed003_scenario` for `--matrix seed003`) and the lab's options
//! (`lab_options`).

use std::path::PathBuf;

use anyhow::{bail, Context};
use lab::LabOptions;
use scenario::Scenario;

use super::common::{MarginArg, Matrix, ScenarioArgs};

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
    #[command(flatten)]
    pub margin: MarginArg,
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
    /// Pin each row's client and server threads to these CPUs (sched_setaffinity), e.g.
    /// `--pin 0,1`: the rows run one at a time (pinned rows side by side would share the
    /// CPUs). The capture and kernel-evidence readers are kept on the process's other CPUs
    /// (`--pin 0,0` on two CPUs: readers on CPU 1); the header says where they ran. `taskset -c
    /// N tcpstall lab ...` pins the whole process instead
    #[arg(long, value_name = "CLIENT_CPU,SERVER_CPU", value_parser = parse_pin)]
    pub pin: Option<(usize, usize)>,
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
    pub veth: super::veth::VethArgs,
    #[command(flatten)]
    pub remote: super::remote::RemoteArgs,
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
                (c.matrix != Matrix::Default).then_some("--matrix"),
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

/// `--matrix seed003`: seed 003's stream scenario with `--set` applied; None for the other
/// matrices.
pub(crate) fn seed003_scenario(args: &LabArgs) -> anyhow::Result<Option<Scenario>> {
    if args.common.matrix != Matrix::Seed003 {
        return Ok(None);
    }
    let name = args.common.scenario.as_deref().unwrap_or("");
    if name != "stream" || args.link.is_some() {
        bail!("--matrix seed003 is seed 003's table: `tcpstall lab stream --matrix seed003` (over veth, no --link)");
    }
    let mut s = super::common::load(Some("stream"), None)?;
    s.apply_sets(&args.common.sets)?;
    Ok(Some(s))
}

/// `--pin CLIENT_CPU,SERVER_CPU`: two CPU numbers.
fn parse_pin(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("'{s}': expected two CPU numbers, CLIENT_CPU,SERVER_CPU (e.g. 0,1)");
    let (c, v) = s.split_once(',').ok_or_else(bad)?;
    Ok((c.trim().parse().map_err(|_| bad())?, v.trim().parse().map_err(|_| bad())?))
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
    o.set_stall_threshold_ms(args.margin.min_gap).map_err(|e| anyhow::anyhow!("--min-gap {e}"))?;
    if let Some((c, s)) = args.pin {
        // Fail before any row runs on a CPU this process may not use (offline, or outside a
        // cpuset or a `taskset` around it).
        let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map_err(|e| anyhow::anyhow!("--pin: reading this process's CPUs: {e}"))?;
        for cpu in [c, s] {
            if !allowed.is_set(cpu).unwrap_or(false) {
                bail!("--pin: CPU {cpu} is not one this process may run on (see `taskset -p $$` or nproc)");
            }
        }
        o.pin = Some((c, s));
    }
    if let Some(p) = args.port {
        o.set_fixed_port(p);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use scenario::Opt;

    fn parse(args: &[&str]) -> LabArgs {
        let mut v = vec!["tcpstall", "lab"];
        v.extend_from_slice(args);
        match crate::flags::Cli::parse_from(v).command {
            crate::flags::Command::Lab(a) => a,
            _ => panic!("not lab"),
        }
    }

    #[test]
    fn pin_takes_two_cpus_this_process_may_use() {
        assert_eq!(parse_pin("0,1"), Ok((0, 1)));
        assert_eq!(parse_pin(" 1 , 0 "), Ok((1, 0)));
        for bad in ["0", "0,x", ",1", "0;1", "-1,0"] {
            assert!(parse_pin(bad).unwrap_err().contains("two CPU numbers"), "{bad}");
        }
        assert_eq!(lab_options(&parse(&["rr", "--pin", "0,0"])).unwrap().pin, Some((0, 0)));
        let e = lab_options(&parse(&["rr", "--pin", "0,4095"])).unwrap_err().to_string();
        assert!(e.contains("CPU 4095 is not one this process may run on"), "{e}");
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
        assert!(crate::flags::Cli::try_parse_from(["tcpstall", "lab", "--matrix", "some"]).is_err());
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

    /// One margin flag, its old names kept: the default is the classifier's, exactly.
    #[test]
    fn the_margin_is_min_gap_and_its_old_name_still_parses() {
        let default = lab_options(&parse(&[])).unwrap();
        assert_eq!(default.stall_margin(), std::time::Duration::from_nanos(analyze::DEFAULT_MIN_GAP.0));
        assert_eq!(default.stall_margin(), LabOptions::default().stall_margin());
        for flag in ["--min-gap", "--stall-threshold"] {
            let o = lab_options(&parse(&[flag, "2.5"])).unwrap();
            assert_eq!(o.stall_margin(), std::time::Duration::from_micros(2500));
        }
    }
}
