//! docs/json-schema.md is the JSON contract: every field serialised by the typed schema must
//! be documented there, and every documented field must be serialised. Each table that
//! documents an object follows a `<!-- fields: PATH -->` marker; this test compares its first
//! column with the keys of a fully populated sample at PATH (a `replay:`, `explain:` or
//! `advise:` prefix names that command's document; none, the lab's).

use std::collections::BTreeSet;
use std::path::PathBuf;

use analyze::{EvidenceItem, FlowAnalyzer, Stall, StallSummary};
use serde_json::Value;
use tcpstall_report::explain::{ExplainError, ExplainFlow, ExplainHead};
use tcpstall_report::*;
use trace::{Cause, Duration, Evidence, Instant, VerdictKey};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (path, documented field names) for every marked table.
fn documented() -> Vec<(String, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("docs/json-schema.md")).unwrap();
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("<!-- fields:") {
            out.push((rest.trim_end_matches("-->").trim().to_string(), BTreeSet::new()));
            current = Some(out.len() - 1);
        } else if let (Some(i), true) = (current, line.starts_with("| `")) {
            let first = line.split('|').nth(1).unwrap();
            for name in first.split(',') {
                out[i].1.insert(name.trim().trim_matches('`').to_string());
            }
        } else if !line.starts_with('|') {
            current = current.filter(|_| line.trim().is_empty() || line.starts_with("<!--"));
            if !line.trim().is_empty() {
                current = None;
            }
        }
    }
    out
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    let mut cur = v;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, elem) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        // `[]` alone: the document itself is an array (scenarios).
        if !name.is_empty() {
            cur = &cur[name];
        }
        if elem {
            cur = &cur[0];
        }
    }
    cur
}

fn stall() -> Stall {
    Stall {
        evidence: vec![EvidenceItem { t: Instant(1), source: Evidence::Frame(3), what: "x".into() }],
        ack_delay: Some(Duration(40)),
        detail: "d".into(),
        ..analyze::testing::stall(Instant(1), Duration(2), Cause::NagleDelayedAck)
    }
}

fn lab_sample() -> Value {
    let side = Applied {
        strategies: vec!["nodelay".into()],
        nodelay: Some(true),
        cork: Some(false),
        quickack_state: Some(true),
        mss: Some(1448),
        congestion: Some("bbr".into()),
        busy_poll_us: Some(50),
    };
    let recs = vec![stall()];
    let row = RunResult {
        strategy: "default".into(),
        variant: "size=1".into(),
        client: side.clone(),
        server: side,
        rounds: 1,
        latency_us: Latency::default(),
        slow_samples: 1,
        slow_sample_threshold_us: 1.0,
        stall_count: Some(1),
        stall_summary: StallSummary::of(&recs),
        stall_records: recs,
        measured_from_ns: 0,
        measured_to_ns: 1,
        capture: Some(PacketCapture {
            kernel: Some(tcpstall_report::KernelCounts::default()),
            reader_cpus: Some(vec![1]),
            kernel_reader_cpus: Some(vec![1]),
            ..PacketCapture::default()
        }),
        wall_s: 1.0,
        throughput_bytes_per_s: 1.0,
        wire: Wire::default(),
        cpu: Some(CpuCost {
            client_cpu_us: 900.0,
            server_cpu_us: 850.0,
            cpu_us_per_round: 17.5,
            cpu_share_of_wall: 0.9,
        }),
        tcp: Some(TcpSides {
            client: TcpStats { segs_in: Some(12), ..TcpStats::default() },
            server: TcpStats::default(),
        }),
        netstat: [("DelayedACKs".to_string(), 1)].into_iter().collect(),
        verdict: "v".into(),
        verdict_key: VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) },
        latency_dist: None,
        packets: Vec::new(),
        samples_ns: Vec::new(),
        owners: tcpstall_report::owner::FlowOwners {
            a: Some(tcpstall_report::owner::Owner {
                pid: 1,
                comm: "tcpstall".into(),
                cgroup: Some("/user.slice".into()),
                container: None,
                container_name: None,
                pod_name: None,
                pod_namespace: None,
                shared_with: Vec::new(),
                source: tcpstall_report::owner::OwnerSource::Lab,
            }),
            b: None,
        },
    };
    let r = Report {
        tool: "tcpstall".into(),
        version: "0".into(),
        schema_version: SCHEMA_VERSION,
        kernel: Some("6.18".into()),
        profile: Some("linux".into()),
        mode: "lab".into(),
        scenario: "chunked".into(),
        params: serde_json::json!({}),
        link: "loopback".into(),
        results: vec![row],
        errors: vec!["e".into()],
    };
    serde_json::to_value(&r).unwrap()
}

