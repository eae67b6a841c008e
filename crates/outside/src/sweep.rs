//! What a crashed run left behind, removed by the next run: cgroups named
//! `tcpstall-outside-<pid>-<n>` and files `$TMPDIR/tcpstall-outside-<pid>-*` whose pid no longer
//! runs (a config file changed by a setting is restored from its backup first), the uplink's
//! iptables rules and forwarding ([`crate::uplink`]). The lab's
//! namespaces have their own sweep (`link::sweep`). A BPF program needs none: nothing is pinned,
//! the kernel drops it with the crashed process's file descriptors.

use crate::cgroup::PREFIX;

/// The pid in a name of ours (`tcpstall-outside-<pid>-...`). Pure.
pub fn owner(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

fn dead(pid: u32) -> bool {
    pid != std::process::id() && !alive(pid)
}

/// Whether a process runs (this one included).
pub(crate) fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove what dead runs left; returns what was removed, for a note.
pub fn sweep() -> Vec<String> {
    let mut gone = crate::uplink::sweep(dead);
    if let Ok(root) = crate::cgroup::root() {
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if owner(&name).is_some_and(dead) {
                crate::cgroup::remove(&e.path());
                gone.push(e.path().display().to_string());
            }
        }
    }
    for e in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if owner(&name).is_some_and(dead) && !name.contains("-forwarding-") {
            if name.ends_with("-setting") {
                crate::setting::restore_backup(&e.path());
            } else {
                let _ = std::fs::remove_file(e.path());
            }
            gone.push(e.path().display().to_string());
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_owner() {
        assert_eq!(super::owner("tcpstall-outside-123-4"), Some(123));
        assert_eq!(super::owner("tcpstall-outside-77-shim.so"), Some(77));
        assert_eq!(super::owner("tcpstall-veth-1-tx"), None);
    }
}
