//! Regression tests for the wrong verdicts issue 32 found against ground truth (real programs,
//! their system calls and the kernel's resend records), each rebuilt as a packet script. The
//! same classes are held end to end by crates/truth's corpus, on captures of real programs.

use super::{Script, MS};
use crate::RecordKind;
use trace::{Cause, Endpoint, EventKind, TcpFlags};
use Endpoint::{A, B};

fn set_sack(s: &mut Script, blocks: &[(u32, u32)]) {
    if let EventKind::Segment(seg) = &mut s.ev.last_mut().unwrap().kind {
        *seg = seg.with_sack(blocks);
    }
}

/// Seed 001 with a sleeping requester (RFC 9293 3.7.4 x 3.8.6.3): A writes 275, 24 and 292
/// bytes, B's delayed ACK releases the 316 held bytes ~41 ms later, B answers, A sleeps 50 ms.
/// The requests' rhythm (41.5 + 50.3 ms alternating, 46 ms on average) is made by the stalls
/// themselves: every request is Nagle x delayed ACK, none is the application's clock.
#[test]
fn a_requester_that_sleeps_between_requests_keeps_its_nagle_stalls() {
    let mut s = Script::new();
    let mut t = 1.0;
    for _ in 0..20 {
        s.data(t, A, 275).ack(t + 41.5, B, 512).data(t + 41.53, A, 316).data(t + 41.7, B, 100);
        t += 41.7 + 50.3;
    }
    let r = s.records();
    let nagle = r.iter().filter(|x| x.cause == Cause::NagleDelayedAck && x.kind == RecordKind::Stall).count();
    assert!(nagle >= 19, "{nagle} Nagle stalls of 20: {r:#?}");
    // The clock's text, when it was weighed, counts its intervals out of the intervals it has.
    for x in &r {
        if let Some(i) = x.detail.find("of its last ") {
            let tail = &x.detail[i..];
            assert!(!tail.starts_with("of its last 15 intervals") || !x.detail.contains("(16 of"), "{}", x.detail);
        }
    }
}

/// A responder that corks and never uncorks (tcp(7) TCP_CORK, `tcp_probe0_base`): each
/// response leaves ~200 ms after the request. It answers its peer, so the rhythm is the
/// requester's, not B's own clock: never `application` by clock; the probe timer is named
/// (ambiguous from packets: an application pause looks the same).
#[test]
fn a_corked_responder_has_its_requesters_clock_not_its_own() {
    let mut s = Script::new();
    let mut t = 1.0;
    for _ in 0..20 {
        s.data(t, A, 40).ack(t + 0.05, B, 512).data(t + 205.0, B, 100).ack(t + 205.05, A, 512);
        t += 205.0 + 12.0;
    }
    let r = s.records();
    let b: Vec<_> = r.iter().filter(|x| x.held == B).collect();
    assert!(b.len() >= 19, "{r:#?}");
    assert!(b.iter().all(|x| !x.detail.contains("own clock")), "{b:#?}");
    assert!(b.iter().filter(|x| x.cause == Cause::ProbeTimer).count() >= 19, "{b:#?}");
}

/// RFC 3708 2 / RFC 2883 4: a resend of bytes the receiver had already acknowledged, then
/// D-SACKed, is spurious: no wait (PcapPlusPlus many-protocols: a 200 ms delayed ACK racing
/// the RTO). Cumulative ACK before the resend, and a D-SACK after it, each suffice.
#[test]
fn a_spurious_resend_is_not_a_wait() {
    // Acknowledged before: B's 291 bytes, A's delayed ACK 206 ms later, B's resend at 291 ms.
    let mut s = Script::new();
    s.data(1.0, A, 40).data(2.0, B, 291).ack(208.0, A, 512).resend(293.0, B, 291);
    let r = s.records();
    assert!(r.iter().all(|x| !x.shows_a_wait()), "{r:#?}");
    assert!(r.iter().any(|x| x.detail.contains("spurious") && x.detail.contains("acknowledged")), "{r:#?}");
    // D-SACK after: the ACK was lost, the RTO resent, the receiver answers with a D-SACK.
    let mut s = Script::new();
    s.data(1.0, A, 40).data(2.0, B, 291);
    let (lo, hi) = (s.seq[1] - 291, s.seq[1]);
    s.resend(215.0, B, 291).ack(215.2, A, 512);
    set_sack(&mut s, &[(lo, hi)]);
    let r = s.records();
    assert!(r.iter().all(|x| !x.shows_a_wait()), "{r:#?}");
    assert!(r.iter().any(|x| x.detail.contains("D-SACK")), "{r:#?}");
}

