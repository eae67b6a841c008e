//! Packet scripts for the model's rules. Each test names the rule (kernel function or RFC
//! section) it checks; times are milliseconds, the link is 50 us each way.

use crate::script::{Script, A, B};

/// Linux Nagle with Minshall's modification (tcp_nagle_check + tcp_minshall_check,
/// net/ipv4/tcp_output.c): full segments in flight do not hold a small tail; a small segment in
/// flight holds the next one until it is acknowledged.
#[test]
fn linux_minshall_lets_the_tail_go_after_full_segments() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write(A, 1448 * 2 + 100);
    s.write(A, 10); // a small segment (100 B) is unacknowledged: held
    s.expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448).expect_segment(0.0, A, 100);
    // First data grants quick ACKs (tcp_incr_quickack, TCP_MAX_QUICKACKS): B ACKs each at once.
    s.expect_ack(0.05, B).expect_ack(0.05, B).expect_ack(0.05, B);
    s.expect_segment(0.1, A, 10);
}

/// RFC 896 / RFC 9293 3.7.4 classic Nagle: the small tail waits while anything is
/// unacknowledged; RFC 1122 4.2.3.2: the second full segment is ACKed at once.
#[test]
fn classic_nagle_holds_the_tail_until_everything_is_acked() {
    let mut s = Script::new("rfc-classic", 1448);
    s.at(0.0).write(A, 1448 * 2 + 100);
    s.write(A, 10); // merged into the held tail
    s.expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448);
    s.expect_ack(0.05, B);
    s.expect_segment(0.1, A, 110);
}

/// RFC 1122 4.2.3.2 on the classic profile: a lone full segment waits for the 200 ms delayed-ACK
/// timer; that is seed 004's stall when the segment count is odd.
#[test]
fn classic_lone_segment_waits_for_the_200ms_timer() {
    let mut s = Script::new("rfc-classic", 1448);
    s.at(0.0).write(A, 1448 * 3 + 88);
    s.expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448);
    s.expect_ack(0.05, B); // ACK for the first two (every second full segment)
    s.expect_nothing_until(200.0); // third segment unacked, 88 B held by Nagle
    s.expect_ack(200.05, B);
    s.expect_segment(200.1, A, 88);
}

/// XNU tcp_output: a small segment may leave when the last segment sent was full-size
/// (TF_MAXSEGSNT, Mac OS X 10.5+, seed 004), but not after a small one.
#[test]
fn xnu_sends_small_after_full_but_not_after_small() {
    let mut s = Script::new("macos", 1448);
    s.at(0.0).write(A, 1448 * 2 + 100);
    s.write(A, 10); // the last segment sent (100 B) was small: held
    s.expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448).expect_segment(0.0, A, 100);
    // XNU forces ACKs for the first 16 segments (TCP_FORCED_ACKS_COUNT).
    s.expect_ack(0.05, B).expect_ack(0.05, B).expect_ack(0.05, B);
    s.expect_segment(0.1, A, 10);
}

/// Linux pingpong (tcp_event_data_sent: a reply within ato of the last data received) turns
/// off quick ACKs (tcp_in_quickack_mode: quick && !pingpong); the next small segment is ACKed
/// by the delayed-ACK timer after TCP_ATO_MIN = 40 ms (tcp_send_delayed_ack, __tcp_ack_snd_check).
#[test]
fn linux_interactive_connection_delays_the_ack_40ms() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B);
    s.at(1.0).read(B, 10).write(B, 10); // reply within ato: B enters pingpong
    s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
    s.at(2.0).write(A, 10);
    s.expect_segment(2.0, A, 10);
    s.expect_nothing_until(42.0);
    s.expect_ack(42.05, B);
    // tcp_delack_timer_handler: the timer firing in pingpong mode leaves it; quick ACKs resume.
    s.at(50.0).write(A, 10);
    s.expect_segment(50.0, A, 10).expect_ack(50.05, B);
}

