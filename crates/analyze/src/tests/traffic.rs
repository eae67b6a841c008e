//! Regression tests for the wrong verdicts issue 21 found on other programs' captures, each
//! rebuilt as a packet script: a verdict needs evidence that bytes waited, and no cause the
//! packets contradict is named.

use super::{Script, MS};
use crate::{analyze_events, Config, RecordKind, Stall};
use trace::{Cause, Endpoint, Event, EventKind, Evidence, IcmpError, IcmpKind, Instant, TcpFlags};
use Endpoint::{A, B};

fn counted(r: &[Stall]) -> Vec<&Stall> {
    r.iter().filter(|s| s.shows_a_wait()).collect()
}

/// A writer on its own clock (IEEE C37.118 PMUs send a frame every 20 ms; pollers, screen
/// updates): B sends `bytes` every `period_ms` (with jitter and, optionally, bursts of three
/// segments per tick); A's delayed ACK (40 ms, or every second segment) lands when it lands,
/// sometimes just before a tick. Nagle is off (B sends with data in flight).
fn paced(period_ms: f64, jitter: f64, burst: bool, ticks: u32) -> Script {
    let mut s = Script::new();
    let mut next_ack = 0.0;
    let mut acked_upto = s.seq[1];
    for k in 0..ticks {
        // A deterministic jitter in [-jitter, +jitter] of the period.
        let j = (((k * 7919) % 200) as f64 / 100.0 - 1.0) * jitter * period_ms;
        let t = 5.0 + k as f64 * period_ms + j;
        if next_ack > 0.0 && next_ack < t {
            s.ack(next_ack, A, 512);
            acked_upto = s.seq[1];
            next_ack = 0.0;
        }
        s.data(t, B, 54);
        if burst {
            s.data(t + 0.02, B, 1448).data(t + 0.04, B, 200);
        }
        if next_ack == 0.0 && s.seq[1] != acked_upto {
            next_ack = t + 0.3 + 39.0;
        }
    }
    s
}

/// Issue 21's phantom stalls: a periodic sender's regular gaps are its application's, at every
/// period from 1 ms to 1 s, with jitter and with bursts; none is counted (no cwnd-limited, no
/// Nagle, no unknown), and the periodic gaps longer than the stall threshold are listed as
/// application gaps kept by its clock.
#[test]
fn a_sender_on_its_own_clock_has_no_stalls() {
    for period in [1.0, 15.0, 20.0, 110.0, 200.0, 1000.0] {
        for (jitter, burst) in [(0.0, false), (0.03, false), (0.0, true)] {
            let s = paced(period, jitter, burst, 60);
            let r = s.records();
            assert!(counted(&r).is_empty(), "period {period} ms, jitter {jitter}, burst {burst}: {:#?}", counted(&r));
            if period >= 20.0 {
                let clocked = r.iter().filter(|x| x.detail.contains("on its own clock")).count();
                assert!(clocked >= 40, "period {period}: {clocked} records name the clock: {r:#?}");
            }
        }
    }
}

/// The ACK that lands just before a scheduled send released nothing: the gap is the clock's.
#[test]
fn an_ack_just_before_a_tick_released_nothing() {
    let r = paced(20.0, 0.0, false, 40).records();
    let near = r.iter().filter(|x| x.detail.contains("released nothing")).count();
    assert!(near > 0, "{r:#?}");
    assert!(counted(&r).is_empty(), "{r:#?}");
}

