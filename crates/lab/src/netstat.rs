//! TcpExt counters of a network namespace (`/proc/thread-self/net/netstat`).
//!
//! The counters are per namespace (`net->mib.net_statistics`, net/ipv4/proc.c `netstat_seq_show`),
//! and `/proc/self/net` is the *process's* (its main thread's) namespace, not the calling
//! thread's: a lab thread that entered a private namespace must read `/proc/thread-self/net`.

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

/// Parse the text of /proc/net/netstat: pairs of lines "TcpExt: names" / "TcpExt: values".
/// Returns the TcpExt counters by name. Malformed pairs are skipped (the file is the kernel's).
pub fn parse(text: &str) -> BTreeMap<String, i64> {
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

/// Read the calling thread's namespace counters.
pub fn read_thread() -> std::io::Result<BTreeMap<String, i64>> {
    Ok(parse(&std::fs::read_to_string("/proc/thread-self/net/netstat")?))
}

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
    fn parses_tcpext_pairs_and_ignores_others() {
        let t = "TcpExt: SyncookiesSent DelayedACKs TCPAutoCorking\nTcpExt: 0 12 3\n\
                 IpExt: InNoRoutes\nIpExt: 7\n";
        let m = parse(t);
        assert_eq!(m.get("DelayedACKs"), Some(&12));
        assert_eq!(m.get("TCPAutoCorking"), Some(&3));
        assert_eq!(m.get("InNoRoutes"), None);
    }

    #[test]
    fn delta_keeps_the_reported_counters() {
        let b = parse("TcpExt: DelayedACKs Other\nTcpExt: 5 1\n");
        let a = parse("TcpExt: DelayedACKs Other\nTcpExt: 9 100\n");
        let d = delta(&b, &a, "");
        assert_eq!(d.get("DelayedACKs"), Some(&4));
        assert_eq!(d.get("Other"), None);
        assert_eq!(delta(&b, &a, "client:").get("client:DelayedACKs"), Some(&4));
    }

    #[test]
    fn this_threads_namespace_is_readable() {
        // /proc/thread-self/net/netstat exists on every kernel tcpstall supports (3.17+).
        let m = read_thread().unwrap();
        assert!(m.contains_key("DelayedACKs"));
    }
}