fn explain_sample() -> Value {
    let path = root().join("testdata/captures/seed001-default.pcap");
    let file = std::fs::File::open(path).unwrap();
    let mut dec = wire::Decoder::new(std::io::BufReader::new(file), wire::FlowFilter::default()).unwrap();
    let mut fa = FlowAnalyzer::new(analyze::Config::default());
    while let Some(fe) = dec.next_event().unwrap() {
        fa.push(&fe.event);
    }
    let fa = fa.finish();
    assert!(!fa.stalls.is_empty());
    let stats = dec.stats();
    let head = ExplainHead {
        tool: "tcpstall",
        version: "0",
        schema_version: SCHEMA_VERSION,
        mode: "explain",
        file: "f".into(),
        decode: &stats,
        error: Some(ExplainError { offset_bytes: 1, message: "m".into() }),
    };
    let mut v = serde_json::to_value(&head).unwrap();
    let mut flow = ExplainFlow::new(1, "a".into(), "b".into(), 0, "l".into(), &fa);
    let owner = |pid| tcpstall_report::owner::Owner {
        pid,
        comm: "curl".into(),
        cgroup: None,
        container: None,
        container_name: None,
        pod_name: None,
        pod_namespace: None,
        shared_with: Vec::new(),
        source: tcpstall_report::owner::OwnerSource::Capture,
    };
    flow.owners = tcpstall_report::owner::FlowOwners { a: Some(owner(1)), b: Some(owner(2)) };
    v["flows"] = Value::Array(vec![serde_json::to_value(&flow).unwrap()]);
    v
}

/// `replay --format json`: the run is the lab document (checked above), the records are the
/// stall records (checked above); the top level is checked here.
fn replay_sample(lab: &Value) -> Value {
    let doc = tcpstall_report::ReplayDoc {
        tool: "tcpstall",
        version: "0",
        schema_version: SCHEMA_VERSION,
        mode: "replay",
        file: "f".into(),
        flow: "a <-> b".into(),
        repetitions: 3,
        exchange: "client 275,24,292; server 100".into(),
        path_rtt_ns: Some(1),
        path_rtt_from_handshake: true,
        capture_stall_summary: StallSummary::default(),
        capture_stall_records: vec![stall()],
        as_written: "client:nodelay".into(),
        shown_options: vec!["client: TCP_NODELAY shown on by the capture: ...".into()],
        think_ms: vec![tcpstall_report::ThinkMs { median_ms: 1.0, min_ms: 0.5, max_ms: 2.0, samples: 3 }],
        dropped: vec!["turn 1 (client): sizes 175..176 bytes".into()],
        saved: None,
        run: Some(serde_json::from_value(lab.clone()).expect("the lab document reads back as a Report")),
    };
    serde_json::to_value(&doc).unwrap()
}

/// `explain A B --format json`: one merged connection with one split stall.
fn explain_pair_sample() -> Value {
    use tcpstall_report::explain_pair::{MergedConnection, PairStall, TimeByHost};
    let stalls = vec![PairStall {
        stall: stall(),
        time_by_host_ns: Some(TimeByHost { client_host: 1, network: 2, server_host: 3 }),
    }];
    let conn = MergedConnection {
        client: "a".into(),
        server: "b".into(),
        client_file: "a.pcap".into(),
        ends_decided: "handshake".into(),
        offset_ns: -1,
        offset_error_ns: 1,
        packets_matched: 1,
        stalls,
    };
    serde_json::to_value(ExplainPairDoc { merged: vec![conn], files: Default::default() }).unwrap()
}

