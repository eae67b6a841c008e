//! The TcpExt counters a lab row reports, as deltas over its measured rounds (pure: the
//! counters of the calling thread's namespace are read by `sys::host::netstat_thread`).

use std::collections::BTreeMap;

/// The TcpExt counters a lab run reports (deltas over the run).
pub const COUNTERS: &[&str] = &[
    // The delayed-ACK timer fired and sent an ACK (tcp_delack_timer_handler, tcp_timer.c).
    "DelayedACKs",
    // The timer fired while the socket was owned by the user and had to wait.
    "DelayedACKLocked",
    "DelayedACKLost",
    // A small write was held by autocorking (tcp_should_autocork, tcp.c).
    "TCPAutoCorking",
    "TCPOrigDataSent",
    "TCPTimeouts",
    "TCPLossProbes",
    "TCPToZeroWindowAdv",
];

/// after - before for the reported counters, with `prefix` before each name.
pub fn delta(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>, prefix: &str) -> BTreeMap<String, i64> {
    COUNTERS
        .iter()
        .filter_map(|&k| {
            let a = *after.get(k)?;
            let b = before.get(k).copied().unwrap_or(0);
            Some((format!("{prefix}{k}"), a - b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_keeps_the_reported_counters() {
        let b = sys::host::parse_netstat("TcpExt: DelayedACKs Other\nTcpExt: 5 1\n");
        let a = sys::host::parse_netstat("TcpExt: DelayedACKs Other\nTcpExt: 9 100\n");
        let d = delta(&b, &a, "");
        assert_eq!(d.get("DelayedACKs"), Some(&4));
        assert_eq!(d.get("Other"), None);
        assert_eq!(delta(&b, &a, "client:").get("client:DelayedACKs"), Some(&4));
    }
}