/// RFC 8985 7.3, `tcp_send_loss_probe`: B's 186-byte response head is lost; the 40-byte body,
/// held by Nagle behind it, leaves ~205 ms later as the loss probe (new data); A's answer SACKs
/// it with its ACK below: a tail-loss probe, not an application write; and that send is no
/// evidence of Nagle off, so a later Nagle hold is still named.
#[test]
fn a_loss_probe_that_sends_new_data_is_named_and_does_not_show_nagle_off() {
    let mut s = Script::new();
    s.data(1.0, A, 50).ack(1.1, B, 512);
    let head = s.seq[1];
    // B sends its head (lost before A; the capture at B sees it), then the body at the PTO.
    s.data(2.0, B, 186).data(207.0, B, 40);
    let body = (head + 186, head + 226);
    s.raw(207 * MS + 100_000, A, s.seq[0], head, TcpFlags::ACK, 0, 512, None);
    set_sack(&mut s, &[body]);
    // Recovery resends the head; A acknowledges everything.
    s.raw(207 * MS + 300_000, B, head, s.seq[0], TcpFlags::ACK, 186, 512, None);
    s.raw(207 * MS + 400_000, A, s.seq[0], head + 226, TcpFlags::ACK, 0, 512, None);
    // Later: a plain Nagle x delayed ACK hold of B's.
    s.data(400.0, A, 50).data(401.0, B, 100).ack(441.0, A, 512).data(441.1, B, 30).data(442.0, A, 10);
    let r = s.records();
    let probe = r.iter().find(|x| x.cause == Cause::TailLossProbe);
    assert!(probe.is_some_and(|p| p.kind == RecordKind::Stall && p.held == B), "{r:#?}");
    assert!(
        r.iter().any(|x| x.cause == Cause::NagleDelayedAck && x.kind == RecordKind::Stall && x.held == B),
        "the probe must not count as Nagle off: {r:#?}"
    );
}

/// RFC 5681 3.1 / `tcp_cwnd_test`: a partial ACK frees part of a window-sized flight and
/// nothing leaves for 80 ms: the window had room, so it did not hold the next flight (an 8 KB
/// send buffer did, suricata-verify smtp-raw-extraction): not cwnd-limited.
#[test]
fn a_partial_ack_after_which_nothing_leaves_is_not_the_window() {
    let mut s = Script::new();
    s.data(1.0, B, 10);
    for i in 0..6 {
        s.data(2.0 + f64::from(i) * 0.01, A, 1365);
    }
    let partial = s.seq[0] - 4 * 1365;
    s.raw(32 * MS, B, s.seq[1], partial, TcpFlags::ACK, 0, 512, None);
    s.ack(112.0, B, 512).data(112.1, A, 1365);
    let r = s.records();
    let last = r.last().unwrap();
    assert!(last.cause != Cause::CwndLimited && !last.shows_a_wait(), "{r:#?}");
    assert!(last.detail.contains("partial ACK"), "{}", last.detail);
}

/// A capture filtered to data segments (no SYN, no pure ACK) and one stamped on a 10 ms tick
/// each say so once per flow.
#[test]
fn data_only_and_coarse_tick_captures_are_said() {
    let mut s = Script::mid_connection();
    for k in 0..10 {
        let t = 10.0 + f64::from(k) * 50.0;
        s.data(t, A, 40).data(t + 1.0, B, 60);
    }
    let a = crate::analyze_events(s.ev.clone(), crate::Config::default());
    assert!(a.flows[0].notes.iter().any(|n| n.contains("data segments only")), "{:?}", a.flows[0].notes);
    let mut s = Script::mid_connection();
    for k in 0..12 {
        let t = 10.0 + f64::from(k) * 50.0;
        s.data(t, A, 40).ack(t + 10.0, B, 512).data(t + 20.0, B, 60).ack(t + 30.0, A, 512);
    }
    let a = crate::analyze_events(s.ev.clone(), crate::Config::default());
    assert!(a.flows[0].notes.iter().any(|n| n.contains("10.00 ms ticks")), "{:?}", a.flows[0].notes);
}