fn scenarios_sample() -> Value {
    use tcpstall_report::scenarios::{MatrixEntry, ScenarioEntry};
    let entry = ScenarioEntry {
        name: "chunked".into(),
        seed: Some("000".into()),
        kind: "chunked".into(),
        summary: "s".into(),
        finding: "f".into(),
        params: serde_json::json!({ "send": 1000 }),
        matrix: vec![MatrixEntry { label: "nodelay".into(), client: vec!["nodelay".into()], server: Vec::new() }],
    };
    serde_json::to_value(ScenariosDoc { scenarios: vec![entry] }).unwrap()
}

/// `kernel --format json`: the model's fingerprint as measured (every field serialised, None
/// as null), one row and one replay agreement.
fn kernel_sample() -> Value {
    use tcpstall_report::kernel::{Comparison, ReplayAgreement, Row};
    let row = Row { behaviour: "b".into(), predicted: vec!["1".into()], scored: true, ..Row::default() };
    let doc = KernelDoc {
        fingerprint: model::fingerprint::Fingerprint::default(),
        comparison: Comparison { profiles: vec!["linux".into()], rows: vec![row], ..Comparison::default() },
        replay_agreement: vec![ReplayAgreement { profile: "linux:here".into(), ..ReplayAgreement::default() }],
        about: Default::default(),
    };
    serde_json::to_value(doc).unwrap()
}

fn seed003_sample() -> Value {
    use tcpstall_report::seed003::{Interval, Measured, Seed003Row};
    let row = Seed003Row {
        name: "1 GRO, delayed ACK, TSO".into(),
        seed_row: Some(1),
        runs: 1,
        throughput_gbit_per_s: Interval { est: 1.0, lo: 0.5, hi: 1.5 },
        acks_per_data_at_sender: 0.5,
        acks_per_data_at_receiver: 0.5,
        sender_softirq_share: 0.1,
        receiver_softirq_share: 0.1,
        sender_cpu_s_per_gb: 1.0,
        receiver_cpu_s_per_gb: 1.0,
        readback: "r".into(),
        measured: vec![Measured { sender_acks_received: Some(1), ..Measured::default() }],
        failed: vec!["f".into()],
        retried: vec!["r".into()],
    };
    let doc = Seed003Doc {
        tool: "tcpstall",
        version: "0",
        schema_version: SCHEMA_VERSION,
        mode: "lab",
        scenario: "stream",
        matrix: "seed003",
        kernel: "6.18".into(),
        duration_s_per_run: 1.0,
        elapsed_s: 1.0,
        rows: vec![row],
        findings: vec!["f".into()],
        reps: 1,
        cpus: (0, 1),
    };
    serde_json::to_value(doc).unwrap()
}

