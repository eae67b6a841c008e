//! The watcher on packet scripts built with `wire::synth` (IPv4 packets, as the cooked capture
//! ring gives them) and times chosen by the test.

use super::*;
use wire::synth::{pkt, Pkt as P};

/// LINKTYPE_RAW: every frame starts at its IP header.
const RAW: u32 = 101;
/// The scripts' time zero, µs since the Unix epoch.
const T0_US: u64 = 1_700_000_000_000_000;
pub(crate) const MS: u64 = 1_000;

pub(crate) fn cfg() -> Config {
    Config {
        analyze: analyze::Config::default(),
        linktype: RAW,
        idle_ns: 120_000_000_000,
        max_flows: 100,
        keep_ns: 10_000_000_000,
        keep_packets: 2000,
        record: true,
        ports: Vec::new(),
        count: None,
        kernel: false,
        owners: OwnerFilter::default(),
    }
}

pub(crate) fn ns(t_us: u64) -> u64 {
    (T0_US + t_us) * 1000
}

fn on_port(port: u16, v: Vec<P>) -> Vec<P> {
    v.into_iter().map(|p| P { port, ..p }).collect()
}

/// Client `port` to server port 80: the handshake at `t0`, then `rounds` requests written as
/// 275 bytes then 316 (Nagle holds the second until the first is acknowledged), the server
/// acknowledging after its delayed-ACK timer (40 ms) and answering 100 bytes; rounds 100 ms
/// apart. With `cut`, the last round stops at the held segment's release (nothing settles it).
pub(crate) fn nagle_rounds(port: u16, t0: u64, rounds: u32, cut: bool) -> Vec<P> {
    let (mut c, mut s) = (1u32, 9000u32);
    let mut v = vec![pkt(t0, true, c, 0, "S", 0), pkt(t0 + 100, false, s, c + 1, "SA", 0)];
    c += 1;
    s += 1;
    v.push(pkt(t0 + 200, true, c, s, "A", 0));
    let mut t = t0 + 10 * MS;
    for r in 0..rounds {
        v.push(pkt(t, true, c, s, "PA", 275));
        v.push(pkt(t + 40 * MS, false, s, c + 275, "A", 0));
        v.push(pkt(t + 40 * MS + 50, true, c + 275, s, "PA", 316));
        c += 591;
        if cut && r + 1 == rounds {
            break;
        }
        v.push(pkt(t + 40 * MS + 100, false, s, c, "PA", 100));
        s += 100;
        t += 100 * MS;
    }
    on_port(port, v)
}

fn feed(w: &mut Watcher, pkts: &[P]) -> Vec<Record> {
    let mut out = Vec::new();
    for p in pkts {
        let data = p.ip().expect("a valid packet");
        let f = Frame { ts_ns: ns(p.t_us), orig_len: data.len() as u32, data: &data, interface: 1 };
        w.push(&f, &mut out);
    }
    out
}

#[test]
fn a_stall_comes_out_at_the_packet_that_settles_it_with_the_packets_around_it() {
    let mut w = Watcher::new(cfg());
    let out = feed(&mut w, &nagle_rounds(5000, 0, 3, false));
    assert_eq!(out.len(), 3, "{out:#?}");
    for (i, r) in out.iter().enumerate() {
        assert!(r.stall.shows_a_wait(), "{r:?}");
        assert!((35_000_000..=45_000_000).contains(&r.stall.length.0), "{r:?}");
        assert_eq!(r.port, 80, "the port the SYN went to");
        assert_eq!(r.start_unix_ns, ns(0) + r.stall.start.0);
        assert!(r.start_unix_ns >= ns(10 * MS + i as u64 * 100 * MS), "{r:?}");
    }
    // The first record brings the handshake (3 packets) and the round; later ones only what
    // came since, each packet once.
    let first: Vec<usize> = out[0].packets.iter().map(|p| p.data.len()).collect();
    assert_eq!(first.len(), 3 + 4, "{first:?}");
    assert_eq!(out[0].packets[0].ts_ns, ns(0));
    assert_eq!(out[1].packets.len(), 4, "{:?}", out[1].packets);
    assert!(out[1].packets[0].ts_ns > out[0].packets.last().unwrap().ts_ns);
    let h = w.health();
    assert_eq!((h.stall_records, h.packets_written), (3, 7 + 4 + 4));
    let top = w.top(5);
    assert_eq!((top.len(), top[0].stalls), (1, 3));
    assert_eq!(w.by_cause().values().map(|t| t.records).sum::<u64>(), 3);
}

#[test]
fn without_the_recorder_no_packet_is_kept() {
    let mut w = Watcher::new(Config { record: false, ..cfg() });
    let out = feed(&mut w, &nagle_rounds(5000, 0, 2, false));
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|r| r.packets.is_empty()));
    assert_eq!(w.recorded(), (1, 0));
}

