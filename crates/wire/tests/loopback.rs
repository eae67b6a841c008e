//! Whether a flow was captured on a loopback interface: from the pcapng interface name, the BSD
//! loopback link types, Linux cooked captures' ARPHRD type, and Ethernet frames with zero MACs.

use tcpstall_wire::synth::{self, pkt};
use tcpstall_wire::{frame_on_loopback, linktype, loopback_name, Decoder, FlowFilter};

/// The first event's `loopback` and the decoder's view of interface 0.
fn first(file: &[u8]) -> (bool, Option<bool>) {
    let mut d = Decoder::new(file, FlowFilter::default()).unwrap();
    let e = d.next_event().unwrap().expect("an event");
    (e.loopback, d.interface_loopback(0))
}

fn ip() -> Vec<u8> {
    pkt(0, true, 1, 0, "S", 0).ip().unwrap()
}

/// Linux cooked v1 (libpcap sll.h: packet type, ARPHRD type, address length, address, protocol)
/// and v2 (protocol, reserved, ifindex, ARPHRD type, packet type, address length, address) with
/// ARPHRD type `hatype` (include/uapi/linux/if_arp.h: 1 Ethernet, 772 loopback).
fn sll(v2: bool, hatype: u16) -> Vec<u8> {
    let h = hatype.to_be_bytes();
    let mut f = if v2 {
        vec![0x08, 0x00, 0, 0, 0, 0, 0, 1, h[0], h[1], 0, 6, 0, 0, 0, 0, 0, 0, 0, 0]
    } else {
        vec![0, 0, h[0], h[1], 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00]
    };
    f.extend_from_slice(&ip());
    f
}

/// Per frame (see `frame_on_loopback`): BSD loopback encapsulation (pcap-linktype(7) NULL,
/// LOOP), ARPHRD_LOOPBACK (772) in SLL and SLL2, both MACs zero in Ethernet (Linux `lo`).
#[test]
fn link_headers_that_say_loopback() {
    let eth = pkt(0, true, 1, 0, "S", 0).frame().unwrap();
    let mut zero = eth.clone();
    zero[..12].fill(0);
    assert!(frame_on_loopback(linktype::ETHERNET, &zero));
    assert!(!frame_on_loopback(linktype::ETHERNET, &eth));
    assert!(!frame_on_loopback(linktype::ETHERNET, &zero[..11]), "too short to tell");
    for v2 in [false, true] {
        let lt = if v2 { linktype::LINUX_SLL2 } else { linktype::LINUX_SLL };
        assert!(frame_on_loopback(lt, &sll(v2, 772)), "v2={v2}");
        assert!(!frame_on_loopback(lt, &sll(v2, 1)), "v2={v2}");
    }
    assert!(frame_on_loopback(linktype::NULL, &[2, 0, 0, 0]));
    assert!(frame_on_loopback(linktype::LOOP, &[0, 0, 0, 2]));
    assert!(!frame_on_loopback(linktype::RAW, &ip()));
}

/// pcapng `if_name`: Linux `lo` (and aliases), BSD/macOS `lo0`, Npcap's `\Device\NPF_Loopback`,
/// Windows "Loopback Pseudo-Interface 1"; not `eth0`, `lowpan0`, `utun3`.
#[test]
fn interface_names_that_say_loopback() {
    for n in ["lo", "lo0", "lo1", "lo:1", "\\Device\\NPF_Loopback", "NPF_Loopback", "Loopback Pseudo-Interface 1"] {
        assert!(loopback_name(n), "{n}");
    }
    for n in ["eth0", "lowpan0", "utun3", "any", "wlo1", "", "veth-lo"] {
        assert!(!loopback_name(n), "{n}");
    }
}

/// The decoder combines them per flow, on its first packet: an `lo` interface makes any frame
/// loopback; another name outranks the BSD loopback encapsulation (macOS utun tunnels are
/// DLT_NULL too) but not a per-frame ARPHRD_LOOPBACK; without a name the frame decides.
#[test]
fn decoder_marks_flows_captured_on_loopback() {
    let eth = pkt(0, true, 1, 0, "S", 0).frame().unwrap();
    let mut zero = eth.clone();
    zero[..12].fill(0);
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&ip());
    let one = |f: &Vec<u8>| vec![(0u64, f.clone())];
    // pcapng with a name.
    assert_eq!(first(&synth::pcapng("lo", linktype::ETHERNET, &one(&eth)).unwrap()), (true, Some(true)));
    assert_eq!(first(&synth::pcapng("eth0", linktype::ETHERNET, &one(&eth)).unwrap()), (false, Some(false)));
    assert_eq!(first(&synth::pcapng("utun3", linktype::NULL, &one(&null)).unwrap()), (false, Some(false)));
    assert_eq!(first(&synth::pcapng("lo0", linktype::NULL, &one(&null)).unwrap()), (true, Some(true)));
    assert_eq!(first(&synth::pcapng("any", linktype::LINUX_SLL2, &one(&sll(true, 772))).unwrap()), (true, Some(false)));
    assert_eq!(first(&synth::pcapng("any", linktype::LINUX_SLL2, &one(&sll(true, 1))).unwrap()), (false, Some(false)));
    // Classic pcap: no name.
    assert_eq!(first(&synth::pcap_frames(&one(&zero))), (true, None));
    assert_eq!(first(&synth::pcap_frames(&one(&eth))), (false, None));
    let null_pcap = synth::classic_pcap(false, linktype::NULL, &[(0, 0, null)]);
    assert_eq!(first(&null_pcap), (true, Some(true)));
}

/// The fact is per flow, from its first packet: later packets of the flow carry it too, and a
/// flow on another interface of the same file has its own.
#[test]
fn loopback_is_a_fact_of_the_flow() {
    let frames = [
        pkt(0, true, 1, 0, "S", 0).frame().unwrap(),
        pkt(10, false, 9, 2, "SA", 0).frame().unwrap(),
        pkt(20, true, 2, 10, "A", 0).frame().unwrap(),
    ];
    let mut w = tcpstall_wire::write::PcapNgWriter::new(
        Vec::new(),
        &[
            tcpstall_wire::write::Interface { name: "lo".into(), description: String::new(), linktype: 1, snaplen: 0 },
            tcpstall_wire::write::Interface {
                name: "eth0".into(),
                description: String::new(),
                linktype: 1,
                snaplen: 0,
            },
        ],
    )
    .unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.packet(0, i as u64 * 1000, f, f.len() as u32).unwrap();
        w.packet(1, i as u64 * 1000 + 1, f, f.len() as u32).unwrap();
    }
    let file = w.into_inner();
    let mut d = Decoder::new(&file[..], FlowFilter::default()).unwrap();
    let mut seen = Vec::new();
    while let Some(e) = d.next_event().unwrap() {
        seen.push((e.flow.0, e.loopback));
    }
    assert_eq!(seen, vec![(0, true), (1, false), (0, true), (1, false), (0, true), (1, false)]);
}
