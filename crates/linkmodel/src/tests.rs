//! Packet scripts against the pure link model: explicit times, seeded randomness.

use super::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;

const MS: u64 = 1_000_000;

fn spec(s: &str) -> LinkSpec {
    s.parse().unwrap()
}

fn rng() -> SmallRng {
    SmallRng::seed_from_u64(0x7c9_5a11)
}

/// An IPv4 TCP segment 198.18.0.1:5001 -> 198.18.0.2:40000 with timestamps (so a pure ACK is
/// 52 bytes, the length seed 003's iptables rule matches).
fn tcp4(payload: usize, flags: &str) -> Vec<u8> {
    let mut b = etherparse::PacketBuilder::ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(5001, 40000, 1000, 65535)
        .options(&[
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Noop,
            etherparse::TcpOptionElement::Timestamp(1, 2),
        ])
        .unwrap();
    for f in flags.chars() {
        b = match f {
            'A' => b.ack(1),
            'S' => b.syn(),
            'F' => b.fin(),
            'R' => b.rst(),
            'P' => b.psh(),
            _ => panic!("flag {f}"),
        };
    }
    let data = vec![0x55u8; payload];
    let mut out = Vec::new();
    b.write(&mut out, &data).unwrap();
    out
}

fn at(v: Verdict) -> u64 {
    match v {
        Verdict::Deliver { at_ns } => at_ns,
        Verdict::Drop(r) => panic!("dropped: {r:?}"),
    }
}

#[test]
fn classifies_pure_acks_like_seed_003s_rule() {
    let pure = tcp4(0, "A");
    assert_eq!(pure.len(), 52, "seed 003 matches --length 52");
    assert_eq!(classify(&pure), PacketKind::PureAck);
    assert_eq!(classify(&tcp4(100, "A")), PacketKind::TcpData);
    assert_eq!(classify(&tcp4(100, "AP")), PacketKind::TcpData);
    assert_eq!(classify(&tcp4(0, "SA")), PacketKind::TcpControl);
    assert_eq!(classify(&tcp4(0, "FA")), PacketKind::TcpControl);
    assert_eq!(classify(&tcp4(0, "RA")), PacketKind::TcpControl);
    assert_eq!(classify(&tcp4(0, "S")), PacketKind::TcpControl);
    assert_eq!(classify(&[0x45, 0, 0]), PacketKind::Other);
    let mut udp = Vec::new();
    etherparse::PacketBuilder::ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64).udp(1, 2).write(&mut udp, &[0; 64]).unwrap();
    assert_eq!(classify(&udp), PacketKind::Other);
    let mut v6 = Vec::new();
    etherparse::PacketBuilder::ipv6([0xfe; 16], [0xfd; 16], 64).tcp(1, 2, 3, 4).ack(9).write(&mut v6, &[]).unwrap();
    assert_eq!(classify(&v6), PacketKind::PureAck);
}

#[test]
fn rtt_splits_evenly_into_one_way_delays() {
    let mut m = LinkModel::new(&spec("rtt=20ms"));
    let p = tcp4(10, "AP");
    assert_eq!(at(m.on_packet(5 * MS, Dir::Up, &p, &mut rng())), 15 * MS);
    assert_eq!(at(m.on_packet(6 * MS, Dir::Down, &p, &mut rng())), 16 * MS);
    let mut m = LinkModel::new(&spec("delay-up=3ms,delay-down=7ms"));
    assert_eq!(at(m.on_packet(0, Dir::Up, &p, &mut rng())), 3 * MS);
    assert_eq!(at(m.on_packet(0, Dir::Down, &p, &mut rng())), 7 * MS);
}

