//! The way out of the lab's client namespace to an existing server (`advise-run --server-addr`):
//! a veth pair between the host's namespace and the client's, the namespace's default route
//! through the host, and, when the server is not on this host, the host forwarding and
//! masquerading the namespace's packets (the server answers the host's address, as it would
//! answer any client behind a NAT).
//!
//! - A server on this host (`ip route get` says `local`): delivered by the host's own stack
//!   (net/ipv4/route.c ip_route_input_slow, RTN_LOCAL); nothing else changes. Its loopback is
//!   not reachable from another namespace: 127.0.0.0/8 is refused with the reason.
//! - A server elsewhere: forwarding is decided by the input device's `forwarding`
//!   (ip_route_input_slow: `IN_DEV_FORWARD(in_dev)`), so it is set on our host end (gone with
//!   the device) and on the device the server is reached through (the replies come in there),
//!   only when it is off there, and put back; iptables `MASQUERADE` in nat POSTROUTING and
//!   `ACCEPT` in FORWARD for the namespace's address, each tagged with a comment
//!   `tcpstall-outside-<pid>-uplink`.
//!
//! Undone on drop; a crashed run's rules and forwarding are undone by [`crate::sweep()`] (the
//! rules by their comment, the forwarding from the state file
//! `$TMPDIR/tcpstall-outside-<pid>-forwarding-<dev>` holding the value before). The veth pair
//! goes with the namespace (deleted on drop, or by the lab's sweep after a crash).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::cgroup::PREFIX;
use crate::{tool, FixError};

/// The namespace's uplink; undone on drop.
#[derive(Debug)]
pub struct Uplink {
    /// Our end in the host's namespace, and its address.
    pub host_dev: String,
    pub host_ip: Ipv4Addr,
    /// The client namespace's address on the uplink.
    pub ns_ip: Ipv4Addr,
    /// Whether the server is on this host (no forwarding, no NAT).
    pub local: bool,
    /// The iptables rules added (their `-A ...` words).
    rules: Vec<Vec<String>>,
    /// The forwarding this run turned on (a state file of ours holds the value before).
    forwarding: Option<Forwarding>,
}

/// The addresses of a run's uplink (/30 in 10.205.0.0/16, from the pid). Pure.
pub fn addresses(pid: u32) -> (Ipv4Addr, Ipv4Addr) {
    let n = pid % 16_384;
    let (c, d) = ((n / 64) as u8, (n % 64 * 4) as u8);
    (Ipv4Addr::new(10, 205, c, d + 1), Ipv4Addr::new(10, 205, c, d + 2))
}

/// What `ip -4 route get DST` says: whether it is local, and the device. Pure.
pub fn route_get(text: &str) -> (bool, Option<String>) {
    let local = text.trim_start().starts_with("local ");
    let mut w = text.split_whitespace();
    let dev = w.by_ref().find(|x| *x == "dev").and_then(|_| w.next()).map(String::from);
    (local, dev)
}

/// The comment our rules carry.
fn tag(pid: u32) -> String {
    format!("{PREFIX}{pid}-uplink")
}

