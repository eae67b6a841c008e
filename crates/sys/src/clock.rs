//! The clocks every OS crate reads: CLOCK_REALTIME (the kernel's packet stamps,
//! SO_TIMESTAMPNS, and the clock two hosts compare) and CLOCK_MONOTONIC (the link forwarder's
//! deadlines, the kernel's tracepoint stamps).

/// CLOCK_REALTIME now, in ns: the clock of the kernel's packet stamps (SO_TIMESTAMPNS).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in nanoseconds.
pub fn realtime_offset_ns() -> i128 {
    let r = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME");
    let real = i128::from(r.tv_sec()) * 1_000_000_000 + i128::from(r.tv_nsec());
    real - i128::from(mono_ns())
}
