//! Finding what a killed run left behind, and removing it: [`sweep_all`] is the one sweep every
//! command that creates namespaces, links, TUN devices, routes or firewall rules runs at its
//! start (`lab` on any path, `shell`, `kernel`, `advise`, `replay`), whichever kind of run left
//! them:
//!
//! - named network namespaces `/run/netns/tcpstall-*-<pid>-*` (seed 003's veth path and its
//!   matrix name theirs so `ip netns exec` can run the seed's tools in them) whose `<pid>` no
//!   longer runs: deleted with `ip netns del`, which takes their veth devices, routes and
//!   iptables/nft rules with them (all of them live inside);
//! - devices in the caller's namespace named after a dead run (`tsv<pid>t`/`tsv<pid>r`, the veth
//!   pair's ends, and `tcpstall*<pid>`), if a run ever left one there: deleted;
//! - processes tagged by a dead run (below): killed.
//!
//! Unnamed namespaces (the lab's private namespace per row, the emulated link's two) need no
//! sweep: they are held by descriptors and the kernel frees them when the process dies.
//!
//! The namespaces, devices and routes of a link belong to the process (see `netns`), so the
//! kernel removes them when it dies, even by SIGKILL. The processes `tcpstall shell` starts
//! run in a PID namespace whose init dies with it, and the kernel kills the rest of that
//! namespace (`sys::process::PidNs`). This sweep is the fallback where no PID namespace could
//! be made: every process tcpstall starts carries `TCPSTALL_LINK_OWNER=<pid>:<start time>` in
//! its environment (which its own children inherit); a later run kills the processes whose
//! owner is gone, and only those.

use std::fs;

/// The environment variable marking processes started behind a link.
pub const OWNER_VAR: &str = "TCPSTALL_LINK_OWNER";

/// This process's owner tag: `<pid>:<start time in clock ticks since boot>` (field 22 of
/// /proc/PID/stat, proc(5)), so a recycled pid is not mistaken for the owner.
pub fn owner_tag() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or(0))
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 of a /proc/PID/stat line; the command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last ')'.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Is the run named by `tag` still alive?
pub fn owner_alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.split_once(':') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    start_time(pid) == Some(start)
}

/// A process found by the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub pid: u32,
    pub owner: String,
}

/// Processes tagged by a run that no longer exists.
pub fn find_stale() -> Vec<Stale> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else { continue };
        if let Some(owner) = tag_in_environ(&env) {
            if !owner_alive(&owner) {
                out.push(Stale { pid, owner });
            }
        }
    }
    out
}

/// The value of `OWNER_VAR` in a NUL-separated environment block.
pub fn tag_in_environ(env: &[u8]) -> Option<String> {
    let prefix = format!("{OWNER_VAR}=");
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Processes carrying exactly `tag` (this run's own, at the end of a session).
pub fn find_owned_by(tag: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).ok().and_then(|env| tag_in_environ(&env)).as_deref() == Some(tag)
        })
        .collect()
}

/// Kill (SIGKILL) what this run started and left running: background jobs of the command or
/// of the server command. Returns the pids killed.
pub fn kill_own_leftovers() -> Vec<u32> {
    let tag = owner_tag();
    find_owned_by(&tag)
        .into_iter()
        .filter(|&pid| {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).is_ok()
        })
        .collect()
}

/// What [`sweep_all`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub processes: Vec<u32>,
    pub namespaces: Vec<String>,
    pub links: Vec<String>,
}

impl Swept {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.namespaces.is_empty() && self.links.is_empty()
    }

    /// One line for the user, or None when nothing was found.
    pub fn line(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut v = Vec::new();
        if !self.namespaces.is_empty() {
            v.push(format!("{} namespace(s) ({})", self.namespaces.len(), self.namespaces.join(", ")));
        }
        if !self.links.is_empty() {
            v.push(format!("{} device(s) ({})", self.links.len(), self.links.join(", ")));
        }
        if !self.processes.is_empty() {
            v.push(format!("{} process(es)", self.processes.len()));
        }
        Some(format!("removed what killed runs left: {}", v.join(", ")))
    }
}

