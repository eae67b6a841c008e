//! Finding what a killed run left behind.
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
