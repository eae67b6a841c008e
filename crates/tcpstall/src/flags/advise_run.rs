//! `tcpstall advise-run`'s flags and their help.

use std::path::PathBuf;

use super::common::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall advise-run --port 8080 \\
      --server 'python3 -m http.server --bind {host} {port}' \\
      --client 'python3 client.py {host} {port}'
  tcpstall advise-run --port 1883 --server 'mosquitto -c /tmp/m.conf' \\
      --server-setting 'line:/tmp/m.conf:set_tcp_nodelay true' --client 'python3 mqtt_rr.py {host} {port}'
  tcpstall advise-run --server-addr 192.0.2.10:8080 --client 'python3 client.py {host} {port}'
  tcpstall advise-run --link rtt=20ms,mtu=1500 --port 8080 \\
      --server 'python3 server.py {host} {port}' --client 'python3 client.py {host} {port}'

The server runs in one namespace of the lab's veth path, the client in the other ({host} and
{port} name the server), each in a cgroup of its own. Candidates, each applied from outside and
measured A/B interleaved on the real programs: route quickack 1 (either side), a cgroup sock_ops
program setting TCP_NODELAY (either side), a cgroup sock_ops program capping the delayed ACK
(TCP_BPF_DELACK_MAX at the kernel's minimum, 2 jiffies) on the side whose ACKs the held writes
waited for (found by the first run as written), an LD_PRELOAD shim (where the program is dynamically
linked and not Go), and the program's own setting when named. Each run's stalls are named
from its packets and the kernel's evidence of the server's sockets (eBPF on TCP tracepoints,
attached only while the run records; --no-kernel: the packets only). Needs root. Everything created is
removed on exit and on Ctrl-C, and swept by the next run after a crash.

With --server-addr there is no server command: the server is not ours, so only the client's
candidates run and the server's are listed as left out; the packets are captured in the
client's namespace and the CPU is the client's.

When the first choice sets TCP_NODELAY on a side that runs HAProxy or nginx (named with
--server-program/--client-program, else the process listening on the port, else the command's
executable), its deployable form adds the proxy's own line, `option http-no-delay` (HAProxy) or
`tcp_nodelay on;` (nginx), saying it was not measured: --server-setting measures it.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct AdviseRunArgs {
    /// The server's command (a shell command line; {host} and {port} are filled in)
    #[arg(
        long,
        value_name = "COMMAND",
        required_unless_present_any = ["write_sockops", "write_sockops_delack", "server_addr"]
    )]
    pub server: Option<String>,
    /// An existing server instead of a server command (IPv4 HOST:PORT, a name resolved here):
    /// the client reaches it out of the lab's namespace through this host (routed, and
    /// masqueraded when it is not on this host); only the client's side is changed
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["server", "server_setting", "server_program", "port"])]
    pub server_addr: Option<String>,
    /// The client's command: runs to its end once per run
    #[arg(long, value_name = "COMMAND", required_unless_present_any = ["write_sockops", "write_sockops_delack"])]
    pub client: Option<String>,
    /// Run behind the lab's emulated link between the two namespaces (as `lab --link`; see
    /// `tcpstall shell --help` for SPEC), instead of the direct veth pair
    #[arg(long, value_name = "SPEC", conflicts_with = "server_addr")]
    pub link: Option<String>,
    /// The port the server listens on
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The server program's own setting: env:NAME=VALUE or line:FILE:LINE (added to FILE, then restored)
    #[arg(long, value_name = "SETTING")]
    pub server_setting: Option<String>,
    /// The client program's own setting: env:NAME=VALUE or line:FILE:LINE
    #[arg(long, value_name = "SETTING")]
    pub client_setting: Option<String>,
    /// The program the server command runs, when a wrapper script or a container hides it
    /// (haproxy, nginx: the deployable form of a TCP_NODELAY fix then adds its own line)
    #[arg(long, value_name = "NAME")]
    pub server_program: Option<String>,
    /// The program the client command runs, when a wrapper hides it
    #[arg(long, value_name = "NAME")]
    pub client_program: Option<String>,
    /// Do not add kernel evidence to the runs' packets. By default each run's connection is
    /// also traced in the kernel (eBPF on TCP tracepoints, attached only while the run records:
    /// its writes, resends, congestion states) and the classifier reads both; where that is not
    /// possible the report says in one line that the stalls come from the packets only
    #[arg(long)]
    pub no_kernel: bool,
    /// Seconds to spend before the first answer (more runs of each candidate with more)
    #[arg(long, default_value_t = 60)]
    pub budget: u64,
    /// Seconds one client run may take (and the server to start listening)
    #[arg(long, default_value_t = 20)]
    pub timeout: u64,
    /// Write the deployable sock_ops object (TCP_NODELAY on) to FILE, for bpftool, and exit
    #[arg(long, value_name = "FILE")]
    pub write_sockops: Option<PathBuf>,
    /// Write the deployable sock_ops object capping the delayed ACK (TCP_BPF_DELACK_MAX at the
    /// kernel's minimum, 2 jiffies) to FILE, for bpftool, and exit
    #[arg(long, value_name = "FILE")]
    pub write_sockops_delack: Option<PathBuf>,
    /// Output format: table, or json (the versioned document, docs/json-schema.md)
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}
