//! The sending half of an endpoint: application writes and socket options that push, Nagle
//! and cork, transmission, ACK processing, RTT and cwnd.

use super::*;

impl Tcp {
    // ------------------------------------------------------------------ application calls

    /// send(2) of `len` bytes (`more` = MSG_MORE), already admitted to the send buffer.
    /// `force_push` is the push Linux does before sleeping on a full send buffer
    /// (`tcp_sendmsg_locked` -> `tcp_push(..., TCP_NAGLE_PUSH, ...)`).
    pub(crate) fn app_write(&mut self, now: u64, len: u64, more: bool, force_push: bool, out: &mut Vec<Action>) {
        if len == 0 {
            return;
        }
        // tcp_skb_entail (tcp.c) clears TCP_NAGLE_PUSH when a new skb is queued; a write that
        // fits in the unsent tail skb is merged into it instead (tcp_sendmsg_locked).
        if self.unsent() == 0 || self.tail_len >= self.size_goal {
            if !self.snd.sticky_nagle_push {
                self.nonagle &= !NAGLE_PUSH;
            }
            self.tail_len = 0;
        }
        self.write_end += len;
        self.tail_len = (self.tail_len + len - 1) % self.size_goal + 1;
        // tcp_push (tcp.c): MSG_MORE pushes with TCP_NAGLE_CORK instead of tp->nonagle.
        let nonagle = if force_push {
            NAGLE_PUSH
        } else if more && self.snd.msg_more {
            NAGLE_CORK
        } else {
            self.nonagle
        };
        self.push(now, nonagle, Trigger::App, out);
    }

    /// setsockopt(TCP_NODELAY): __tcp_sock_set_nodelay (tcp.c). Setting it also pushes what is
    /// pending with TCP_NAGLE_PUSH; clearing it leaves TCP_NAGLE_PUSH set until the next skb is
    /// queued (tcp_skb_entail).
    pub(crate) fn set_nodelay(&mut self, now: u64, on: bool, out: &mut Vec<Action>) {
        if on {
            self.nonagle |= NAGLE_OFF | NAGLE_PUSH;
            let n = self.nonagle;
            self.push(now, n, Trigger::App, out);
        } else {
            self.nonagle &= !NAGLE_OFF;
        }
    }

    /// setsockopt(TCP_CORK) (Linux __tcp_sock_set_cork; TCP_NOPUSH on BSD-derived profiles).
    /// Returns false when the profile has no such option (the call is ignored).
    pub(crate) fn set_cork(&mut self, now: u64, on: bool, out: &mut Vec<Action>) -> bool {
        if !self.snd.cork {
            return false;
        }
        if on {
            self.nonagle |= NAGLE_CORK;
        } else {
            self.nonagle &= !NAGLE_CORK;
            if self.nonagle & NAGLE_OFF != 0 {
                self.nonagle |= NAGLE_PUSH;
            }
            let n = self.nonagle;
            self.push(now, n, Trigger::App, out);
        }
        true
    }

    // ------------------------------------------------------------------ sender

    /// The Nagle test for a sub-MSS tail segment: Linux tcp_nagle_test / tcp_nagle_check
    /// (tcp_output.c): TCP_NAGLE_PUSH sends; TCP_NAGLE_CORK holds (cork overrides NODELAY);
    /// TCP_NAGLE_OFF sends; otherwise the profile's rule with data in flight.
    pub(super) fn nagle_hold(&self, nonagle: u8) -> Option<Hold> {
        if nonagle & NAGLE_PUSH != 0 {
            return None;
        }
        if nonagle & NAGLE_CORK != 0 {
            return Some(Hold::Cork);
        }
        if nonagle & NAGLE_OFF != 0 || self.flight.is_empty() {
            return None;
        }
        let hold = match self.snd.nagle {
            NagleRule::Off => false,
            // RFC 896: hold while any data is unacknowledged.
            NagleRule::Classic => true,
            // tcp_minshall_check: after(snd_sml, snd_una) && !after(snd_sml, snd_nxt).
            NagleRule::Minshall => self.snd_sml > self.snd_una && self.snd_sml <= self.snd_nxt,
            // XNU tcp_output: a small segment may go if the last one sent was full (TF_MAXSEGSNT).
            NagleRule::XnuMaxseg => !self.last_full,
        };
        hold.then_some(Hold::Nagle)
    }

