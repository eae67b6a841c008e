//! Where a case runs: two network namespaces with a path between them.
//!
//! - RTT ~0: a client and a server namespace joined through a router namespace by two veth
//!   pairs (`tst-<pid>-a` - `tst-<pid>-r` - `tst-<pid>-b`), offloads off so a captured packet
//!   is one segment. Loss rules are iptables rules in the router's FORWARD chain, so both
//!   endpoints' captures are what their kernels sent and received.
//! - RTT > 0: the project's emulated link (crates/link: two unnamed namespaces joined by TUN
//!   devices and a userspace forwarder with nanosecond deadlines), its random loss seeded.
//!
//! Everything created is registered in [`cleanup`] and removed on drop, on exit and on
//! SIGINT/SIGTERM/SIGHUP; named namespaces of dead runs are swept at start ([`sweep`]).

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::shape::Loss;

/// Prefix of every named namespace this program makes: `tst-<pid>-<role>`.
pub const NS_PREFIX: &str = "tst-";

/// What a run owns, for the signal handler: namespaces by name and child processes by pid.
#[derive(Default)]
struct Owned {
    namespaces: Vec<String>,
    children: Vec<u32>,
    /// Inodes of every namespace of the run (named or not): the processes in them are killed.
    inodes: Vec<u64>,
}

static OWNED: Mutex<Owned> = Mutex::new(Owned { namespaces: Vec::new(), children: Vec::new(), inodes: Vec::new() });

fn owned() -> std::sync::MutexGuard<'static, Owned> {
    OWNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers a child process to kill on a signal.
pub fn own_child(pid: u32) {
    owned().children.push(pid);
}

/// The child is gone (waited for).
pub fn disown_child(pid: u32) {
    owned().children.retain(|&p| p != pid);
}

/// Kills every registered child and deletes every registered namespace (the signal path and
/// the end of a run).
pub fn cleanup() {
    let (kids, nss, inodes) = {
        let mut o = owned();
        (std::mem::take(&mut o.children), std::mem::take(&mut o.namespaces), std::mem::take(&mut o.inodes))
    };
    for (pid, _) in processes_in(&inodes) {
        kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    for pid in kids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
    for ns in nss {
        let _ = quiet(&["ip", "netns", "del", &ns]);
    }
}

fn kill(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// The processes (pid, command name) whose network namespace is one of `inodes` (proc(5):
/// /proc/PID/ns/net reads `net:[INODE]`), this process excepted.
pub fn processes_in(inodes: &[u64]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
            let ino: u64 = link.to_str()?.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()?;
            inodes.contains(&ino).then(|| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                (pid, comm.trim().to_string())
            })
        })
        .collect()
}

fn inode(f: impl AsFd) -> Option<u64> {
    nix::sys::stat::fstat(f.as_fd().as_raw_fd()).ok().map(|s| s.st_ino)
}

/// Kills the registered children (after a case; its namespaces go with its path).
pub fn cleanup_children() {
    let kids = std::mem::take(&mut owned().children);
    for pid in kids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Removes everything and exits 130 on SIGINT, SIGTERM or SIGHUP (a thread of its own reads
/// the signals, signal-hook's iterator).
pub fn on_signals_clean_up() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new().name("truth-signals".into()).spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("tcpstall-truth: signal {sig}: removing the namespaces and processes of this run");
            cleanup();
            std::process::exit(130);
        }
    })?;
    Ok(())
}

/// Deletes the namespaces `tst-<pid>-*` whose run is gone (their devices and rules go with
/// them). Returns how many.
pub fn sweep() -> usize {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return 0 };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = 0;
    for name in stale_namespaces(&text, |pid| std::path::Path::new(&format!("/proc/{pid}")).exists()) {
        if quiet(&["ip", "netns", "del", &name]).is_ok() {
            n += 1;
        }
    }
    n
}

