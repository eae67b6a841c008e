//! The command line, as ripgrep's `flags/` keeps it: every subcommand's flags (clap derive), their
//! `--help` and examples, and the checks and conversions that turn flag values into the typed
//! requests the libraries take (`lab::LabOptions`, `scenario::Scenario`, `model::RunRequest`,
//! `lab::veth::Knobs`, `remote::Limits`, ...). Nothing here opens a socket, a capture or a
//! namespace (it reads only the files a flag names as input: `--config`, a scenario file);
//! `cli/` does the rest and calls the libraries.

use clap::{Parser, Subcommand};

pub(crate) mod advise;
pub(crate) mod advise_run;
pub(crate) mod common;
pub(crate) mod completions;
pub(crate) mod explain;
pub(crate) mod kernel;
pub(crate) mod lab;
pub(crate) mod remote;
pub(crate) mod replay;
pub(crate) mod scenarios;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod simulate;
pub(crate) mod sockets;
pub(crate) mod veth;
pub(crate) mod watch;

const ABOUT: &str = "A Linux laboratory for TCP small-message latency: finds which mechanism \
(Nagle, delayed ACK, cork, congestion window, pure-ACK rate) makes your 40 ms or 200 ms stall, \
and which fix works on this kernel.";

const EXAMPLES: &str = "\
Examples:
  tcpstall lab                              seed 000 on loopback: 1000 bytes as 100 writes of 10,
                                            every strategy of its matrix (Nagle + delayed ACK)
  tcpstall lab multi-write --client cork    seed 001, one pair: the client corks each request
  tcpstall lab burst --link rtt=20ms        seed 002 behind an emulated 20 ms round trip
  tcpstall scenarios                        the built-in scenarios, their seeds and matrices
  tcpstall simulate --profile rfc-classic   the same scenario on a model of another stack
  tcpstall explain capture.pcapng           find and classify the stalls in a capture
  tcpstall kernel                           which Linux era this kernel behaves like
  tcpstall advise --exchange \"client 275,24,292; server 100\"
                                            which fix, on which side, with the code
  tcpstall watch --port 8080 --format jsonl  stalls on a running host, live, one JSON line each
  tcpstall shell --link rtt=20ms,rate=100mbit
                                            a shell 20 ms away from a second namespace
  tcpstall serve --listen 0.0.0.0:7523 --key-file lab.key
                                            the far side for `lab --remote HOST --key-file lab.key`
  tcpstall completions bash > ~/.local/share/bash-completion/completions/tcpstall
                                            tab completion (also zsh, fish); `tcpstall man` the man page

Each subcommand has its own --help with examples.";

#[derive(Debug, Parser)]
#[command(name = "tcpstall", version, about = ABOUT, propagate_version = true, after_help = EXAMPLES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a scenario over real sockets across a matrix of strategies (default: seed 000).
    Lab(lab::LabArgs),
    /// List the built-in scenarios with their parameters and default strategy matrix.
    Scenarios(scenarios::ScenariosArgs),
    /// Find and classify stalls in a pcap/pcapng capture of any program.
    Explain(explain::ExplainArgs),
    /// Run a scenario on the deterministic model of other TCP stacks.
    Simulate(simulate::SimulateArgs),
    /// Run a command in a network namespace behind an emulated link.
    Shell(shell::ShellArgs),
    /// Fingerprint this kernel's TCP rules (about 7 s) and name the Linux era profile it matches.
    Kernel(kernel::KernelArgs),
    /// Which fix, on which side, and how sure: the workload as written against every candidate fix.
    Advise(advise::AdviseArgs),
    /// Measure fixes applied from outside (route quickack, sock_ops, a shim, a setting) on your own client and server.
    AdviseRun(advise_run::AdviseRunArgs),
    /// Derive the exchange a captured connection carried, save it, and run it here.
    Replay(replay::ReplayArgs),
    /// Find stalls live on this host (TPACKET_V3 ring, the same classifier as explain).
    Watch(watch::WatchArgs),
    /// Live TCP sockets with their owner and what decides stalls: TCP_NODELAY, cork, delayed ACK.
    Sockets(sockets::SocketsArgs),
    /// Serve the far side of `lab --remote` (authenticated, limited; docs/remote.md).
    Serve(serve::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard output.
    Completions(completions::CompletionsArgs),
    /// Print the manual page (roff, man(7)) to standard output.
    Man(completions::ManArgs),
}