/// __tcp_sock_set_quickack (net/ipv4/tcp.c): TCP_QUICKACK after a read leaves pingpong and
/// sends the pending ACK (tcp_cleanup_rbuf with ICSK_ACK_PUSHED); a plain read does not.
#[test]
fn linux_quickack_after_read_flushes_the_delayed_ack() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B);
    s.at(1.0).read(B, 10).write(B, 10);
    s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
    s.at(2.0).write(A, 10);
    s.expect_segment(2.0, A, 10);
    s.at(3.0).read(B, 10); // pingpong: reading alone sends nothing
    s.expect_nothing_until(3.5);
    s.quickack(B);
    s.expect_ack(3.5, B);
}

/// __tcp_ack_snd_check: more than one rcv_mss unacknowledged sends the ACK at once, even in
/// pingpong mode (rcv_mss from tcp_measure_rcv_mss).
#[test]
fn linux_acks_two_full_segments_at_once() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B);
    s.at(1.0).read(B, 10).write(B, 10);
    s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
    s.at(2.0).write(A, 2896);
    s.expect_segment(2.0, A, 1448).expect_segment(2.0, A, 1448);
    s.expect_ack(2.05, B);
}

/// __tcp_cleanup_rbuf: with the quick-ACK budget spent (tcp_dec_quickack_mode) and the
/// connection not interactive, a read that drains a queue holding a small (PSH) segment sends
/// the pending ACK (ICSK_ACK_PUSHED && !pingpong).
#[test]
fn linux_ack_on_read_when_not_interactive() {
    let mut s = Script::new("linux", 1448);
    s.nodelay(A, true);
    for i in 0..16 {
        s.at(f64::from(i)).write(A, 10);
        s.expect_segment(f64::from(i), A, 10).expect_ack(f64::from(i) + 0.05, B);
    }
    s.at(16.0).write(A, 10);
    s.expect_segment(16.0, A, 10);
    s.expect_nothing_until(20.0); // budget spent: the ACK is delayed
    s.read(B, 170);
    s.expect_ack(20.0, B);
}

/// TCP_CORK (__tcp_sock_set_cork, net/ipv4/tcp.c): nothing sub-MSS leaves while corked;
/// uncorking pushes the merged data as one segment.
#[test]
fn cork_merges_writes_until_uncorked() {
    let mut s = Script::new("linux", 1448);
    s.cork(A, true).write(A, 100).write(A, 200);
    s.expect_nothing_until(5.0);
    s.cork(A, false);
    s.expect_segment(5.0, A, 300);
}

/// Corked data with nothing in flight is released by the probe timer (__tcp_push_pending_frames
/// -> tcp_check_probe_timer; tcp_probe_timer -> tcp_write_wakeup) after
/// tcp_probe0_base = max(RTO, TCP_RTO_MIN); RTO = srtt + TCP_RTO_MIN here.
#[test]
fn corked_data_waits_for_the_probe_timer() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B); // an RTT sample: RTO ~200.1 ms
    s.at(1.0).cork(A, true).write(A, 100);
    s.expect_nothing_until(200.0);
    s.expect_segment(201.1, A, 100);
}

/// MSG_MORE (tcp_push: flags & MSG_MORE -> TCP_NAGLE_CORK): the write is held; the next write
/// without it pushes both as one segment.
#[test]
fn msg_more_holds_until_the_last_write() {
    let mut s = Script::new("linux", 1448);
    s.at(0.0).write_more(A, 100);
    s.expect_nothing_until(1.0);
    s.write(A, 50);
    s.expect_segment(1.0, A, 150);
}

/// tcp_cwnd_test (RFC 5681 3.1, RFC 6928 IW 10): with Nagle off, the 11th segment waits for
/// an ACK to open the congestion window.
#[test]
fn initial_window_of_ten_segments() {
    let mut s = Script::new("linux", 1448);
    s.nodelay(A, true);
    for _ in 0..12 {
        s.write(A, 100);
    }
    for _ in 0..10 {
        s.expect_segment(0.0, A, 100);
    }
    for _ in 0..10 {
        s.expect_ack(0.05, B);
    }
    // The first ACK opens the window; the two held writes share the unsent tail skb.
    s.expect_segment(0.1, A, 200);
}

