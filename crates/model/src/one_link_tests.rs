//! One link: the forwarder (`tcpstall lab --link`, `tcpstall shell`) and the simulator
//! (`tcpstall simulate --link`) run the same link model, so the same packets at the same times
//! with the same seed are dropped, delayed and reordered alike. Each packet goes through
//! `link::forward::judge` as the forwarder calls it (the raw IPv4 packet it reads from the TUN
//! device, with and without a virtio_net_hdr, the models from `link::forwarder_models`) and
//! through [`SimLink::send`] as the simulator calls it (payload and TCP header lengths); what
//! each delivers, and when, must be identical for every key of the link spec.

use super::SimLink;
use linkmodel::Verdict;
use scenario::LinkSpec;

const SEED: u64 = 0x5eed_0036;
/// TCP header with the timestamps option (RFC 7323): 20 + 12 bytes, as both the simulated
/// stacks (timestamps on) and seed 003's 52-byte pure ACKs carry.
const TCP_HDR: u32 = 32;

/// One packet of the script: when, who sends it (0 = client, up), its payload.
#[derive(Debug, Clone, Copy)]
struct Pkt {
    t: u64,
    from: usize,
    payload: u32,
}

/// An IPv4 TCP segment with timestamps, as the forwarder reads it: `vnet` bytes of
/// virtio_net_hdr (all zero: VIRTIO_NET_HDR_GSO_NONE) then the packet.
fn datagram(p: Pkt, vnet: usize) -> Vec<u8> {
    let (src, dst, sport, dport) = if p.from == 0 {
        ([198, 18, 0, 1], [198, 18, 0, 2], 40000, 5001)
    } else {
        ([198, 18, 0, 2], [198, 18, 0, 1], 5001, 40000)
    };
    let mut b = etherparse::PacketBuilder::ipv4(src, dst, 64)
        .tcp(sport, dport, 1, 65535)
        .options(&[
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Timestamp(1, 2),
        ])
        .expect("options fit")
        .ack(1);
    if p.payload > 0 {
        b = b.psh();
    }
    let mut out = vec![0u8; vnet];
    b.write(&mut out, &vec![0x5a; p.payload as usize]).expect("packet");
    assert_eq!(out.len() - vnet, (p.payload + TCP_HDR + 20) as usize);
    out
}

/// A script exercising every key: both directions interleaved, pure ACKs and data of many
/// sizes up to the MSS (and one a byte over the MTU), bursts at one instant (the queue) and
/// gaps (an idle link), times never going back. A fixed linear congruential generator, so the
/// script is the same on every run.
fn script(mtu: u32) -> Vec<Pkt> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mss = mtu - 20 - TCP_HDR;
    let mut t = 0;
    let mut out = Vec::new();
    for i in 0..3000 {
        t += match next() % 10 {
            0..=3 => 0,                          // a burst
            4..=8 => next() % 200_000,           // up to 0.2 ms
            _ => 1_000_000 + next() % 5_000_000, // idle for 1-6 ms
        };
        let from = (next() % 2) as usize;
        let payload = match next() % 4 {
            0 | 1 => 0,
            2 => mss,
            _ => 1 + (next() % u64::from(mss)) as u32,
        };
        let payload = if i == 1500 { mss + 1 } else { payload };
        out.push(Pkt { t, from, payload });
    }
    out
}

/// The fates of `script` through the forwarder's call (`vnet` bytes of header) and the
/// simulator's: None = dropped, Some(t) = delivered at t.
fn fates(spec: &LinkSpec, script: &[Pkt], vnet: usize) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
    let mut fwd = link::forwarder_models(spec, SEED);
    let mut sim = SimLink::new(spec, SEED);
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &p in script {
        let (model, rng) = &mut fwd[p.from];
        a.push(match link::forward::judge(model, rng, p.t, &datagram(p, vnet), vnet) {
            Verdict::Deliver { at_ns } => Some(at_ns),
            Verdict::Drop(_) => None,
        });
        b.push(sim.send(p.t, p.from, p.payload, TCP_HDR));
    }
    (a, b)
}

