use super::*;
use analyze::{EvidenceItem, Stall};
use trace::{Cause, Duration, Endpoint, Event, EventKind, Evidence, Instant, Segment, TcpFlags};

fn seg(t_us: u64, from: Endpoint, seq: u32, ack: u32, len: u32, frame: u64) -> Event {
    Event {
        t: Instant(t_us * 1000),
        from,
        kind: EventKind::Segment(Segment { wscale: Some(2), ..trace::testing::segment(seq, ack, TcpFlags::ACK, len) }),
        evidence: Evidence::Frame(frame),
    }
}

/// A Nagle x delayed-ACK wait: A sends 10 B at 1 ms, B's delayed ACK at 41 ms, A's held 10 B at
/// 41.02 ms; packets before and after the wait are not part of it.
fn nagle() -> (Vec<Event>, Vec<Stall>) {
    let ev = vec![
        seg(0, Endpoint::A, 100, 500, 10, 1),
        seg(1000, Endpoint::A, 110, 500, 10, 2),
        seg(41_000, Endpoint::B, 500, 120, 0, 3),
        seg(41_020, Endpoint::A, 120, 500, 10, 4),
        seg(41_100, Endpoint::B, 500, 130, 0, 5),
    ];
    let st = Stall {
        evidence: vec![
            EvidenceItem {
                t: Instant(1_000_000),
                source: Evidence::Frame(2),
                what: "A data 10 B, unacknowledged".into(),
            },
            EvidenceItem { t: Instant(41_000_000), source: Evidence::Frame(3), what: "B pure ACK, 40 ms late".into() },
        ],
        ack_delay: Some(Duration(40_000_000)),
        detail: "d".into(),
        ..analyze::testing::stall(Instant(1_000_000), Duration(40_020_000), Cause::NagleDelayedAck)
    };
    (ev, vec![st])
}

fn page<'a>(ev: &'a [Event], st: &'a [Stall]) -> Page<'a> {
    Page {
        header: Header { mode: "explain".into(), scenario: "x.pcap".into(), ..Header::default() },
        rows: &[],
        flows: vec![FlowIn {
            label: "flow 1".into(),
            row: None,
            stalls: st,
            events: Some(ev),
            events_note: None,
            rtt_ns: Some(100_000),
            capture_point: "same host".into(),
            capture_at: None,
        }],
        errors: &[],
        ranking: None,
        notes: vec![],
    }
}

#[test]
fn ladder_has_every_packet_of_the_wait_and_names_the_release() {
    let (ev, st) = nagle();
    let d = data(&page(&ev, &st));
    assert_eq!(d.ladders.len(), 1);
    let l = &d.ladders[0];
    let frames: Vec<_> = l.arrows.iter().map(|a| a.frame).collect();
    assert_eq!(frames, vec![Some(2), Some(3), Some(4)]);
    assert_eq!(l.arrows[1].note, "B pure ACK, 40 ms late");
    assert!(l.arrows[2].release && l.arrows[2].note.contains("tcp_nagle_check"));
    assert!((l.arrows[2].t_ms - 40.02).abs() < 1e-9);
    assert_eq!(l.one_way_ms, 0.05);
    assert_eq!(d.stalls[0].ladder, Some(0));
}

#[test]
fn time_sequence_is_relative_with_ack_and_window_lines() {
    let (ev, st) = nagle();
    let d = data(&page(&ev, &st));
    let a = &d.timeseq[0].dirs[0];
    assert_eq!(a.dir, "A→B");
    assert_eq!(a.data[0], [0.0, 0.0, 10.0]);
    assert_eq!(a.segments, 3);
    assert!(!a.downsampled);
    // B's ACK of 120 is 20 bytes past A's first byte; its window 1000 << 2 = 4000.
    assert!(a.ack.iter().any(|p| p[1] == 20.0));
    assert!(a.win.iter().any(|p| p[1] == 4020.0));
    assert_eq!(a.stalls, vec![(1.0, 41.02, Cause::NagleDelayedAck)]);
}

#[test]
fn big_flows_are_downsampled_per_time_bin() {
    let ev: Vec<Event> =
        (0..50_000u32).map(|i| seg(u64::from(i) * 10, Endpoint::A, i * 100, 0, 100, u64::from(i) + 1)).collect();
    let d = data(&page(&ev, &[]));
    let a = &d.timeseq[0].dirs[0];
    assert!(a.downsampled && a.segments == 50_000);
    assert!(a.data.len() <= LIMITS.bins + 1, "{}", a.data.len());
    // Nothing lost at the ends: the first byte and the last.
    assert_eq!(a.data[0][1], 0.0);
    assert_eq!(a.data.last().unwrap()[2], 5_000_000.0);
}

#[test]
fn page_is_self_contained_and_escapes_its_data() {
    let (ev, mut st) = nagle();
    st[0].detail = "</script><script>alert(1)</script>".into();
    let html = String::from_utf8(render(&page(&ev, &st))).unwrap();
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(html.contains("report-ok") && html.contains("id=\"ladder\""));
}

#[test]
fn utc_dates() {
    assert_eq!(utc_date(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc_date(951_782_400 + 3661), "2000-02-29 01:01:01 UTC");
    assert_eq!(utc_date(1_795_478_400 - 86_400 + 59), "2026-11-23 00:00:59 UTC");
}

/// Capture timestamps out of order (several CPUs): no panic, the same ladder.
#[test]
fn unordered_packets_give_the_same_ladder() {
    let (mut ev, st) = nagle();
    ev.reverse();
    let d = data(&page(&ev, &st));
    let frames: Vec<_> = d.ladders[0].arrows.iter().map(|a| a.frame).collect();
    assert_eq!(frames, vec![Some(2), Some(3), Some(4)]);
    assert_eq!(d.timeseq[0].dirs[0].segments, 3);
}

/// The header's command line quotes only what a shell would split or expand.
#[test]
fn command_line_quotes_what_a_shell_would_change() {
    let args = ["tcpstall", "explain", "a b.pcap", "--flow", "[::1]:1-[::1]:2", "it's"].map(String::from);
    assert_eq!(command_line(args), "tcpstall explain 'a b.pcap' --flow '[::1]:1-[::1]:2' 'it'\\''s'");
}
