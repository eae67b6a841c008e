//! The multi-flow driver on captures built with `wire::synth` (etherparse frames in a pcap):
//! duplicate frames are not retransmissions (RFC 791 3.2 / RFC 6864 4.1 IPv4 ID), a reused
//! 4-tuple is two analyses (RFC 9293 3.4 / 3.6), IPv4 ID gaps are not loss (loss only from
//! sequence evidence, RFC 9293 3.4), and ended flows are freed (bounded memory).

use tcpstall_analyze::{session, Config, Finished, Session};
use trace::Cause;
use wire::{Decoder, FlowFilter, FlowLimits};

use wire::synth::{pkt as p, Pkt as P};

fn pcap(pkts: &[P]) -> Vec<u8> {
    wire::synth::pcap(pkts).expect("valid packets")
}

fn analyse(file: &[u8], limits: FlowLimits) -> Vec<Finished> {
    let mut dec = Decoder::with_limits(file, FlowFilter::default(), limits).unwrap();
    let mut out = Vec::new();
    session::run(&mut dec, Config::default(), |_| {}, |f| out.push(f)).unwrap();
    out.sort_by_key(|f| f.id);
    out
}

/// A connection with `rounds` request/response exchanges (10 ms apart), FIN both ways.
fn session_pkts(t0: u64, isn: u32, rounds: u32) -> Vec<P> {
    let (mut c, mut s) = (isn, 9000u32);
    let mut v = vec![p(t0, true, c, 0, "S", 0), p(t0 + 100, false, s, c + 1, "SA", 0)];
    c += 1;
    s += 1;
    v.push(p(t0 + 200, true, c, s, "A", 0));
    let mut t = t0 + 1000;
    for _ in 0..rounds {
        v.push(p(t, true, c, s, "PA", 100));
        c += 100;
        v.push(p(t + 100, false, s, c, "PA", 200));
        s += 200;
        v.push(p(t + 200, true, c, s, "A", 0));
        t += 10_000;
    }
    v.push(p(t, true, c, s, "FA", 0));
    v.push(p(t + 100, false, s, c + 1, "FA", 0));
    v.push(p(t + 200, true, c + 1, s + 1, "A", 0));
    v
}

fn numbered(mut v: Vec<P>) -> Vec<P> {
    let (mut a, mut b) = (100u16, 30000u16);
    for x in &mut v {
        let n = if x.c2s { &mut a } else { &mut b };
        x.id = *n;
        *n += 1;
    }
    v
}

/// Every frame twice (before and after a router: same IPv4 ID, TTL one lower, 30 us later):
/// one flow, no retransmission, no out-of-order; with the duplicate window off, the same file
/// shows the copies as retransmissions (what issue 9 saw), so the test can fail.
#[test]
fn duplicated_frames_are_not_retransmissions() {
    let orig = numbered(session_pkts(0, 1, 20));
    let twice: Vec<P> = orig.iter().flat_map(|x| [*x, P { ttl: 63, t_us: x.t_us + 30, ..*x }]).collect();
    let file = pcap(&twice);
    let flows = analyse(&file, FlowLimits::default());
    assert_eq!(flows.len(), 1);
    let d = &flows[0].analysis.dirs;
    assert_eq!((d[0].retransmissions, d[1].retransmissions), (0, 0));
    assert_eq!(d[0].wire.packets + d[1].wire.packets, orig.len() as u64);
    let off = FlowLimits { dup_window_ns: 0, ..FlowLimits::default() };
    let flows = analyse(&file, off);
    let d = &flows[0].analysis.dirs;
    assert!(d[0].retransmissions + d[1].retransmissions > 0, "copies kept: counted as resent");
}

/// The same ports reused 57 minutes later: two analyses, each with its own handshake.
#[test]
fn reused_ports_are_two_analyses() {
    let mut v = session_pkts(0, 1, 3);
    v.extend(session_pkts(57 * 60 * 1_000_000, 123_456_789, 3));
    let flows = analyse(&pcap(&v), FlowLimits::default());
    assert_eq!(flows.len(), 2);
    for f in &flows {
        assert!(f.analysis.handshake.syn.is_some() && f.analysis.handshake.ack.is_some());
        assert_eq!(f.analysis.dirs[0].wire.packets + f.analysis.dirs[1].wire.packets, 15);
    }
    // Each ended when its close completed (both FINs acknowledged, RFC 9293 3.6).
    assert_eq!(flows[0].end, Some(wire::EndReason::Closed));
    assert_eq!(flows[1].end, Some(wire::EndReason::Closed));
}

/// IPv4 IDs that jump (a GSO sender, a counter shared with other flows) between keystrokes
/// 500 ms apart: no retransmission-timeout claim (loss needs a resent or missing range).
#[test]
fn ip_id_gaps_are_not_loss() {
    let mut v = session_pkts(0, 1, 0);
    v.truncate(3);
    let (mut c, s) = (2u32, 9001u32);
    for k in 0..8u64 {
        let t = 1_000 + k * 500_000;
        let mut d = p(t, true, c, s, "PA", 1);
        d.id = 100 + (k as u16) * 7; // +7 per packet: 6 "unseen" each time
        v.push(d);
        c += 1;
        v.push(p(t + 100, false, s, c, "A", 0));
    }
    let flows = analyse(&pcap(&v), FlowLimits::default());
    assert_eq!(flows.len(), 1);
    let a = &flows[0].analysis;
    assert!(a.stalls.iter().all(|s| s.cause != Cause::RetransmissionTimeout), "{:?}", a.stalls);
    assert_eq!(a.dirs[0].retransmissions, 0);
}