    /// tcp_write_xmit (tcp_output.c): send what cwnd and Nagle allow; only the tail may be
    /// sub-MSS in this byte-stream model, so only the tail is subject to Nagle, as in Linux
    /// (`tcp_skb_is_last(sk, skb) ? nonagle : TCP_NAGLE_PUSH`).
    pub(crate) fn push(&mut self, now: u64, nonagle: u8, trig: Trigger, out: &mut Vec<Action>) {
        let mut sent_any = false;
        let mut hold = None;
        while self.snd_nxt < self.write_end {
            // tcp_cwnd_test: packets in flight below cwnd (RFC 5681 3.1).
            if self.packets_out() >= self.cwnd {
                hold = Some(Hold::Cwnd);
                break;
            }
            let len = (self.write_end - self.snd_nxt).min(u64::from(self.mss)) as u32;
            let retransmission = self.snd_nxt < self.snd_max;
            if len < self.mss && !retransmission {
                if let Some(h) = self.nagle_hold(nonagle) {
                    hold = Some(h);
                    break;
                }
            }
            self.transmit(now, len, out);
            sent_any = true;
        }
        self.note_release(now, sent_any, hold, trig, out);
        // tcp_write_xmit ends with tcp_cwnd_validate when it sent or hit cwnd, and schedules a
        // tail-loss probe when it sent (tcp_schedule_loss_probe(sk, false)).
        let cwnd_limited = self.packets_out() >= self.cwnd;
        if sent_any || cwnd_limited {
            self.cwnd_validate(now, cwnd_limited);
        }
        if sent_any {
            self.schedule_loss_probe(now, false, out);
        }
        // __tcp_push_pending_frames -> tcp_check_probe_timer: data left with nothing in flight
        // arms the probe timer at tcp_probe0_base = max(rto, TCP_RTO_MIN).
        if self.unsent() > 0
            && self.flight.is_empty()
            && self.snd.probe_timer
            && !self.armed(TimerId::Probe)
            && !self.armed(TimerId::Rto)
        {
            let at = now + self.rto.max(self.snd.probe_min_ms * MS);
            self.arm(now, TimerId::Probe, at, out);
        }
    }

    /// Ground truth for stall causes: held data that leaves because of a timer-driven event.
    pub(super) fn note_release(
        &mut self,
        _now: u64,
        sent_any: bool,
        hold: Option<Hold>,
        trig: Trigger,
        out: &mut Vec<Action>,
    ) {
        if sent_any {
            if let Some((since, h)) = self.held {
                // The stall is the part of the hold the timer is responsible for: from when the
                // peer armed its delayed-ACK timer, or this side its probe timer.
                let cause = match (trig, h) {
                    (Trigger::Ack { delack_since: Some(t) }, Hold::Nagle | Hold::Cork) => {
                        Some((Cause::NagleDelayedAck, since.max(t)))
                    }
                    (Trigger::Ack { delack_since: Some(t) }, Hold::Cwnd) => Some((Cause::CwndLimited, since.max(t))),
                    (Trigger::Probe, _) => {
                        Some((Cause::ProbeTimer, since.max(self.timers[TimerId::Probe as usize].armed_at)))
                    }
                    (Trigger::Rto, _) => Some((Cause::RetransmissionTimeout, since)),
                    (Trigger::Tlp, _) => {
                        Some((Cause::TailLossProbe, since.max(self.timers[TimerId::Tlp as usize].armed_at)))
                    }
                    _ => None,
                };
                if let Some((cause, since)) = cause {
                    out.push(Action::Release { cause, since });
                }
                self.held = None;
            }
        }
        match hold {
            Some(h) if self.unsent() > 0 => {
                let since = self.held.map(|(s, _)| s).unwrap_or(_now);
                self.held = Some((since, h));
            }
            _ => {
                if self.unsent() == 0 {
                    self.held = None;
                }
            }
        }
    }