/// Seed 001 on a current kernel: NODELAY, then per message NODELAY off + CORK on ... CORK off +
/// NODELAY on merges the writes, because tcp_skb_entail clears the TCP_NAGLE_PUSH that
/// __tcp_sock_set_nodelay left set.
#[test]
fn nodelay_then_cork_merges_on_current_kernels() {
    let mut s = Script::new("linux", 1448);
    s.nodelay(A, true);
    s.at(1.0).nodelay(A, false).cork(A, true).write(A, 275).write(A, 24).write(A, 292);
    s.cork(A, false).nodelay(A, true);
    s.expect_segment(1.0, A, 591);
}

/// RFC 6298 2.1 / 5.4-5.5 (Linux tcp_retransmit_timer): a lost segment with no RTT sample yet is
/// resent after the initial RTO of 1 s, and the timer backs off (doubles) for the next loss.
#[test]
fn lost_segment_is_resent_after_the_rto() {
    let mut s = Script::new("linux", 1448);
    s.lose_next(A, 2);
    s.at(0.0).write(A, 100);
    s.expect_segment(0.0, A, 100);
    s.expect_nothing_until(1000.0);
    s.expect_segment(1000.0, A, 100); // lost again
    s.expect_nothing_until(3000.0);
    s.expect_segment(3000.0, A, 100).expect_ack(3000.05, B);
}

/// RFC 5681 3.2 fast retransmit: the third duplicate ACK resends the missing segment without
/// waiting for the RTO (the model's receiver drops out-of-order data and ACKs it at once, as
/// tcp_data_queue does for data beyond rcv_nxt).
#[test]
fn third_duplicate_ack_triggers_fast_retransmit() {
    let mut s = Script::new("linux", 1000);
    s.nodelay(A, true);
    s.lose_next(A, 1);
    s.at(0.0).write(A, 5000);
    for _ in 0..5 {
        s.expect_segment(0.0, A, 1000);
    }
    for _ in 0..4 {
        s.expect_ack(0.05, B); // duplicate ACKs for the hole
    }
    // Go-back-N from the hole: the window after fast retransmit is FlightSize / 2.
    s.expect_segment(0.1, A, 1000).expect_segment(0.1, A, 1000);
}

/// kernel/time/timer.c: with CONFIG_HZ = 250 a 40 ms delayed ACK is 10 ticks after the current
/// tick, rounded up one more tick (`calc_index`) so it never fires early: 40 to 44 ms.
#[test]
fn linux_timers_fire_on_the_next_tick() {
    let p = crate::Profile::builtin("linux").unwrap();
    assert_eq!(p.timer_hz, 250);
    let mut s = Script::pair(&p, &p, 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B);
    s.at(1.0).read(B, 10).write(B, 10);
    s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
    s.at(2.0).write(A, 10);
    s.expect_segment(2.0, A, 10);
    // Arrives at 2.05 ms (tick 0): fires at tick 0 + 10 + 1 = 44 ms.
    s.expect_nothing_until(44.0);
    s.expect_ack(44.0, B);
}

/// Seed 001 on its 2.6 kernel: after an RTO of application-limited sending,
/// tcp_cwnd_application_limited moves cwnd to max(used, 2) (RFC 2861; 2.6's `2U` floor), so
/// with TCP_NODELAY the third write of a request waits for the interactive server's delayed ACK
/// (tcp_cwnd_test): a 40 ms stall even with Nagle off.
#[test]
fn linux_26_app_limited_cwnd_decays_to_two() {
    let mut s = Script::new("linux-2.6", 1448);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10).expect_ack(0.05, B); // RTT sample: RTO = srtt + 200 ms
    s.at(1.0).read(B, 10).write(B, 10); // B replies within ato: interactive (pingpong)
    s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
    assert_eq!(s.eps[A].cwnd, 3);
    s.at(300.0).read(A, 10).nodelay(A, true).write(A, 275).write(A, 24).write(A, 292);
    s.expect_segment(300.0, A, 275).expect_segment(300.0, A, 24);
    assert_eq!(s.eps[A].cwnd, 2, "decayed after an RTO of using one segment of three");
    s.expect_nothing_until(340.0);
    s.expect_ack(340.05, B);
    s.expect_segment(340.1, A, 292);
}

