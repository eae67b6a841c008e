//! Tail-loss probe (RFC 8985 7; Linux `tcp_schedule_loss_probe`, `tcp_send_loss_probe`,
//! `tcp_process_tlp_ack`, net/ipv4/tcp_output.c and tcp_input.c; 6ba8a3b19e76, 3.10; at most
//! one probe per flight since 76be93fc0702, 5.8).
//!
//! With data in flight the sender arms a probe timeout (PTO) of 2 srtt plus TCP_RTO_MIN when
//! one segment is out (room for the peer's delayed ACK) or TCP_TIMEOUT_MIN (2 ticks) when more
//! are, never later than the RTO. When it fires the sender sends one new segment if it has
//! unsent data (ignoring Nagle and cork: `tcp_write_xmit(sk, mss, TCP_NAGLE_OFF, 2, ...)`),
//! else it resends the last segment; the peer answers a duplicate with an immediate ACK and
//! re-enters quick-ACK mode (tcp_data_queue -> tcp_enter_quickack_mode). So two small
//! segments in flight to a receiver that delays its ACK are ACKed after ~2 srtt + 2 ticks,
//! not after the delayed-ACK timer, as `tcpstall kernel` measures on loopback.
//!
//! Not modelled: SACK/DSACK (the episode ends when the cumulative ACK reaches tlp_high_seq),
//! `skb_still_in_host_queue`, the receive-window test before sending new data.

use super::*;

/// TCP_TIMEOUT_INIT (include/net/tcp.h): the PTO without an RTT sample.
const TIMEOUT_INIT: u64 = 1_000 * MS;

impl Tcp {
    /// TCP_TIMEOUT_MIN = 2 jiffies (include/net/tcp.h); 2 ms when timers fire exactly.
    fn timeout_min(&self) -> u64 {
        2 * self.jiffy().unwrap_or(MS)
    }

    /// tcp_schedule_loss_probe: arm the PTO if probes are on, data is in flight and the
    /// connection is not recovering a loss (icsk_ca_state Open or CWR; here: no retransmitted
    /// data outstanding). `advancing_rto`: called after an ACK that advanced snd_una (the RTO
    /// would restart from now, so the bound is a whole RTO); otherwise the bound is what is
    /// left of the armed RTO (tcp_rto_delta_us).
    pub(super) fn schedule_loss_probe(&mut self, now: u64, advancing_rto: bool, out: &mut Vec<Action>) -> bool {
        if !self.tlp || self.flight.is_empty() || self.high_rtx > self.snd_una {
            return false;
        }
        let mut timeout = match self.srtt {
            // usecs_to_jiffies(tp->srtt_us >> 2): twice the smoothed RTT.
            Some(s) => 2 * s + if self.packets_out() == 1 { self.snd.rto_min_ms * MS } else { self.timeout_min() },
            None => TIMEOUT_INIT,
        };
        let rto_delta = if advancing_rto {
            Some(self.rto)
        } else {
            self.timers[TimerId::Rto as usize].at.map(|at| at.saturating_sub(now))
        };
        if let Some(d) = rto_delta.filter(|d| *d > 0) {
            timeout = timeout.min(d);
        }
        self.cancel(TimerId::Tlp);
        self.arm(now, TimerId::Tlp, now + timeout, out);
        true
    }

    /// tcp_send_loss_probe: the PTO fired. Returns true if the timer fired (anything in flight).
    pub(super) fn send_loss_probe(&mut self, now: u64, out: &mut Vec<Action>) -> bool {
        if self.flight.is_empty() {
            return false;
        }
        out.push(Action::Fired(TimerId::Tlp));
        // "At most one outstanding TLP": the RTO (still armed) takes over.
        if self.tlp_high_seq.is_some() {
            return true;
        }
        if self.unsent() > 0 {
            // New data, one segment, Nagle and cork ignored, cwnd forced open (push_one == 2).
            let len = self.unsent().min(u64::from(self.mss)) as u32;
            self.transmit(now, len, out);
            let hold = (self.unsent() > 0).then_some(Hold::Nagle);
            self.note_release(now, true, hold, Trigger::Tlp, out);
        } else {
            // Resend the last segment sent (skb_rb_last of the retransmit queue).
            let Some(last) = self.flight.back().copied() else { return true };
            let start = if self.flight.len() >= 2 { self.flight[self.flight.len() - 2].end } else { self.snd_una };
            let seg =
                Seg { seq: start, len: (last.end - start) as u32, ack: self.rcv_nxt, psh: true, delack_since: None };
            // Karn's rule (RFC 6298 3): no RTT sample from the resent range.
            self.high_rtx = self.high_rtx.max(last.end);
            self.c.retransmits += 1;
            self.count_tx(&seg);
            self.ack_sent(1);
            out.push(Action::Tx(seg));
        }
        self.c.loss_probes += 1;
        self.tlp_high_seq = Some(self.snd_nxt);
        // probe_sent: icsk_pending = 0, then tcp_rearm_rto restarts the RTO from now.
        self.cancel(TimerId::Rto);
        let at = now + self.rto;
        self.arm(now, TimerId::Rto, at, out);
        true
    }

    /// The ACK side (tcp_ack -> tcp_process_tlp_ack, tcp_set_xmit_timer): an ACK at or past
    /// tlp_high_seq ends the episode; an ACK of new data re-arms the PTO while data is in flight.
    pub(super) fn tlp_on_ack(&mut self, now: u64, ack: u64, out: &mut Vec<Action>) {
        if self.tlp_high_seq.is_some_and(|h| ack >= h) {
            self.tlp_high_seq = None;
        }
        self.cancel(TimerId::Tlp);
        if !self.flight.is_empty() {
            self.schedule_loss_probe(now, true, out);
        }
    }
}
