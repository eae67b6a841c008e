//! End-to-end tests of `tcpstall explain` on the kept captures (testdata/captures) and on
//! damaged files.

use crate::support::tcpstall;
use predicates::prelude::*;
use std::path::PathBuf;

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures").join(name)
}

pub(crate) fn explain_names_nagle_delayed_ack_in_seed_000() {
    tcpstall()
        .args(["explain"])
        .arg(capture("seed000-default.pcap"))
        .assert()
        .success()
        .stdout(predicate::str::contains("nagle-delayed-ack"))
        .stdout(predicate::str::contains("loopback"))
        .stdout(predicate::str::contains("A->B"));
}

pub(crate) fn explain_json_lists_stalls_with_evidence() {
    let out = tcpstall().args(["explain", "--format", "json"]).arg(capture("seed001-default.pcap")).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let stalls = v["flows"][0]["stalls"].as_array().expect("stalls");
    assert!(stalls.len() >= 15, "{}", stalls.len());
    for s in stalls {
        assert_eq!(s["cause"], "nagle-delayed-ack");
        assert!(s["length_ns"].as_u64().unwrap() >= 30_000_000);
        assert!(s["waited"] == "B" && s["held"] == "A", "{s}");
        assert!(!s["evidence"].as_array().unwrap().is_empty());
    }
    assert!(v["flows"][0]["directions"]["a_to_b"]["wire"]["pure_acks"].as_u64().is_some());
    assert!(v["error"].is_null());
}

/// `--format csv` and `markdown`: the same records as the JSON, one row each (RFC 4180 quoting
/// of the detail's commas), the header once; `text` is the table's other name; replay refuses
/// CSV in one line before any work.
pub(crate) fn explain_csv_and_markdown_list_the_same_records_as_json() {
    let run = |f: &str| {
        let out = tcpstall().args(["explain", "--format", f]).arg(capture("seed001-default.pcap")).output().unwrap();
        assert!(out.status.success(), "{f}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let stalls = json["flows"][0]["stalls"].as_array().unwrap();
    let csv = run("csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("flow,a,b,kind,cause,start_ns,length_ns,waited,held,bytes_held,confidence,evidence,detail")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), stalls.len());
    for (row, st) in rows.iter().zip(stalls) {
        assert!(row.starts_with("1,"), "{row}");
        assert!(row.contains(&format!(",stall,nagle-delayed-ack,{},{},", st["start_ns"], st["length_ns"])), "{row}");
        assert!(row.ends_with('"'), "the detail has commas, so it is quoted: {row}");
    }
    let md = run("markdown");
    assert_eq!(md.lines().filter(|l| l.starts_with("| 1 | stall | nagle-delayed-ack |")).count(), stalls.len());
    assert_eq!(run("text"), run("table"));
    let out = tcpstall().args(["replay", "--format", "csv"]).arg(capture("seed001-default.pcap")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1);
}

pub(crate) fn explain_fixed_strategy_shows_no_stalls() {
    tcpstall()
        .args(["explain"])
        .arg(capture("seed002-nodelay.pcap"))
        .assert()
        .success()
        .stdout(predicate::str::contains("no stalls"))
        .stdout(predicate::str::contains("nagle").not());
}

pub(crate) fn explain_port_filter_and_flow_filter() {
    tcpstall()
        .args(["explain", "--port", "1"])
        .arg(capture("seed000-default.pcap"))
        .assert()
        .success()
        .stdout(predicate::str::contains("0 TCP packets in 0 flows"));
    tcpstall()
        .args(["explain", "--flow", "nonsense"])
        .arg(capture("seed000-default.pcap"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("ADDR:PORT-ADDR:PORT"));
}

/// `--plot` was replaced by `--report`: a clear one-line error before any work.
pub(crate) fn explain_plot_says_to_use_report() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("x.svg");
    tcpstall()
        .args(["explain", "--plot"])
        .arg(&svg)
        .arg(capture("http-client-post.pcap"))
        .assert()
        .failure()
        .stdout("")
        .stderr(predicate::str::contains("--plot was replaced by --report FILE.html"));
    assert!(!svg.exists());
}

pub(crate) fn explain_truncated_file_prints_the_valid_prefix_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    let full = std::fs::read(capture("seed001-default.pcap")).unwrap();
    std::fs::write(&cut, &full[..full.len() * 2 / 3]).unwrap();
    tcpstall()
        .arg("explain")
        .arg(&cut)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("nagle-delayed-ack"))
        .stdout(predicate::str::contains("DAMAGED FILE"))
        .stderr(predicate::str::contains("byte offset"));
}

pub(crate) fn explain_not_a_capture_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("notes.txt");
    std::fs::write(&txt, "hello, this is not a capture\n").unwrap();
    tcpstall()
        .arg("explain")
        .arg(&txt)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a pcap or pcapng").and(predicate::str::contains("offset 0")));
    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, "").unwrap();
    tcpstall().arg("explain").arg(&empty).assert().code(2).stderr(predicate::str::contains("empty file"));
    tcpstall()
        .arg("explain")
        .arg(dir.path().join("missing.pcap"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot open"));
}

pub(crate) fn explain_reads_standard_input() {
    let bytes = std::fs::read(capture("seed002-default.pcap")).unwrap();
    tcpstall()
        .args(["explain", "-"])
        .write_stdin(bytes)
        .assert()
        .success()
        .stdout(predicate::str::contains("nagle-delayed-ack"))
        .stdout(predicate::str::contains("sent the SYN"));
}

/// QA finding 15: a capture on a link type the decoder does not know yields no TCP packet; an
/// empty report would read as "no stalls", so it is a one-line error naming the link type and
/// the supported ones (tcpdump.org linktypes.html numbers), exit 2, nothing on stdout.
pub(crate) fn explain_unknown_link_type_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lt9999.pcap");
    // pcap header (magic, v2.4, zone, sigfigs, snaplen, network = 9999), then 3 records.
    let mut file = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    file.extend(2u16.to_le_bytes());
    file.extend(4u16.to_le_bytes());
    for v in [0u32, 0, 65_535, 9_999] {
        file.extend(v.to_le_bytes());
    }
    for i in 0..3u32 {
        for v in [i, 0, 60, 60] {
            file.extend(v.to_le_bytes());
        }
        file.extend([0u8; 60]);
    }
    std::fs::write(&path, &file).unwrap();
    for format in ["text", "json"] {
        let out = tcpstall().args(["explain", "--format", format]).arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{format}");
        assert!(out.stdout.is_empty(), "{format}: {}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(
                "no TCP packets decoded: link type 9999 is not supported (supported: 0 BSD loopback, 1 Ethernet"
            ),
            "{err}"
        );
        assert!(err.contains("all 3 frames are on it"), "{err}");
    }
}