#[test]
fn health_counts_packets_flows_and_frames_that_are_not_tcp() {
    let mut w = Watcher::new(cfg());
    feed(&mut w, &nagle_rounds(5000, 0, 1, false));
    feed(&mut w, &nagle_rounds(5001, 500 * MS, 1, false));
    let mut out = Vec::new();
    w.push(&Frame { ts_ns: ns(900 * MS), orig_len: 3, data: &[0x45, 0, 0], interface: 1 }, &mut out);
    let h = w.health();
    assert_eq!((h.packets_seen, h.packets_not_tcp), (15, 1));
    assert_eq!((h.flows_seen, h.flows_tracked, h.flows_evicted), (2, 2, 0));
    assert_eq!(h.stall_records, 2);
}

#[test]
fn an_idle_flow_is_forgotten_and_its_pending_record_comes_out_then() {
    let mut w = Watcher::new(Config { idle_ns: 1_000_000_000, ..cfg() });
    let out = feed(&mut w, &nagle_rounds(5000, 0, 2, true));
    assert_eq!(out.len(), 1, "the last round's wait is not settled yet: {out:#?}");
    // Another flow's packet 5 s later: the first flow's idle time ran out.
    let out = feed(&mut w, &on_port(6000, vec![pkt(5_000 * MS, true, 1, 0, "S", 0)]));
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(out[0].key.a.port().min(out[0].key.b.port()), 80);
    assert!([out[0].key.a.port(), out[0].key.b.port()].contains(&5000));
    assert!(!out[0].packets.is_empty(), "the recorder is read before the flow is dropped");
    let h = w.health();
    assert_eq!((h.flows_tracked, h.flows_evicted, h.stall_records), (1, 0, 2));
    assert_eq!(w.recorded().0, 1);
}

#[test]
fn beyond_max_flows_the_least_recently_seen_is_pushed_out() {
    let mut w = Watcher::new(Config { max_flows: 2, ..cfg() });
    feed(&mut w, &on_port(5000, vec![pkt(0, true, 1, 0, "S", 0)]));
    feed(&mut w, &on_port(5001, vec![pkt(MS, true, 1, 0, "S", 0)]));
    feed(&mut w, &on_port(5000, vec![pkt(2 * MS, true, 2, 0, "A", 0)]));
    assert_eq!(w.health().flows_evicted, 0);
    feed(&mut w, &on_port(5002, vec![pkt(3 * MS, true, 1, 0, "S", 0)]));
    let h = w.health();
    assert_eq!((h.flows_seen, h.flows_tracked, h.flows_evicted), (3, 2, 1));
    let ports: Vec<u16> = w.ids.keys().map(|k| k.a.port().max(k.b.port())).collect();
    assert!(ports.contains(&5000) && ports.contains(&5002) && !ports.contains(&5001), "{ports:?}");
    assert_eq!(w.recorded(), (2, 3), "5000: its SYN and ACK; 5002: its SYN");
}

/// A connection closed (FIN both ways), then a new one on the same ports (RFC 9293 3.6: a new
/// SYN after the close is a new connection): the first one's end must not forget the second
/// one's recorder.
#[test]
fn a_reused_pair_keeps_the_new_flows_recorder() {
    let mut w = Watcher::new(cfg());
    let mut first = nagle_rounds(5000, 0, 1, false);
    let (c, s) = (1 + 1 + 591, 9000 + 1 + 100);
    let t = first.last().unwrap().t_us;
    first.extend(on_port(5000, vec![pkt(t + 10, true, c, s, "FA", 0), pkt(t + 20, false, s, c + 1, "FA", 0)]));
    first.extend(on_port(5000, vec![pkt(t + 30, true, c + 1, s + 1, "A", 0)]));
    assert_eq!(feed(&mut w, &first).len(), 1);
    let out = feed(&mut w, &nagle_rounds(5000, 1_000 * MS, 2, false));
    assert_eq!(out.len(), 2, "{out:#?}");
    assert!(out.iter().all(|r| !r.packets.is_empty()), "{out:#?}");
    assert_eq!(out[0].packets[0].ts_ns, ns(1_000 * MS), "the new handshake first");
    assert_eq!(w.health().flows_seen, 2);
}

#[test]
fn the_tick_settles_a_quiet_flows_wait() {
    let mut w = Watcher::new(cfg());
    let script = nagle_rounds(5000, 0, 1, true);
    assert!(feed(&mut w, &script).is_empty());
    let last = ns(script.last().unwrap().t_us);
    let mut out = Vec::new();
    w.tick(last + 2_000_000_000, &mut out);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert!((35_000_000..=45_000_000).contains(&out[0].stall.length.0));
    let mut again = Vec::new();
    w.tick(last + 3_000_000_000, &mut again);
    assert!(again.is_empty(), "each record once");
}

