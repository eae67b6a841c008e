//! The receiving half of an endpoint: when to ACK (delayed ACK, quick ACKs, pingpong, ACK on
//! read, TCP_QUICKACK).

use super::*;

impl Tcp {
    /// setsockopt(TCP_QUICKACK, 1): __tcp_sock_set_quickack (tcp.c) leaves pingpong mode and,
    /// if an ACK is scheduled, marks ICSK_ACK_PUSHED and runs tcp_cleanup_rbuf(sk, 1). It does
    /// not refill the quick-ACK budget. Returns false when the profile has no such option.
    pub(crate) fn set_quickack(&mut self, now: u64, out: &mut Vec<Action>) -> bool {
        if !self.rcv.quickack_sockopt {
            return false;
        }
        self.pingpong = 0;
        if self.ack_sched {
            self.pushed = true;
            self.cleanup_rbuf(now, 1, out);
        }
        true
    }

    /// recv(2) of at most `max` bytes; returns how many were copied.
    pub(crate) fn app_read(&mut self, now: u64, max: u64, out: &mut Vec<Action>) -> u64 {
        let n = self.readable().min(max);
        self.copied += n;
        if n > 0 {
            self.cleanup_rbuf(now, n, out);
        }
        n
    }

    /// __tcp_cleanup_rbuf (tcp.c): after a read, ACK if more than one rcv_mss is unacknowledged,
    /// or the read drained the queue and (two small segments were seen: ICSK_ACK_PUSHED2, or
    /// one and the connection is not interactive: ICSK_ACK_PUSHED && !pingpong).
    pub(super) fn cleanup_rbuf(&mut self, now: u64, copied: u64, out: &mut Vec<Action>) {
        if self.rcv.policy != AckPolicy::Linux || !self.ack_sched {
            return;
        }
        let drained = self.copied == self.rcv_nxt;
        if self.rcv_nxt - self.rcv_wup > u64::from(self.rcv_mss)
            || (copied > 0 && (self.pushed2 || (self.pushed && !self.in_pingpong())) && drained)
        {
            self.send_ack(now, false, out);
        }
    }

    /// In-order data arrived.
    pub(super) fn data_recv(&mut self, now: u64, seg: &Seg) {
        self.ack_sched = true; // inet_csk_schedule_ack
        match self.rcv.policy {
            AckPolicy::Linux => {
                self.measure_rcv_mss(seg);
                // tcp_event_data_recv (tcp_input.c): the adaptive ato and the quick-ACK budget.
                let ato_min = self.delack_ato_min();
                if self.ato == 0 {
                    self.incr_quickack();
                    self.ato = ato_min;
                } else if let Some(lr) = self.lrcvtime {
                    let m = now - lr;
                    if m <= ato_min / 2 {
                        self.ato = self.ato / 2 + ato_min / 2;
                    } else if m < self.ato {
                        self.ato = (self.ato / 2 + m).min(self.rto);
                    } else if m > self.rto && self.rcv.quickack_after_idle {
                        // "Too long gap": ACK quickly again.
                        self.incr_quickack();
                    }
                }
                self.lrcvtime = Some(now);
            }
            AckPolicy::Count => {
                // RFC 1122 4.2.3.2: count (full-sized) segments towards "ACK every second".
                if !self.rcv.count_full_only || seg.len >= self.advmss.min(self.mss_peer_estimate()) {
                    self.segs_unacked += 1;
                }
                if self.lrcvtime.is_none() {
                    self.quick = self.rcv.quickack_budget;
                } else if let Some(lr) = self.lrcvtime {
                    if self.rcv.quickack_after_idle && now - lr > self.rto {
                        self.quick = self.rcv.quickack_budget;
                    }
                }
                self.lrcvtime = Some(now);
            }
        }
    }

    /// The full segment size the peer sends with: its MSS equals ours (symmetric links).
    pub(super) fn mss_peer_estimate(&self) -> u32 {
        self.mss
    }

    /// tcp_incr_quickack (tcp_input.c): quick = max(quick, min(rcv_wnd / (2 * rcv_mss) or 2 if
    /// that is 0, TCP_MAX_QUICKACKS)).
    pub(super) fn incr_quickack(&mut self) {
        let mut q = self.rcv.rcv_wnd / (2 * self.rcv_mss);
        if q == 0 {
            q = 2;
        }
        q = q.min(self.rcv.quickack_budget);
        if q > self.quick {
            self.quick = q;
        }
    }