    pub(super) fn transmit(&mut self, now: u64, len: u32, out: &mut Vec<Action>) {
        let seq = self.snd_nxt;
        let new_data = seq >= self.snd_max;
        if new_data && self.flight.is_empty() && self.snd.restart_after_idle {
            // tcp_slow_start_after_idle_check / tcp_cwnd_restart (RFC 2861, RFC 5681 4.1):
            // after an idle period longer than the RTO, cwnd restarts from min(IW, cwnd),
            // halved once per RTO of idleness.
            if let Some(last) = self.lsndtime {
                let idle = now.saturating_sub(last);
                if idle > self.rto {
                    let restart = self.snd.initial_cwnd.min(self.cwnd);
                    let mut cwnd = self.cwnd;
                    let mut delta = idle;
                    while delta > self.rto && cwnd > restart {
                        cwnd >>= 1;
                        delta -= self.rto;
                    }
                    self.cwnd = cwnd.max(restart);
                }
            }
        }
        self.snd_nxt += u64::from(len);
        if self.snd_nxt > self.snd_max {
            self.snd_max = self.snd_nxt;
        }
        // tcp_minshall_update: remember the end of the last small segment sent.
        if len < self.mss {
            self.snd_sml = self.snd_nxt;
        }
        self.last_full = len == self.mss;
        self.flight.push_back(Sent { end: self.snd_nxt, t: now });
        if !self.armed(TimerId::Rto) {
            // tcp_event_new_data_sent -> tcp_rearm_rto (RFC 6298 5.1).
            self.cancel(TimerId::Probe);
            let at = now + self.rto;
            self.arm(now, TimerId::Rto, at, out);
        }
        if new_data {
            // tcp_event_data_sent (tcp_output.c): a reply sent within ato of the last data
            // received counts towards pingpong (interactive) mode.
            if let Some(lr) = self.lrcvtime {
                if now - lr < self.ato && self.rcv.pingpong_thresh > 0 {
                    self.pingpong = (self.pingpong + 1).min(255);
                }
            }
            self.lsndtime = Some(now);
        } else {
            self.c.retransmits += 1;
        }
        let seg = Seg { seq, len, ack: self.rcv_nxt, psh: self.snd_nxt == self.write_end, delack_since: None };
        self.count_tx(&seg);
        self.ack_sent(1);
        out.push(Action::Tx(seg));
    }

    pub(super) fn count_tx(&mut self, seg: &Seg) {
        self.c.segs_out += 1;
        if seg.len > 0 {
            self.c.data_segs_out += 1;
            self.c.bytes_sent += u64::from(seg.len);
        }
        self.c.wire_bytes += u64::from(seg.len + self.hdr + 20 + 14);
    }

    /// Go back to snd_una (the model's receiver keeps no out-of-order queue).
    pub(super) fn go_back(&mut self) {
        self.cancel(TimerId::Tlp);
        self.snd_nxt = self.snd_una;
        self.flight.clear();
        self.high_rtx = self.snd_max;
    }

    /// tcp_ack (tcp_input.c): advance snd_una, sample RTT (RFC 6298), grow cwnd (RFC 5681 3.1),
    /// count duplicate ACKs (RFC 5681 3.2, fast retransmit on the third).
    pub(super) fn on_ack(&mut self, now: u64, seg: &Seg, out: &mut Vec<Action>) {
        if seg.ack > self.snd_una && seg.ack <= self.snd_max {
            let mut acked = 0u32;
            let mut sample = None;
            while let Some(s) = self.flight.front() {
                if s.end > seg.ack {
                    break;
                }
                // Karn's rule (RFC 6298 3): no sample from retransmitted data.
                if s.end > self.high_rtx {
                    sample = Some(now - s.t);
                }
                self.flight.pop_front();
                acked += 1;
            }
            self.snd_una = seg.ack;
            if self.snd_nxt < self.snd_una {
                self.snd_nxt = self.snd_una;
            }
            if let Some(r) = sample {
                self.rtt_sample(r);
            }
            if !self.cwnd_is_limited() {
                // tcp_cong_avoid callers: no growth while the application, not cwnd, limits
                // the sender (tcp_is_cwnd_limited; RFC 7661).
            } else if self.cwnd < self.ssthresh {
                // Slow start: cwnd += segments acknowledged (RFC 5681 3.1, tcp_slow_start).
                self.cwnd = self.cwnd.saturating_add(acked);
            } else {
                // Congestion avoidance: one segment per cwnd acknowledged (tcp_cong_avoid_ai).
                self.cwnd_cnt += acked;
                if self.cwnd_cnt >= self.cwnd {
                    self.cwnd_cnt -= self.cwnd;
                    self.cwnd += 1;
                }
            }
            self.cwnd = self.cwnd.min(65_535);
            self.dupacks = 0;
            // tcp_rearm_rto: stop when nothing is outstanding, else restart (RFC 6298 5.2, 5.3).
            self.cancel(TimerId::Rto);
            if !self.flight.is_empty() {
                let at = now + self.rto;
                self.arm(now, TimerId::Rto, at, out);
            }
            self.tlp_on_ack(now, seg.ack, out);
        } else if seg.ack == self.snd_una && seg.len == 0 && !self.flight.is_empty() {
            self.dupacks += 1;
            if self.dupacks == 3 {
                // RFC 5681 3.2: fast retransmit, ssthresh = max(FlightSize / 2, 2 SMSS).
                self.ssthresh = (self.packets_out() / 2).max(2);
                self.cwnd = self.ssthresh;
                self.go_back();
            }
        }
    }