#[test]
fn finish_classifies_what_is_pending_and_counts_it_at_the_end() {
    let mut w = Watcher::new(cfg());
    assert_eq!(feed(&mut w, &nagle_rounds(5000, 0, 2, true)).len(), 1);
    let mut out = Vec::new();
    w.finish(&mut out);
    assert_eq!(out.len(), 1, "{out:#?}");
    let h = w.health();
    assert_eq!((h.stall_records, h.classified_at_end), (2, 1));
}

#[test]
fn no_record_past_the_count_asked_for() {
    let mut w = Watcher::new(Config { count: Some(2), ..cfg() });
    let out = feed(&mut w, &nagle_rounds(5000, 0, 4, false));
    assert_eq!(out.len(), 2);
    assert!(w.done());
    let mut tail = Vec::new();
    w.finish(&mut tail);
    assert!(tail.is_empty());
    assert_eq!(w.health().stall_records, 2);
}

#[test]
fn kernel_records_join_their_flow_and_are_counted() {
    let mut w = Watcher::new(Config { kernel: true, ..cfg() });
    let script = nagle_rounds(5000, 0, 1, false);
    let client: SocketAddr = "10.0.0.1:5000".parse().unwrap();
    let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let (hs, rest) = script.split_at(3);
    assert!(feed(&mut w, hs).is_empty());
    for (t, bytes) in [(10 * MS - 5, 275), (10 * MS + 1, 316)] {
        let event = trace::KernelEvent::Sendmsg { bytes, seq: 2 };
        w.kernel_record(KernelRecord { unix_ns: ns(t), local: client, remote: server, event, owner: None });
    }
    // A record of a connection the capture never shows.
    let stray: SocketAddr = "10.9.9.9:1".parse().unwrap();
    let event = trace::KernelEvent::Sendmsg { bytes: 1, seq: 1 };
    w.kernel_record(KernelRecord { unix_ns: ns(0), local: stray, remote: server, event, owner: None });
    let out = feed(&mut w, rest);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(out[0].kernel, Some(FlowKernel { writes: 2, resends: 0 }));
    let mut none = Vec::new();
    w.tick(ns(10_000 * MS), &mut none);
    let k = w.health().kernel.expect("kernel stats");
    assert_eq!((k.events, k.writes, k.unmatched), (2, 2, 1));
}

fn owner(pid: u32, comm: &str, cgroup: &str) -> Arc<Owner> {
    Arc::new(Owner {
        pid,
        comm: comm.into(),
        cgroup: Some(cgroup.into()),
        container: None,
        container_name: None,
        pod_name: None,
        pod_namespace: None,
        shared_with: vec![],
        source: report::owner::OwnerSource::Kernel,
    })
}

/// Two flows to one server: the held end's owner (the client whose Nagle held) is named on
/// each of its flow's records, the server's as the peer; `--comm` keeps one client's flow only,
/// and counts the other's records as left out.
#[test]
fn each_record_names_the_held_ends_owner_and_the_filter_keeps_one_program() {
    let cfg = Config {
        kernel: true,
        owners: OwnerFilter { comms: vec!["stalls".into()], ..OwnerFilter::default() },
        ..cfg()
    };
    let mut w = Watcher::new(cfg);
    let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let mut script = nagle_rounds(5000, 0, 3, false);
    script.extend(nagle_rounds(5001, 1, 3, false));
    script.sort_by_key(|p| p.t_us);
    let recs = [(5000, owner(7, "stalls", "/a")), (5001, owner(8, "other", "/b"))];
    for (port, o) in recs {
        let client = SocketAddr::from(([10, 0, 0, 1], port));
        let event = trace::KernelEvent::Sendmsg { bytes: 1, seq: 0 };
        w.kernel_record(KernelRecord { unix_ns: ns(0), local: client, remote: server, event, owner: Some(o) });
        let srv = Some(owner(9, "srv", "/s"));
        w.kernel_record(KernelRecord { unix_ns: ns(0), local: server, remote: client, event, owner: srv });
    }
    let mut out = feed(&mut w, &script);
    w.finish(&mut out);
    assert_eq!(out.len(), 3, "{out:#?}");
    for r in &out {
        assert_eq!(r.key.a.port(), 5000, "{r:?}");
        assert_eq!(r.owner.as_ref().map(|o| (o.pid, o.comm.as_str())), Some((7, "stalls")));
        assert_eq!(r.peer_owner.as_ref().map(|o| o.pid), Some(9));
    }
    assert_eq!((w.health().stall_records, w.health().stalls_of_other_owners), (3, 3));
    assert_eq!(w.top(5)[0].owner.as_ref().map(|o| o.pid), Some(7));
}

#[test]
fn server_port_is_the_one_below_the_ephemeral_range() {
    let k = |a: u16, b: u16| FlowKey {
        a: SocketAddr::from(([127, 0, 0, 1], a)),
        b: SocketAddr::from(([127, 0, 0, 1], b)),
        interface: 1,
    };
    assert_eq!(server_port(&k(45000, 8080)), 8080);
    assert_eq!(server_port(&k(443, 51000)), 443);
    assert_eq!(server_port(&k(40000, 50000)), 40000);
}
