//! ptcpdump's packet comments (the process of each packet) read by the decoder: from a capture
//! ptcpdump wrote (testdata/ptcpdump), and from one this crate's writer makes with the same
//! comments.

use std::path::PathBuf;

use tcpstall_wire::comment::PacketProcess;
use tcpstall_wire::synth::pkt;
use tcpstall_wire::write::{Interface, PcapNgWriter};
use tcpstall_wire::{linktype, Decoder, Direction, FlowId};

/// Every event's flow, then the processes the decoder gathered for each.
fn processes(bytes: &[u8]) -> Vec<(String, Option<tcpstall_wire::comment::FlowProcesses>)> {
    let mut dec = Decoder::new(bytes, Default::default()).unwrap();
    let mut ids: Vec<FlowId> = Vec::new();
    while let Some(ev) = dec.next_event().unwrap() {
        if !ids.contains(&ev.flow) {
            ids.push(ev.flow);
        }
    }
    ids.iter().map(|id| (dec.flows().key(*id).unwrap().to_string(), dec.processes(*id).cloned())).collect()
}

#[test]
fn a_capture_ptcpdump_wrote_names_curl_on_its_own_end() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ptcpdump/curl-thread.pcapng");
    let flows = processes(&std::fs::read(path).unwrap());
    assert_eq!(flows.len(), 1, "{flows:?}");
    let (key, p) = &flows[0];
    assert_eq!(key, "10.0.2.15:53258 <-> 198.185.159.144:80");
    let p = p.as_ref().expect("the comments were read");
    // Every packet, out (curl sent it) and in (curl received it), names curl: its end, A.
    let a = p.a.as_ref().unwrap();
    assert_eq!((a.process.pid, a.process.comm(), a.process.cmd.as_str()), (122868, "curl", "/usr/bin/curl"));
    assert_eq!((a.process.args.as_str(), a.process.parent_pid), ("curl kernel.com", Some(53229)));
    assert_eq!(a.process.tid, Some(122868), "ThreadId on the first packet it sent");
    assert!(a.other_pids.is_empty());
    assert_eq!(p.b, None, "the web server is not on the capturing host");
}

#[test]
fn the_writers_comments_and_direction_read_back() {
    let c = "PID: 41\nCmd: /usr/bin/python3\nArgs: python3 -m http.server";
    let s = "PID: 77\nCmd: /usr/sbin/nginx\nArgs: nginx: worker process";
    let k8s = "ContainerName: web\nContainerId: abc\nContainerImage: nginx\nContainerLabels: {}";
    let pod = "PodName: web-0\nPodNamespace: shop\nPodUID: u\nPodLabels: {}\nPodAnnotations: {}";
    let iface = Interface { name: "eth0".into(), description: "x".into(), linktype: linktype::ETHERNET, snaplen: 0 };
    let mut w = PcapNgWriter::new(Vec::new(), &[iface]).unwrap();
    let packets: [(_, &[&str], Direction); 5] = [
        (pkt(0, true, 1, 0, "S", 0), &[c], Direction::Outbound),
        (pkt(100, false, 9, 2, "SA", 0), &[s, k8s, pod], Direction::Unknown),
        (pkt(200, true, 2, 10, "A", 0), &["a note of someone's"], Direction::Outbound),
        (pkt(300, true, 2, 10, "PA", 10), &[], Direction::Unknown),
        // The server's ACK, as a ptcpdump on the client would see it: its own (inbound) end.
        (pkt(400, false, 10, 12, "A", 0), &["PID: 42\nCmd: /usr/bin/python3"], Direction::Inbound),
    ];
    for (p, comments, dir) in packets {
        w.packet_with(0, p.t_us * 1000, &p.frame().unwrap(), 0, comments, dir).unwrap();
    }
    let flows = processes(&w.into_inner());
    let p = flows[0].1.as_ref().unwrap();
    let (a, b) = (p.a.as_ref().unwrap(), p.b.as_ref().unwrap());
    assert_eq!((a.process.pid, a.process.comm(), &a.other_pids[..]), (41, "python3", &[42][..]));
    let want = PacketProcess {
        pid: 77,
        cmd: "/usr/sbin/nginx".into(),
        args: "nginx: worker process".into(),
        container_name: Some("web".into()),
        container_id: Some("abc".into()),
        pod_name: Some("web-0".into()),
        pod_namespace: Some("shop".into()),
        ..Default::default()
    };
    assert_eq!((&b.process, b.other_pids.len()), (&want, 0));
}

#[test]
fn a_capture_without_comments_has_no_processes() {
    let frames: Vec<(u64, Vec<u8>)> = [pkt(0, true, 1, 0, "S", 0), pkt(100, false, 9, 2, "SA", 0)]
        .iter()
        .map(|p| (p.t_us, p.frame().unwrap()))
        .collect();
    let file = tcpstall_wire::synth::pcapng("eth0", linktype::ETHERNET, &frames).unwrap();
    assert_eq!(processes(&file)[0].1, None);
}
