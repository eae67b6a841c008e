//! `tcpstall sockets`' flags.

const EXAMPLES: &str = "\
Examples:
  tcpstall sockets                          every TCP socket of this network namespace
  tcpstall sockets --port 8080 --at-risk    only those at risk of a stall, and why
  tcpstall sockets --pid 1234 --format json

Reads each socket's options from a duplicate of its owner's descriptor (pidfd_getfd, Linux
5.6+, root): TCP_NODELAY, TCP_CORK, TCP_QUICKACK (the delayed-ACK ping-pong mode),
TCP_NOTSENT_LOWAT, TCP_CONGESTION and TCP_INFO; the socket itself is not changed. Reads twice,
--interval apart, to tell a cork held from one set for a moment.";

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SocketsFormat {
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct SocketsArgs {
    /// Only sockets of this process (repeatable)
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only sockets of processes in this cgroup v2 path or below (repeatable)
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// Only sockets with this local or remote port (repeatable)
    #[arg(long = "port", value_name = "P")]
    pub ports: Vec<u16>,
    /// Include listening sockets
    #[arg(long)]
    pub listening: bool,
    /// Only the sockets at risk of a stall
    #[arg(long)]
    pub at_risk: bool,
    /// Seconds between the two readings (a cork held across both is a held cork)
    #[arg(long, value_name = "S", default_value_t = 0.25)]
    pub interval: f64,
    #[arg(long, value_enum, default_value = "table")]
    pub format: SocketsFormat,
}

/// The flags' values: one line on what is wrong.
pub(crate) fn check(a: &SocketsArgs) -> anyhow::Result<()> {
    if !(a.interval.is_finite() && (0.0..=60.0).contains(&a.interval)) {
        anyhow::bail!("--interval {}: expected seconds between 0 and 60", a.interval);
    }
    if let Some(c) = a.cgroups.iter().find(|c| !c.starts_with('/')) {
        anyhow::bail!("--cgroup {c}: expected a cgroup v2 path from its root, starting with /");
    }
    Ok(())
}