#[test]
fn rate_serialises_back_to_back_packets() {
    // 1500 bytes at 12 Mbit/s take exactly 1 ms (bytes * 8 / rate).
    let mut m = DirectionModel::new(&spec("rate=12mbit,delay=10ms"), Dir::Up);
    let p = vec![0u8; 1500];
    let r = &mut rng();
    assert_eq!(at(m.on_packet(0, &p, r)), 11 * MS);
    assert_eq!(at(m.on_packet(0, &p, r)), 12 * MS);
    assert_eq!(at(m.on_packet(MS / 2, &p, r)), 13 * MS);
    // After the link went idle, a packet starts serialising at its arrival.
    assert_eq!(at(m.on_packet(100 * MS, &p, r)), 111 * MS);
}

#[test]
fn serialisation_is_byte_accurate_over_many_packets() {
    // 7 Mbit/s does not divide 8e9 ns per byte evenly; the total must still be exact.
    let mut m = DirectionModel::new(&spec("rate=7mbit,queue=100000p"), Dir::Up);
    let p = vec![0u8; 1337];
    let mut last = 0;
    for _ in 0..10_000 {
        last = at(m.on_packet(0, &p, &mut rng()));
    }
    let exact = (10_000u128 * 1337 * 8 * 1_000_000_000).div_ceil(7_000_000) as u64;
    assert_eq!(last, exact);
}

#[test]
fn drop_tail_in_packets_and_bytes() {
    let p = vec![0u8; 1500];
    let r = &mut rng();
    let mut m = DirectionModel::new(&spec("rate=12mbit,queue=2p"), Dir::Up);
    at(m.on_packet(0, &p, r)); // in service until 1 ms
    at(m.on_packet(0, &p, r)); // waiting
    assert_eq!(m.on_packet(0, &p, r), Verdict::Drop(DropReason::Queue));
    // At 1 ms the first has left: room for one more.
    assert_eq!(at(m.on_packet(MS, &p, r)), 3 * MS);
    assert_eq!(m.counters.drops_of(DropReason::Queue), 1);

    let mut m = DirectionModel::new(&spec("rate=12mbit,queue=3000b"), Dir::Up);
    at(m.on_packet(0, &p, r));
    at(m.on_packet(0, &p, r));
    assert_eq!(m.on_packet(0, &[0u8; 1], r), Verdict::Drop(DropReason::Queue));
}

#[test]
fn default_queue_is_netems_1000_packets() {
    let p = vec![0u8; 100];
    let mut m = DirectionModel::new(&spec("rate=1mbit"), Dir::Up);
    let r = &mut rng();
    let delivered = (0..1500).filter(|_| matches!(m.on_packet(0, &p, r), Verdict::Deliver { .. })).count();
    assert_eq!(delivered as u64, DEFAULT_QUEUE_PACKETS);
}

#[test]
fn mtu_drops_oversized_packets() {
    let mut m = DirectionModel::new(&spec("mtu=1500"), Dir::Up);
    assert_eq!(m.on_packet(0, &[0u8; 1501], &mut rng()), Verdict::Drop(DropReason::Mtu));
    assert_eq!(at(m.on_packet(0, &[0u8; 1500], &mut rng())), 0);
}

/// Binomial check: |observed - n p| within 5 standard deviations.
fn within_5_sigma(observed: u64, n: u64, p: f64) -> bool {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (observed as f64 - mean).abs() <= 5.0 * sd.max(1.0)
}

#[test]
fn random_loss_matches_its_fraction() {
    let mut m = DirectionModel::new(&spec("loss=3%"), Dir::Up);
    let r = &mut rng();
    let p = tcp4(100, "A");
    for i in 0..20_000 {
        m.on_packet(i, &p, r);
    }
    let lost = m.counters.drops_of(DropReason::Loss);
    assert!(within_5_sigma(lost, 20_000, 0.03), "lost {lost} of 20000 at 3%");
}

