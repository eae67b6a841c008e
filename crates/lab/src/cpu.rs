//! What a strategy costs besides its latency (busy-poll keeps a CPU busy while it waits): the
//! sides' CPU time (`sys::host::thread_cpu_ns`, read around the measured rounds only, never per
//! packet) as the row reports it.

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
    fn cost_is_per_round_and_a_share_of_the_wall_time() {
        let c = super::cost(2_000, 1_000, 3, 6_000);
        assert_eq!((c.cpu_us_per_round, c.cpu_share_of_wall), (1.0, 0.5));
    }
}