/// Seed 001 on its 2.6 kernel: TCP_NODELAY set TCP_NAGLE_PUSH and clearing it left the bit, so
/// NODELAY off + CORK on sends every write at once (the current kernel merges them: see
/// nodelay_then_cork_merges_on_current_kernels).
#[test]
fn linux_26_sticky_push_defeats_cork() {
    let mut s = Script::new("linux-2.6", 1448);
    s.nodelay(A, true);
    s.at(1.0).nodelay(A, false).cork(A, true).write(A, 275).write(A, 24).write(A, 292);
    s.expect_segment(1.0, A, 275).expect_segment(1.0, A, 24).expect_segment(1.0, A, 292);
}

/// 4720852ed9af ("tcp: fix delayed ACKs for MSS boundary condition", 6.6): tcp_measure_rcv_mss
/// marks ICSK_ACK_PUSHED for a full-sized segment with PSH, so __tcp_cleanup_rbuf ACKs it when
/// the application reads it (quick ACKs spent, not interactive). Linux 6.1 as released waits
/// for the delayed-ACK timer (TCP_ATO_MIN, tcp_send_delayed_ack). `tcpstall kernel` measures
/// the same exchange on the running kernel ("one full segment with PSH, read").
#[test]
fn full_mss_psh_segment_is_acked_on_read_since_6_6() {
    for (profile, acked_on_read) in [("linux", true), ("linux:6.6", true), ("linux:6.1", false), ("linux:5.10", false)]
    {
        let mut s = Script::new(profile, 1448);
        s.nodelay(A, true);
        for i in 0..16 {
            s.at(f64::from(i)).write(A, 10);
            s.expect_segment(f64::from(i), A, 10).expect_ack(f64::from(i) + 0.05, B);
        }
        s.at(20.0).read(B, 160);
        s.at(30.0).write(A, 1448);
        s.expect_segment(30.0, A, 1448);
        s.expect_nothing_until(34.0);
        s.read(B, 1448);
        if acked_on_read {
            s.expect_ack(34.0, B);
        } else {
            s.expect_nothing_until(70.0);
            s.expect_ack(70.05, B);
        }
    }
}

/// 059217c18be6 ("tcp: fix quick-ack counting to count actual ACKs of new data", 6.6):
/// tcp_dec_quickack_mode spends a quick ACK per ACK of new data only. Before it, every skb sent
/// with the ACK flag spent tcp_skb_pcount of them, data included: a receiver that sent 10 data
/// segments has 5 quick ACKs left instead of 15 (TCP_MAX_QUICKACKS = 16, one spent on the first
/// segment). `tcpstall kernel` measures the same exchange ("quick ACKs spent").
#[test]
fn data_segments_sent_spend_quick_acks_before_6_6() {
    for (profile, left) in [("linux", 15), ("linux:6.6", 15), ("linux:6.1", 5), ("linux:4.19", 5)] {
        let mut s = Script::new(profile, 1448);
        s.nodelay(A, true).nodelay(B, true);
        s.at(0.0).write(A, 1);
        s.expect_segment(0.0, A, 1).expect_ack(0.05, B);
        // B replies long after ato (40 ms): not a pingpong exchange (tcp_event_data_sent).
        for i in 0..10 {
            let t = 100.0 + f64::from(i);
            s.at(t).write(B, 100);
            s.expect_segment(t, B, 100).expect_ack(t + 0.05, A);
        }
        for i in 0..left {
            let t = 200.0 + f64::from(i);
            s.at(t).write(A, 1);
            s.expect_segment(t, A, 1).expect_ack(t + 0.05, B);
        }
        let t = 200.0 + f64::from(left);
        s.at(t).write(A, 1);
        s.expect_segment(t, A, 1);
        s.expect_nothing_until(t + 30.0); // the next one waits for the delayed-ACK timer
    }
}