/// A Nagle-on sender writing on a 20 ms clock while its peer delays ACKs 40 ms (RFC 9293
/// 3.7.4 x 3.8.6.3): every write made while a small segment is unacknowledged is held until
/// the ACK. At least 90% of the real holds longer than the stall threshold are named
/// nagle-delayed-ack.
#[test]
fn a_nagle_on_sender_on_a_clock_is_held_by_the_delayed_ack() {
    let mut s = Script::new();
    let (mut unacked, mut held, mut held_since) = (false, 0u32, 0.0f64);
    let mut ack_at = f64::MAX;
    let mut holds = Vec::new();
    let mut t = 5.0;
    for _ in 0..100 {
        if ack_at <= t {
            s.ack(ack_at, A, 512);
            unacked = false;
            if held > 0 {
                let rel = ack_at + 0.3;
                s.data(rel, B, held);
                if rel - held_since >= 11.0 {
                    holds.push(rel);
                }
                held = 0;
                unacked = true;
                ack_at = rel + 0.3 + 40.0;
            } else {
                ack_at = f64::MAX;
            }
        }
        if unacked {
            if held == 0 {
                held_since = t;
            }
            held += 54;
        } else {
            s.data(t, B, 54);
            unacked = true;
            ack_at = t + 0.3 + 40.0;
        }
        t += 20.0;
    }
    let r = s.records();
    let found = holds
        .iter()
        .filter(|&&rel| {
            r.iter().any(|x| {
                x.cause == Cause::NagleDelayedAck
                    && x.kind == RecordKind::Stall
                    && ((x.start + x.length).0 as f64 / MS as f64 - rel).abs() < 0.5
            })
        })
        .count();
    assert!(holds.len() >= 30, "{}", holds.len());
    assert!(found * 10 >= holds.len() * 9, "{found} of {} holds named: {r:#?}", holds.len());
}

/// Physics: captured at A over an 88 ms path, B's data cannot be released by A's ACK 1.3 ms
/// after it: the ACK had not reached B (zeek ftp/cwd-navigation). Not Nagle: the writer wrote.
#[test]
fn a_release_sooner_than_the_path_allows_is_not_nagle() {
    let mut s = Script::with_rtt(88);
    s.data(100.0, A, 20).data(188.0, B, 80).ack(388.0, A, 512).data(389.3, B, 23);
    let r = s.records();
    assert!(r.iter().all(|x| x.cause != Cause::NagleDelayedAck), "{r:#?}");
    let last = r.last().unwrap();
    assert_eq!((last.cause, last.kind), (Cause::Application, RecordKind::Gap), "{last:#?}");
    assert!(last.detail.contains("could not have released it"), "{}", last.detail);
    // The same release 89 ms after the ACK is physically a release: Nagle.
    let mut ok = Script::with_rtt(88);
    ok.data(100.0, A, 20).data(188.0, B, 80).ack(388.0, A, 512).data(477.0, B, 23);
    assert_eq!(ok.records().last().unwrap().cause, Cause::NagleDelayedAck);
}

/// A side that sent a sub-MSS segment while another was unacknowledged has Nagle off
/// (tcp_nagle_check + tcp_minshall_check would have held it): no Nagle verdict for it from
/// then on; one named before stands (TCP_NODELAY can be set midway, as OpenSSH does after its
/// key exchange).
#[test]
fn a_sender_that_shows_nagle_off_gets_no_nagle_verdict() {
    let mut s = Script::new();
    // Nagle-looking release first, then Nagle visibly off, then the same look again.
    s.data(1.0, A, 20).data(2.0, B, 80).ack(42.0, A, 512).data(42.1, B, 23).ack(42.2, A, 512);
    s.data(100.0, A, 20).data(101.0, B, 80).data(101.5, B, 30).ack(141.0, A, 512);
    s.data(200.0, A, 20).data(201.0, B, 80).ack(241.0, A, 512).data(241.1, B, 23).ack(241.2, A, 512);
    let r = s.records();
    let nagle: Vec<_> = r.iter().filter(|x| x.cause == Cause::NagleDelayedAck).collect();
    assert_eq!(nagle.len(), 1, "{r:#?}");
    assert_eq!(nagle[0].kind, RecordKind::Stall, "{r:#?}");
    assert!(nagle[0].start.as_nanos() < 50 * MS, "the first, before Nagle was shown off: {r:#?}");
    let last = r.iter().rev().find(|x| x.held == B).unwrap();
    assert_eq!(last.cause, Cause::Application, "{r:#?}");
    assert!(last.detail.contains("showed Nagle off before"), "{}", last.detail);
}

