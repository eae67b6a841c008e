//! One TCP endpoint under a profile's rules: the sender (write queue, Nagle, cork, cwnd, probe
//! and retransmission timers) and the receiver (delayed ACK, quick ACKs, pingpong, ACK on read).
//!
//! Pure: every method takes `now` (ns) and appends what it wants done (segments to put on the
//! wire, timers to arm) to an action list the simulator executes. Sequence numbers are 64-bit
//! byte offsets from 0 (no wrap); the handshake is not modelled (the connection starts
//! established, as the lab measures after accept()).

use std::collections::VecDeque;

use trace::{Cause, TimerKind};

use crate::profile::{AckPolicy, NagleRule, Profile, ReceiverRules, SenderRules};

const MS: u64 = 1_000_000;
/// TCP_ATO_MIN = TCP_DELACK_MIN = HZ/25 (include/net/tcp.h); the profile may override it.
const RTO_MAX: u64 = 120_000 * MS; // TCP_RTO_MAX (include/net/tcp.h)

/// `tp->nonagle` bits (include/net/tcp.h): TCP_NAGLE_OFF, TCP_NAGLE_CORK, TCP_NAGLE_PUSH.
pub(crate) const NAGLE_OFF: u8 = 1;
pub(crate) const NAGLE_CORK: u8 = 2;
pub(crate) const NAGLE_PUSH: u8 = 4;

/// A segment on the model's wire. Every segment carries an ACK (the connection is established).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seg {
    pub seq: u64,
    pub len: u32,
    pub ack: u64,
    pub psh: bool,
    /// Sent by the delayed-ACK timer, which was armed at this time (ground truth for stall
    /// causes, not a header bit).
    pub delack_since: Option<u64>,
}

/// Why unsent data is waiting in the write queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    Nagle,
    Cork,
    Cwnd,
}

/// What made the sender try to transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    App,
    Ack { delack_since: Option<u64> },
    Probe,
    Rto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerId {
    Delack = 0,
    Probe = 1,
    Rto = 2,
}

impl TimerId {
    pub fn kind(self) -> TimerKind {
        match self {
            TimerId::Delack => TimerKind::DelayedAck,
            TimerId::Probe => TimerKind::Probe,
            TimerId::Rto => TimerKind::Retransmit,
        }
    }
    pub fn from_index(i: u8) -> TimerId {
        match i {
            0 => TimerId::Delack,
            1 => TimerId::Probe,
            _ => TimerId::Rto,
        }
    }
}

/// What the endpoint asks the simulator to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Action {
    Tx(Seg),
    /// Put a timer event in the queue at `at`. Re-arming later than an event already queued
    /// emits nothing: the queued event re-arms itself when it finds a later deadline (so a
    /// stream of ACKs restarting the RTO does not flood the queue).
    Arm {
        timer: TimerId,
        at: u64,
    },
    /// Held data left because a timer-driven event released it: ground truth for a stall.
    Release {
        cause: Cause,
        since: u64,
    },
    Fired(TimerId),
}

#[derive(Debug, Clone, Copy, Default)]
struct Timer {
    /// The deadline, if armed.
    at: Option<u64>,
    /// The earliest event for this timer in the simulator's queue.
    queued: Option<u64>,
    /// When it was last armed from idle.
    armed_at: u64,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    end: u64,
    t: u64,
}

/// Per-endpoint counters (what tcp_info would say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub segs_out: u64,
    pub data_segs_out: u64,
    pub bytes_sent: u64,
    pub wire_bytes: u64,
    pub retransmits: u64,
    pub delayed_acks: u64,
    pub probes: u64,
}

impl Counters {
    /// The change since `earlier`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            segs_out: self.segs_out - earlier.segs_out,
            data_segs_out: self.data_segs_out - earlier.data_segs_out,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            wire_bytes: self.wire_bytes - earlier.wire_bytes,
            retransmits: self.retransmits - earlier.retransmits,
            delayed_acks: self.delayed_acks - earlier.delayed_acks,
            probes: self.probes - earlier.probes,
        }
    }
}

pub(crate) struct Tcp {
    pub snd: SenderRules,
    pub rcv: ReceiverRules,
    /// Sender MSS (mss_cache): effective MSS towards the peer.
    pub mss: u32,
    /// MSS this endpoint advertised (advmss).
    pub advmss: u32,
    /// TCP header length including options (tcp_header_len).
    pub hdr: u32,
    size_goal: u64,