/// The names in `ip netns list` output that are this program's and whose pid is not alive.
pub fn stale_namespaces(list: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|name| {
            let rest = name.strip_prefix(NS_PREFIX)?;
            let (pid, _) = rest.split_once('-')?;
            let pid: u32 = pid.parse().ok()?;
            (pid != std::process::id() && !alive(pid)).then(|| name.to_string())
        })
        .collect()
}

fn quiet(args: &[&str]) -> anyhow::Result<String> {
    output_of(Command::new(args[0]), args)
}

/// Runs `cmd` (made for `args[0]`) with the rest of `args` to completion: its standard output,
/// or its standard error as the error.
fn output_of(mut cmd: Command, args: &[&str]) -> anyhow::Result<String> {
    let out = cmd.args(&args[1..]).stdin(Stdio::null()).output().with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The two ends of a case's path.
pub enum Net {
    Veth(Veth),
    Link(Box<link::Link>),
}

/// The veth path: three named namespaces.
pub struct Veth {
    ns: [String; 3],
    files: [File; 3],
    devs: [String; 2],
    /// The router's end facing the client (its capture is the middle point).
    router_dev: String,
}

/// Client address on both kinds of path.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const VETH_SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);

impl Veth {
    // long: the whole topology in one place: namespaces, pairs, addresses, routes, offloads.
    pub fn open(tag: &str) -> anyhow::Result<Veth> {
        let pid = std::process::id();
        let ns = ["a", "r", "b"].map(|r| format!("{NS_PREFIX}{pid}-{tag}{r}"));
        for n in &ns {
            quiet(&["ip", "netns", "add", n])?;
            owned().namespaces.push(n.clone());
        }
        let devs = [format!("t{pid}{tag}a"), format!("t{pid}{tag}b")];
        let rdevs = [format!("t{pid}{tag}ra"), format!("t{pid}{tag}rb")];
        for (i, end) in [0usize, 2].into_iter().enumerate() {
            quiet(&[
                "ip", "link", "add", &devs[i], "netns", &ns[end], "type", "veth", "peer", "name", &rdevs[i], "netns",
                &ns[1],
            ])?;
        }
        let exec = |n: &str, args: &[&str]| -> anyhow::Result<String> {
            let mut v = vec!["ip", "netns", "exec", n];
            v.extend_from_slice(args);
            quiet(&v)
        };
        let addrs = [("198.18.0.1/24", "198.18.0.254"), ("198.18.1.2/24", "198.18.1.254")];
        for (i, end) in [0usize, 2].into_iter().enumerate() {
            let n = &ns[end];
            quiet(&["ip", "-n", n, "addr", "add", addrs[i].0, "dev", &devs[i]])?;
            quiet(&["ip", "-n", n, "link", "set", "lo", "up"])?;
            quiet(&["ip", "-n", n, "link", "set", &devs[i], "up"])?;
            quiet(&["ip", "-n", n, "route", "add", "default", "via", addrs[i].1])?;
            // One captured packet is one segment: no TSO/GSO super-packets at the sender, no
            // GRO merging at the receiver (ethtool(8) -K).
            exec(n, &["ethtool", "-K", &devs[i], "tso", "off", "gso", "off", "gro", "off"])?;
        }
        let r = &ns[1];
        for (i, a) in ["198.18.0.254/24", "198.18.1.254/24"].into_iter().enumerate() {
            quiet(&["ip", "-n", r, "addr", "add", a, "dev", &rdevs[i]])?;
            quiet(&["ip", "-n", r, "link", "set", &rdevs[i], "up"])?;
            exec(r, &["ethtool", "-K", &rdevs[i], "tso", "off", "gso", "off", "gro", "off"])?;
        }
        exec(r, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
        let files = [0, 1, 2].map(|i| File::open(format!("/run/netns/{}", ns[i])));
        let [a, b, c] = files;
        let files = [a?, b?, c?];
        owned().inodes.extend(files.iter().filter_map(inode));
        Ok(Veth { ns, files, devs, router_dev: rdevs[0].clone() })
    }
}

impl Drop for Net {
    /// Ends what still runs in the path's namespaces, then forgets their inodes: a namespace's
    /// inode number is reused once it is freed, maybe by another run's namespace.
    fn drop(&mut self) {
        let ino = self.inodes();
        for (pid, _) in processes_in(&ino) {
            kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        owned().inodes.retain(|i| !ino.contains(i));
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = quiet(&["ip", "netns", "del", n]);
        }
        owned().namespaces.retain(|n| !self.ns.contains(n));
    }
}

/// A point of the path: the client's namespace, the router (veth only) or the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    Client,
    Router,
    Server,
}

impl Net {
    /// Opens the path for a case with round trip `rtt_ms` and `loss`.
    pub fn open(rtt_ms: u32, loss: &Loss, seed: u64, tag: &str) -> anyhow::Result<Net> {
        if rtt_ms == 0 {
            let v = Veth::open(tag)?;
            let net = Net::Veth(v);
            net.add_loss(loss)?;
            return Ok(net);
        }
        let half = u64::from(rtt_ms) * 500_000;
        let mut spec = link::LinkSpec { delay_up_ns: half, delay_down_ns: half, ..Default::default() };
        if let Loss::Random { percent } = loss {
            spec.loss = f64::from(*percent) / 100.0;
        } else if *loss != Loss::None {
            bail!("loss rule {loss:?} needs the veth path (rtt 0)");
        }
        // No GSO: each packet the captures show is one segment, as on the veth path.
        let opts = link::LinkOptions { seed: Some(seed), calibrate: false, gso: false, ..Default::default() };
        let l = link::Link::open_with(&spec, None, &opts).map_err(|e| anyhow::anyhow!("emulated link: {e}"))?;
        owned().inodes.extend([inode(l.client().netns()), inode(l.server().netns())].into_iter().flatten());
        Ok(Net::Link(Box::new(l)))
    }

    pub fn server_ip(&self) -> Ipv4Addr {
        match self {
            Net::Veth(_) => VETH_SERVER_IP,
            Net::Link(_) => link::netns::SERVER_IP,
        }
    }

    /// The interface a capture at `p` listens on (None: no such point on this path).
    pub fn interface(&self, p: Point) -> Option<String> {
        match (self, p) {
            (Net::Veth(v), Point::Client) => Some(v.devs[0].clone()),
            (Net::Veth(v), Point::Server) => Some(v.devs[1].clone()),
            (Net::Veth(v), Point::Router) => Some(v.router_dev.clone()),
            (Net::Link(_), Point::Router) => None,
            (Net::Link(_), _) => Some(link::netns::TUN_NAME.to_string()),
        }
    }

    /// A command that runs `program` inside the namespace of `p`, killed if this thread dies
    /// (sys::process::enter_netns_on_spawn).
    pub fn command(&self, p: Point, program: &str) -> Command {
        let mut cmd = Command::new(program);
        match (self, p) {
            (Net::Veth(v), _) => {
                let i = match p {
                    Point::Client => 0,
                    Point::Router => 1,
                    Point::Server => 2,
                };
                sys::process::enter_netns_on_spawn(&mut cmd, v.files[i].as_fd());
            }
            (Net::Link(l), Point::Server) => sys::process::enter_netns_on_spawn(&mut cmd, l.server().netns()),
            (Net::Link(l), _) => sys::process::enter_netns_on_spawn(&mut cmd, l.client().netns()),
        }
        cmd
    }

    fn inodes(&self) -> Vec<u64> {
        match self {
            Net::Veth(v) => v.files.iter().filter_map(inode).collect(),
            Net::Link(l) => [inode(l.client().netns()), inode(l.server().netns())].into_iter().flatten().collect(),
        }
    }

    /// Ends the programs still running in the path's namespaces: SIGTERM to all but strace and
    /// tcpdump (strace then writes its last lines and exits with its tracee), then, after up to
    /// 2 s, SIGKILL to all but tcpdump.
    pub fn stop_programs(&self) {
        use nix::sys::signal::Signal;
        let ino = self.inodes();
        for (pid, comm) in processes_in(&ino) {
            if comm != "strace" && comm != "tcpdump" {
                kill(pid, Signal::SIGTERM);
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline && processes_in(&ino).iter().any(|(_, c)| c != "tcpdump") {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        for (pid, comm) in processes_in(&ino) {
            if comm != "tcpdump" {
                kill(pid, Signal::SIGKILL);
            }
        }
    }

    /// Runs `args` in the namespace of `p` to completion.
    pub fn run(&self, p: Point, args: &[&str]) -> anyhow::Result<String> {
        output_of(self.command(p, args[0]), args)
    }

    /// The loss rule as iptables rules in the router's FORWARD chain (iptables-extensions(8):
    /// statistic --mode nth, length, tcp flags). Payload length = IP total length - 20 - 32
    /// (IPv4 header, TCP header with the timestamps option, RFC 7323 3).
    fn add_loss(&self, loss: &Loss) -> anyhow::Result<()> {
        let data = ["-m", "length", "!", "--length", "0:52"];
        let nth = |every: u32| {
            vec![
                "-m".to_string(),
                "statistic".into(),
                "--mode".into(),
                "nth".into(),
                "--every".into(),
                every.to_string(),
                "--packet".into(),
                "0".into(),
            ]
        };
        let mut rule: Vec<String> =
            vec!["iptables".into(), "-w".into(), "-A".into(), "FORWARD".into(), "-p".into(), "tcp".into()];
        match loss {
            Loss::None | Loss::Random { .. } => return Ok(()),
            Loss::NthData { every } => {
                rule.extend(["-s", "198.18.0.1"].map(String::from));
                rule.extend(data.map(String::from));
                rule.extend(nth(*every));
            }
            Loss::TailData { every, len } => {
                rule.extend(["-s", "198.18.1.2", "-m", "length", "--length"].map(String::from));
                rule.push((len + 52).to_string());
                rule.extend(nth(*every));
            }
            Loss::NthAck { every } => {
                rule.extend(
                    [
                        "-s",
                        "198.18.1.2",
                        "--tcp-flags",
                        "SYN,FIN,RST,ACK,PSH",
                        "ACK",
                        "-m",
                        "length",
                        "--length",
                        "0:52",
                    ]
                    .map(String::from),
                );
                rule.extend(nth(*every));
            }
        }
        rule.extend(["-j", "DROP"].map(String::from));
        let args: Vec<&str> = rule.iter().map(String::as_str).collect();
        self.run(Point::Router, &args)?;
        Ok(())
    }
}

/// A child process that is killed and reaped when dropped.
pub struct Proc(pub Option<Child>);

impl Proc {
    pub fn spawn(mut cmd: std::process::Command) -> anyhow::Result<Proc> {
        let c = cmd.spawn()?;
        own_child(c.id());
        Ok(Proc(Some(c)))
    }
    /// Waits up to `limit`; an error names `what` if it fails or takes longer.
    pub fn wait(&mut self, limit: Duration, what: &str) -> anyhow::Result<()> {
        let Some(c) = self.0.as_mut() else { return Ok(()) };
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = c.try_wait()? {
                disown_child(c.id());
                self.0 = None;
                if !st.success() {
                    bail!("{what} exited with {st}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{what} did not finish within {} s", limit.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
            disown_child(c.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dead_runs_namespaces_are_stale() {
        let me = std::process::id();
        let list = format!("tst-4000000-0a (id: 3)\ntst-4000001-0b\ntst-{me}-0r\ntcpstall-x-1-tx\nother\n");
        let alive = |pid: u32| pid == 4000001;
        assert_eq!(stale_namespaces(&list, alive), vec!["tst-4000000-0a".to_string()]);
    }
}
