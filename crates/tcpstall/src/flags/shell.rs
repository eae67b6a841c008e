//! `tcpstall shell`'s flags and their help.

use std::ffi::OsString;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  # An interactive shell 20 ms and 100 Mbit/s away from a second namespace:
  tcpstall shell --link rtt=20ms,rate=100mbit

  # Your own server and client on a lossy link, every packet recorded at both ends
  # (1 MB through netcat-openbsd, Debian's and Ubuntu's nc; -N closes after the input;
  # under 1 s, writes run.pcapng of about 2 MB):
  tcpstall shell --link rtt=40ms,loss=1% --capture run.pcapng \\
      --server-command 'nc -l 5001 >/dev/null' \\
      -- sh -c 'head -c 1M /dev/zero | nc -N 198.18.0.2 5001'

  # Seed 003's receiver-side pure-ACK thinning (keep 1 of 2 of the server's), no iptables:
  tcpstall shell --link ack-every=2,ack-dir=down --server-command 'nc -l 5001 >/dev/null' \\
      -- sh -c 'head -c 100M /dev/zero | nc -N 198.18.0.2 5001'

The command runs in the client namespace (198.18.0.1); the server namespace (198.18.0.2) is
behind the link. Both see TCPSTALL_CLIENT, TCPSTALL_SERVER, TCPSTALL_SERVER_NETNS (a path for
`nsenter --net=`) and TCPSTALL_LINK; their /etc/hosts names the ends `client` and `server`.
There is no default route: off-link addresses (and so DNS) fail at once. Everything started
runs in its own PID namespace and dies with tcpstall. The command runs in a process group of
its own: SIGINT and SIGTERM sent to tcpstall reach all of it (every process of a pipeline), and
on a terminal it is the foreground group, so Ctrl-C reaches it directly. A command that cannot
start exits 127 (not found) or 126 (not executable). Link keys: rtt, delay, delay-up, delay-down, jitter,
reorder, rate, queue, loss, ack-loss, ack-every, ack-dir, mtu (see docs/link.md).";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ShellArgs {
    /// The emulated link, e.g. rtt=20ms,rate=100mbit,mtu=1500,ack-loss=50%.
    #[arg(long, value_name = "SPEC", default_value = "mtu=1500")]
    pub link: String,
    /// Run this (with /bin/sh -c) in the server namespace for the whole session.
    #[arg(long, value_name = "CMD")]
    pub server_command: Option<String>,
    /// Record every packet the link carries, at both ends, to this pcapng file.
    #[arg(long, value_name = "FILE.pcapng")]
    pub capture: Option<PathBuf>,
    /// Do not print the link's addresses and counters.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to run in the client namespace (default: $SHELL, or /bin/sh).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}
