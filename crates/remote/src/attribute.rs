//! Two vantage points, one classifier: the stall records come from the client host's packets
//! (the lab's own classifier, `analyze`), and each record's time is then split by host with the
//! server host's packets of the same connection:
//!
//! - the packet that ended the wait at the client (the last segment from the server at or before
//!   the stall's end) is found in the server's capture (same seq, ack, length, flags): when it
//!   left the server;
//! - the last segment from the client the server had received before that: when it arrived at
//!   the server, and (from the client's capture) when it left the client.
//!
//! On the client's clock the stall [s, e] is then: client host until that segment left, network
//! until it arrived, server host until the answer left, network until it arrived, client host
//! until e. Times on the server's clock are moved onto the client's with the measured offset
//! (clock.rs, RFC 5905); the server host's share of one round trip (answer left - question
//! arrived) is on one clock and needs no offset, so it is exact up to the capture's stamps, and
//! the split between the two network legs and the hosts' edges moves by at most the offset's
//! error bound. This decides no cause: the cause is the classifier's.

use report::cells::ns_as_ms_1dp;
use report::RunResult;
use trace::{Endpoint, Event, EventKind, Segment};

use crate::clock::Offset;

/// How one stall's time splits (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Split {
    pub client_host: u64,
    pub network: u64,
    pub server_host: u64,
}

/// A segment's identity across the two captures.
fn key(from: Endpoint, s: &Segment) -> (Endpoint, u32, u32, u32, u8) {
    (from, s.seq.0, s.ack.0, s.len, s.flags.0)
}

fn segs(events: &[Event]) -> Vec<(u64, Endpoint, &Segment)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Segment(s) => Some((e.t.0, e.from, s)),
            _ => None,
        })
        .collect()
}

/// The same segment in `other`, nearest to time `t` (both on the client's time base).
fn find(other: &[(u64, Endpoint, &Segment)], from: Endpoint, s: &Segment, t: u64) -> Option<u64> {
    let k = key(from, s);
    other.iter().filter(|(_, f, x)| key(*f, x) == k).map(|(u, _, _)| *u).min_by_key(|u| u.abs_diff(t))
}

/// The split of the stall [s, e] (client time base, ns), or None when the packets that ended it
/// are not in both captures.
pub fn split(client: &[Event], server: &[Event], s: u64, e: u64) -> Option<Split> {
    let c = segs(client);
    let v = segs(server);
    // The last segment from the server that reached the client by the stall's end.
    let (c_r, _, r) = *c.iter().rfind(|(t, f, _)| *f == Endpoint::B && *t <= e && *t > s)?;
    let s_r = find(&v, Endpoint::B, r, c_r)?;
    // The last segment from the client the server had received before it answered.
    let (s_q, _, q) = *v.iter().rfind(|(t, f, _)| *f == Endpoint::A && *t <= s_r)?;
    let c_q = find(&c, Endpoint::A, q, s_q)?;
    // Intervals on the client's time base, clamped into [s, e] and into order.
    let clamp = |x: u64, lo: u64| x.clamp(lo, e);
    let t1 = clamp(c_q, s); // left the client
    let t2 = clamp(s_q, t1); // arrived at the server
    let t3 = clamp(s_r, t2); // answer left the server
    let t4 = clamp(c_r, t3); // answer arrived at the client
    Some(Split { client_host: (t1 - s) + (e - t4), network: (t2 - t1) + (t4 - t3), server_host: t3 - t2 })
}