#[test]
fn ack_loss_drops_only_pure_acks() {
    let mut m = DirectionModel::new(&spec("ack-loss=50%"), Dir::Down);
    let r = &mut rng();
    let (ack, data, syn) = (tcp4(0, "A"), tcp4(1448, "A"), tcp4(0, "SA"));
    for i in 0..10_000 {
        m.on_packet(i, &ack, r);
        assert!(matches!(m.on_packet(i, &data, r), Verdict::Deliver { .. }), "data is never thinned");
        assert!(matches!(m.on_packet(i, &syn, r), Verdict::Deliver { .. }), "SYN-ACK is not a pure ACK");
    }
    let c = &m.counters;
    assert_eq!(c.pure_acks_in, 10_000);
    assert_eq!(c.data_segments_in, 10_000);
    assert!(within_5_sigma(c.drops_of(DropReason::AckLoss), 10_000, 0.5), "{c:?}");
}

/// Seed 003's `-m statistic --mode nth --every 2 --packet 0 -j DROP` drops the first of each
/// 2 (xt_statistic.c statistic_mt, nth mode; iptables libxt_statistic.c starts the counter at
/// every - packet): `ack-every=N` drops the first N-1 of each N pure ACKs and keeps the Nth,
/// which for N = 2 is the seed's rule and for N = 4 two of its rules stacked.
#[test]
fn ack_every_keeps_the_last_of_each_n_like_seed_003s_nth_rule() {
    for n in [1u32, 2, 3, 4] {
        let mut m = DirectionModel::new(&spec(&format!("ack-every={n}")), Dir::Down);
        let ack = tcp4(0, "A");
        let kept: Vec<u64> =
            (0..12).filter(|&i| matches!(m.on_packet(i, &ack, &mut rng()), Verdict::Deliver { .. })).collect();
        let want: Vec<u64> = (0..12).filter(|i| (i + 1) % u64::from(n) == 0).collect();
        assert_eq!(kept, want, "n={n}: kept (0-based) {kept:?}");
        assert_eq!(m.counters.drops_of(DropReason::AckEvery), 12 - 12 / u64::from(n));
        // Data segments are never counted or thinned.
        assert!(matches!(m.on_packet(99, &tcp4(10, "A"), &mut rng()), Verdict::Deliver { .. }));
    }
    // The seed's rule on four pure ACKs: the 2nd and 4th pass.
    let mut m = DirectionModel::new(&spec("ack-every=2"), Dir::Up);
    let fates: Vec<bool> =
        (0..4).map(|i| matches!(m.on_packet(i, &tcp4(0, "A"), &mut rng()), Verdict::Deliver { .. })).collect();
    assert_eq!(fates, [false, true, false, true]);
}

/// The case: `ack-every=2,ack-dir=up` and four pure ACKs each way. Only the client's
/// (up) are thinned, the 2nd and 4th kept; the server's four all pass. `ack-loss` follows
/// `ack-dir` too.
#[test]
fn ack_dir_names_the_thinned_direction_for_ack_every_and_ack_loss() {
    let ack = tcp4(0, "A");
    let r = &mut rng();
    let mut m = LinkModel::new(&spec("ack-every=2,ack-dir=up"));
    let mut kept = |m: &mut LinkModel, dir| -> Vec<u64> {
        (0..4).filter(|&i| matches!(m.on_packet(i, dir, &ack, r), Verdict::Deliver { .. })).collect()
    };
    assert_eq!(kept(&mut m, Dir::Up), [1, 3]);
    assert_eq!(kept(&mut m, Dir::Down), [0, 1, 2, 3]);
    let mut m = LinkModel::new(&spec("ack-loss=100%,ack-dir=down"));
    assert_eq!(kept(&mut m, Dir::Up), [0, 1, 2, 3]);
    assert_eq!(kept(&mut m, Dir::Down), Vec::<u64>::new());
    let mut m = LinkModel::new(&spec("ack-every=2"));
    assert_eq!(kept(&mut m, Dir::Up), [1, 3]);
    assert_eq!(kept(&mut m, Dir::Down), [1, 3]);
}

