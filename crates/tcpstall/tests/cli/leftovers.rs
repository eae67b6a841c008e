//! Leftovers: each kind of run that creates namespaces, devices, routes or firewall rules is
//! killed with SIGKILL mid-run, then a run of another kind starts; afterwards the machine is as
//! the test found it: the same named namespaces (`ip netns list`), the same devices (`ip -o
//! link`), the same iptables and nft rules, and no process tagged by a dead run
//! (`link::sweep::sweep_all`, run at the start of every such command).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{exclusive, have, tcpstall};

/// What a run could leave behind, as the host's tools print it.
#[derive(Debug, PartialEq, Eq)]
struct State {
    netns: Vec<String>,
    links: Vec<String>,
    iptables: Vec<String>,
    nft: Vec<String>,
}

fn lines(cmd: &str, args: &[&str]) -> Vec<String> {
    let Ok(out) = Command::new(cmd).args(args).output() else { return vec![format!("{cmd}: not run")] };
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

fn state() -> State {
    // Device names only: counters and flags change with traffic, not with leftovers.
    let mut links: Vec<String> = lines("ip", &["-o", "link", "show"])
        .iter()
        .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()))
        .collect();
    links.sort();
    let mut netns: Vec<String> =
        lines("ip", &["netns", "list"]).iter().map(|l| l.split_whitespace().next().unwrap_or("").to_string()).collect();
    netns.sort();
    // iptables-save: the rules, without its comment lines (a date) and packet counters.
    let iptables = if have("iptables-save") {
        lines("iptables-save", &[])
            .into_iter()
            .filter(|l| !l.starts_with('#'))
            .map(|l| if l.starts_with(':') { l.split_whitespace().take(2).collect::<Vec<_>>().join(" ") } else { l })
            .collect()
    } else {
        Vec::new()
    };
    let nft = if have("nft") { lines("nft", &["list", "ruleset"]) } else { Vec::new() };
    State { netns, links, iptables, nft }
}

/// Processes whose TCPSTALL_LINK_OWNER names a run that is gone.
fn stale_tagged() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
            let Some(tag) = link::sweep::tag_in_environ(&env) else { return false };
            !link::sweep::owner_alive(&tag)
        })
        .collect()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `ready` holds for the child's pid (at most 20 s), then SIGKILLs it.
fn kill_when(mut child: Child, what: &str, ready: impl Fn(u32) -> bool) {
    let pid = child.id();
    let t0 = Instant::now();
    while !ready(pid) {
        if let Ok(Some(s)) = child.try_wait() {
            panic!("{what}: ended ({s}) before it was killed");
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}: never got to the point of being killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn named_netns_of(pid: u32) -> bool {
    let mine = format!("-{pid}-");
    lines("ip", &["netns", "list"]).iter().any(|l| l.starts_with("tcpstall-") && l.contains(&mine))
}

/// A process started by the run behind its link (tagged with the run's pid).
fn tagged_child_of(pid: u32) -> bool {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())).any(|p| {
        std::fs::read(format!("/proc/{p}/environ"))
            .ok()
            .and_then(|env| link::sweep::tag_in_environ(&env))
            .is_some_and(|t| t.starts_with(&prefix))
    })
}

/// Has the process run for `d`? (for runs whose namespaces have no name to wait for)
fn running_for(d: Duration) -> impl Fn(u32) -> bool {
    let t0 = Instant::now();
    move |_| t0.elapsed() >= d
}

fn run_ok(what: &str, args: &[&str]) -> String {
    let out = tcpstall().args(args).output().unwrap();
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn a_run_killed_mid_way_is_cleaned_up_by_the_next_run_of_another_kind() {
    let _one = exclusive();
    let before = state();
    let next_shell = ["shell", "--link", "rtt=1ms", "--", "true"];
    let next_lab = ["lab", "rr", "--rounds", "50", "-q"];
    let next_veth = ["lab", "stream", "--path", "veth", "--set", "duration_ms=200", "-q"];
    let next_link_lab = ["lab", "rr", "--rounds", "20", "--link", "rtt=1ms", "-q"];

    // Seed 003's veth path: named namespaces, a veth pair, iptables rules inside.
    let c = spawn(&["lab", "stream", "--path", "veth", "--thin-acks", "2", "--set", "duration_ms=8000", "-q"]);
    kill_when(c, "lab --path veth", |pid| {
        named_netns_of(pid)
            && lines("ip", &["netns", "list"]).iter().filter(|l| l.contains(&format!("-{pid}-"))).count() >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let err = run_ok("shell after a killed veth run", &next_shell);
    assert!(err.contains("removed"), "the sweep says what it removed: {err}");
    assert_eq!(state(), before, "after a killed `lab --path veth` and a `shell`");

    // Seed 003's matrix.
    let c = spawn(&["lab", "stream", "--matrix", "seed003", "-q"]);
    kill_when(c, "lab --matrix seed003", named_netns_of);
    std::thread::sleep(Duration::from_millis(300));
    run_ok("lab after a killed matrix", &next_lab);
    assert_eq!(state(), before, "after a killed `--matrix seed003` and a `lab`");

    // The emulated link: a shell with a server command and a command behind it.
    let c = spawn(&["shell", "--link", "rtt=5ms", "--server-command", "sleep 301", "--", "sleep", "302"]);
    kill_when(c, "shell --link", tagged_child_of);
    run_ok("lab --path veth after a killed shell", &next_veth);
    assert_eq!(state(), before, "after a killed `shell` and a `lab --path veth`");
    assert_eq!(stale_tagged(), Vec::<u32>::new(), "processes of the killed shell");

    // The kernel fingerprint (an emulated 400 ms link).
    let c = spawn(&["kernel"]);
    kill_when(c, "kernel", running_for(Duration::from_millis(1500)));
    run_ok("lab --link after a killed kernel", &next_link_lab);
    assert_eq!(state(), before, "after a killed `kernel` and a `lab --link`");

    // The lab on loopback (a private namespace per row).
    let c = spawn(&["lab", "chunked"]);
    kill_when(c, "lab", running_for(Duration::from_millis(800)));
    run_ok("shell after a killed lab", &next_shell);
    assert_eq!(state(), before, "after a killed `lab` and a `shell`");
    assert_eq!(stale_tagged(), Vec::<u32>::new(), "tagged processes of dead runs");
}