/// `explain DIR`: one clear line, the OS error said once.
pub(crate) fn explain_a_directory_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = tcpstall().arg("explain").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end(), format!("tcpstall: cannot read {}: Is a directory", dir.path().display()));
}

/// An application gap (the writer had not written) is not a stall: counted apart, listed only
/// with --app-gaps; the stalls of a lossy link are named from their resent ranges.
pub(crate) fn explain_counts_application_gaps_apart_and_lists_them_on_request() {
    let f = capture("link20ms-loss10-seed001-nodelay.pcapng");
    let out = tcpstall().args(["explain"]).arg(&f).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("application gap") && text.contains("(not stalls) (--app-gaps lists those)"), "{text}");
    let listed = |t: &str| t.lines().any(|l| l.split_whitespace().nth(5) == Some("application"));
    assert!(!listed(&text), "listed without --app-gaps: {text}");
    assert!(text.contains("retransmission-timeout"), "{text}");
    let out = tcpstall().args(["explain", "--app-gaps"]).arg(&f).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(listed(&text), "{text}");
    assert!(text.contains("not a TCP stall"), "{text}");
}

/// Each flow's label names its capture interface only when the file has several (the link's
/// tap writes one per end), in the text and in the JSON alike; a pcapng with one interface
/// keeps the bare label (the decoder knows which only at the end of the file).
pub(crate) fn explain_labels_flows_with_their_interface_only_when_the_capture_has_several() {
    let json = |name: &str| -> serde_json::Value {
        let out = tcpstall().args(["explain", "--format", "json"]).arg(capture(name)).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("valid JSON")
    };
    let text = |name: &str| -> String {
        let out = tcpstall().arg("explain").arg(capture(name)).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let two = "link20ms-seed001-default.pcapng";
    let v = json(two);
    let labels: Vec<&str> = v["flows"].as_array().unwrap().iter().map(|f| f["label"].as_str().unwrap()).collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels[0].ends_with(" on interface 0 (client tcpstall0 198.18.0.1)"), "{labels:?}");
    assert!(labels[1].ends_with(" on interface 1 (server tcpstall0 198.18.0.2)"), "{labels:?}");
    let t = text(two);
    assert!(t.contains(&format!("\nflow 2: {} (A = ", labels[1])), "{t}");
    let one = "seed001-any-sll2.pcapng";
    let v = json(one);
    let flow = &v["flows"][0];
    assert_eq!(
        flow["label"].as_str().unwrap(),
        format!("{} <-> {}", flow["a"].as_str().unwrap(), flow["b"].as_str().unwrap())
    );
    assert!(!text(one).contains("on interface"));
}