/// A `watch --format jsonl` line with every optional part present; its `stall` is the stall
/// record (checked with the lab's document), and the line must stay on one line.
fn watch_sample() -> Value {
    let st = stall();
    let owner = tcpstall_report::owner::Owner {
        pid: 4242,
        comm: "python3".into(),
        cgroup: Some(
            "/system.slice/docker-3f1c0a9d2b7e4f6a8c5d1e0b9a7f3c2d4e6f8a0b1c3d5e7f9a2b4c6d8e0f1a3b.scope".into(),
        ),
        container: Some("3f1c0a9d2b7e4f6a8c5d1e0b9a7f3c2d4e6f8a0b1c3d5e7f9a2b4c6d8e0f1a3b".into()),
        container_name: Some("web".into()),
        pod_name: Some("web-0".into()),
        pod_namespace: Some("shop".into()),
        shared_with: vec![4243],
        source: tcpstall_report::owner::OwnerSource::Kernel,
    };
    let line = tcpstall_report::watch::WatchLine {
        schema_version: SCHEMA_VERSION,
        kind: "stall",
        flow: "127.0.0.1:45000-127.0.0.1:8080".into(),
        a: "127.0.0.1:45000".parse().unwrap(),
        b: "127.0.0.1:8080".parse().unwrap(),
        interface: "lo".into(),
        start_unix_ns: 1_795_561_879_875_042_608,
        stall: &st,
        kernel: Some(tcpstall_report::watch::FlowKernel { writes: 30, resends: 1 }),
        owner: Some(&owner),
        peer_owner: Some(&owner),
    };
    let text = line.to_jsonl().unwrap();
    assert!(!text.contains('\n'), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stall"], serde_json::to_value(&st).unwrap());
    v
}

/// `sockets --format json`: one socket, every optional part present.
fn sockets_sample() -> Value {
    use tcpstall_report::sockets::{SocketOptions, SocketRow, SocketsDoc};
    let owner = tcpstall_report::owner::Owner {
        pid: 7,
        comm: "python3".into(),
        cgroup: Some("/a".into()),
        container: None,
        container_name: None,
        pod_name: None,
        pod_namespace: None,
        shared_with: Vec::new(),
        source: tcpstall_report::owner::OwnerSource::Proc,
    };
    let options = SocketOptions {
        nodelay: false,
        cork: false,
        pingpong: true,
        ato_us: 40000,
        mss: 1448,
        cwnd: 10,
        unacked_segments: 1,
        unacked_bytes: Some(150),
        small_in_flight: true,
        notsent_lowat: 0,
        notsent_bytes: 0,
        congestion: "cubic".into(),
        data_segs_in: 3,
        data_segs_out: 4,
    };
    // Both `options` and `unreadable`, for the check (a real row has one or the other).
    let row = SocketRow {
        local: "127.0.0.1:8080".parse().unwrap(),
        remote: "127.0.0.1:45000".parse().unwrap(),
        state: "ESTABLISHED",
        owner: Some(owner),
        options: Some(options),
        unreadable: Some("u".into()),
        risks: vec!["Nagle on".into()],
    };
    let doc = SocketsDoc {
        schema_version: SCHEMA_VERSION,
        method: "m".into(),
        not_available: vec!["n".into()],
        sockets: vec![row],
    };
    serde_json::to_value(&doc).unwrap()
}

/// `advise-run --format json`: every field populated (a row with its causes and CPU, a
/// candidate left out, a winner).
fn advise_run_sample() -> Value {
    use tcpstall_report::advise_run::{AdviseRunDoc, AdviseRunKernel, AdviseRunRow, AdviseRunWinner, CauseN, LeftOut};
    let row = AdviseRunRow {
        rank: 1,
        label: "client route quickack 1".into(),
        change_size: 2,
        tier: 0,
        runs: 3,
        requests: 30,
        p50_ms: 0.4,
        p99_ms: 0.9,
        stalls_per_request: 0.0,
        causes: vec![CauseN { cause: "nagle-delayed-ack".into(), count: 1 }],
        data_segments_per_request: 4.0,
        packets_per_request: 8.0,
        pure_acks_per_request: 4.0,
        cpu_ms_per_request: Some(0.2),
        owners: tcpstall_report::owner::FlowOwners {
            a: Some(tcpstall_report::owner::Owner::of_process(
                7,
                "python3".into(),
                Some("/tcpstall-outside-1-0".into()),
                Vec::new(),
                tcpstall_report::owner::OwnerSource::Proc,
            )),
            b: Some(tcpstall_report::owner::Owner::of_process(
                8,
                "nginx".into(),
                Some("/tcpstall-outside-1-1".into()),
                Vec::new(),
                tcpstall_report::owner::OwnerSource::Proc,
            )),
        },
        kernel: Some(AdviseRunKernel {
            runs: 3,
            events: 60,
            writes: 60,
            resends: 0,
            lost: 0,
            stalls_with_kernel: 1,
            examples: vec!["nagle-delayed-ack 40.9 ms, the server's bytes: kernel: sendmsg 330 bytes".into()],
        }),
    };
    let doc = AdviseRunDoc {
        tool: "tcpstall",
        version: "0",
        schema_version: SCHEMA_VERSION,
        mode: "advise-run",
        server_command: "python3 s.py".into(),
        client_command: "python3 c.py".into(),
        port: 8080,
        server_addr: Some("192.0.2.10:8080".into()),
        link: Some("rtt=20ms,mtu=1500".into()),
        kernel_evidence: "kernel evidence: 6 of 6 tracepoints".into(),
        delack_max_us: Some(8000),
        passes: 3,
        stopped: "settled".into(),
        elapsed_s: 12.5,
        ranking: vec![row],
        left_out: vec![LeftOut { label: "server LD_PRELOAD shim (TCP_NODELAY)".into(), reason: "static".into() }],
        winner: Some(AdviseRunWinner { label: "client route quickack 1".into(), deploy: "ip route change ...".into() }),
        text: String::new(),
    };
    serde_json::to_value(&doc).unwrap()
}

/// `advise --format json`: every field populated (a lab row, with its CPU and its causes).
fn advise_sample() -> Value {
    use tcpstall_report::advise::{AdviseDecision, AdviseDoc, AdviseRow, Interval, StallSource};
    let iv = Interval { est: 50.0, lo: 40.0, hi: 60.0 };
    let row = AdviseRow {
        rank: 1,
        tied: true,
        label: "client:writev".into(),
        client: vec!["writev".into()],
        server: Vec::new(),
        runs: 5,
        rounds: 100,
        stalls: 1,
        stalls_per_round: 0.01,
        stall_source: StallSource::StallRecords,
        stalls_by_cause: [("nagle-delayed-ack".to_string(), 1)].into_iter().collect(),
        p50_us: iv,
        p99_us: iv,
        p999_us: iv,
        segments_per_message: 1.0,
        wire_bytes_per_message: 400.0,
        cpu_us_per_round: Some(17.5),
        change_size: 2,
    };
    let doc = AdviseDoc {
        tool: "tcpstall",
        mode: "lab".into(),
        scenario: "exchange".into(),
        workload: "client 275,24,292; server 100".into(),
        peer_profile: Some("macos".into()),
        runs_per_candidate: 5,
        rounds_per_run: 20,
        messages_per_round: 2,
        elapsed_s: 1.0,
        as_written_stalls: true,
        ranking: vec![row],
        decision: AdviseDecision {
            tie: vec!["client:writev".into()],
            chosen: "client:writev".into(),
            rule: "alone",
            rules: vec!["no-busy-poll"],
            reason: "r".into(),
        },
        recommendation: "Recommendation: r".into(),
        lang: "c".into(),
        code: "c".into(),
        notes: vec!["n".into()],
    };
    serde_json::to_value(&doc).unwrap()
}

/// `simulate --compare-profiles --format json`: the lab document's rows, one column per profile.
fn simulate_sample(lab: &Value) -> Value {
    let run: Report = serde_json::from_value(lab.clone()).expect("the lab document reads back as a Report");
    let doc = tcpstall_report::simulate::CompareProfilesDoc::new("burst", "0", &[("linux:macos".into(), run)]);
    serde_json::to_value(&doc).unwrap()
}

#[test]
fn every_serialised_field_is_documented_and_every_documented_field_serialised() {
    let (lab, explain) = (lab_sample(), explain_sample());
    let replay = replay_sample(&lab);
    let others = [
        ("simulate:", simulate_sample(&lab)),
        ("explain_pair:", explain_pair_sample()),
        ("scenarios:", scenarios_sample()),
        ("kernel:", kernel_sample()),
        ("seed003:", seed003_sample()),
        ("advise:", advise_sample()),
        ("sockets:", sockets_sample()),
        ("advise_run:", advise_run_sample()),
    ];
    let watch = watch_sample();
    let docs = documented();
    assert!(docs.len() >= 30, "the doc's marked tables: {}", docs.len());
    let mut problems = Vec::new();
    for (path, names) in &docs {
        let other = others.iter().find_map(|(prefix, doc)| path.strip_prefix(prefix).map(|p| (doc, p)));
        let (doc, p) = if let Some(found) = other {
            found
        } else if let Some(p) = path.strip_prefix("explain:") {
            (&explain, p)
        } else if let Some(p) = path.strip_prefix("replay:") {
            (&replay, p)
        } else if let Some(p) = path.strip_prefix("watch:") {
            (&watch, p)
        } else {
            (&lab, path.as_str())
        };
        let Some(obj) = at(doc, p).as_object() else {
            problems.push(format!("{path}: no object there in the sample"));
            continue;
        };
        let keys: BTreeSet<String> = obj.keys().cloned().collect();
        for k in keys.difference(names) {
            problems.push(format!("{path}: `{k}` is serialised but not documented"));
        }
        for k in names.difference(&keys) {
            problems.push(format!("{path}: `{k}` is documented but not serialised"));
        }
    }
    assert!(problems.is_empty(), "docs/json-schema.md disagrees with the schema:\n{}", problems.join("\n"));
}