#[test]
fn jitter_without_reorder_keeps_order() {
    let mut m = DirectionModel::new(&spec("delay=10ms,jitter=5ms"), Dir::Up);
    let r = &mut rng();
    let p = tcp4(10, "A");
    let mut prev = 0;
    for i in 0..2000u64 {
        let now = i * 100_000; // every 0.1 ms, far closer than the jitter
        let t = at(m.on_packet(now, &p, r));
        assert!(t >= prev, "reordered at {i}");
        assert!(t >= now + 5 * MS && t <= now + 15 * MS + 5 * MS, "delay out of range at {i}");
        prev = t;
    }
}

#[test]
fn jitter_with_reorder_may_reorder_but_stays_in_range() {
    let mut m = DirectionModel::new(&spec("delay=10ms,jitter=5ms,reorder=on"), Dir::Up);
    let r = &mut rng();
    let p = tcp4(10, "A");
    let mut prev = 0;
    let mut inversions = 0;
    for i in 0..2000u64 {
        let now = i * 100_000;
        let t = at(m.on_packet(now, &p, r));
        assert!(t >= now + 5 * MS && t <= now + 15 * MS);
        if t < prev {
            inversions += 1;
        }
        prev = t;
    }
    assert!(inversions > 100, "only {inversions} reorderings");
}

#[test]
fn ack_dir_down_thins_only_the_data_receivers_acks() {
    // Seed 003 dropped the receiver's pure ACKs (iptables OUTPUT --sport 5001 on the receiver),
    // never the sender's handshake ACK.
    let mut m = LinkModel::new(&spec("ack-every=1000,ack-dir=down"));
    let ack = tcp4(0, "A");
    let r = &mut rng();
    for i in 0..10 {
        assert!(matches!(m.on_packet(i, Dir::Up, &ack, r), Verdict::Deliver { .. }));
    }
    let down: usize =
        (0..10).filter(|&i| matches!(m.on_packet(i, Dir::Down, &ack, r), Verdict::Deliver { .. })).count();
    assert_eq!(down, 0, "the 1000th is the first kept");
}

/// A datagram read with a virtio_net_hdr of GSO_NONE, or without one, is judged as the plain
/// packet; a TSO super-packet as its segments (the rate counts each segment's headers).
#[test]
fn on_datagram_judges_super_packets_as_their_segments() {
    let p = tcp4(1448 * 3, "A");
    let mut tso = vec![0u8; 10];
    tso[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
    tso[4..6].copy_from_slice(&1448u16.to_le_bytes());
    // 1 Mbit/s: a byte is 8 us.
    let mut m = DirectionModel::new(&spec("rate=1mbit,mtu=1500"), Dir::Up);
    let wire = p.len() as u64 + 2 * 52;
    assert_eq!(at(m.on_datagram(0, &tso, &p, &mut rng())), wire * 8_000);
    assert_eq!(m.counters.data_segments_in, 3);
    let small = tcp4(100, "A");
    let mut a = DirectionModel::new(&spec("rate=1mbit"), Dir::Up);
    let mut b = a.clone();
    assert_eq!(a.on_datagram(0, &[0u8; 10], &small, &mut rng()), b.on_datagram(0, &[], &small, &mut rng()));
    assert_eq!(at(a.on_datagram(0, &[], &small, &mut rng())), 2 * small.len() as u64 * 8_000);
}

/// Each direction draws from its own generator: the order the two directions' packets come
/// in does not change either one's fate.
#[test]
fn each_direction_draws_its_own_random_numbers() {
    let l = spec("loss=30%,jitter=1ms,delay=5ms");
    let p = tcp4(10, "A");
    let run = |up_first: bool| {
        let mut m = LinkModel::new(&l);
        let mut r = rngs(7);
        let mut out = [Vec::new(), Vec::new()];
        for i in 0..200u64 {
            let order = if up_first { [Dir::Up, Dir::Down] } else { [Dir::Down, Dir::Up] };
            for d in order {
                let v = m.on_packet(i * 1000, d, &p, &mut r[d.index()]);
                out[d.index()].push(v);
            }
        }
        out
    };
    assert_eq!(run(true), run(false));
}