/// RFC 5681 3.2: duplicate ACKs count from the range's latest transmission, and the fast
/// retransmit follows the third promptly. The same range resent again 400 ms later with no new
/// duplicate ACK is the retransmission timer backing off (RFC 6298 5.5), not a fast
/// retransmit citing the old duplicates (zeek http/206_example_b).
#[test]
fn fast_retransmit_needs_fresh_duplicate_acks_and_backoff_is_a_timeout() {
    let mut s = Script::new();
    let (head, ack) = s.flight_and_three_dupacks();
    s.raw(25 * MS + 40_000, A, head, ack, TcpFlags::ACK, 1460, 512, None);
    s.raw(425 * MS, A, head, ack, TcpFlags::ACK, 1460, 512, None);
    s.raw(1225 * MS, A, head, ack, TcpFlags::ACK, 1460, 512, None);
    let r = s.records();
    let causes: Vec<Cause> = r.iter().map(|x| x.cause).collect();
    assert_eq!(causes, vec![Cause::FastRetransmit, Cause::RetransmissionTimeout, Cause::RetransmissionTimeout]);
    assert!(r[0].detail.contains("3 duplicate ACKs"), "{}", r[0].detail);
    assert!(r[1].detail.contains("timer backed off"), "{}", r[1].detail);
    assert!(!r[2].detail.contains("duplicate ACKs from"), "{}", r[2].detail);
    // Duplicate ACKs long before the resend did not trigger it.
    let mut late = Script::new();
    let (head, ack) = late.flight_and_three_dupacks();
    late.raw(300 * MS, A, head, ack, TcpFlags::ACK, 1460, 512, None);
    let r = late.records();
    assert_eq!(r.last().unwrap().cause, Cause::RetransmissionTimeout, "{r:#?}");
    assert!(r.last().unwrap().detail.contains("did not trigger it"), "{}", r.last().unwrap().detail);
}

/// ICMP fragmentation-needed about A's segments, in the capture, then the range resent smaller:
/// path MTU discovery (RFC 1191; tcp_v4_mtu_reduced -> tcp_simple_retransmit), not a
/// retransmission timeout (zeek smtp.pcap).
#[test]
fn icmp_fragmentation_needed_is_path_mtu_discovery() {
    let mut s = Script::new();
    s.data(1.0, A, 1460);
    let head = s.seq[0] - 1460;
    s.ev.push(Event {
        t: Instant(40 * MS),
        from: A,
        kind: EventKind::Icmp(IcmpError { kind: IcmpKind::FragNeeded { mtu: 1492 }, seq: head }),
        evidence: Evidence::Frame(99),
    });
    let ack = s.seq[1];
    s.raw(40 * MS + 36_000, A, head, ack, TcpFlags::ACK, 1400, 512, None);
    let r = s.records();
    let last = r.last().unwrap();
    assert_eq!((last.cause, last.kind), (Cause::PathMtu, RecordKind::Stall), "{r:#?}");
    assert!(last.detail.contains("next-hop MTU 1492") && last.detail.contains("RFC 1191"), "{}", last.detail);
    assert!(last.evidence.iter().any(|e| e.source == Evidence::Frame(99)), "{last:#?}");

    // The rest of the too-big flight follows as the ACKs open the window (zeek smtp.pcap: the
    // resends leave 31-36 us after ACKs on a long path): path MTU recovery, not a timeout with
    // back-off, though the range was last sent long before.
    let mut s = Script::with_rtt(20);
    s.data(301.0, A, 1460).data(301.01, A, 1460);
    let (first, second) = (s.seq[0] - 2920, s.seq[0] - 1460);
    s.ev.push(Event {
        t: Instant(304 * MS),
        from: A,
        kind: EventKind::Icmp(IcmpError { kind: IcmpKind::FragNeeded { mtu: 1492 }, seq: first }),
        evidence: Evidence::Frame(98),
    });
    let ack = s.seq[1];
    s.raw(304 * MS + 35_000, A, first, ack, TcpFlags::ACK, 1440, 512, None);
    s.raw(704 * MS, B, ack, first + 1440, TcpFlags::ACK, 0, 512, None);
    s.raw(704 * MS + 31_000, A, first + 1440, ack, TcpFlags::ACK, 1440, 512, None);
    let r = s.records();
    let last = r.last().unwrap();
    assert_eq!(last.cause, Cause::PathMtu, "{r:#?}");
    assert!(last.detail.contains("as the window let the re-cut flight go"), "{}", last.detail);
    assert!(second > first);
}