/// Directory of named network namespaces (iproute2's `ip netns`).
const NETNS_DIR: &str = "/run/netns";

/// Is `pid` a run of this machine that is gone (not this process, not running)?
fn pid_gone(pid: u32) -> bool {
    pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The run's pid in a name tcpstall gives namespaces (`tcpstall-veth-<pid>-tx`): the first
/// dash-separated field after `tcpstall-` that is a number.
pub fn netns_owner(name: &str) -> Option<u32> {
    name.strip_prefix("tcpstall-")?.split('-').find_map(|f| f.parse().ok()).filter(|&p| p > 0)
}

/// The run's pid in the name of a veth end tcpstall makes (`tsv<pid>t`, `tsv<pid>r`).
pub fn link_owner(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("tsv")?.strip_suffix(['t', 'r'])?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&p| p > 0)
}

/// The shared sweep (see the module documentation). Never fails: what cannot be removed stays
/// and the next run tries again.
pub fn sweep_all() -> Swept {
    // A command run inside a tcpstall session (`shell --link`, whose children carry the session's
    // tag) cannot judge from in there whether runs are alive: its pid and mount view may not be
    // the host's, and its own session would look dead. Sweeping is the outermost run's job.
    if std::env::var_os(OWNER_VAR).is_some() {
        return Swept::default();
    }
    let mut out = Swept { processes: sweep(), ..Swept::default() };
    if let Ok(dir) = fs::read_dir(NETNS_DIR) {
        let mut names: Vec<String> = dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            if netns_owner(&name).is_some_and(pid_gone) && ip(&["netns", "del", &name]) {
                out.namespaces.push(name);
            }
        }
    }
    if let Ok(dir) = fs::read_dir("/sys/class/net") {
        let mut names: Vec<String> = dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            if link_owner(&name).is_some_and(pid_gone) && ip(&["link", "del", &name]) {
                out.links.push(name);
            }
        }
    }
    out
}

/// `ip ARGS`, true when it succeeded (iproute2: what the named namespaces were made with).
fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Kill the stale processes (SIGKILL); returns the pids killed.
pub fn sweep() -> Vec<u32> {
    let mut killed = Vec::new();
    for s in find_stale() {
        let pid = nix::unistd::Pid::from_raw(s.pid as i32);
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
            killed.push(s.pid);
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = "123 (a) b (c)) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_start_time(stat), Some(98765));
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn owners_are_read_from_the_names_tcpstall_gives() {
        assert_eq!(netns_owner("tcpstall-veth-4242-tx"), Some(4242));
        assert_eq!(netns_owner("tcpstall-17-rx"), Some(17));
        assert_eq!(netns_owner("tcpstall-veth-tx"), None);
        assert_eq!(netns_owner("other-4242"), None);
        assert_eq!(link_owner("tsv4242t"), Some(4242));
        assert_eq!(link_owner("tsv4242r"), Some(4242));
        assert_eq!(link_owner("tcpstall0"), None);
        assert_eq!(link_owner("tsvx"), None);
        assert_eq!(link_owner("tsv12x"), None);
        assert_eq!(link_owner("eth0"), None);
        // This process is no stale owner; a pid beyond pid_max is.
        assert!(!pid_gone(std::process::id()));
        assert!(pid_gone(u32::MAX - 1));
    }

    #[test]
    fn tag_is_found_in_an_environment_block() {
        let env = b"PATH=/bin\0TCPSTALL_LINK_OWNER=42:777\0HOME=/root\0";
        assert_eq!(tag_in_environ(env).as_deref(), Some("42:777"));
        assert_eq!(tag_in_environ(b"PATH=/bin\0"), None);
    }

    #[test]
    fn this_process_is_its_own_live_owner_and_a_wrong_start_time_is_not() {
        let tag = owner_tag();
        assert!(owner_alive(&tag));
        let pid = std::process::id();
        assert!(!owner_alive(&format!("{pid}:1")));
        assert!(!owner_alive("nonsense"));
    }
}