/// With kernel evidence the congestion state at the resend decides (`tcp:tcp_cong_state_set`,
/// `enum tcp_ca_state`): a loss probe is sent in Open (`tcp_schedule_loss_probe` arms it only
/// in Open or CWR), a retransmission timeout enters Loss first (`tcp_enter_loss`). A resend
/// the kernel reported with no state change before it was sent in Open: a probe, at the top
/// band; and the state is named as the kernel names it.
#[test]
fn the_kernels_congestion_state_names_a_probe_or_a_timeout() {
    use trace::{Event, Evidence, KernelEvent};
    for loss_state in [false, true] {
        let mut s = Script::new();
        s.data(1.0, A, 100);
        let seq = s.seq[0] - 100;
        if loss_state {
            s.ev.push(Event {
                t: trace::Instant(204 * MS),
                from: A,
                kind: EventKind::Kernel(KernelEvent::CongState { state: 4 }),
                evidence: Evidence::Kernel(1),
            });
        }
        s.ev.push(Event {
            t: trace::Instant(205 * MS - 10_000),
            from: A,
            kind: EventKind::Kernel(KernelEvent::Retransmit { seq, len: 100 }),
            evidence: Evidence::Kernel(2),
        });
        s.resend(205.0, A, 100);
        let r = s.records();
        let st: Vec<_> = r.iter().filter(|x| x.kind == RecordKind::Stall).collect();
        assert_eq!(st.len(), 1, "{r:#?}");
        let want = if loss_state { Cause::RetransmissionTimeout } else { Cause::TailLossProbe };
        assert_eq!(st[0].cause, want, "{:#?}", st[0]);
        assert!(st[0].confidence >= 0.9, "{:#?}", st[0]);
        if loss_state {
            assert!(st[0].evidence.iter().any(|e| e.what.contains("congestion state Loss")), "{:#?}", st[0]);
        } else {
            assert!(st[0].detail.contains("Open"), "{}", st[0].detail);
        }
    }
}

/// A capture of one direction (A's ACK numbers advance, none of B's packets are in it): a
/// resend of A's is not a confident stall, since nothing shows whether B had the bytes before
/// it (a spurious resend is no wait, RFC 3708) (ICS-Security-Tools EIP-IPAddressChangeAttempt,
/// flow 3).
#[test]
fn a_resend_in_a_one_direction_capture_is_not_a_confident_stall() {
    let mut s = Script::mid_connection();
    for k in 0..5 {
        s.seq[1] += 10; // B's data, never captured, that A acknowledges
        s.data(10.0 + f64::from(k) * 30.0, A, 500);
    }
    s.resend(1_400.0, A, 500);
    let r = s.records();
    assert!(r.iter().all(|x| x.kind != RecordKind::Stall), "{r:#?}");
    assert!(r.iter().any(|x| x.detail.contains("packets only")), "{r:#?}");
}