impl Uplink {
    /// Join `netns` to the host and route it to `server`.
    pub fn open(netns: &str, server: Ipv4Addr) -> Result<Uplink, FixError> {
        if server.is_unspecified() || server.is_broadcast() || server.is_multicast() {
            return Err(FixError::Input(format!(
                "--server-addr {server}: not a server's address (unspecified, broadcast or multicast)"
            )));
        }
        if server.is_loopback() {
            return Err(FixError::Input(format!(
                "--server-addr {server}: the host's loopback is not reachable from the lab's namespace; give an address the server listens on that is not loopback (one of `ip -4 addr`)"
            )));
        }
        let pid = std::process::id();
        let (host_ip, ns_ip) = addresses(pid);
        let host_dev = format!("tso{pid}h");
        let ns_dev = format!("tso{pid}c");
        tool(&["ip", "link", "add", &host_dev, "type", "veth", "peer", "name", &ns_dev, "netns", netns])?;
        let mut up = Uplink { host_dev, host_ip, ns_ip, local: false, rules: Vec::new(), forwarding: None };
        tool(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &up.host_dev])?;
        tool(&["ip", "link", "set", &up.host_dev, "up"])?;
        tool(&["ip", "-n", netns, "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_dev])?;
        tool(&["ip", "-n", netns, "link", "set", &ns_dev, "up"])?;
        tool(&["ip", "-n", netns, "route", "add", "default", "via", &host_ip.to_string(), "dev", &ns_dev])?;
        let (local, dev) = route_get(&tool(&["ip", "-4", "route", "get", &server.to_string()])?);
        up.local = local;
        if !local {
            let dev = dev.ok_or_else(|| FixError::Unavailable(format!("no route from this host to {server}")))?;
            std::fs::write(format!("/proc/sys/net/ipv4/conf/{}/forwarding", up.host_dev), "1")
                .map_err(|e| FixError::Io(format!("forwarding on {}", up.host_dev), e))?;
            up.forwarding = Forwarding::on(&dev)?;
            let t = tag(pid);
            let ns = ns_ip.to_string();
            for rule in [
                vec!["-t", "nat", "-A", "POSTROUTING", "-s", &ns, "-j", "MASQUERADE"],
                // Inserted first: a FORWARD chain ending in DROP or REJECT must not hide them.
                vec!["-t", "filter", "-I", "FORWARD", "1", "-s", &ns, "-j", "ACCEPT"],
                vec!["-t", "filter", "-I", "FORWARD", "1", "-d", &ns, "-j", "ACCEPT"],
            ] {
                let mut r: Vec<String> = rule.iter().map(|s| s.to_string()).collect();
                r.extend(["-m", "comment", "--comment", &t].map(String::from));
                let mut a = vec!["iptables", "-w"];
                a.extend(r.iter().map(String::as_str));
                tool(&a)?;
                up.rules.push(r);
            }
        }
        Ok(up)
    }
}

/// The words that delete a rule added with `-A CHAIN ...` or `-I CHAIN 1 ...`: `-D CHAIN ...`.
fn delete_rule(r: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(r.len());
    let mut it = r.iter().peekable();
    while let Some(w) = it.next() {
        match w.as_str() {
            "-A" => out.push("-D".to_string()),
            "-I" => {
                out.push("-D".to_string());
                if let Some(chain) = it.next() {
                    out.push(chain.clone());
                }
                // The position, if any.
                if it.peek().is_some_and(|p| p.parse::<u32>().is_ok()) {
                    it.next();
                }
            }
            _ => out.push(w.clone()),
        }
    }
    out
}

impl Drop for Uplink {
    fn drop(&mut self) {
        for r in self.rules.iter().rev() {
            let mut a = vec!["iptables".to_string(), "-w".into()];
            a.extend(delete_rule(r));
            let _ = tool(&a.iter().map(String::as_str).collect::<Vec<_>>());
        }
        self.forwarding = None;
        let _ = tool(&["ip", "link", "del", &self.host_dev]);
    }
}

/// `forwarding` turned on on a device, put back on drop unless another live run of ours
/// still needs it.
#[derive(Debug)]
struct Forwarding {
    dev: String,
    state: PathBuf,
}

fn forwarding_path(dev: &str) -> String {
    format!("/proc/sys/net/ipv4/conf/{dev}/forwarding")
}

/// State files of runs that turned forwarding on on `dev`: (pid, path, the value before).
fn states(dev: &str) -> Vec<(u32, PathBuf, String)> {
    let suffix = format!("-forwarding-{dev}");
    std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let pid = crate::sweep::owner(&name).filter(|_| name.ends_with(&suffix))?;
            let before = std::fs::read_to_string(e.path()).ok()?.trim().to_string();
            Some((pid, e.path(), before))
        })
        .collect()
}

impl Forwarding {
    /// Turn it on on `dev` (None when it was on already and no run of ours turned it on).
    fn on(dev: &str) -> Result<Option<Forwarding>, FixError> {
        let path = forwarding_path(dev);
        let now = std::fs::read_to_string(&path).map_err(|e| FixError::Io(path.clone(), e))?.trim().to_string();
        // Another live run turned it on: the value before is the one it kept.
        let before = states(dev).into_iter().find(|(p, _, _)| crate::sweep::alive(*p)).map(|s| s.2);
        let before = match before {
            Some(b) => b,
            None if now == "1" => return Ok(None),
            None => now,
        };
        let state = std::env::temp_dir().join(format!("{PREFIX}{}-forwarding-{dev}", std::process::id()));
        std::fs::write(&state, &before).map_err(|e| FixError::Io(state.display().to_string(), e))?;
        std::fs::write(&path, "1").map_err(|e| FixError::Io(path.clone(), e))?;
        Ok(Some(Forwarding { dev: dev.to_string(), state }))
    }
}

