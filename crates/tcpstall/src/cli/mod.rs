//! What each command does, one file per command (`explain_pair`, `lab::remote` and `seed003` are
//! modes of explain and lab; `output`, `htmlreport` and `linkenv` the sinks, the HTML page's
//! host side and the link environment they share): open the OS sources and sinks (sockets,
//! captures, namespaces, files), call the libraries with the typed request its flags made
//! (`crate::flags`), hand the result to `report`, and choose the exit status.

use crate::flags::{Cli, Command};

pub(crate) mod advise;
pub(crate) mod advise_run;
pub(crate) mod completions;
pub(crate) mod explain;
pub(crate) mod explain_pair;
pub(crate) mod htmlreport;
pub(crate) mod kernel;
pub(crate) mod lab;
pub(crate) mod linkenv;
pub(crate) mod output;
pub(crate) mod procsock;
pub(crate) mod replay;
pub(crate) mod scenarios;
pub(crate) mod seed003;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod simulate;
pub(crate) mod sockets;
pub(crate) mod watch;

/// Runs the command; returns the process exit code.
pub(crate) fn run(cli: Cli) -> anyhow::Result<i32> {
    // Every command that creates namespaces, devices, routes or firewall rules first removes
    // what killed runs of any of them left (link::sweep::sweep_all): lab (a private namespace
    // per row, --link, --path veth, --matrix seed003), shell, kernel, advise and replay (which
    // run the lab).
    if matches!(
        cli.command,
        Command::Lab(_)
            | Command::Shell(_)
            | Command::Kernel(_)
            | Command::Advise(_)
            | Command::AdviseRun(_)
            | Command::Replay(_)
    ) {
        if let Some(line) = link::sweep::sweep_all().line() {
            eprintln!("tcpstall: {line}");
        }
        // And what a killed advise-run left (outside::sweep): its uplink's iptables rules and
        // the forwarding it turned on host-wide must not wait for the next advise-run.
        if nix::unistd::geteuid().is_root() {
            for gone in outside::sweep() {
                eprintln!("tcpstall: removed {gone}, left by a run that no longer runs");
            }
        }
    }
    match cli.command {
        Command::Lab(a) => lab::run(a),
        Command::Scenarios(a) => scenarios::run(a),
        Command::Explain(a) => explain::run(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Shell(a) => shell::run(a),
        Command::Kernel(a) => kernel::run(a),
        Command::Advise(a) => advise::run(a),
        Command::AdviseRun(a) => advise_run::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Watch(a) => watch::run(a),
        Command::Sockets(a) => sockets::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Completions(a) => completions::completions(a),
        Command::Man(a) => completions::man(a),
    }
}