/// Add each stall record's split by host to its detail, and the row's median split (or why
/// there is none) to its verdict. `server_frames` are the server host's packets (its clock),
/// `origin_ns` the client capture's time 0 (client clock).
pub fn attribute(
    row: &mut RunResult,
    server_frames: &[lab::side::FrameRecord],
    server_note: &str,
    origin_ns: u64,
    server_port: u16,
    offset: Option<Offset>,
) {
    if row.capture.is_none() {
        return;
    }
    let frames: Vec<_> = server_frames.iter().filter_map(|f| f.frame()).collect();
    if lab::side::host_events(&frames, server_port, 0).is_empty() {
        let why = if server_note.is_empty() { "no packets" } else { server_note };
        row.verdict.push_str(&format!("; time by host not split (server host's capture: {why})"));
        return;
    }
    let Some(off) = offset else {
        row.verdict.push_str("; time by host not split (no clock offset)");
        return;
    };
    // Server time t_s = client time + offset: the server's frames onto the client's time base.
    let server_origin = (origin_ns as i128 + off.offset_ns as i128).max(0) as u64;
    let server = lab::side::host_events(&frames, server_port, server_origin);
    let mut splits = Vec::new();
    for st in &mut row.stall_records {
        let (s, e) = (st.start.0, st.start.0 + st.length.0);
        if let Some(x) = split(&row.packets, &server, s, e) {
            let (sender, receiver) = if st.held == Endpoint::A { ("client", "server") } else { ("server", "client") };
            let (snd, rcv) =
                if st.held == Endpoint::A { (x.client_host, x.server_host) } else { (x.server_host, x.client_host) };
            st.detail.push_str(&format!(
                " [time by host: sender ({sender}) {}, network {}, receiver ({receiver}) {}]",
                ns_as_ms_1dp(snd),
                ns_as_ms_1dp(x.network),
                ns_as_ms_1dp(rcv)
            ));
            splits.push(Split { client_host: snd, network: x.network, server_host: rcv });
        }
    }
    if row.stall_records.is_empty() {
        return;
    }
    if splits.is_empty() {
        row.verdict.push_str("; time by host not split (the stalls' packets are not in the server host's capture)");
        return;
    }
    let med = |f: fn(&Split) -> u64| report::stats::median(splits.iter().map(f).collect()).unwrap_or(0);
    // By role (the splits above are stored as sender, network, receiver): in seed 000 each
    // host is the sender of half the stalls.
    row.verdict.push_str(&format!(
        "; time by host (median of {} of {} stalls, clock offset +- {}): sender host {}, network {}, receiver host {}",
        splits.len(),
        row.stall_records.len(),
        ns_as_ms_1dp(off.error_ns),
        ns_as_ms_1dp(med(|x| x.client_host)),
        ns_as_ms_1dp(med(|x| x.network)),
        ns_as_ms_1dp(med(|x| x.server_host))
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Evidence, Instant, TcpFlags};

    fn seg(t: u64, from: Endpoint, seq: u32, ack: u32, len: u32) -> Event {
        Event {
            t: Instant(t),
            from,
            kind: EventKind::Segment(Segment { window: 100, ..trace::testing::segment(seq, ack, TcpFlags::ACK, len) }),
            evidence: Evidence::Frame(1),
        }
    }

    /// Seed 001 on two hosts 1 ms apart each way: the client's 24-byte piece leaves at 0, the
    /// server holds its ACK 40 ms (delayed ACK), the ACK is back at 42 ms, the held 292 bytes
    /// leave at 42.1 ms. The stall [0, 42.1] splits into client 0.1, network 2, server 40.
    #[test]
    fn a_delayed_ack_is_the_receivers_time() {
        let ms = 1_000_000;
        let client = vec![
            seg(0, Endpoint::A, 275, 1, 24),
            seg(42 * ms, Endpoint::B, 1, 299, 0),
            seg(42 * ms + ms / 10, Endpoint::A, 299, 1, 292),
        ];
        let server = vec![seg(ms, Endpoint::A, 275, 1, 24), seg(41 * ms, Endpoint::B, 1, 299, 0)];
        let x = split(&client, &server, 0, 42 * ms + ms / 10).unwrap();
        assert_eq!(x, Split { client_host: ms / 10, network: 2 * ms, server_host: 40 * ms });
    }

    #[test]
    fn without_the_answer_in_the_servers_capture_there_is_no_split() {
        let client = vec![seg(0, Endpoint::A, 1, 1, 10), seg(5, Endpoint::B, 1, 11, 0)];
        assert_eq!(split(&client, &[], 0, 10), None);
    }
}