/// Issue 32: a capture whose TCP the decoder cannot read must not read as "0 TCP packets in 0
/// flows" with exit 0. Here IPComp behind AH (RFC 4302, RFC 3173: the TCP packet inside is
/// compressed), the first fragment of an IPv4 datagram whose other fragments were not captured
/// (RFC 791 3.2) and an ARP request: the counts and the reasons are printed as usual, one line
/// on stderr says that no TCP packet was decoded and why, and the exit status is 1 (a result
/// with an error beside it). The capture is written with wire's pcapng writer.
pub(crate) fn explain_without_decodable_tcp_says_why_and_exits_1() {
    let tcp = wire::synth::pkt(0, true, 1, 1, "PA", 300).ip().unwrap();
    let eth = |et: u16, p: &[u8]| [&[2u8; 6][..], &[0x12; 6], &et.to_be_bytes(), p].concat();
    let ipv4 = |proto: u8, frag: u16, p: &[u8]| {
        let t = ((20 + p.len()) as u16).to_be_bytes();
        let f = frag.to_be_bytes();
        [&[0x45, 0, t[0], t[1], 0, 1, f[0], f[1], 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2][..], p].concat()
    };
    // AH (next header 108, payload length 4: 24 bytes), then IPComp (next header 4, CPI 2).
    let ah_ipcomp =
        [&[108u8, 4, 0, 0, 0, 0, 0x10, 1, 0, 0, 0, 1][..], &[0xaa; 12], &[4, 0, 0, 2], &tcp[..100]].concat();
    let arp = [&[0, 1, 8, 0, 6, 4, 0, 1][..], &[0x12; 6], &[192, 0, 2, 1], &[0; 6], &[192, 0, 2, 2]].concat();
    let mut frames = vec![
        (0, eth(0x0800, &ipv4(51, 0, &ah_ipcomp))),
        (1000, eth(0x0800, &ipv4(51, 0, &ah_ipcomp))),
        (2000, eth(0x0800, &ipv4(6, 0x2000, &tcp[20..20 + 160]))),
        (3000, eth(0x0806, &arp)),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-tcp.pcapng");
    std::fs::write(&path, wire::synth::pcapng("eth0", 1, &frames).unwrap()).unwrap();
    let why = "no TCP packets decoded from 4 frames: 2 packets inside IPComp (RFC 3173), not decoded; \
               1 IP fragment not reassembled: datagram never completed (RFC 791 3.2, RFC 8200 4.5); 1 not TCP";
    let out = tcpstall().arg("explain").arg(&path).output().unwrap();
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(text.contains("4 frames, 0 TCP packets in 0 flows; skipped 1 not TCP"), "{text}");
    assert!(
        text.contains("note: 2 packets inside IPComp (RFC 3173), not decoded; 1 IP fragment not reassembled"),
        "{text}"
    );
    assert_eq!(err.trim_end(), format!("tcpstall: {}: {why}", path.display()));
    let out = tcpstall().args(["explain", "--format", "json"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decode"]["not_decoded_inside"]["IPComp (RFC 3173)"], 2);
    assert_eq!(v["decode"]["not_reassembled"]["datagram never completed (RFC 791 3.2, RFC 8200 4.5)"], 1);
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end().lines().count(), 1);
    // One TCP packet read, and the report is the result: exit 0, the notes still there.
    frames.push((4000, eth(0x0800, &tcp)));
    std::fs::write(&path, wire::synth::pcapng("eth0", 1, &frames).unwrap()).unwrap();
    let out = tcpstall().arg("explain").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("5 frames, 1 TCP packets in 1 flows"), "{text}");
    assert!(text.contains("2 packets inside IPComp (RFC 3173), not decoded"), "{text}");
}

/// `capture` rewritten as pcapng by tcpstall's writer, each packet with the comments ptcpdump
/// would write on the host of its sender (`a` for A's packets, `b` for B's; A sent the first).
fn with_ptcpdump_comments(capture: &std::path::Path, a: &[&str], b: &[&str]) -> Vec<u8> {
    let bytes = std::fs::read(capture).unwrap();
    let mut r = wire::CaptureReader::new(&bytes[..]).unwrap();
    let mut out: Option<wire::write::PcapNgWriter<Vec<u8>>> = None;
    let mut first = None;
    while let Some(p) = r.next_packet().unwrap() {
        let w = out.get_or_insert_with(|| {
            let iface = wire::write::Interface {
                name: "eth0".into(),
                description: "rewritten".into(),
                linktype: p.linktype,
                snaplen: 0,
            };
            wire::write::PcapNgWriter::new(Vec::new(), &[iface]).unwrap()
        });
        let src = wire::decode(p.linktype, p.data, p.orig_len).unwrap().src;
        let from_a = *first.get_or_insert(src) == src;
        let comments = if from_a { a } else { b };
        w.packet_with(0, p.ts_ns, p.data, p.orig_len, comments, wire::Direction::Outbound).unwrap();
    }
    out.unwrap().into_inner()
}

/// Issue 33 item 3: a capture whose packets carry ptcpdump's comments names each end's
/// process, container and pod (JSON `owners`, the text's `processes` line), and its stalls are
/// the same records as the capture's without them.
pub(crate) fn explain_names_the_processes_of_ptcpdumps_comments() {
    let dir = tempfile::tempdir().unwrap();
    let a = ["PID: 4100\nCmd: /usr/bin/python3\nArgs: python3 client.py", "ThreadId: 4101\nThreadName: python3"];
    let b = [
        "PID: 7700\nCmd: /usr/sbin/nginx\nArgs: nginx: worker process",
        "ContainerName: /web\nContainerId: 3f1c0a9d2b7e\nContainerImage: nginx:1.25\nContainerLabels: {}",
        "PodName: web-0\nPodNamespace: shop\nPodUID: 1-2\nPodLabels: {}\nPodAnnotations: {}",
    ];
    let plain = capture("seed001-default.pcap");
    let commented = dir.path().join("commented.pcapng");
    std::fs::write(&commented, with_ptcpdump_comments(&plain, &a, &b)).unwrap();
    let json = |f: &std::path::Path| {
        let out = tcpstall().args(["explain", "--format", "json"]).arg(f).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (with, without) = (json(&commented), json(&plain));
    let flow = &with["flows"][0];
    let owners = &flow["owners"];
    assert_eq!(owners["a"], serde_json::json!({"pid": 4100, "comm": "python3", "source": "capture"}), "{owners}");
    assert_eq!(
        owners["b"],
        serde_json::json!({"pid": 7700, "comm": "nginx", "container": "3f1c0a9d2b7e", "container_name": "web",
            "pod_name": "web-0", "pod_namespace": "shop", "source": "capture"}),
        "{owners}"
    );
    assert!(without["flows"][0].get("owners").is_none(), "no comments, no owners");
    assert_eq!(flow["stalls"], without["flows"][0]["stalls"], "the same stall records");
    assert!(flow["stalls"].as_array().unwrap().iter().all(|s| s["held"] == "A"), "python3's end held");
    let text = tcpstall().arg("explain").arg(&commented).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "processes (the capture's packet comments): A python3[4100]; B nginx[7700] container web, pod shop/web-0"
        ),
        "{text}"
    );
}

/// The same on the capture ptcpdump itself wrote (testdata/ptcpdump): curl is A's process,
/// named on the packets it received (inbound) as on those it sent.
pub(crate) fn explain_reads_a_capture_ptcpdump_wrote() {
    let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ptcpdump/curl-thread.pcapng");
    let out = tcpstall().args(["explain", "--format", "json"]).arg(&f).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let owners = &v["flows"][0]["owners"];
    assert_eq!(owners, &serde_json::json!({"a": {"pid": 122868, "comm": "curl", "source": "capture"}}));
}