/// Every key of the link spec (scenario's link_spec.rs), alone and together.
const SPECS: &[&str] = &[
    "rtt=20ms",
    "delay=3ms",
    "delay-up=1ms,delay-down=7ms",
    "rtt=10ms,delay-up=2ms",
    "rtt=10ms,jitter=2ms",
    "rtt=10ms,jitter=2ms,reorder=on",
    "rate=20mbit",
    "rate=20mbit,queue=5p",
    "rate=20mbit,queue=6000b",
    "loss=20%",
    "ack-loss=50%",
    "ack-every=2",
    "ack-every=3,ack-dir=up",
    "ack-every=2,ack-loss=30%,ack-dir=down",
    "mtu=576",
    "rtt=4ms,jitter=1ms,reorder=on,rate=50mbit,queue=20p,loss=5%,ack-loss=20%,ack-every=2,ack-dir=up,mtu=1400",
];

#[test]
fn the_forwarder_and_the_simulator_deliver_the_same_packets_at_the_same_times() {
    for s in SPECS {
        let spec: LinkSpec = s.parse().unwrap();
        let script = script(spec.mtu);
        for vnet in [0, 10] {
            let (fwd, sim) = fates(&spec, &script, vnet);
            for (i, (f, m)) in fwd.iter().zip(&sim).enumerate() {
                assert_eq!(
                    f, m,
                    "{s} (virtio header {vnet}): packet {i} {:?}: forwarder {f:?}, simulator {m:?}",
                    script[i]
                );
            }
            let delivered = fwd.iter().filter(|f| f.is_some()).count();
            assert!(delivered > 0, "{s}: nothing delivered");
            // The oversized packet is the only drop of a link that decides nothing else.
            let decides = ["loss", "ack-", "queue"].iter().any(|k| s.contains(k));
            assert_eq!(delivered == script.len() - 1, !decides, "{s}: {delivered} of {} delivered", script.len());
        }
    }
}

/// The disagreement: `ack-every=2,ack-dir=up` and four pure ACKs each way. Both users
/// now keep the client's 2nd and 4th (seed 003's `--every 2 --packet 0 -j DROP` drops the
/// first of each two: xt_statistic.c nth mode) and every one of the server's.
#[test]
fn ack_every_2_up_keeps_the_clients_2nd_and_4th_and_all_of_the_servers_in_both() {
    let spec: LinkSpec = "ack-every=2,ack-dir=up".parse().unwrap();
    let script: Vec<Pkt> = (0..8).map(|i| Pkt { t: i * 1000, from: (i % 2) as usize, payload: 0 }).collect();
    let (fwd, sim) = fates(&spec, &script, 0);
    assert_eq!(fwd, sim);
    let kept = |from: usize| -> Vec<usize> {
        script
            .iter()
            .zip(&fwd)
            .filter(|(p, _)| p.from == from)
            .enumerate()
            .filter(|(_, (_, f))| f.is_some())
            .map(|(k, _)| k + 1)
            .collect()
    };
    assert_eq!(kept(0), [2, 4], "client's pure ACKs kept (1-based)");
    assert_eq!(kept(1), [1, 2, 3, 4], "server's pure ACKs kept (1-based)");
}

/// GSO: the forwarder carries a TSO super-packet whole (IFF_VNET_HDR, only on a link without
/// per-segment decisions) as the segments it stands for (linkmodel::gso: each repeats the
/// headers, tcp_gso_segment); the simulator sends those segments one by one. The super-packet
/// leaves when its last segment would: the simulator's last segment arrives at the same time.
#[test]
fn a_super_packet_arrives_with_the_last_of_its_segments() {
    for s in ["rate=20mbit,rtt=4ms", "rate=20mbit,queue=10p,delay-up=1ms,delay-down=3ms", "rtt=2ms"] {
        let spec: LinkSpec = s.parse().unwrap();
        let mss = spec.mtu - 20 - TCP_HDR;
        let mut fwd = link::forwarder_models(&spec, SEED);
        let mut sim = SimLink::new(&spec, SEED);
        let mut vnet = vec![0u8; 10];
        vnet[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4 (include/uapi/linux/virtio_net.h)
        vnet[4..6].copy_from_slice(&(mss as u16).to_le_bytes());
        for (k, t) in [0u64, 100_000, 5_000_000].into_iter().enumerate() {
            let p = Pkt { t, from: k % 2, payload: 3 * mss };
            let mut buf = vnet.clone();
            buf.extend_from_slice(&datagram(p, 0));
            let (model, rng) = &mut fwd[p.from];
            let whole = link::forward::judge(model, rng, t, &buf, vnet.len());
            let last = (0..3).map(|_| sim.send(t, p.from, mss, TCP_HDR)).last().flatten();
            assert_eq!(whole, Verdict::Deliver { at_ns: last.expect("delivered") }, "{s}: super-packet {k}");
        }
    }
}
