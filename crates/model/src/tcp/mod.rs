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

mod recv;
mod send;
mod tlp;

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
    Ack {
        delack_since: Option<u64>,
    },
    Probe,
    Rto,
    /// The tail-loss probe timer sent held data (tcp_send_loss_probe).
    Tlp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerId {
    Delack = 0,
    Probe = 1,
    Rto = 2,
    /// ICSK_TIME_LOSS_PROBE (tcp_schedule_loss_probe). The kernel runs it on the retransmit
    /// timer (icsk_retransmit_timer with icsk_pending = ICSK_TIME_LOSS_PROBE), always at or
    /// before the RTO's deadline; the model keeps it apart with that same bound.
    Tlp = 3,
}

impl TimerId {
    pub(crate) fn kind(self) -> TimerKind {
        match self {
            TimerId::Delack => TimerKind::DelayedAck,
            TimerId::Probe => TimerKind::Probe,
            TimerId::Rto | TimerId::Tlp => TimerKind::Retransmit,
        }
    }
    pub(crate) fn from_index(i: u8) -> TimerId {
        match i {
            0 => TimerId::Delack,
            1 => TimerId::Probe,
            3 => TimerId::Tlp,
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
    /// Tail-loss probes sent (TcpExt TCPLossProbes).
    pub loss_probes: u64,
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
            loss_probes: self.loss_probes - earlier.loss_probes,
        }
    }
}

pub(crate) struct Tcp {
    pub snd: SenderRules,
    pub rcv: ReceiverRules,
    hz: u32,
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
    // tcp_cwnd_validate state.
    is_cwnd_limited: bool,
    max_packets_out: u32,
    cwnd_usage_seq: u64,
    cwnd_used: u32,
    cwnd_stamp: u64,
    lsndtime: Option<u64>,
    pub srtt: Option<u64>,
    rttvar: u64,
    pub rto: u64,
    high_rtx: u64,
    dupacks: u32,
    held: Option<(u64, Hold)>,
    timers: [Timer; 4],
    /// Tail-loss probes enabled (profile `[linux] tlp`: net.ipv4.tcp_early_retrans 3, SACK).
    tlp: bool,
    /// tp->tlp_high_seq: snd_nxt when the probe went out; at most one probe per episode.
    tlp_high_seq: Option<u64>,

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
    pub(crate) fn new(profile: &Profile, mss: u32, advmss: u32, timestamps: bool) -> Tcp {
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
            is_cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: 0,
            cwnd_used: 0,
            cwnd_stamp: 0,
            lsndtime: None,
            srtt: None,
            rttvar: 0,
            rto: snd.rto_initial_ms * MS,
            high_rtx: 0,
            dupacks: 0,
            held: None,
            timers: [Timer::default(); 4],
            tlp: profile.linux.as_ref().is_some_and(|l| l.tlp),
            tlp_high_seq: None,
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
            hz: profile.timer_hz,
            snd,
            rcv,
        }
    }

    pub(crate) fn packets_out(&self) -> u32 {
        self.flight.len() as u32
    }
    pub(crate) fn unsent(&self) -> u64 {
        self.write_end - self.snd_nxt
    }
    /// Bytes in the send buffer (unacknowledged plus unsent).
    pub(crate) fn queued(&self) -> u64 {
        self.write_end - self.snd_una
    }
    pub(crate) fn readable(&self) -> u64 {
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
        let at = self.on_tick(now, at);
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
    /// With a tick rate, a timer set `at - now` ahead fires on the tick after its expiry in
    /// ticks: `jiffies + timeout` (timeout rounded up to whole ticks), plus the one-tick round-up
    /// of kernel/time/timer.c `calc_index`.
    fn on_tick(&self, now: u64, at: u64) -> u64 {
        let Some(j) = self.jiffy() else { return at };
        let ticks = (at - now).div_ceil(j);
        (now / j + ticks + 1) * j
    }
    /// One timer tick (ns), or None when timers fire exactly (timer_hz = 0).
    fn jiffy(&self) -> Option<u64> {
        (self.hz != 0).then(|| 1_000_000_000 / u64::from(self.hz))
    }
    fn cancel(&mut self, t: TimerId) {
        self.timers[t as usize].at = None;
    }
    fn armed(&self, t: TimerId) -> bool {
        self.timers[t as usize].at.is_some()
    }

    // ------------------------------------------------------------------ receiving a segment

    /// A segment arrives. Order follows tcp_rcv_established: tcp_ack, tcp_data_queue,
    /// tcp_data_snd_check, tcp_ack_snd_check.
    pub(crate) fn on_segment(&mut self, now: u64, seg: Seg, out: &mut Vec<Action>) {
        self.on_ack(now, &seg, out);
        let mut ack_now = false;
        if seg.len > 0 {
            if seg.seq == self.rcv_nxt {
                self.rcv_nxt += u64::from(seg.len);
                self.data_recv(now, &seg);
            } else {
                // Out of order (dropped: no OFO queue here) or a duplicate: tcp_data_queue sends
                // an immediate (duplicate) ACK and, for a duplicate (end_seq not after
                // rcv_nxt: "A retransmit, 2nd most common case"), tcp_enter_quickack_mode:
                // quick ACKs refilled, pingpong left, ato back to TCP_ATO_MIN.
                ack_now = true;
                self.ack_sched = true;
                if seg.seq + u64::from(seg.len) <= self.rcv_nxt && self.rcv.policy == AckPolicy::Linux {
                    self.incr_quickack();
                    self.pingpong = 0;
                    self.ato = self.delack_ato_min();
                }
            }
        }
        let nonagle = self.nonagle;
        self.push(now, nonagle, Trigger::Ack { delack_since: seg.delack_since }, out);
        if self.ack_sched {
            self.ack_snd_check(now, ack_now, &seg, out);
        }
    }

    // ------------------------------------------------------------------ timers

    /// A queued timer event at `now`. Superseded events are ignored; an event that finds its
    /// deadline moved later re-queues itself. Returns true if the timer fired.
    pub(crate) fn on_timer(&mut self, now: u64, t: TimerId, out: &mut Vec<Action>) -> bool {
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
            TimerId::Tlp => return self.send_loss_probe(now, out),
            TimerId::Rto => {
                if self.flight.is_empty() {
                    return false;
                }
                out.push(Action::Fired(t));
                self.cancel(TimerId::Tlp);
                self.tlp_high_seq = None;
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
