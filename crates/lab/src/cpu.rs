//! CPU time of the calling thread, read around the measured rounds only (never per packet):
//! what a strategy costs besides its latency (busy-poll keeps a CPU busy while it waits).

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

/// The two sides' CPU as the row reports it: per side in µs, per round, and as a share of the
/// measured wall time (pure).
pub fn cost(client_ns: u64, server_ns: u64, rounds: u64, wall_ns: u64) -> report::CpuCost {
    let us = |ns: u64| ns as f64 / 1e3;
    report::CpuCost {
        client_cpu_us: us(client_ns),
        server_cpu_us: us(server_ns),
        cpu_us_per_round: if rounds > 0 { us(client_ns + server_ns) / rounds as f64 } else { 0.0 },
        cpu_share_of_wall: if wall_ns > 0 { (client_ns + server_ns) as f64 / wall_ns as f64 } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_spinning_thread_uses_about_its_wall_time() {
        let t0 = super::thread_cpu_ns().expect("getrusage");
        let w = std::time::Instant::now();
        while w.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let used = super::thread_cpu_ns().unwrap() - t0;
        // Preemption on a loaded machine only lowers it; it cannot exceed the wall time by
        // more than the clock's tick.
        assert!(used <= 30_000_000 + 12_000_000, "{used}");
        assert!(used > 0);
        let c = super::cost(2_000, 1_000, 3, 6_000);
        assert_eq!((c.cpu_us_per_round, c.cpu_share_of_wall), (1.0, 0.5));
    }
}
