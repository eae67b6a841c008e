//! Privilege: root, or an unprivileged user namespace that owns the network namespaces.
//!
//! Without root, the whole process moves into a new user namespace where it is uid 0 with a
//! full capability set over namespaces it creates afterwards (user_namespaces(7)). unshare(2)
//! refuses CLONE_NEWUSER in a multithreaded process (EINVAL), so this must run before any
//! thread starts; the threads of the lab then inherit the user namespace and may setns into
//! the network namespaces it owns.

use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getegid, geteuid};

use crate::LinkError;

/// How the link got its privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// Effective uid 0 (or already inside a user namespace that maps us to 0).
    Root,
    /// Entered a new user namespace mapping the caller's uid/gid to 0.
    UserNamespace { uid: u32, gid: u32 },
}

/// Become able to create network namespaces and TUN devices, or say exactly why not.
pub fn acquire() -> Result<Privilege, LinkError> {
    if geteuid().is_root() {
        return Ok(Privilege::Root);
    }
    let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
    let threads = thread_count();
    if threads > 1 {
        return Err(LinkError::Privilege(format!(
            "not root, and an unprivileged user namespace can only be entered by a single-threaded process \
             (this one has {threads} threads); run as root"
        )));
    }
    if let Err(e) = unshare(CloneFlags::CLONE_NEWUSER) {
        return Err(LinkError::Privilege(format!(
            "not root, and this kernel refuses unprivileged user namespaces ({}): {}; run as root",
            e.desc(),
            userns_policy()
        )));
    }
    // user_namespaces(7): an unprivileged process must deny setgroups before writing gid_map.
    let w = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| LinkError::Privilege(format!("writing /proc/self/{file} in the new user namespace: {e}")))
    };
    w("setgroups", "deny".into())?;
    w("uid_map", format!("0 {uid} 1"))?;
    w("gid_map", format!("0 {gid} 1"))?;
    Ok(Privilege::UserNamespace { uid, gid })
}

fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().unwrap_or(1))))
        .unwrap_or(1)
}

/// The sysctls that forbid unprivileged user namespaces, with their values on this machine.
fn userns_policy() -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|v| v.trim().to_string());
    let mut found = Vec::new();
    if let Some(v) = read("/proc/sys/kernel/unprivileged_userns_clone") {
        found.push(format!("kernel.unprivileged_userns_clone={v}"));
    }
    if let Some(v) = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        found.push(format!("kernel.apparmor_restrict_unprivileged_userns={v}"));
    }
    if let Some(v) = read("/proc/sys/user/max_user_namespaces") {
        found.push(format!("user.max_user_namespaces={v}"));
    }
    if found.is_empty() {
        "no known sysctl explains it (a seccomp filter or security module may)".into()
    } else {
        found.join(", ")
    }
}