    /// tcp_measure_rcv_mss (tcp_input.c).
    pub(super) fn measure_rcv_mss(&mut self, seg: &Seg) {
        let lss = self.last_seg_size;
        self.last_seg_size = 0;
        let len = seg.len;
        if len >= self.rcv_mss {
            self.rcv_mss = len.min(self.advmss);
            // 4720852ed9af (6.6) "tcp: fix delayed ACKs for MSS boundary condition": a full-sized
            // segment with PSH marks ICSK_ACK_PUSHED, so reading it ACKs at once.
            if self.rcv.full_psh_pushed && seg.psh {
                self.pushed = true;
            }
        } else {
            let full = len + self.hdr;
            // TCP_MSS_DEFAULT (536) + header, or TCP_MIN_MSS (88) + header without PSH.
            if full >= 536 + 20 || (full >= 88 + 20 && !seg.psh) {
                self.last_seg_size = len;
                if len == lss {
                    self.rcv_mss = len;
                    return;
                }
            }
            if self.pushed {
                self.pushed2 = true;
            }
            self.pushed = true;
        }
    }

    pub(super) fn ack_snd_check(&mut self, now: u64, ack_now: bool, seg: &Seg, out: &mut Vec<Action>) {
        match self.rcv.policy {
            AckPolicy::Linux => {
                // __tcp_ack_snd_check: more than one rcv_mss unacknowledged (window assumed not to
                // shrink), quick-ACK mode (quick && !pingpong: tcp_in_quickack_mode), or ACK now.
                let quick_mode = self.quick > 0 && !self.in_pingpong();
                if self.rcv_nxt - self.rcv_wup > u64::from(self.rcv_mss) || quick_mode || ack_now {
                    self.send_ack(now, false, out);
                } else {
                    self.send_delayed_ack(now, out);
                }
            }
            AckPolicy::Count => {
                let _ = seg;
                if ack_now || self.quick > 0 || self.segs_unacked >= self.rcv.ack_every {
                    if self.quick > 0 && !ack_now {
                        self.quick -= 1; // XNU forced ACKs at start
                    }
                    self.send_ack(now, false, out);
                } else if !self.armed(TimerId::Delack) {
                    let at = now + self.rcv.delack_min_ms * MS;
                    self.arm(now, TimerId::Delack, at, out);
                }
            }
        }
    }

    /// tcp_send_delayed_ack (tcp_output.c).
    pub(super) fn send_delayed_ack(&mut self, now: u64, out: &mut Vec<Action>) {
        let ato_min = self.delack_ato_min();
        let mut ato = self.ato;
        if ato > ato_min {
            let mut max_ato = 500 * MS; // HZ/2
            if self.in_pingpong() || self.pushed {
                max_ato = self.rcv.delack_max_ms * MS; // TCP_DELACK_MAX
            }
            // "Slow path, intersegment interval is high": bound by srtt, at least TCP_DELACK_MIN.
            if let Some(s) = self.srtt {
                let rtt = s.max(ato_min);
                if rtt < max_ato {
                    max_ato = rtt;
                }
            }
            ato = ato.min(max_ato);
        }
        ato = ato.min(self.rcv.delack_max_ms * MS); // tcp_delack_max
        let mut at = now + ato;
        if let Some(old) = self.timers[TimerId::Delack as usize].at {
            // "If delack timer is about to expire, send ACK now."
            if old <= now + (ato >> 2) {
                self.send_ack(now, false, out);
                return;
            }
            // Use the new timeout only if there wasn't an older one earlier.
            if old <= at {
                at = old;
                if self.timers[TimerId::Delack as usize].at == Some(at) {
                    return;
                }
            }
        }
        self.arm(now, TimerId::Delack, at, out);
    }

    /// Pure ACK now (tcp_send_ack).
    pub(super) fn send_ack(&mut self, _now: u64, by_timer: bool, out: &mut Vec<Action>) {
        let delack_since = by_timer.then_some(self.timers[TimerId::Delack as usize].armed_at);
        let seg = Seg { seq: self.snd_nxt, len: 0, ack: self.rcv_nxt, psh: false, delack_since };
        self.count_tx(&seg);
        self.ack_sent(1);
        out.push(Action::Tx(seg));
    }

    /// tcp_event_ack_sent: tcp_dec_quickack_mode, then clear the pending ACK and its timer.
    /// `pkts` is tcp_skb_pcount of the segment sent (1 in the model, pure ACKs included).
    pub(super) fn ack_sent(&mut self, pkts: u32) {
        // include/net/tcp.h tcp_dec_quickack_mode. Since 059217c18be6 (6.6) one quick ACK is
        // spent per ACK of new data (`pkts = inet_csk_ack_scheduled(sk) ? 1 : 0`); before it,
        // `pkts` segments of every skb sent with the ACK flag, data segments included.
        let spent = if self.rcv.quickack_counts_data_segs { pkts } else { u32::from(self.ack_sched) };
        if self.rcv.policy == AckPolicy::Linux && self.quick > 0 && spent > 0 {
            if spent >= self.quick {
                self.quick = 0;
                self.ato = self.delack_ato_min(); // "Leaving quickack mode we deflate ATO."
            } else {
                self.quick -= spent;
            }
        }
        self.ack_sched = false;
        self.pushed = false;
        self.pushed2 = false;
        self.segs_unacked = 0;
        self.rcv_wup = self.rcv_nxt;
        self.cancel(TimerId::Delack);
    }
}