/// 30,000 short connections, 1,000 per second of capture time: the session holds only the
/// analysers of open connections, and every flow is finished exactly once.
#[test]
fn finished_flows_are_freed() {
    let mut v = Vec::new();
    for i in 0..30_000u64 {
        for mut x in session_pkts(i * 1_000, 1, 1) {
            x.port = 1024 + i as u16;
            v.push(x);
        }
    }
    v.sort_by_key(|x| x.t_us);
    let file = pcap(&v);
    let mut dec = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut s = Session::new(Config::default());
    let (mut done, mut max_live) = (0usize, 0usize);
    while let Some(fe) = dec.next_event().unwrap() {
        while let Some(end) = dec.pop_ended() {
            done += usize::from(s.end(&end).is_some());
        }
        s.push(&fe, || dec.flows().key(fe.flow));
        max_live = max_live.max(s.live());
    }
    // Each connection's analyser is freed when its close completes (RFC 9293 3.6), ~11 ms after
    // it started: at 1,000 new flows per second about 11 are ever alive, never thousands.
    assert!(max_live <= 20, "{max_live} analysers alive");
    done += s.finish_all().len();
    assert_eq!(done, 30_000);
}

/// A handshake (SYN, SYN-ACK 20 us later, ACK 20 us after that: a 40 us round trip, what a veth
/// pair or loopback shows) and one exchange between `client` and `server`, as frames.
fn fast_handshake(client: [u8; 4], server: [u8; 4]) -> Vec<(u64, Vec<u8>)> {
    let at = |q: P| P { client, server, ..q };
    [
        at(p(0, true, 100, 0, "S", 0)),
        at(p(20, false, 900, 101, "SA", 0)),
        at(p(40, true, 101, 901, "A", 0)),
        at(p(1000, true, 101, 901, "PA", 10)),
        at(p(1050, false, 901, 111, "PA", 20)),
        at(p(1100, true, 111, 921, "A", 0)),
    ]
    .iter()
    .map(|q| (q.t_us, q.frame().unwrap()))
    .collect()
}

fn capture_point(file: &[u8]) -> trace::CapturePoint {
    let f = analyse(file, FlowLimits::default());
    assert_eq!(f.len(), 1);
    f[0].analysis.capture_point
}

/// Where a capture was taken, from the file rather than the handshake's timing (issue 21):
/// - a veth-like capture between two 10.x addresses with a 40 us round trip is not "same host"
///   (two network namespaces are two stacks: the address rule, `session::same_host_by_address`);
/// - a capture on `lo` (pcapng `if_name`, or Linux `lo`'s all-zero MACs in a plain pcap)
///   between 127.0.0.1 and itself is;
/// - a capture on `lo` between two addresses of one host (Linux routes traffic to a local
///   address through `lo`) is too, though the addresses alone say two hosts; the same frames on
///   an interface named `eth0` are not.
#[test]
fn capture_point_from_interface_and_addresses() {
    use trace::CapturePoint::SameHost;
    use wire::linktype::ETHERNET;
    let veth = fast_handshake([10, 0, 0, 1], [10, 0, 0, 2]);
    assert_ne!(capture_point(&wire::synth::pcap_frames(&veth)), SameHost);
    assert_ne!(capture_point(&wire::synth::pcapng("tcpstall-c0", ETHERNET, &veth).unwrap()), SameHost);

    let lo = fast_handshake([127, 0, 0, 1], [127, 0, 0, 1]);
    assert_eq!(capture_point(&wire::synth::pcapng("lo", ETHERNET, &lo).unwrap()), SameHost);
    let zero_macs: Vec<_> = lo
        .iter()
        .map(|(t, f)| {
            let mut f = f.clone();
            f[..12].fill(0);
            (*t, f)
        })
        .collect();
    assert_eq!(capture_point(&wire::synth::pcap_frames(&zero_macs)), SameHost);

    let two_addresses = fast_handshake([10, 0, 0, 1], [192, 168, 7, 9]);
    assert_eq!(capture_point(&wire::synth::pcapng("lo", ETHERNET, &two_addresses).unwrap()), SameHost);
    assert_ne!(capture_point(&wire::synth::pcapng("eth0", ETHERNET, &two_addresses).unwrap()), SameHost);
}

/// `session::same_host`: a loopback interface says one host whatever the addresses; otherwise
/// the addresses decide.
#[test]
fn same_host_rule() {
    let key = |a: &str, b: &str| wire::FlowKey { a: a.parse().unwrap(), b: b.parse().unwrap(), interface: 0 };
    assert_eq!(session::same_host(&key("10.0.0.1:1", "192.168.7.9:2"), true), Some(true));
    assert_eq!(session::same_host(&key("10.0.0.1:1", "192.168.7.9:2"), false), Some(false));
    assert_eq!(session::same_host(&key("127.0.0.1:1", "127.0.0.2:2"), false), Some(true));
    assert_eq!(session::same_host(&key("[::1]:1", "[::1]:2"), false), Some(true));
}
