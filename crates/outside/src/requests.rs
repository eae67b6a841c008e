//! Each request's latency and the wire's cost, from the packets of a run. Pure: the packets are
//! handed in, decoded and time-stamped by the capture.
//!
//! A request is a run of the client's data segments; its response the server's data segments
//! that follow, up to the client's next data. Its latency is from the request's first data
//! segment to the response's last, as the capture point saw them (the server's namespace: a
//! client-side delay before the request's first byte reached the wire is not in it). Stalls are
//! the one classifier's (`analyze::analyze_events`), per connection, with endpoint A the client,
//! reading the connection's packets and, when recorded, the kernel's events of it (its writes,
//! resends, congestion states: crates/kevidence), merged in time order as the lab merges a row's.

use trace::{Endpoint, Event, EventKind, Evidence, Instant, Segment, TcpFlags};

/// One captured packet of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet {
    /// ns since the run's origin.
    pub t_ns: u64,
    /// The client's port: tells connections apart.
    pub client_port: u16,
    /// Sent by the client.
    pub from_client: bool,
    pub segment: Segment,
}

/// A stall named by the classifier.
#[derive(Debug, Clone, PartialEq)]
pub struct StallNote {
    pub cause: String,
    pub length_ns: u64,
    /// "client" or "server": whose bytes were held.
    pub held: &'static str,
    pub detail: String,
    /// The kernel's part of the record's evidence ("kernel: sendmsg 330 bytes", "kernel:
    /// retransmit 100 bytes", "kernel: congestion state Loss"); empty without kernel evidence.
    pub kernel: Vec<String>,
}

/// A run's kernel events per connection: the client's port, the connection's events
/// (lab::capture::kernel_events_by_client).
pub type KernelFlows = Vec<(u16, Vec<Event>)>;

/// The kernel events a run's classifier read (trace::KernelEvent), and the records lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelCounts {
    /// Kernel events merged into the connections' traces.
    pub events: u64,
    /// Of those, writes (`tcp:tcp_sendmsg_locked`).
    pub writes: u64,
    /// Resends (`tcp:tcp_retransmit_skb`).
    pub resends: u64,
    /// Records lost on the way (the ring full, unparsed, not kept).
    pub lost: u64,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measure {
    /// Each answered request's latency (ns), in order.
    pub latencies_ns: Vec<u64>,
    pub connections: u32,
    pub packets: u64,
    pub data_segments: u64,
    pub pure_acks: u64,
    /// Records of kind `stall` (a mechanism's signature in the evidence).
    pub stalls: Vec<StallNote>,
    /// The kernel evidence the classifier read; None when the run recorded none.
    pub kernel: Option<KernelCounts>,
}

impl Measure {
    pub fn requests(&self) -> usize {
        self.latencies_ns.len()
    }

    /// `x` per answered request (0 without requests).
    pub fn per_request(&self, x: u64) -> f64 {
        if self.latencies_ns.is_empty() {
            0.0
        } else {
            x as f64 / self.latencies_ns.len() as f64
        }
    }
}