/// 4a41f453bedf (5.1) made three replies within ato the pingpong threshold; 4d8f24eeedc5
/// reverted it to one (tcp_event_data_sent, inet_csk_in_pingpong_mode). After one exchange the
/// next request's ACK is delayed on 6.x and 4.19, and sent at once on 5.10 as released.
#[test]
fn pingpong_threshold_by_era() {
    for (profile, delayed) in [("linux", true), ("linux:4.19", true), ("linux:5.10", false), ("linux:6.1", true)] {
        let mut s = Script::new(profile, 1448);
        s.at(0.0).write(A, 10);
        s.expect_segment(0.0, A, 10).expect_ack(0.05, B);
        s.at(1.0).read(B, 10).write(B, 10);
        s.expect_segment(1.0, B, 10).expect_ack(1.05, A);
        s.at(2.0).write(A, 10);
        s.expect_segment(2.0, A, 10);
        if delayed {
            s.expect_nothing_until(42.0);
            s.expect_ack(42.05, B);
        } else {
            s.expect_ack(2.05, B);
        }
    }
}

/// The handshake's RTT sample (client: tcp_ack_update_rtt on the SYN-ACK; server:
/// tcp_synack_rtt_meas): the first write on a fresh connection, corked, is released by the
/// probe timer after tcp_probe0_base = max(RTO, TCP_RTO_MIN) ~ 200 ms, not after
/// TCP_TIMEOUT_INIT = 1 s (issue 13 gap 1; the kernel sends it at ~200 ms under packetdrill).
#[test]
fn handshake_rtt_sample_releases_a_first_corked_write_at_200ms() {
    let mut s = Script::new("linux", 1448);
    s.handshake();
    s.at(0.0).cork(A, true).write(A, 100);
    s.expect_nothing_until(200.0);
    s.expect_segment(200.1, A, 100);
    // Without the sample (the model before this rule) the RTO is still TCP_TIMEOUT_INIT.
    let mut s = Script::new("linux", 1448);
    s.at(0.0).cork(A, true).write(A, 100);
    s.expect_nothing_until(999.0);
}

/// tcp_send_delayed_ack bounds the timeout by max(srtt, TCP_DELACK_MIN) once an RTT sample
/// exists, and the handshake gives one: a receiver that never sends keeps ACKing after 40 ms
/// while tcp_delack_timer_handler doubles ato (`tcpstall kernel` measures tcpi_ato 80 -> 160 ->
/// ~200 ms with 40-44 ms delays on 6.18).
#[test]
fn handshake_rtt_keeps_one_way_delayed_acks_at_40ms() {
    let mut s = Script::new("linux", 1448);
    s.handshake();
    s.nodelay(A, true);
    for i in 0..16 {
        s.at(f64::from(i)).write(A, 10);
        s.expect_segment(f64::from(i), A, 10).expect_ack(f64::from(i) + 0.05, B);
    }
    let mut t = 20.0;
    for _ in 0..4 {
        s.at(t).write(A, 10);
        s.expect_segment(t, A, 10);
        s.expect_nothing_until(t + 40.0);
        s.expect_ack(t + 40.05, B);
        t += 41.0;
    }
    assert!(s.eps[B].ato > 100_000_000, "ato grew: {}", s.eps[B].ato);
}

/// FreeBSD, from freebsd-net/tcp-testsuite `rcv-data-segments/overlapping-050-075.pkt` (and the
/// other `rcv-data-segments/*.pkt`): after the handshake one in-order segment of 99 bytes
/// arrives (`+0.00 < . 1:100(99)`) and the script expects no ACK for it (the next line the
/// stack writes is the ACK of an out-of-order segment): the ACK is delayed (tcp_input.c
/// DELAY_ACK, net.inet.tcp.delayed_ack=1) and the delayed-ACK callout fires after delacktime,
/// TCPTV_DELACK = hz/25, 40 ms (sys/netinet/tcp_timer.h).
#[test]
fn freebsd_delays_the_ack_of_one_in_order_segment_for_delacktime() {
    let mut s = Script::new("freebsd", 1448);
    s.at(0.0).write(A, 99);
    s.expect_segment(0.0, A, 99);
    s.expect_nothing_until(40.0);
    s.expect_ack(40.05, B);
}

/// FreeBSD, sys/netinet/tcp_input.c DELAY_ACK(tp, tlen): an ACK is delayed only while the
/// delayed-ACK timer is not already running (`!tcp_timer_active(tp, TT_DELACK)`), so the second
/// full segment is ACKed at once (RFC 1122 4.2.3.2: at least every second full-sized segment).
#[test]
fn freebsd_acks_every_second_segment_at_once() {
    let mut s = Script::new("freebsd", 1448);
    s.at(0.0).write(A, 1448 * 2);
    s.expect_segment(0.0, A, 1448).expect_segment(0.0, A, 1448);
    s.expect_ack(0.05, B);
}