    // --- sender ---
    pub snd_una: u64,
    pub snd_nxt: u64,
    snd_max: u64,
    pub write_end: u64,
    tail_len: u64,
    pub nonagle: u8,
    flight: VecDeque<Sent>,
    snd_sml: u64,
    last_full: bool,
    pub cwnd: u32,
    ssthresh: u32,
    cwnd_cnt: u32,
    lsndtime: Option<u64>,
    pub srtt: Option<u64>,
    rttvar: u64,
    pub rto: u64,
    high_rtx: u64,
    dupacks: u32,
    held: Option<(u64, Hold)>,
    timers: [Timer; 3],

    // --- receiver ---
    pub rcv_nxt: u64,
    rcv_wup: u64,
    pub copied: u64,
    pub rcv_mss: u32,
    last_seg_size: u32,
    ack_sched: bool,
    pushed: bool,
    pushed2: bool,
    pub quick: u32,
    pub pingpong: u32,
    pub ato: u64,
    lrcvtime: Option<u64>,
    segs_unacked: u32,

    pub c: Counters,
}

impl Tcp {
    /// `mss` is the negotiated sender MSS; `advmss` this side's advertised MSS.
    pub fn new(profile: &Profile, mss: u32, advmss: u32, timestamps: bool) -> Tcp {
        let snd = profile.sender.clone();
        let rcv = profile.receiver.clone();
        // tcp_xmit_size_goal (tcp.c): a multiple of mss_now up to the GSO limit (64 KB).
        let size_goal = u64::from(mss) * (u64::from(65_536 / mss).max(1));
        // tcp_initialize_rcv_mss (tcp_input.c): min(advmss, mss_cache, rcv_wnd/2, TCP_MSS_DEFAULT),
        // at least TCP_MIN_MSS (88).
        let rcv_mss = advmss.min(mss).min(rcv.rcv_wnd / 2).clamp(88, 536);
        Tcp {
            mss,
            advmss,
            hdr: 20 + if timestamps { 12 } else { 0 },
            size_goal,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            write_end: 0,
            tail_len: 0,
            nonagle: 0,
            flight: VecDeque::new(),
            snd_sml: 0,
            last_full: false,
            cwnd: snd.initial_cwnd,
            ssthresh: u32::MAX,
            cwnd_cnt: 0,
            lsndtime: None,
            srtt: None,
            rttvar: 0,
            rto: snd.rto_initial_ms * MS,
            high_rtx: 0,
            dupacks: 0,
            held: None,
            timers: [Timer::default(); 3],
            rcv_nxt: 0,
            rcv_wup: 0,
            copied: 0,
            rcv_mss,
            last_seg_size: 0,
            ack_sched: false,
            pushed: false,
            pushed2: false,
            quick: 0,
            pingpong: 0,
            ato: 0,
            lrcvtime: None,
            segs_unacked: 0,
            c: Counters::default(),
            snd,
            rcv,
        }
    }

    pub fn packets_out(&self) -> u32 {
        self.flight.len() as u32
    }
    pub fn unsent(&self) -> u64 {
        self.write_end - self.snd_nxt
    }
    /// Bytes in the send buffer (unacknowledged plus unsent).
    pub fn queued(&self) -> u64 {
        self.write_end - self.snd_una
    }
    pub fn readable(&self) -> u64 {
        self.rcv_nxt - self.copied
    }
    fn delack_ato_min(&self) -> u64 {
        self.rcv.delack_min_ms * MS
    }
    fn in_pingpong(&self) -> bool {
        // inet_csk_in_pingpong_mode: pingpong >= sysctl_tcp_pingpong_thresh.
        self.rcv.pingpong_thresh > 0 && self.pingpong >= self.rcv.pingpong_thresh
    }

    fn arm(&mut self, now: u64, t: TimerId, at: u64, out: &mut Vec<Action>) {
        let tm = &mut self.timers[t as usize];
        if tm.at.is_none() {
            tm.armed_at = now;
        }
        tm.at = Some(at);
        if tm.queued.is_none_or(|q| q > at) {
            tm.queued = Some(at);
            out.push(Action::Arm { timer: t, at });
        }
    }
    fn cancel(&mut self, t: TimerId) {
        self.timers[t as usize].at = None;
    }
    fn armed(&self, t: TimerId) -> bool {
        self.timers[t as usize].at.is_some()
    }

    // ------------------------------------------------------------------ application calls