/// RFC 6298 5.5 / 5.7: the SYN timer starts at 1 s and doubles. A SYN-ACK sent again right
/// after the client's SYN was sent again answers it (Linux `tcp_check_req`): one connect
/// stall, the client's, not two; resends at a constant interval are not the timer (a SYN-ACK
/// reflection answering spoofed SYNs), and a SYN-ACK whose peer is not in the capture shows
/// no wait (public captures: packetbeat http_minitwit, StopDDoS amp.TCP.syn).
#[test]
fn syn_resends_that_answer_or_do_not_back_off_are_not_the_timer() {
    let mut s = Script::mid_connection();
    s.raw(0, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(100_000, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    s.raw(1_000 * MS, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(1_000 * MS + 20_000, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    s.raw(1_000 * MS + 200_000, A, 1000, 5000, TcpFlags::ACK, 0, 512, None);
    let st: Vec<_> = s.records().into_iter().filter(|x| x.kind == RecordKind::Stall).collect();
    assert_eq!(st.len(), 1, "{st:#?}");
    assert_eq!((st[0].held, st[0].cause), (A, Cause::RetransmissionTimeout));
    // B's SYN-ACK every 2 s, A never in the capture: not confident, and after more equal
    // steps than any stack's table, not the timer.
    let mut s = Script::mid_connection();
    for k in 0..10u64 {
        s.raw(k * 2_000 * MS, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    }
    let r = s.records();
    assert!(r.iter().all(|x| x.confidence < 0.75), "{r:#?}");
    assert!(r[0].detail.contains("cannot be seen"), "{r:#?}");
    // A's SYN resent at a constant 0.5 s: never at the timer's own interval (1 s, or
    // doubling), so never confident; after more equal steps than FreeBSD's table, not it.
    let mut s = Script::mid_connection();
    for k in 0..10u64 {
        s.raw(k * 500 * MS, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    }
    let r = s.records();
    assert!(r.iter().all(|x| x.confidence < 0.75), "{r:#?}");
    assert!(r.iter().skip(6).all(|x| x.kind != RecordKind::Stall && x.detail.contains("doubles")), "{r:#?}");
    // B's SYN-ACK went out, A resent its SYN 1 s later anyway: the answer was late or lost.
    let mut s = Script::mid_connection();
    s.raw(0, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(50_000, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    s.raw(1_000 * MS, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    let r = s.records();
    assert!(r[0].confidence < 0.75 && r[0].detail.contains("had answered"), "{r:#?}");
}

/// A client with TCP_CORK set and never cleared (tcp(7)): each request leaves ~200 ms after it
/// was written, after a think time, so the gap is think + 200 ms, past the probe timer's band.
/// Without the write times a longer pause looks the same: not `application` at a confident
/// level. A client that shows it sends small writes at once keeps its confident gaps.
#[test]
fn a_long_pause_before_a_small_write_may_hide_a_forgotten_cork() {
    let run = |think_ms: &[f64]| {
        let mut s = Script::new();
        let mut t = 1.0;
        for &th in think_ms {
            t += th;
            s.data(t, A, 200).ack(t + 0.1, B, 512).data(t + 0.3, B, 60).ack(t + 0.4, A, 512);
        }
        s.records().into_iter().filter(|x| x.held == A).collect::<Vec<_>>()
    };
    let corked = run(&[260.0, 290.0, 240.0, 280.0, 250.0, 300.0]);
    assert!(corked.iter().all(|x| x.confidence < 0.5 && x.alternatives.contains(&Cause::ProbeTimer)), "{corked:#?}");
    let uncorked = run(&[100.0, 30.0, 260.0, 290.0, 240.0]);
    let bad: Vec<_> = uncorked.iter().filter(|x| x.length.as_millis_f64() > 200.0 && x.confidence < 0.75).collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// At the sender over a long path, the receiver's late ACK of the first transmission can come
/// after the resend but sooner than the resend could have reached it: the first transmission
/// had arrived, the resend was spurious (RFC 3708): not a wait.
#[test]
fn an_ack_too_soon_to_answer_the_resend_shows_it_spurious() {
    let mut s = Script::with_rtt(80);
    s.data(100.0, A, 40).ack(180.0, B, 512).data(181.0, A, 300);
    // B's delayed ACK of the 300 bytes is late; A resends at ~2 x SRTT + 200 ms...
    s.resend(481.0, A, 300);
    // ...and the ACK of the first transmission arrives 20 ms later (< the 80 ms round trip).
    s.ack(501.0, B, 512);
    let r = s.records();
    let last = r.iter().rev().find(|x| x.held == A).unwrap();
    assert!(!last.shows_a_wait(), "{r:#?}");
    assert!(last.detail.contains("first transmission"), "{}", last.detail);
}

/// RFC 2883 4: the receiver D-SACKs a duplicate at once, but its ACK of the first
/// transmission (a delayed ACK) can reach the sender first: a D-SACK in a later answer still
/// shows the resend spurious.
#[test]
fn a_dsack_after_the_first_answer_still_shows_a_resend_spurious() {
    let mut s = Script::with_rtt(20);
    s.data(50.0, A, 40).ack(70.0, B, 512).data(71.0, A, 300);
    let (lo, hi) = (s.seq[0] - 300, s.seq[0]);
    s.resend(300.0, A, 300);
    s.ack(321.0, B, 512);
    s.ack(322.0, B, 512);
    set_sack(&mut s, &[(lo, hi)]);
    let r = s.records();
    let last = r.iter().rev().find(|x| x.held == A).unwrap();
    assert!(!last.shows_a_wait() && last.detail.contains("D-SACK"), "{r:#?}");
}

/// The same requester over an 80 ms path, captured at the client: its sends alternate between
/// 121.5 ms (the round trip, the delayed ACK) and 130 ms (the response's trip and the 50 ms
/// sleep), 4% either side of their 125.75 ms mean, as tight as a timer's jitter; but the
/// intervals that end right after an ACK sit apart from the others (`ClockFit::two_rhythms`):
/// two processes, not one clock. Every request is still Nagle x delayed ACK.
#[test]
fn a_sleeping_requester_on_a_long_path_is_not_a_clock() {
    let mut s = Script::with_rtt(80);
    let mut t = 200.0;
    for _ in 0..30 {
        s.data(t, A, 275).ack(t + 121.5, B, 512).data(t + 121.53, A, 316).data(t + 201.6, B, 100);
        t += 201.6 + 50.0;
    }
    let r = s.records();
    let nagle = r.iter().filter(|x| x.cause == Cause::NagleDelayedAck && x.kind == RecordKind::Stall).count();
    assert!(nagle >= 28, "{nagle} Nagle stalls of 30: {r:#?}");
}

/// The proof that a resend was spurious can come late: after a second resend of the range, or
/// after an ACK that did not cover it (phones' ACKs arrive a second late in a burst; nDPI's
/// alexa-app and wa_video captures). A D-SACK or an ACK echoing the first transmission's
/// timestamp within two round trips and three seconds of the resend still makes it a gap (RFC
/// 2883 4, RFC 3522 2). And a segment that fills a hole opened microseconds before was
/// captured out of order, not resent (nDPI's aerospike capture).
#[test]
fn late_proof_of_a_spurious_resend_and_a_hole_filled_at_once() {
    let mut s = Script::with_rtt(20);
    s.data(50.0, A, 40).ack(70.0, B, 512).data(71.0, A, 300);
    let (lo, hi) = (s.seq[0] - 300, s.seq[0]);
    s.resend(300.0, A, 300).resend(720.0, A, 300);
    s.ack(1_500.0, B, 512);
    set_sack(&mut s, &[(lo, hi)]);
    let r = s.records();
    let resends: Vec<_> = r.iter().filter(|x| x.held == A && (x.start + x.length).as_nanos() > 200 * MS).collect();
    assert_eq!(resends.len(), 2, "{r:#?}");
    assert!(resends.iter().all(|x| !x.shows_a_wait()), "{r:#?}");
    assert!(resends.iter().any(|x| x.detail.contains("D-SACK")), "{r:#?}");
    // A FIN seen 9 us before the data it follows: the data fills the hole at once.
    let mut s = Script::new();
    s.data(1.0, A, 44).ack(1.1, B, 512);
    let seq = s.seq[0];
    s.raw(60_000 * MS, A, seq + 43, s.seq[1], TcpFlags::ACK | TcpFlags::FIN, 0, 512, None);
    s.raw(60_000 * MS + 9_000, A, seq, s.seq[1], TcpFlags::ACK | TcpFlags::PSH, 43, 512, None);
    let r = s.records();
    assert!(r.iter().all(|x| x.cause != Cause::RetransmissionTimeout), "{r:#?}");
}

/// nDPI captures (hand-checked): a SYN-ACK 120 ms after the client's resent SYN answers it,
/// not B's timer (a timer's resend comes a second after its last SYN-ACK); a resend 2.5 ms
/// after a SACK dupack is SACK recovery (RFC 6675 5), however long before the third dupack
/// came; a release sooner than every round trip the flow showed (63 ms against 67-76 ms) was
/// not released by that ACK.
#[test]
fn hand_checked_handshake_sack_and_physics_cases() {
    let mut s = Script::mid_connection();
    s.raw(0, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(60 * MS, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    s.raw(1_000 * MS, A, 999, 0, TcpFlags::SYN, 0, 65535, Some(1460));
    s.raw(1_120 * MS, B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, 65535, Some(1460));
    let r = s.records();
    assert!(r.iter().all(|x| x.held == A), "the SYN-ACK answering the resent SYN is no record: {r:#?}");
    // A release 63 ms after the ACK where the round trip is 67 ms at least.
    let mut s = Script::with_rtt(67);
    for k in 0..4 {
        let t = 100.0 + f64::from(k) * 300.0;
        s.data(t, A, 20).data(t + 67.0, B, 80).ack(t + 67.5, A, 512);
    }
    s.data(1_400.0, A, 20).data(1_467.0, B, 80).ack(1_667.0, A, 512).data(1_730.0, B, 23);
    let r = s.records();
    let last = r.last().unwrap();
    assert!(last.cause != Cause::NagleDelayedAck, "{r:#?}");
}

/// Captured at the client, 88 ms from the server (zeek's ftp/cwd-navigation): the server sends
/// small segments back to back, and the client's ACK of the first is stamped 0.3 ms after the
/// second. That ACK had not reached the server, so it released nothing: the second segment
/// shows Nagle off (RFC 9293 3.7.4), and a later Nagle-looking release is the application's.
#[test]
fn an_ack_far_from_the_sender_does_not_explain_back_to_back_small_segments() {
    let mut s = Script::with_rtt(88);
    s.data(100.0, A, 16);
    s.data(188.0, B, 71).data(188.3, B, 68);
    s.ack(188.6, A, 512);
    s.data(188.9, B, 68).ack(189.2, A, 512);
    s.data(300.0, A, 20).data(388.0, B, 80).ack(588.0, A, 512).data(676.5, B, 23);
    let r = s.records();
    assert!(r.iter().all(|x| x.cause != Cause::NagleDelayedAck), "{r:#?}");
}
