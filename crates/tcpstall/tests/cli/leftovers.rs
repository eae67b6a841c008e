//! Leftovers: each kind of run that creates namespaces, devices, routes or firewall rules is
//! killed with SIGKILL mid-run, then a run of another kind starts; afterwards nothing of either
//! run is left: no named namespace (`ip netns list`) or device (`ip -o link`) named after their
//! pids, no seed 003 firewall rule in the caller's namespace, and no process tagged by them
//! (`link::sweep::sweep_all`, run at the start of every such command, removes what dead runs
//! left).
//!
//! System-wide state, shared with whatever else runs on the machine: the host's namespaces and
//! devices (other tests, other programs make theirs: a whole-system before/after comparison
//! fails whenever anything else creates one meanwhile), and the sweep itself (every `lab`,
//! `shell`, `kernel`, `advise` or `replay` of any test or user removes what any dead run left,
//! so it may take a killed run's leftovers before the run under test does). So the tests here
//! look only at what their own runs (their pids) made, hold `exclusive()` against the tests of
//! this binary that time things, and keep a killed run unreaped until the next run starts: a
//! zombie's pid still exists, so no sweep takes its leftovers meanwhile (`pid_gone`); when
//! another run's sweep wins the moment between the reaping and the next run's own sweep, the
//! step is tried again (`twice`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{exclusive, have, twice};

fn lines(cmd: &str, args: &[&str]) -> Vec<String> {
    let Ok(out) = Command::new(cmd).args(args).output() else { return vec![format!("{cmd}: not run")] };
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// What runs of these pids left: named namespaces, devices in this namespace, seed 003's
/// thinning rules in this namespace's iptables (they belong inside the run's namespaces), and
/// processes tagged by them (not zombies).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Left {
    netns: Vec<String>,
    links: Vec<String>,
    iptables: Vec<String>,
    processes: Vec<u32>,
}

impl Left {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Left::default()
    }
}

/// Is this device name one tcpstall gives a run of `pid` (`tsv<pid>t`, `tsv<pid>r`,
/// `tcpstall*<pid>`)?
fn link_of(name: &str, pid: u32) -> bool {
    link::sweep::link_owner(name) == Some(pid) || (name.starts_with("tcpstall") && name.ends_with(&pid.to_string()))
}

pub(crate) fn netns_of(pids: &[u32]) -> Vec<String> {
    lines("ip", &["netns", "list"])
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| link::sweep::netns_owner(n).is_some_and(|p| pids.contains(&p)))
        .map(str::to_string)
        .collect()
}

fn tagged_by(pids: &[u32]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|p| {
            let Ok(env) = std::fs::read(format!("/proc/{p}/environ")) else { return false };
            let owner = link::sweep::tag_in_environ(&env).and_then(|t| t.split(':').next()?.parse::<u32>().ok());
            owner.is_some_and(|o| pids.contains(&o)) && state_of(*p) != Some('Z')
        })
        .collect()
}

/// The state letter of /proc/PID/stat (proc(5): after the command name's last ')').
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

pub(crate) fn left_by(pids: &[u32]) -> Left {
    let links = lines("ip", &["-o", "link", "show"])
        .iter()
        .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()))
        .filter(|n| pids.iter().any(|&p| link_of(n, p)))
        .collect();
    // Seed 003's `-m length --length 40:80 ... -m statistic` pair (lab::veth), which only ever
    // belongs inside a run's own namespaces.
    let iptables = if have("iptables-save") {
        lines("iptables-save", &[]).into_iter().filter(|l| l.contains("--length 40:80")).collect()
    } else {
        Vec::new()
    };
    Left { netns: netns_of(pids), links, iptables, processes: tagged_by(pids) }
}

/// What runs of `pids` left, once the processes killed by the last sweep had a moment to die.
fn settled(pids: &[u32]) -> Left {
    let t0 = Instant::now();
    loop {
        let left = left_by(pids);
        if left.is_empty() || t0.elapsed() > Duration::from_secs(3) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A tcpstall run with `args` in a process group of its own, its standard error piped when
/// `stderr` (read it: a killed run's is not, so that its progress never fills the pipe).
pub(crate) fn spawn(args: &[&str], stderr: bool) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .process_group(0)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(if stderr { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap()
}

/// Waits until `ready` holds for the child's pid (at most 30 s), SIGKILLs it and waits until
/// it is a zombie: dead, its exit done, not reaped, so its pid stays taken and no sweep
/// removes what it left until the caller reaps it.
pub(crate) fn kill_when(child: &mut Child, what: &str, ready: impl Fn(u32) -> bool) {
    let pid = child.id();
    let t0 = Instant::now();
    while !ready(pid) {
        assert!(state_of(pid) != Some('Z'), "{what}: ended before it was killed");
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}: never got to the point of being killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    while state_of(pid) != Some('Z') {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}: SIGKILLed, never died");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Its children (`ip`, `ethtool`, `iptables` of a veth path half built) outlive it and may
    // still create what the sweep is to find: they are waited for too, by their process group
    // (`spawn` gives the run its own), a few seconds at most: a PID namespace's init dies with
    // the run, and a tagged process left running is the sweep's.
    let t1 = Instant::now();
    while !group_of(pid).is_empty() && t1.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live processes of process group `pgid` (field 5 of /proc/PID/stat), but itself.
fn group_of(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&p| p != pgid && state_of(p).is_some_and(|s| s != 'Z'))
        .filter(|p| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
            let group = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().nth(2)?.parse::<u32>().ok());
            group == Some(pgid)
        })
        .collect()
}

/// Reaps the killed `child`, then at once runs `next` to its end; returns its pid and its
/// standard error.
pub(crate) fn reap_then_run(mut child: Child, what: &str, next: &[&str]) -> (u32, String) {
    child.wait().unwrap();
    let run = spawn(next, true);
    let pid = run.id();
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what}: {next:?}: {err}");
    (pid, err)
}

