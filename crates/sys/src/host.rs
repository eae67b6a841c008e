//! Facts about the running host, read the same way by every command: the kernel's release and
//! tick rate, CPU time, the TcpExt counters of the calling thread's network namespace, and a
//! process's command and cgroup (/proc).

use std::collections::BTreeMap;

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_else(|_| "unknown".into())
}

/// The running kernel's tick rate (CONFIG_HZ), read as the resolution of
/// CLOCK_MONOTONIC_COARSE, which advances once per jiffy (kernel/time/timekeeping.c,
/// `ktime_get_coarse_*`; clock_getres(2) reports it). Every TCP timer rounds to it.
pub fn kernel_hz() -> Result<u32, HzError> {
    match nix::time::clock_getres(nix::time::ClockId::CLOCK_MONOTONIC_COARSE) {
        Ok(ts) if ts.tv_sec() == 0 && ts.tv_nsec() > 0 => Ok((1e9 / ts.tv_nsec() as f64).round() as u32),
        Ok(_) => Err(HzError::NotATick),
        Err(e) => Err(HzError::ClockGetres(e)),
    }
}

/// Why the kernel's tick rate could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HzError {
    #[error("CLOCK_MONOTONIC_COARSE resolution is not one tick")]
    NotATick,
    #[error("clock_getres failed: {0}")]
    ClockGetres(nix::Error),
}

/// CPU time of the calling thread (ns, user + system), CLOCK_THREAD_CPUTIME_ID (clock_gettime(2):
/// the scheduler's exact runtime of the thread, `sum_exec_runtime`; getrusage's RUSAGE_THREAD is
/// sampled at the tick and reads 0 for a few short rounds); None when the call fails.
pub fn thread_cpu_ns() -> Option<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// User + system CPU time of the whole process (ns), getrusage(RUSAGE_SELF); 0 when it fails.
pub fn process_cpu_ns() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| {
            let ns = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1_000_000_000 + (t.tv_usec() as u64) * 1000;
            ns(u.user_time()) + ns(u.system_time())
        })
        .unwrap_or(0)
}

/// Parse the text of /proc/net/netstat: pairs of lines "TcpExt: names" / "TcpExt: values".
/// Returns the TcpExt counters by name. Malformed pairs are skipped (the file is the kernel's).
pub fn parse_netstat(text: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some(("TcpExt", n)), Some(("TcpExt", v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        for (name, value) in n.split_whitespace().zip(v.split_whitespace()) {
            if let Ok(x) = value.parse::<i64>() {
                out.insert(name.to_string(), x);
            }
        }
    }
    out
}

/// The TcpExt counters of the calling thread's network namespace
/// (`/proc/thread-self/net/netstat`).
///
/// The counters are per namespace (`net->mib.net_statistics`, net/ipv4/proc.c
/// `netstat_seq_show`), and `/proc/self/net` is the *process's* (its main thread's) namespace,
/// not the calling thread's: a thread that entered a private namespace must read
/// `/proc/thread-self/net`.
pub fn netstat_thread() -> std::io::Result<BTreeMap<String, i64>> {
    Ok(parse_netstat(&std::fs::read_to_string("/proc/thread-self/net/netstat")?))
}

/// /proc/PID/comm, without its newline (the kernel's `task->comm`, 15 bytes at most).
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// The process's cgroup v2 path (/proc/PID/cgroup's `0::` line, cgroups(7)).
pub fn cgroup_of(pid: u32) -> Option<String> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    t.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CONFIG_HZ is one of the kernel's choices (kernel/Kconfig.hz: 100, 250, 300, 1000).
    #[test]
    fn kernel_hz_is_a_config_hz_choice() {
        let hz = kernel_hz().expect("CLOCK_MONOTONIC_COARSE resolution");
        assert!([100, 250, 300, 1000].contains(&hz), "HZ {hz}");
    }

    #[test]
    fn a_spinning_thread_uses_about_its_wall_time() {
        let t0 = thread_cpu_ns().expect("getrusage");
        let w = std::time::Instant::now();
        while w.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let used = thread_cpu_ns().unwrap() - t0;
        // Preemption on a loaded machine only lowers it; it cannot exceed the wall time by
        // more than the clock's tick.
        assert!(used <= 30_000_000 + 12_000_000, "{used}");
        assert!(used > 0);
    }

    #[test]
    fn parses_tcpext_pairs_and_ignores_others() {
        let t = "TcpExt: SyncookiesSent DelayedACKs TCPAutoCorking\nTcpExt: 0 12 3\n\
                 IpExt: InNoRoutes\nIpExt: 7\n";
        let m = parse_netstat(t);
        assert_eq!(m.get("DelayedACKs"), Some(&12));
        assert_eq!(m.get("TCPAutoCorking"), Some(&3));
        assert_eq!(m.get("InNoRoutes"), None);
    }

    #[test]
    fn this_threads_namespace_is_readable() {
        // /proc/thread-self/net/netstat exists on every kernel tcpstall supports (3.17+).
        let m = netstat_thread().unwrap();
        assert!(m.contains_key("DelayedACKs"));
    }
}
