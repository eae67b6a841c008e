//! `tcpstall sockets`' rules: which live socket is at risk of a stall, and why. Pure: two
//! readings of a socket's options, the time between them.

use report::sockets::SocketOptions;

/// Longer than this with the cork held and bytes waiting is a held cork: the kernel itself
/// releases a corked partial segment after 200 ms (tcp(7) TCP_CORK; net/ipv4/tcp_output.c
/// `tcp_push` / the probe timer).
pub const CORK_HELD_NS: u64 = 200_000_000;

/// Why a socket is at risk, one sentence each: `now` its options, `before` those read
/// `between_ns` earlier (None: one reading).
pub fn risks(now: &SocketOptions, before: Option<&SocketOptions>, between_ns: u64) -> Vec<String> {
    let mut out = Vec::new();
    // Nagle (RFC 896; net/ipv4/tcp_output.c `tcp_nagle_check`) holds a small segment while
    // another small one is unacknowledged; with request/response traffic the peer's delayed
    // ACK (RFC 1122 4.2.3.2, `tcp_send_delayed_ack`) holds that acknowledgement: a stall of up
    // to the delayed-ACK timeout per exchange.
    let both_ways = now.data_segs_in > 0 && now.data_segs_out > 0;
    if !now.nodelay && !now.cork && both_ways {
        let mut why = format!(
            "Nagle on (no TCP_NODELAY) with request/response traffic ({} data segments in, {} out)",
            now.data_segs_in, now.data_segs_out
        );
        if now.pingpong {
            why += "; the delayed-ACK engine is in ping-pong mode";
        }
        if now.small_in_flight {
            why += "; a small segment is in flight now, so a small write waits for its ACK";
        }
        out.push(why + ": a write split in two can wait for the peer's delayed ACK (~40 ms)");
    }
    if let Some(b) = before {
        if now.cork && b.cork && now.notsent_bytes > 0 && b.notsent_bytes > 0 && between_ns >= CORK_HELD_NS {
            out.push(format!(
                "TCP_CORK held {} ms or more with {} bytes unsent: corked data waits for the uncork or the \
                 kernel's 200 ms ceiling",
                between_ns / 1_000_000,
                now.notsent_bytes
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SocketOptions {
        SocketOptions {
            nodelay: false,
            cork: false,
            pingpong: true,
            ato_us: 40_000,
            mss: 65483,
            cwnd: 10,
            unacked_segments: 1,
            unacked_bytes: Some(40),
            small_in_flight: true,
            notsent_lowat: 0,
            notsent_bytes: 0,
            congestion: "cubic".into(),
            data_segs_in: 20,
            data_segs_out: 40,
        }
    }

    #[test]
    fn nagle_on_with_request_response_is_at_risk_and_nodelay_is_not() {
        let r = risks(&opts(), None, 0);
        assert_eq!(r.len(), 1);
        assert!(r[0].starts_with("Nagle on") && r[0].contains("ping-pong") && r[0].contains("in flight"), "{r:?}");
        assert!(risks(&SocketOptions { nodelay: true, ..opts() }, None, 0).is_empty());
        assert!(risks(&SocketOptions { data_segs_in: 0, ..opts() }, None, 0).is_empty(), "one-way traffic");
    }

    #[test]
    fn a_cork_is_held_when_two_readings_200_ms_apart_both_hold_bytes() {
        let corked = SocketOptions { cork: true, notsent_bytes: 300, ..opts() };
        assert!(risks(&corked, Some(&corked), 199_000_000).is_empty());
        let r = risks(&corked, Some(&corked), 250_000_000);
        assert_eq!(r.len(), 1);
        assert!(r[0].starts_with("TCP_CORK held 250 ms"), "{r:?}");
        assert!(risks(&corked, Some(&SocketOptions { notsent_bytes: 0, ..corked.clone() }), 250_000_000).is_empty());
    }
}