/// One step: `args` run until `ready`, SIGKILLed, then `next`. Afterwards nothing of either is
/// left, and the namespaces the killed run left were removed by `next`, which says so, naming
/// them; Err when another run's sweep removed them first.
fn killed_then(
    what: &str,
    args: &[&str],
    ready: &dyn Fn(u32) -> bool,
    next: &[&str],
    ours: &mut Vec<u32>,
) -> Result<(), String> {
    let mut child = spawn(args, false);
    ours.push(child.id());
    kill_when(&mut child, what, ready);
    let left = netns_of(&[child.id()]);
    let (pid, err) = reap_then_run(child, what, next);
    ours.push(pid);
    let after = settled(ours);
    assert!(after.is_empty(), "after a killed `{what}` and {next:?}: left {after:?}; {err}");
    if !left.iter().all(|n| err.contains(n.as_str())) {
        return Err(format!("{next:?} did not name {left:?} among what it removed (another run's sweep did): {err}"));
    }
    Ok(())
}

fn named_netns_of(pid: u32) -> bool {
    !netns_of(&[pid]).is_empty()
}

/// A process started by the run behind its link (tagged with the run's pid).
fn tagged_child_of(pid: u32) -> bool {
    !tagged_by(&[pid]).is_empty()
}

/// Has the process run for `d`? (for runs whose namespaces have no name to wait for)
fn running_for(d: Duration) -> impl Fn(u32) -> bool {
    let t0 = Instant::now();
    move |_| t0.elapsed() >= d
}

pub(crate) fn a_run_killed_mid_way_is_cleaned_up_by_the_next_run_of_another_kind() {
    let _one = exclusive();
    let mut ours = Vec::new();
    let next_shell = ["shell", "--link", "rtt=1ms", "--", "true"];
    let next_lab = ["lab", "rr", "--rounds", "50", "-q"];
    let next_veth = ["lab", "stream", "--path", "veth", "--set", "duration_ms=200", "-q"];
    let next_link_lab = ["lab", "rr", "--rounds", "20", "--link", "rtt=1ms", "-q"];

    // Seed 003's veth path: named namespaces, a veth pair, iptables rules inside.
    let veth = ["lab", "stream", "--path", "veth", "--thin-acks", "2", "--set", "duration_ms=8000", "-q"];
    twice("a killed `lab --path veth`, then `shell`", || {
        killed_then("lab --path veth", &veth, &|pid| netns_of(&[pid]).len() >= 2, &next_shell, &mut ours)
    });
    // Seed 003's matrix.
    let matrix = ["lab", "stream", "--matrix", "seed003", "-q"];
    twice("a killed `lab --matrix seed003`, then `lab`", || {
        killed_then("lab --matrix seed003", &matrix, &named_netns_of, &next_lab, &mut ours)
    });
    // The emulated link: a shell with a server command and a command behind it; its processes
    // die with it (a PID namespace) or are swept by the next run.
    let shell = ["shell", "--link", "rtt=5ms", "--server-command", "sleep 301", "--", "sleep", "302"];
    twice("a killed `shell`, then `lab --path veth`", || {
        killed_then("shell --link", &shell, &tagged_child_of, &next_veth, &mut ours)
    });
    // The kernel fingerprint (an emulated 400 ms link) and the lab on loopback (a private
    // namespace per row): unnamed namespaces, which die with the process.
    twice("a killed `kernel`, then `lab --link`", || {
        killed_then("kernel", &["kernel"], &running_for(Duration::from_millis(1500)), &next_link_lab, &mut ours)
    });
    twice("a killed `lab`, then `shell`", || {
        killed_then("lab", &["lab", "chunked"], &running_for(Duration::from_millis(800)), &next_shell, &mut ours)
    });
}