/// The q-quantile (0..=1) of `v` by nearest rank; None when empty. Pure.
pub fn quantile(v: &[u64], q: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

/// Request latencies of one connection's packets (time order). Pure.
pub fn latencies(packets: &[&Packet]) -> Vec<u64> {
    let mut out = Vec::new();
    // (start of the current request, end of its response so far)
    let mut cur: Option<(u64, Option<u64>)> = None;
    for p in packets.iter().filter(|p| p.segment.len > 0) {
        match (p.from_client, cur) {
            // The client writes after a response began: that request is done, a new one starts.
            (true, Some((_, Some(_)))) | (true, None) => {
                if let Some((s, Some(e))) = cur {
                    out.push(e - s);
                }
                cur = Some((p.t_ns, None));
            }
            (true, Some((_, None))) => {}
            (false, Some((s, _))) => cur = Some((s, Some(p.t_ns))),
            (false, None) => {}
        }
    }
    if let Some((s, Some(e))) = cur {
        out.push(e - s);
    }
    out
}

fn is_pure_ack(s: &Segment) -> bool {
    s.len == 0 && s.flags.has(TcpFlags::ACK) && !s.flags.has(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
}

/// The events of one connection for the classifier: its packets (numbered as frames from 1)
/// and the kernel's events of it, one stable sort by time (a packet before a kernel event
/// stamped at the same time), as the lab's whole-row path merges them
/// (crates/lab/src/capture/rowstream.rs). Pure.
fn flow_events(flow: &[&Packet], kernel: &[Event]) -> Vec<Event> {
    let mut events: Vec<Event> = flow
        .iter()
        .enumerate()
        .map(|(i, p)| Event {
            t: Instant(p.t_ns),
            from: if p.from_client { Endpoint::A } else { Endpoint::B },
            kind: EventKind::Segment(p.segment),
            evidence: Evidence::Frame(i as u64 + 1),
        })
        .collect();
    events.extend(kernel.iter().cloned());
    events.sort_by_key(|e| e.t);
    events
}

/// Count the kernel events of a connection into `k`.
fn count_kernel(k: &mut KernelCounts, events: &[Event]) {
    for e in events {
        k.events += 1;
        match e.kind {
            EventKind::Kernel(trace::KernelEvent::Sendmsg { .. }) => k.writes += 1,
            EventKind::Kernel(trace::KernelEvent::Retransmit { .. }) => k.resends += 1,
            _ => {}
        }
    }
}

/// Measure a run: latencies, cost and the classifier's stalls, per connection. `kernel`: the
/// kernel's events per client port (lab::capture::kernel_events_by_client), when recorded.
/// Pure.
pub fn measure(packets: &[Packet], kernel: Option<&KernelFlows>, cfg: analyze::Config) -> Measure {
    let mut ports: Vec<u16> = packets.iter().map(|p| p.client_port).collect();
    ports.sort_unstable();
    ports.dedup();
    let mut m = Measure {
        connections: ports.len() as u32,
        kernel: kernel.map(|_| KernelCounts::default()),
        ..Measure::default()
    };
    for port in ports {
        let mut flow: Vec<&Packet> = packets.iter().filter(|p| p.client_port == port).collect();
        flow.sort_by_key(|p| p.t_ns);
        m.latencies_ns.extend(latencies(&flow));
        m.packets += flow.len() as u64;
        m.data_segments += flow.iter().filter(|p| p.segment.len > 0).count() as u64;
        m.pure_acks += flow.iter().filter(|p| is_pure_ack(&p.segment)).count() as u64;
        let kev: &[Event] = kernel.and_then(|k| k.iter().find(|(p, _)| *p == port)).map_or(&[], |(_, e)| e);
        if let Some(k) = m.kernel.as_mut() {
            count_kernel(k, kev);
        }
        let a = analyze::analyze_events(flow_events(&flow, kev), cfg);
        for s in a.stalls().filter(|s| s.kind == analyze::RecordKind::Stall) {
            m.stalls.push(StallNote {
                cause: s.cause.to_string(),
                length_ns: s.length.0,
                held: if s.held == Endpoint::A { "client" } else { "server" },
                detail: s.detail.clone(),
                kernel: s
                    .evidence
                    .iter()
                    .filter(|e| matches!(e.source, Evidence::Kernel(_)))
                    .map(|e| e.what.clone())
                    .collect(),
            });
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(len: u32, flags: u8) -> Segment {
        Segment { wire_len: 52 + len, ..trace::testing::segment(0, 0, flags, len) }
    }

    fn p(t_ns: u64, from_client: bool, len: u32) -> Packet {
        Packet { t_ns, client_port: 5000, from_client, segment: seg(len, TcpFlags::ACK | TcpFlags::PSH) }
    }

    #[test]
    fn a_request_runs_from_its_first_byte_to_the_last_byte_of_its_response() {
        let ps = [
            p(0, true, 100),
            p(10, true, 300),
            p(20, false, 0),
            p(50, false, 120),
            p(45_000, false, 170),
            p(46_000, true, 0),
            p(100_000, true, 100),
            p(100_500, false, 290),
        ];
        let refs: Vec<&Packet> = ps.iter().collect();
        assert_eq!(latencies(&refs), vec![45_000, 500]);
    }

    #[test]
    fn an_unanswered_request_is_not_counted() {
        let ps = [p(0, true, 100), p(5, false, 10), p(100, true, 10)];
        let refs: Vec<&Packet> = ps.iter().collect();
        assert_eq!(latencies(&refs), vec![5]);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn counts_pure_acks_apart_from_handshake_and_data() {
        let mut ps = vec![p(0, true, 10), p(1, false, 0), p(2, false, 20)];
        ps.push(Packet {
            t_ns: 3,
            client_port: 5000,
            from_client: true,
            segment: seg(0, TcpFlags::ACK | TcpFlags::FIN),
        });
        let m = measure(&ps, None, analyze::Config::default());
        assert_eq!((m.packets, m.data_segments, m.pure_acks, m.connections), (4, 2, 1, 1));
        assert_eq!(m.latencies_ns, vec![2]);
    }

    fn at(t_ns: u64, from_client: bool, seq: u32, ack: u32, flags: u8, len: u32) -> Packet {
        let segment = Segment { wire_len: 52 + len, ..trace::testing::segment(seq, ack, flags, len) };
        Packet { t_ns, client_port: 5000, from_client, segment }
    }

    /// The http.server pattern: the response's header leaves at once, its body (a second
    /// write, Nagle on) waits behind it for the client's delayed ACK (RFC 9293 3.7.4 with
    /// tcp_nagle_check; tcp_delack_timer's 40 ms). With the kernel's record of the body's write
    /// (`tcp:tcp_sendmsg_locked`), the classifier's record carries it; without, the packets
    /// alone still name the cause.
    #[test]
    fn the_kernels_write_of_the_held_body_joins_its_stall_record() {
        let (s, a, pa) = (TcpFlags::SYN, TcpFlags::ACK, TcpFlags::ACK | TcpFlags::PSH);
        let ps = [
            at(0, true, 0, 0, s, 0),
            at(100_000, false, 0, 1, s | a, 0),
            at(200_000, true, 1, 1, a, 0),
            at(1_000_000, true, 1, 1, pa, 300),
            at(1_100_000, false, 1, 301, pa, 50),
            at(41_100_000, true, 301, 51, a, 0),
            at(41_150_000, false, 51, 301, pa, 100),
            at(41_250_000, true, 301, 151, a, 0),
        ];
        let write = |t: u64, bytes: u32, seq: u32, n: u64| Event {
            t: Instant(t),
            from: Endpoint::B,
            kind: EventKind::Kernel(trace::KernelEvent::Sendmsg { bytes, seq }),
            evidence: Evidence::Kernel(n),
        };
        let kernel = [(5000u16, vec![write(1_050_000, 50, 1, 1), write(1_120_000, 100, 51, 2)])];
        let with = measure(&ps, Some(&kernel.to_vec()), analyze::Config::default());
        let without = measure(&ps, None, analyze::Config::default());
        for m in [&with, &without] {
            assert_eq!(m.stalls.len(), 1, "{m:#?}");
            assert_eq!((m.stalls[0].cause.as_str(), m.stalls[0].held), ("nagle-delayed-ack", "server"), "{m:#?}");
        }
        assert_eq!(with.stalls[0].kernel, vec!["kernel: sendmsg 100 bytes".to_string()], "{with:#?}");
        assert_eq!(with.kernel, Some(KernelCounts { events: 2, writes: 2, resends: 0, lost: 0 }));
        assert!(without.stalls[0].kernel.is_empty() && without.kernel.is_none(), "{without:#?}");
        // Another connection's kernel events are not this one's.
        let other = vec![(5001u16, kernel[0].1.clone())];
        let m = measure(&ps, Some(&other), analyze::Config::default());
        assert!(m.stalls[0].kernel.is_empty() && m.kernel == Some(KernelCounts::default()), "{m:#?}");
    }
}