/// Bytes below snd_nxt that the capture never saw sent (a range it saw skipped over) are no
/// "resend after the previous transmission": the capture missed the first one.
#[test]
fn bytes_never_seen_before_are_not_a_retransmission() {
    let mut s = Script::new();
    s.data(1.0, A, 100);
    let (at, ack) = (s.seq[0], s.seq[1]);
    // An empty segment at seq + 300 (snd_nxt moves on), then the middle of the skipped range.
    s.raw(2 * MS, A, at + 300, ack, TcpFlags::ACK, 0, 512, None);
    s.raw(3 * MS, A, at + 100, ack, TcpFlags::ACK, 100, 512, None);
    s.raw(400 * MS, A, at, ack, TcpFlags::ACK, 100, 512, None);
    let r = s.records();
    assert!(r.iter().all(|x| x.cause != Cause::RetransmissionTimeout), "{r:#?}");
    assert!(r.last().unwrap().detail.contains("the capture never saw these bytes before"), "{r:#?}");
}

/// A capture that skipped a sender's data (the peer acknowledges gigabytes never captured,
/// zeek ftp/bigtransfer): its gaps are the capture's, neither window waits nor waits.
#[test]
fn a_gap_the_capture_skipped_is_not_a_wait() {
    let mut s = Script::new();
    s.data(1.0, B, 1448).ack(1.2, A, 1000);
    let (b, a) = (s.seq[1], s.seq[0]);
    s.raw(11_000 * MS, A, a, b.wrapping_add(400_000), TcpFlags::ACK, 0, 1000, None);
    s.raw(11_000 * MS + 100_000, B, b.wrapping_add(400_000), a, TcpFlags::ACK | TcpFlags::PSH, 752, 512, None);
    s.raw(62_000 * MS, A, a, b.wrapping_add(1_900_000_000), TcpFlags::ACK, 0, 1000, None);
    s.raw(62_000 * MS + 100_000, B, b.wrapping_add(1_900_000_000), a, TcpFlags::ACK | TcpFlags::PSH, 752, 512, None);
    let r = s.records();
    assert!(counted(&r).is_empty(), "{r:#?}");
    assert!(r.iter().all(|x| x.cause != Cause::RwndLimited), "{r:#?}");
    assert!(r.iter().any(|x| x.detail.contains("the capture skipped")), "{r:#?}");
}

/// A zero window advertised after the sender's FIN held nothing: the sender had nothing more.
#[test]
fn a_zero_window_after_the_senders_fin_is_no_wait() {
    let mut s = Script::new();
    s.data(1.0, A, 100);
    let (a, b) = (s.seq[0], s.seq[1]);
    s.raw(2 * MS, A, a, b, TcpFlags::ACK | TcpFlags::FIN, 0, 512, None);
    s.raw(3 * MS, B, b, a + 1, TcpFlags::ACK, 0, 0, None);
    s.raw(5_000 * MS, B, b, a + 1, TcpFlags::ACK, 0, 0, None);
    let r = s.records();
    assert!(r.iter().all(|x| x.cause != Cause::RwndLimited), "{r:#?}");
}