    /// send(2) of `len` bytes (`more` = MSG_MORE), already admitted to the send buffer.
    /// `force_push` is the push Linux does before sleeping on a full send buffer
    /// (`tcp_sendmsg_locked` -> `tcp_push(..., TCP_NAGLE_PUSH, ...)`).
    pub fn app_write(&mut self, now: u64, len: u64, more: bool, force_push: bool, out: &mut Vec<Action>) {
        if len == 0 {
            return;
        }
        // tcp_skb_entail (tcp.c) clears TCP_NAGLE_PUSH when a new skb is queued; a write that
        // fits in the unsent tail skb is merged into it instead (tcp_sendmsg_locked).
        if self.unsent() == 0 || self.tail_len >= self.size_goal {
            self.nonagle &= !NAGLE_PUSH;
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
    pub fn set_nodelay(&mut self, now: u64, on: bool, out: &mut Vec<Action>) {
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
    pub fn set_cork(&mut self, now: u64, on: bool, out: &mut Vec<Action>) -> bool {
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

    /// setsockopt(TCP_QUICKACK, 1): __tcp_sock_set_quickack (tcp.c) leaves pingpong mode and,
    /// if an ACK is scheduled, marks ICSK_ACK_PUSHED and runs tcp_cleanup_rbuf(sk, 1). It does
    /// not refill the quick-ACK budget. Returns false when the profile has no such option.
    pub fn set_quickack(&mut self, now: u64, out: &mut Vec<Action>) -> bool {
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
    pub fn app_read(&mut self, now: u64, max: u64, out: &mut Vec<Action>) -> u64 {
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
    fn cleanup_rbuf(&mut self, now: u64, copied: u64, out: &mut Vec<Action>) {
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

    // ------------------------------------------------------------------ sender

    /// The Nagle test for a sub-MSS tail segment: Linux tcp_nagle_test / tcp_nagle_check
    /// (tcp_output.c): TCP_NAGLE_PUSH sends; TCP_NAGLE_CORK holds (cork overrides NODELAY);
    /// TCP_NAGLE_OFF sends; otherwise the profile's rule with data in flight.
    fn nagle_hold(&self, nonagle: u8) -> Option<Hold> {
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
    pub fn push(&mut self, now: u64, nonagle: u8, trig: Trigger, out: &mut Vec<Action>) {
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
    fn note_release(&mut self, _now: u64, sent_any: bool, hold: Option<Hold>, trig: Trigger, out: &mut Vec<Action>) {
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

    fn transmit(&mut self, now: u64, len: u32, out: &mut Vec<Action>) {
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
        self.ack_sent();
        out.push(Action::Tx(seg));
    }

    fn count_tx(&mut self, seg: &Seg) {
        self.c.segs_out += 1;
        if seg.len > 0 {
            self.c.data_segs_out += 1;
            self.c.bytes_sent += u64::from(seg.len);
        }
        self.c.wire_bytes += u64::from(seg.len + self.hdr + 20 + 14);
    }

    /// Go back to snd_una (the model's receiver keeps no out-of-order queue).
    fn go_back(&mut self) {
        self.snd_nxt = self.snd_una;
        self.flight.clear();
        self.high_rtx = self.snd_max;
    }

    // ------------------------------------------------------------------ receiving a segment

    /// A segment arrives. Order follows tcp_rcv_established: tcp_ack, tcp_data_queue,
    /// tcp_data_snd_check, tcp_ack_snd_check.
    pub fn on_segment(&mut self, now: u64, seg: Seg, out: &mut Vec<Action>) {
        self.on_ack(now, &seg, out);
        let mut ack_now = false;
        if seg.len > 0 {
            if seg.seq == self.rcv_nxt {
                self.rcv_nxt += u64::from(seg.len);
                self.data_recv(now, &seg);
            } else {
                // Out of order (dropped: no OFO queue here) or a duplicate: tcp_data_queue sends
                // an immediate (duplicate) ACK and, for a duplicate, tcp_enter_quickack_mode.
                ack_now = true;
                self.ack_sched = true;
            }
        }
        let nonagle = self.nonagle;
        self.push(now, nonagle, Trigger::Ack { delack_since: seg.delack_since }, out);
        if self.ack_sched {
            self.ack_snd_check(now, ack_now, &seg, out);
        }
    }

    /// tcp_ack (tcp_input.c): advance snd_una, sample RTT (RFC 6298), grow cwnd (RFC 5681 3.1),
    /// count duplicate ACKs (RFC 5681 3.2, fast retransmit on the third).
    fn on_ack(&mut self, now: u64, seg: &Seg, out: &mut Vec<Action>) {
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
            if self.cwnd < self.ssthresh {
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

    fn rtt_sample(&mut self, r: u64) {
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

    /// In-order data arrived.
    fn data_recv(&mut self, now: u64, seg: &Seg) {
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
    fn mss_peer_estimate(&self) -> u32 {
        self.mss
    }

    /// tcp_incr_quickack (tcp_input.c): quick = max(quick, min(rcv_wnd / (2 * rcv_mss) or 2,
    /// TCP_MAX_QUICKACKS)).
    fn incr_quickack(&mut self) {
        let mut q = self.rcv.rcv_wnd / (2 * self.rcv_mss);
        if q == 0 {
            q = 2;
        }
        if q > self.quick {
            self.quick = q.min(self.rcv.quickack_budget);
        }
    }

    /// tcp_measure_rcv_mss (tcp_input.c).
    fn measure_rcv_mss(&mut self, seg: &Seg) {
        let lss = self.last_seg_size;
        self.last_seg_size = 0;
        let len = seg.len;
        if len >= self.rcv_mss {
            self.rcv_mss = len.min(self.advmss);
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

    fn ack_snd_check(&mut self, now: u64, ack_now: bool, seg: &Seg, out: &mut Vec<Action>) {
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
    fn send_delayed_ack(&mut self, now: u64, out: &mut Vec<Action>) {
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
    fn send_ack(&mut self, _now: u64, by_timer: bool, out: &mut Vec<Action>) {
        let delack_since = by_timer.then_some(self.timers[TimerId::Delack as usize].armed_at);
        let seg = Seg { seq: self.snd_nxt, len: 0, ack: self.rcv_nxt, psh: false, delack_since };
        self.count_tx(&seg);
        self.ack_sent();
        out.push(Action::Tx(seg));
    }

    /// tcp_event_ack_sent: tcp_dec_quickack_mode, then clear the pending ACK and its timer.
    fn ack_sent(&mut self) {
        if self.rcv.policy == AckPolicy::Linux && self.quick > 0 && self.ack_sched {
            self.quick -= 1;
            if self.quick == 0 {
                self.ato = self.delack_ato_min(); // "Leaving quickack mode we deflate ATO."
            }
        }
        self.ack_sched = false;
        self.pushed = false;
        self.pushed2 = false;
        self.segs_unacked = 0;
        self.rcv_wup = self.rcv_nxt;
        self.cancel(TimerId::Delack);
    }

    // ------------------------------------------------------------------ timers

    /// A queued timer event at `now`. Superseded events are ignored; an event that finds its
    /// deadline moved later re-queues itself. Returns true if the timer fired.
    pub fn on_timer(&mut self, now: u64, t: TimerId, out: &mut Vec<Action>) -> bool {
        let tm = &mut self.timers[t as usize];
        if tm.queued != Some(now) {
            return false;
        }
        tm.queued = None;
        match tm.at {
            None => return false,
            Some(d) if d > now => {
                tm.queued = Some(d);
                out.push(Action::Arm { timer: t, at: d });
                return false;
            }
            Some(_) => tm.at = None,
        }
        match t {
            TimerId::Delack => {
                if !self.ack_sched {
                    return false;
                }
                out.push(Action::Fired(t));
                if self.rcv.policy == AckPolicy::Linux {
                    // tcp_delack_timer_handler: not interactive -> inflate ato; interactive ->
                    // leave pingpong mode and deflate ato.
                    if !self.in_pingpong() {
                        self.ato = (self.ato * 2).min(self.rto);
                    } else {
                        self.pingpong = 0;
                        self.ato = self.delack_ato_min();
                    }
                }
                self.c.delayed_acks += 1;
                self.send_ack(now, true, out);
            }
            TimerId::Probe => {
                // tcp_probe_timer: nothing to do if data is in flight or nothing is queued.
                if !self.flight.is_empty() || self.unsent() == 0 {
                    return false;
                }
                out.push(Action::Fired(t));
                self.c.probes += 1;
                // tcp_write_wakeup: send up to one MSS of the head, ignoring Nagle and cork.
                let len = self.unsent().min(u64::from(self.mss)) as u32;
                self.transmit(now, len, out);
                self.note_release(now, true, None, Trigger::Probe, out);
                let n = self.nonagle;
                self.push(now, n, Trigger::App, out);
            }
            TimerId::Rto => {
                if self.flight.is_empty() {
                    return false;
                }
                out.push(Action::Fired(t));
                // RFC 6298 5.5-5.7 / RFC 5681 3.1: back off, cwnd = 1, ssthresh = FlightSize / 2.
                self.ssthresh = (self.packets_out() / 2).max(2);
                self.cwnd = 1;
                self.rto = (self.rto * 2).min(RTO_MAX);
                // The stall started when the oldest unacknowledged segment was sent.
                let since = self.flight.front().map_or(now, |s| s.t);
                let since = self.held.map_or(since, |(h, _)| h.min(since));
                self.held = Some((since, Hold::Cwnd));
                self.go_back();
                self.push(now, NAGLE_PUSH, Trigger::Rto, out);
            }
        }
        true
    }
}