    /// The RTT sample of the three-way handshake, which the model does not replay (connections
    /// start established): the client times its SYN (tcp_rcv_synsent_state_process -> tcp_ack
    /// -> tcp_ack_update_rtt), the server its SYN-ACK (tcp_rcv_state_process ->
    /// tcp_synack_rtt_meas); RFC 6298 2.2 first measurement. With it the RTO starts near
    /// 200 ms instead of TCP_TIMEOUT_INIT (so a corked tail leaves by the probe timer at
    /// ~200 ms), and tcp_send_delayed_ack bounds the delayed-ACK timeout by max(srtt, 40 ms)
    /// from the first segment on.
    pub(crate) fn handshake_rtt(&mut self, r: u64) {
        self.rtt_sample(r.max(1));
    }

    pub(super) fn rtt_sample(&mut self, r: u64) {
        // RFC 6298 2.2 / 2.3 (Linux tcp_rtt_estimator keeps the same 1/8 and 1/4 gains).
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        let min = self.snd.rto_min_ms * MS;
        self.rto =
            if self.snd.rto_rttvar_floor { s + (4 * self.rttvar).max(min) } else { (s + 4 * self.rttvar).max(min) };
        self.rto = self.rto.min(RTO_MAX);
    }

    /// tcp_is_cwnd_limited (include/net/tcp.h): in slow start, grow while cwnd is less than
    /// twice what was in flight; otherwise only if the window was the limit.
    fn cwnd_is_limited(&self) -> bool {
        if !self.snd.cwnd_validation {
            return true;
        }
        if self.cwnd < self.ssthresh {
            return self.cwnd < 2 * self.max_packets_out;
        }
        self.is_cwnd_limited
    }

    /// tcp_cwnd_validate (tcp_output.c): track how much of the window is used; after an RTO of
    /// application-limited sending, tcp_cwnd_application_limited moves cwnd halfway towards
    /// max(used, floor) (RFC 2861).
    fn cwnd_validate(&mut self, now: u64, is_cwnd_limited: bool) {
        if !self.snd.cwnd_validation {
            return;
        }
        let out = self.packets_out();
        if self.snd_una >= self.cwnd_usage_seq
            || is_cwnd_limited
            || (!self.is_cwnd_limited && out > self.max_packets_out)
        {
            self.is_cwnd_limited = is_cwnd_limited;
            self.max_packets_out = out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
        if self.cwnd_is_limited() {
            self.cwnd_used = 0;
            self.cwnd_stamp = now;
            return;
        }
        self.cwnd_used = self.cwnd_used.max(out);
        if self.snd.restart_after_idle && now.saturating_sub(self.cwnd_stamp) >= self.rto {
            let floor =
                if self.snd.app_limited_floor == 0 { self.snd.initial_cwnd } else { self.snd.app_limited_floor };
            let used = self.cwnd_used.max(floor);
            if used < self.cwnd {
                // tcp_current_ssthresh: max(ssthresh, 3/4 cwnd).
                self.ssthresh = self.ssthresh.max(self.cwnd / 2 + self.cwnd / 4);
                self.cwnd = (self.cwnd + used) / 2;
            }
            self.cwnd_used = 0;
            self.cwnd_stamp = now;
        }
    }
}