/// Spend the receiver's quick ACKs (TCP_MAX_QUICKACKS = 16, tcp_incr_quickack) with one-byte
/// NODELAY writes, each ACKed at once, as `tcpstall kernel`'s `count_quick` does.
fn spend_quick_acks(s: &mut Script) {
    s.handshake();
    s.nodelay(A, true);
    for i in 0..16 {
        s.at(f64::from(i)).write(A, 1);
        s.expect_segment(f64::from(i), A, 1).expect_ack(f64::from(i) + 0.05, B);
    }
}

/// RFC 8985 7.2-7.3, Linux tcp_schedule_loss_probe / tcp_send_loss_probe (6ba8a3b19e76, 3.10):
/// two small segments in flight to a receiver that delays its ACK; the probe timeout is twice
/// srtt plus TCP_TIMEOUT_MIN (more than one segment out), so the last segment is resent ~2 ms later
/// (srtt 0.1 ms here, timers exact) and the duplicate is ACKed at once (tcp_data_queue ->
/// tcp_enter_quickack_mode), long before the 40 ms delayed-ACK timer. `tcpstall kernel`
/// measures the same exchange ("tail-loss probe": ~20 ms on 6.18 loopback, where srtt holds
/// earlier delayed ACKs and a tick is 4 ms).
#[test]
fn tail_loss_probe_resends_the_last_segment_before_the_delayed_ack() {
    let mut s = Script::new("linux", 1448);
    spend_quick_acks(&mut s);
    s.at(20.0).write(A, 10).write(A, 10);
    s.expect_segment(20.0, A, 10).expect_segment(20.0, A, 10);
    s.expect_nothing_until(22.2);
    s.expect_segment(22.2, A, 10); // the probe: the last segment again
    s.expect_ack(22.25, B); // a duplicate is ACKed at once
    s.expect_nothing_until(100.0);
    assert_eq!(s.eps[A].c.loss_probes, 1);
    // Stacks without TLP (FreeBSD's default stack, rfc-classic) wait for the delayed ACK.
    let mut s = Script::new("freebsd", 1448);
    s.nodelay(A, true);
    s.at(0.0).write(A, 10);
    s.expect_segment(0.0, A, 10);
    s.expect_nothing_until(40.0);
    s.expect_ack(40.05, B);
}

/// tcp_schedule_loss_probe adds TCP_RTO_MIN (200 ms), not TCP_TIMEOUT_MIN, when only one segment
/// is out: room for the peer's delayed ACK, so a lone small segment is ACKed by the 40 ms timer
/// and no probe is sent.
#[test]
fn one_segment_in_flight_waits_for_the_delayed_ack_not_a_probe() {
    let mut s = Script::new("linux", 1448);
    spend_quick_acks(&mut s);
    s.at(20.0).write(A, 10);
    s.expect_segment(20.0, A, 10);
    s.expect_nothing_until(60.0);
    s.expect_ack(60.05, B);
    assert_eq!(s.eps[A].c.loss_probes, 0);
}

/// tcp_send_loss_probe sends new data first when there is any (tcp_write_xmit(sk, mss,
/// TCP_NAGLE_OFF, 2, ...): Nagle ignored): a Nagle-held write behind two small segments in flight
/// leaves with the probe, after 2 srtt + TCP_TIMEOUT_MIN rather than after the peer's delayed ACK.
#[test]
fn tail_loss_probe_sends_nagle_held_data() {
    let mut s = Script::new("linux", 1448);
    spend_quick_acks(&mut s);
    s.at(20.0).write(A, 10).write(A, 10).nodelay(A, false).write(A, 10);
    s.expect_segment(20.0, A, 10).expect_segment(20.0, A, 10);
    s.expect_nothing_until(22.2);
    s.expect_segment(22.2, A, 10); // the held write, as the probe
    s.expect_nothing_until(60.0); // 30 bytes: still under one rcv_mss, the ACK is delayed
    s.expect_ack(60.05, B);
}
