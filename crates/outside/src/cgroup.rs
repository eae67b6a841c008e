//! A cgroup (v2) of its own for each side of a run: the sock_ops fix attaches to it, its
//! `cpu.stat` gives the side's CPU time, and `cgroup.kill` ends every process in it at once.
//! Named `tcpstall-outside-<pid>-<n>`: removed on drop, and a crash's leftovers (a pid that no
//! longer runs) are removed by [`crate::sweep()`].
//!
//! A program is put into it without code of ours in the child: the command runs under
//! `sh -c 'echo $$ > <cgroup>/cgroup.procs && exec "$@"'`, so the shell joins the cgroup and
//! then becomes the program (every process it starts inherits the cgroup,
//! Documentation/admin-guide/cgroup-v2.rst "Processes").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::FixError;

/// The names this crate gives what it creates on the system.
pub const PREFIX: &str = "tcpstall-outside-";

/// Where cgroup v2 is mounted, from /proc/self/mountinfo text (the first `cgroup2` mount):
/// `/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a hybrid one. Pure.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        // proc(5): ... mount point is field 5; after " - " come the type and the source.
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// The cgroup v2 mount of this system.
pub fn root() -> Result<PathBuf, FixError> {
    let mi =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| FixError::Io("/proc/self/mountinfo".into(), e))?;
    cgroup2_mount(&mi)
        .ok_or_else(|| FixError::Unavailable("no cgroup v2 mounted (cgroup2 in /proc/self/mountinfo)".into()))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A cgroup of ours; removed on drop (its processes killed first).
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// A new, empty cgroup under the v2 root.
    pub fn create() -> Result<Cgroup, FixError> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = root()?.join(format!("{PREFIX}{}-{n}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| FixError::Io(path.display().to_string(), e))?;
        Ok(Cgroup { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The words that run a command inside this cgroup: `sh -c 'echo $$ > .../cgroup.procs &&
    /// exec "$@"' sh`, to put in front of the command's own words.
    pub fn wrapper(&self) -> Vec<String> {
        let procs = self.path.join("cgroup.procs");
        vec!["sh".into(), "-c".into(), format!("echo $$ > '{}' && exec \"$@\"", procs.display()), "sh".into()]
    }

    /// CPU time of every process that ran in it (µs): cpu.stat `usage_usec`, present in every
    /// cgroup v2 whether or not the cpu controller is enabled (kernel/cgroup/rstat.c
    /// cgroup_base_stat_cputime_show).
    pub fn cpu_usec(&self) -> Option<u64> {
        let s = std::fs::read_to_string(self.path.join("cpu.stat")).ok()?;
        parse_usage_usec(&s)
    }

    /// Processes in it now.
    pub fn pids(&self) -> Vec<u32> {
        read_pids(&self.path)
    }

    /// Kill every process in it (cgroup.kill, Linux 5.14) and wait until it is empty (2 s).
    pub fn kill_all(&self) {
        kill_and_wait(&self.path);
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// `usage_usec` from cpu.stat text. Pure.
pub fn parse_usage_usec(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn kill_and_wait(path: &Path) {
    if read_pids(path).is_empty() {
        return;
    }
    if std::fs::write(path.join("cgroup.kill"), "1").is_err() {
        // Before 5.14: each process by its pid.
        for p in read_pids(path) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
    for _ in 0..200 {
        if read_pids(path).is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Kill what runs in the cgroup at `path` and remove it.
pub(crate) fn remove(path: &Path) {
    kill_and_wait(path);
    // rmdir fails while a killed process is still being reaped: retry briefly.
    for _ in 0..100 {
        if std::fs::remove_dir(path).is_ok() || !path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_of_a_hybrid_host() {
        let mi = "25 1 0:23 / /sys rw,nosuid - sysfs sysfs rw\n\
                  30 25 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n\
                  31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n\
                  32 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(cgroup2_mount(mi), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(cgroup2_mount("25 1 0:23 / /sys rw - sysfs sysfs rw\n"), None);
    }

    #[test]
    fn reads_usage_usec() {
        assert_eq!(parse_usage_usec("usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n"), Some(1234));
        assert_eq!(parse_usage_usec("user_usec 1000\n"), None);
    }
}