/// One direction captured (A's packets only, though A's ACK numbers advance: B sent data the
/// capture never saw): a note once per flow, and no stall from gaps nothing can show.
#[test]
fn a_capture_of_one_direction_says_so_and_names_no_stall() {
    let mut s = Script::mid_connection();
    let mut ack = 7000u32;
    for k in 0..30u32 {
        let t = k as f64 * 60.0 + (k % 4) as f64 * 13.0;
        s.raw((t * MS as f64) as u64, A, s.seq[0], ack, TcpFlags::ACK | TcpFlags::PSH, 30, 512, None);
        s.seq[0] += 30;
        ack += 100;
    }
    let a = analyze_events(s.ev.clone(), Config::default());
    let f = &a.flows[0];
    assert!(counted(&f.stalls).is_empty(), "{:#?}", f.stalls);
    let notes: Vec<_> = f.notes.iter().filter(|n| n.contains("one direction only")).collect();
    assert_eq!(notes.len(), 1, "{:?}", f.notes);
}

/// A SYN answered by a RST-ACK (a SYN scan): nothing was resent, and the note says what
/// happened, not "the SYN or SYN-ACK was resent".
#[test]
fn a_syn_answered_by_a_reset_is_not_a_resend() {
    let mut s = Script::mid_connection();
    s.raw(0, A, 999, 0, TcpFlags::SYN, 0, 1024, Some(1460));
    s.raw(300_000, B, 0, 1000, TcpFlags::RST | TcpFlags::ACK, 0, 0, None);
    let a = analyze_events(s.ev.clone(), Config::default());
    let f = &a.flows[0];
    assert!(f.stalls.is_empty(), "{:#?}", f.stalls);
    assert!(!f.capture_note.contains("resent"), "{}", f.capture_note);
    assert!(f.capture_note.contains("not answered with a SYN-ACK"), "{}", f.capture_note);
}

/// A capture that left out the first round (watch --write: the handshake, then packets from
/// just before the first stall): B's reply acknowledges 591 bytes of A never captured, 0.3 ms
/// before A's next round begins. The round's own packets are all there (275 bytes, B's pure ACK
/// 43.6 ms later, the held 316), so its gap is Nagle's against the delayed ACK, not the
/// capture's: bytes skipped before a gap began are not skipped during it (`capture_skipped`
/// compares the unseen bytes at the gap's start, `Dir::settle_ack_ahead`).
#[test]
fn bytes_skipped_before_a_gap_do_not_make_it_the_captures() {
    let mut s = Script::new();
    let (a, b) = (s.seq[0], s.seq[1]);
    let us = 1_000;
    s.raw(6_572 * us, B, b, a + 591, TcpFlags::ACK | TcpFlags::PSH, 100, 512, None);
    s.raw(6_579 * us, A, a + 591, b + 100, TcpFlags::ACK, 0, 512, None);
    s.raw(6_871 * us, A, a + 591, b + 100, TcpFlags::ACK | TcpFlags::PSH, 275, 512, None);
    s.raw(50_509 * us, B, b + 100, a + 866, TcpFlags::ACK, 0, 512, None);
    s.raw(50_527 * us, A, a + 866, b + 100, TcpFlags::ACK | TcpFlags::PSH, 316, 512, None);
    s.raw(50_535 * us, B, b + 100, a + 1182, TcpFlags::ACK, 0, 512, None);
    s.raw(50_581 * us, B, b + 100, a + 1182, TcpFlags::ACK | TcpFlags::PSH, 100, 512, None);
    let r = s.records();
    let first = r.iter().find(|x| x.length.as_nanos() > 40 * MS).expect("the 43.6 ms gap has a record");
    assert_eq!((first.cause, first.kind), (Cause::NagleDelayedAck, RecordKind::Stall), "{r:#?}");
    assert!(!first.detail.contains("the capture skipped"), "{r:#?}");
    // The capture's skip is still counted and said where it happened (the flow's summary).
    let a = analyze_events(s.ev.clone(), Config::default());
    assert_eq!(a.flows[0].dirs[0].acked_unseen_bytes, 591, "{:?}", a.flows[0].dirs[0]);
}