/// Remove a run's state file for `dev` and put the value back when no live run still needs it.
pub(crate) fn release(dev: &str, state: &std::path::Path, before: &str) {
    let _ = std::fs::remove_file(state);
    if !states(dev).iter().any(|(p, _, _)| crate::sweep::alive(*p)) {
        let _ = std::fs::write(forwarding_path(dev), before);
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        let before = std::fs::read_to_string(&self.state).unwrap_or_else(|_| "0".into());
        release(&self.dev, &self.state, before.trim());
    }
}

/// Undo what dead runs left: their tagged iptables rules and their forwarding (state files
/// `...-forwarding-<dev>`). Returns what was undone.
pub(crate) fn sweep(dead: impl Fn(u32) -> bool) -> Vec<String> {
    let mut gone = Vec::new();
    for table in ["nat", "filter"] {
        let Ok(rules) = tool(&["iptables", "-w", "-t", table, "-S"]) else { continue };
        for line in rules.lines() {
            let Some(pid) = rule_owner(line) else { continue };
            if !dead(pid) {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().map(|w| if w == "-A" { "-D" } else { w }).collect();
            let mut a = vec!["iptables", "-w", "-t", table];
            a.extend(words);
            if tool(&a).is_ok() {
                gone.push(format!("iptables -t {table} {line}"));
            }
        }
    }
    for e in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = crate::sweep::owner(&name) else { continue };
        let Some((_, dev)) = name.split_once("-forwarding-") else { continue };
        if dead(pid) {
            let before = std::fs::read_to_string(e.path()).unwrap_or_else(|_| "0".into());
            release(dev, &e.path(), before.trim());
            gone.push(format!("forwarding on {dev} (back to {})", before.trim()));
        }
    }
    gone
}

/// The pid in a rule's comment of ours (`--comment tcpstall-outside-<pid>-uplink`). Pure.
pub fn rule_owner(line: &str) -> Option<u32> {
    let mut w = line.split_whitespace();
    w.by_ref().find(|x| *x == "--comment")?;
    let c = w.next()?.trim_matches('"');
    c.ends_with("-uplink").then(|| crate::sweep::owner(c))?
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_inserted_or_appended_rule_is_deleted_without_its_position() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            super::delete_rule(&w(&["-t", "filter", "-I", "FORWARD", "1", "-s", "10.0.0.1", "-j", "ACCEPT"])),
            w(&["-t", "filter", "-D", "FORWARD", "-s", "10.0.0.1", "-j", "ACCEPT"])
        );
        assert_eq!(
            super::delete_rule(&w(&["-t", "nat", "-A", "POSTROUTING", "-j", "MASQUERADE"])),
            w(&["-t", "nat", "-D", "POSTROUTING", "-j", "MASQUERADE"])
        );
    }

    use super::*;

    #[test]
    fn addresses_are_a_30_of_the_pid() {
        let (h, n) = addresses(4242);
        assert_eq!((h, n), ("10.205.66.73".parse().unwrap(), "10.205.66.74".parse().unwrap()));
        let (h, _) = addresses(63);
        assert_eq!(h, "10.205.0.253".parse::<Ipv4Addr>().unwrap());
    }

    #[test]
    fn reads_route_get() {
        assert_eq!(
            route_get("local 192.0.2.2 dev lo table local src 192.0.2.2 uid 0 \n    cache <local> "),
            (true, Some("lo".into()))
        );
        assert_eq!(
            route_get("198.51.100.7 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \n    cache "),
            (false, Some("eth0".into()))
        );
    }

    #[test]
    fn finds_our_rules_by_comment() {
        let l = "-A POSTROUTING -s 10.205.66.10/32 -m comment --comment tcpstall-outside-4242-uplink -j MASQUERADE";
        assert_eq!(rule_owner(l), Some(4242));
        assert_eq!(rule_owner("-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE"), None);
        assert_eq!(rule_owner("-A X -m comment --comment tcpstall-outside-4242-other -j ACCEPT"), None);
    }
}
