//! Fixes applied from OUTSIDE a program, each undoable (issue 34): for the program that stalls
//! when its code cannot change (a vendor binary, a broker, a container image).
//!
//! - [`route`]: `quickack 1` on the route a side uses (RTAX_QUICKACK, honoured by
//!   net/ipv4/tcp_input.c tcp_in_quickack_mode: every segment is ACKed at once, no delayed ACK);
//! - [`sockops`]: a cgroup BPF `sock_ops` program calling bpf_setsockopt(TCP_NODELAY) and/or
//!   TCP_BPF_DELACK_MAX on every TCP socket of the program's cgroup (net/core/filter.c
//!   sol_tcp_sockopt lists what bpf_setsockopt may set);
//! - [`shim`]: an LD_PRELOAD shim that sets TCP_NODELAY on the sockets the program connects or
//!   accepts, saying when it cannot apply (static binaries, Go: [`shim::fit`]);
//! - [`setting`]: the program's own setting, when the user names it (a config line, an
//!   environment variable).
//!
//! Each fix is a guard: dropping it undoes the fix. Everything created on the system is named
//! `tcpstall-outside-<pid>...` (cgroups, the shim's file, a config file's backup) and
//! [`sweep()`] removes what a crashed run left. [`run`] and [`ab`] measure the fixes on the real programs
//! (A/B, interleaved) in the lab's namespaces; [`rank`] and [`text`] rank and print them.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod ab;
pub mod cgroup;
pub mod kernel;
pub mod proxy;
pub mod rank;
pub mod requests;
pub mod route;
pub mod run;
pub mod setting;
pub mod shim;
pub mod sockops;
pub mod sweep;
pub mod text;
pub mod uplink;

pub use sweep::sweep;

/// Why a fix could not be applied or undone, on one line.
#[cfg(test)]
mod tests {
    #[test]
    fn names_and_paths_of_namespaces() {
        assert_eq!(super::in_netns("tcpstall-veth-1-tx"), ["ip", "netns", "exec", "tcpstall-veth-1-tx"]);
        assert_eq!(super::in_netns("/proc/9/fd/7"), ["nsenter", "--net=/proc/9/fd/7"]);
        assert_eq!(super::netns_file("a"), std::path::PathBuf::from("/run/netns/a"));
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FixError {
    /// Not possible here, and why (not built, no cgroup v2, not root...).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// A tool ran and failed: the command and its standard error.
    #[error("`{0}` failed: {1}")]
    Tool(String, String),
    /// The user's input (a setting, a command) is not usable.
    #[error("{0}")]
    Input(String),
}

/// The words that run a command inside network namespace `ns`: a name of iproute2's
/// (/run/netns/NAME: `ip netns exec NAME`), or the path of a namespace file (starting with `/`:
/// the emulated link's namespaces are unnamed, `/proc/<pid>/fd/<n>`: `nsenter --net=PATH`).
/// Pure.
pub fn in_netns(ns: &str) -> Vec<String> {
    if ns.starts_with('/') {
        vec!["nsenter".into(), format!("--net={ns}")]
    } else {
        ["ip", "netns", "exec", ns].map(String::from).to_vec()
    }
}

/// The namespace's file (for setns(2)): the path itself, or iproute2's /run/netns/NAME. Pure.
pub fn netns_file(ns: &str) -> std::path::PathBuf {
    if ns.starts_with('/') {
        ns.into()
    } else {
        std::path::Path::new("/run/netns").join(ns)
    }
}

/// Run a tool, its standard output on success.
pub(crate) fn tool(args: &[&str]) -> Result<String, FixError> {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| FixError::Io(format!("{} (is it installed?)", args[0]), e))?;
    if !out.status.success() {
        // One line: iptables, for one, adds a blank line and "Try `iptables -h'" to its error.
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no message").to_string();
        return Err(FixError::Tool(args.join(" "), first));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
