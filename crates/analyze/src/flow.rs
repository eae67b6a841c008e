//! Per-connection state: sequence tracking per direction, RTT samples, the gap detector.

use crate::classify::{classify, syn_stall, GapContext};
use crate::dir::{
    in_block, in_hole, resend_kind, ts_before, AckSeen, Dir, Resend, ResendInfo, Sent, Snapshot, DEFAULT_MSS,
    MAX_OUTSTANDING, MAX_TSVALS,
};
use crate::pacing::ClockFit;
use crate::timers::RELEASE_SLACK;
use crate::write_log::WriteRec;
use crate::{Config, Stall};
use serde::Serialize;
use trace::{
    CapturePoint, Cause, Duration, Endpoint, Event, EventKind, Evidence, IcmpError, IcmpKind, Instant, KernelEvent,
    Segment, SeqNum,
};

pub use crate::dir::DirSummary;

mod seq;
mod summary;

use seq::{mark_resent, on_dupack, retire_acked, rtt_from_echo};

/// Handshake times, when the capture saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Handshake {
    pub syn: Option<Instant>,
    pub syn_ack: Option<Instant>,
    pub ack: Option<Instant>,
}

/// Everything learned about one connection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowAnalysis {
    pub first: Instant,
    pub last: Instant,
    pub handshake: Handshake,
    pub capture_point: CapturePoint,
    /// What the capture point means for this flow's verdicts, for people.
    pub capture_note: String,
    /// Round-trip time of the path (without ACK delays), when it could be estimated.
    pub path_rtt: Option<Duration>,
    /// `path_rtt` was measured on a handshake whose SYN and SYN-ACK were each sent once
    /// (Karn's rule, RFC 6298 3); else it is estimated from data ACKs.
    pub path_rtt_from_handshake: bool,
    /// Index 0 = endpoint A's sends, 1 = B's.
    pub dirs: [DirSummary; 2],
    pub stalls: Vec<Stall>,
    pub notes: Vec<String>,
    /// What each endpoint's packets show of its socket options (index 0 = A, 1 = B): the
    /// classifier's decisions, for the derivation of a replica (not in explain's output).
    #[serde(skip)]
    pub shown: [ShownOptions; 2],
}

/// What one endpoint's packets show of its sending options, as the classifier decided them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShownOptions {
    /// Nagle shown off (TCP_NODELAY): the first segments that showed it (`Dir::nagle_off`).
    pub nagle_off: Option<crate::dir::NagleOffShown>,
    /// Held coalescing shown (TCP_CORK or MSG_MORE): the first record of this endpoint's data
    /// held with nothing in flight until the probe timer released it (`Cause::ProbeTimer`:
    /// Linux `tcp_probe_timer`; Nagle never holds with nothing in flight, RFC 9293 3.7.4).
    pub held_coalescing: Option<Stall>,
}

/// Streaming analyser of one connection.
#[derive(Debug)]
pub struct FlowAnalyzer {
    cfg: Config,
    dirs: [Dir; 2],
    hs: Handshake,
    first: Option<Instant>,
    last: Instant,
    /// Last data segment of the connection (either direction): (time, sender, frame).
    last_data: Option<(Instant, Endpoint, Evidence)>,
    snap: [Snapshot; 2],
    ts_in_use: bool,
    stalls: Vec<Stall>,
    /// A gap that just ended, classified once the events right after it were seen (see
    /// [`REORDER_WINDOW`]).
    pending: Option<GapContext>,
    d_acked_in_gap: bool,
    /// What the capture's interface and addresses say (see [`FlowAnalyzer::set_same_host`]).
    same_host: Option<bool>,
    /// The capture's timestamp tick, read from the packets (see [`Ticks`]).
    ticks: Ticks,
    /// Resends named a loss, still open to a later proof that they were spurious.
    resent: std::collections::VecDeque<Resent>,
}

/// Resends named a loss that a later packet may show spurious (see `revisit_resends`), and
/// how long after the resend (beyond two round trips) such a packet is looked for: phones' and
/// Wi-Fi hosts' ACKs were seen to arrive up to 2.3 s late in a burst (nDPI alexa-app).
const MAX_REVISITED: usize = 32;
const REVISIT_WAIT: Duration = Duration::from_millis(3_000);

#[derive(Debug, Clone, Copy)]
struct Resent {
    /// The record in `stalls`.
    index: usize,
    held: Endpoint,
    seq: SeqNum,
    eifel: Option<(u32, u32)>,
    until: Instant,
}

/// Whether every packet's time since the flow's first is a whole number of 10 ms: a capture
/// written with coarse timestamps (a file rounded to a 10 ms tick; the model's and the lab's
/// traces, stamped to the microsecond or finer, never are),
/// in which intervals shorter than the tick cannot be read, and a rhythm of the tick is the
/// file's, not the sender's.
#[derive(Debug, Clone, Copy)]
struct Ticks {
    packets: u64,
    of_10ms: bool,
}

impl Default for Ticks {
    fn default() -> Self {
        Ticks { packets: 0, of_10ms: true }
    }
}

impl Ticks {
    /// Packets needed before a tick is believed (a few packets on a tick by chance).
    const MIN_PACKETS: u64 = 8;

    fn on_packet(&mut self, since_first: Duration) {
        self.packets += 1;
        self.of_10ms &= since_first.0.is_multiple_of(10_000_000);
    }

    fn tick(&self) -> Option<Duration> {
        if self.packets < Self::MIN_PACKETS {
            None
        } else if self.of_10ms {
            Some(Duration::from_millis(10))
        } else {
            None
        }
    }
}

/// What [`FlowAnalyzer::on_data`] judged of a data segment before it joins its direction's
/// state (see `judge_data`), for the gap it may end.
#[derive(Debug, Clone, Copy)]
struct DataSeen {
    mss: u32,
    mss_known: bool,
    path: Option<Duration>,
    path_dir: Option<Duration>,
    rinfo: ResendInfo,
    resend: Resend,
    kernel_retx: Option<(Instant, Evidence, SeqNum, u32)>,
    clock: Option<ClockFit>,
    written: Option<WriteRec>,
    /// How long `d` had neither sent data nor received an ACK before this segment.
    quiet_since: Option<Duration>,
}

/// The largest forward jump of a sender's sequence space read as its own progress: data lost
/// before the capture point, or acknowledged and never captured. 2^30 is the largest window TCP
/// allows (RFC 7323 2.3: 65535 << 14), so no sender has more than that in flight; a longer jump
/// is another connection on the same ports, or garbage, and is not tracked.
const MAX_SEQ_JUMP: u32 = 1 << 30;

/// `to` is ahead of `from` by less than [`MAX_SEQ_JUMP`] (see `trace::SeqNum` for the order).
fn plausible_advance(from: SeqNum, to: SeqNum) -> bool {
    from < to && to - from < MAX_SEQ_JUMP
}

/// Captures sometimes stamp the ACK that released data a little AFTER the data it released:
/// the link emulator records a packet it delivers into a TUN device after the write returns,
/// by which time the kernel has answered; tcpdump on a multi-queue NIC stamps per CPU. An
/// advancing pure ACK this close after the end of a gap is taken as the one that ended it.
const REORDER_WINDOW: Duration = Duration::from_millis(1);
/// How long a resend's classification waits for the first ACK of its range (Eifel).
const EIFEL_WAIT: Duration = Duration::from_millis(1_000);

impl FlowAnalyzer {
    pub fn new(cfg: Config) -> Self {
        FlowAnalyzer {
            cfg,
            dirs: Default::default(),
            hs: Handshake::default(),
            first: None,
            last: Instant::ZERO,
            last_data: None,
            snap: Default::default(),
            ts_in_use: false,
            stalls: Vec::new(),
            pending: None,
            d_acked_in_gap: false,
            same_host: None,
            ticks: Ticks::default(),
            resent: std::collections::VecDeque::new(),
        }
    }

    /// Where the capture was taken, from what the file says rather than from timing:
    /// `Some(true)` on a loopback interface or with both endpoints' addresses on one host
    /// (both loopback, or the same address), `Some(false)` when the interface and addresses
    /// rule that out (a veth or NIC capture between two addresses: a 40 us round trip is a
    /// short path, not loopback), `None` (lab and model traces) to judge from the handshake's
    /// timing alone.
    pub fn set_same_host(&mut self, same: Option<bool>) {
        self.same_host = same;
    }

    /// Feeds one event; events must come in time order (a capture's order is kept as is).
    pub fn push(&mut self, ev: &Event) {
        let seg = match &ev.kind {
            EventKind::Segment(seg) => seg,
            other => {
                self.on_other(other, ev);
                return;
            }
        };
        let t = ev.t;
        self.note_answer(seg, ev.from, t, ev.evidence);
        self.revisit_resends(seg, ev.from, t, ev.evidence);
        if let Some(p) = &self.pending {
            // A resend, or data sent with data unacknowledged and no ACK, waits (at most
            // EIFEL_WAIT) for the peer's first answer, which tells whether it was spurious
            // (Eifel, D-SACK) or a loss probe (a SACK above a hole).
            let awaiting_ack = p.awaits_answer(t) && t.since(p.end) <= EIFEL_WAIT;
            if (t.since(p.end) > REORDER_WINDOW && !awaiting_ack) || seg.len > 0 {
                self.flush_pending();
            }
        }
        let first = *self.first.get_or_insert(t);
        self.ticks.on_packet(t.since(first));
        self.last = self.last.max(t);
        let d = ev.from;
        let p = d.peer();
        if self.handshake(seg, d, t, ev.evidence) {
            // The handshake's last ACK starts the first gap: data held from the start (a corked
            // first request) is a stall too.
            self.last_data = Some((t, d, ev.evidence));
        }
        self.account(seg, d, t, ev.evidence);
        // Whether `d` had acknowledged any of the peer's data during the current gap, before
        // this segment (the gap detector asks; this segment's own ACK is processed next).
        self.d_acked_in_gap = self.dirs[p.index()].ack_in_gap.is_some();
        if seg.flags.ack() {
            self.on_ack(seg, p, t, ev.evidence);
        }
        if seg.len == 0 && !seg.flags.syn() && !seg.flags.rst() {
            // A segment without data whose seq is beyond what was seen: data before it was lost
            // before the capture point (RFC 9293 3.4: seq of an empty segment is snd_nxt).
            let dir = &mut self.dirs[d.index()];
            if dir.started && plausible_advance(dir.snd_nxt, seg.seq) {
                dir.hole = Some((dir.snd_nxt, seg.seq));
                dir.hole_at = Some(t);
                dir.snd_nxt = seg.seq;
            }
        }
        if seg.len > 0 && self.is_keepalive(seg, d) {
            self.dirs[d.index()].sum.keepalives += 1;
        } else if seg.len > 0 {
            self.on_data(seg, d, t, ev.evidence);
        } else if seg.flags.syn() || seg.flags.fin() {
            self.track_seq(seg, d, t, ev.evidence);
        }
    }

    /// Events that are not segments: the writer's writes (lab, model), kernel evidence, ICMP
    /// errors about the flow's segments. They feed what the classifier knows; they end no gap.
    fn on_other(&mut self, kind: &EventKind, ev: &Event) {
        let dir = &mut self.dirs[ev.from.index()];
        let snd_nxt = dir.started.then_some(dir.snd_nxt);
        match *kind {
            EventKind::Write { bytes, .. } => dir.writes.on_write(ev.t, bytes, None, snd_nxt, ev.evidence),
            EventKind::Kernel(KernelEvent::Sendmsg { bytes, seq }) => {
                dir.writes.on_write(ev.t, bytes, Some(SeqNum(seq)), None, ev.evidence)
            }
            EventKind::Kernel(KernelEvent::Retransmit { seq, len }) => {
                dir.kernel_retx = Some((ev.t, ev.evidence, SeqNum(seq), len));
            }
            EventKind::Kernel(KernelEvent::CongState { state }) => dir.kernel_cong = Some((ev.t, ev.evidence, state)),
            EventKind::Kernel(KernelEvent::State(s)) => dir.kernel_state = Some((ev.t, ev.evidence, s)),
            EventKind::Icmp(IcmpError { kind: IcmpKind::FragNeeded { mtu }, .. }) => {
                dir.icmp_frag = Some((ev.t, ev.evidence, mtu));
            }
            EventKind::Icmp(_)
            | EventKind::Kernel(KernelEvent::Read)
            | EventKind::Read { .. }
            | EventKind::Timer(_)
            | EventKind::Segment(_) => {}
        }
    }

    /// Records handshake times and SYN retransmissions; true when this segment completes the
    /// handshake.
    fn handshake(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) -> bool {
        if seg.flags.syn() {
            let dir = &mut self.dirs[d.index()];
            // The same ISN again: a retransmitted SYN (RFC 9293 3.8.1; the SYN's RTO, RFC 6298 5.7).
            if let Some((t0, f0, isn)) = dir.last_syn {
                if isn == seg.seq {
                    dir.syn_resent = true;
                    dir.sum.syn_retransmissions += 1;
                    let what = if seg.flags.ack() { "SYN-ACK" } else { "SYN" };
                    let interval = t.since(t0);
                    let prev_interval = dir.syn_interval.replace(interval);
                    // Resends in a row that did not back off (FreeBSD's SYN table starts with
                    // five equal steps: tcp_syn_backoff in netinet/tcp_timer.c).
                    let flat = prev_interval.is_some_and(|p| interval.0 < p.0 + p.0 / 2);
                    dir.syn_flat = if flat { dir.syn_flat + 1 } else { 0 };
                    let flat_run = dir.syn_flat;
                    let peer = &self.dirs[d.peer().index()];
                    // A SYN-ACK sent again right after the peer's SYN was sent again answers
                    // it (Linux `tcp_check_req` retransmits the SYN-ACK for a duplicate SYN):
                    // the wait is the SYN's, already counted.
                    // (Sooner after that SYN than half the interval since its own previous
                    // SYN-ACK, and within 200 ms: a timer's resend comes a second or more after.)
                    let answers = seg.flags.ack()
                        && peer.last_syn.is_some_and(|(ts, _, _)| {
                            ts > t0 && t.since(ts) <= Duration(interval.0 / 2).min(Duration::from_millis(200))
                        });
                    let answered = if seg.flags.ack() {
                        self.hs.ack.is_some_and(|a| a > t0)
                    } else {
                        self.hs.syn_ack.is_some_and(|a| a > t0)
                    };
                    let context = crate::classify::SynContext {
                        prev_interval,
                        flat_run,
                        peer_silent: peer.sum.wire.packets == 0,
                        answered,
                    };
                    if !answers {
                        let st = syn_stall(d, (t0, f0), (t, frame), what, &self.cfg.timers, context);
                        self.stalls.push(st);
                    }
                }
            }
            let dir = &mut self.dirs[d.index()];
            dir.last_syn = Some((t, frame, seg.seq));
            dir.syn_wscale = Some(seg.wscale);
            self.dirs[d.peer().index()].peer_mss_opt = seg.mss;
            if !seg.flags.ack() && d == Endpoint::A {
                self.hs.syn = Some(t);
                self.ts_in_use = seg.ts.is_some();
            } else if seg.flags.ack() && d == Endpoint::B {
                self.hs.syn_ack = Some(t);
                self.ts_in_use &= seg.ts.is_some();
            }
        } else if d == Endpoint::A && self.hs.syn_ack.is_some() && self.hs.ack.is_none() && seg.flags.ack() {
            self.hs.ack = Some(t);
            return self.last_data.is_none();
        }
        false
    }

    /// The peer's first packet after a pending gap's end: what its ACK and SACK blocks say of
    /// the segment that ended the gap (RFC 2018, RFC 2883 4).
    fn note_answer(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
        let Some(p) = self.pending.as_mut() else { return };
        if p.held.peer() != d || !seg.flags.ack() || seg.flags.syn() {
            return;
        }
        let blocks = seg.sack_ranges();
        let first = p.seg.seq;
        let dsack = crate::dir::is_dsack(blocks, seg.ack) && blocks.first().is_some_and(|&b| in_block(b, first));
        if let Some(a) = p.answer.as_mut() {
            // A D-SACK of a resend can come after the first answer (the ACK of the first
            // transmission first, or a delayed ACK): still looked for (see `awaits_answer`).
            if dsack && !a.dsack {
                a.dsack = true;
                a.t = t;
                a.frame = frame;
            }
            return;
        }
        // A packet sooner after the segment than the round trip from the capture point to the
        // peer (less an eighth) cannot answer it: it answers what came before. If it covers
        // a resent range, the first transmission had arrived (the resend was spurious).
        let to_peer = p.path_dir.unwrap_or(Duration::ZERO);
        if t.since(p.end) < Duration(to_peer.0 - to_peer.0 / 8) {
            if p.resend != Resend::No && first < seg.ack {
                p.acked_before_answer = Some((t, frame));
            }
            return;
        }
        p.answer = Some(crate::classify::PeerAnswer {
            t,
            frame,
            dsack,
            sacked_above_hole: seg.ack < first && blocks.iter().any(|&b| in_block(b, first)),
        });
    }

    /// The peer's sign of Nagle off waits for this packet's IP ID; then this sender's counter
    /// takes it (at most one MSS is one segment: `dir::IdCounter`).
    fn note_ip_id(&mut self, seg: &Segment, d: Endpoint) {
        self.dirs[d.peer().index()].check_peer_id(seg.ip_id);
        let single = seg.len <= self.mss(d).0;
        self.dirs[d.index()].ip_ids.on_packet(seg.ip_id, single);
    }

    fn account(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
        self.note_ip_id(seg, d);
        if let Some(ttl) = seg.ttl {
            let m = &mut self.dirs[d.index()].max_ttl;
            *m = Some(m.map_or(ttl, |x| x.max(ttl)));
        }
        // A window closed by `d` and the peer's probes into it (RFC 9293 3.8.6.1).
        if !seg.flags.syn() && !seg.flags.rst() {
            let dir = &mut self.dirs[d.index()];
            if seg.window == 0 {
                if dir.zero_since.is_none() {
                    dir.zero_since = Some((t, frame));
                    dir.probes_into_zero = 0;
                    dir.last_probe = None;
                }
            } else {
                dir.zero_since = None;
            }
        }
        // A window probe: an empty segment below snd_una (Linux `tcp_xmit_probe_skb` sends
        // snd_una - 1) or one byte (RFC 9293 3.8.6.1; BSD and Windows send a byte of data).
        let own = &self.dirs[d.index()];
        let probe = seg.len <= 1
            && !seg.flags.syn()
            && !seg.flags.fin()
            && !seg.flags.rst()
            && (seg.len == 1 || (own.started && seg.seq < own.snd_una));
        let peer = &mut self.dirs[d.peer().index()];
        if probe && peer.zero_since.is_some_and(|(t0, _)| t0 < t) {
            peer.probes_into_zero += 1;
            peer.last_probe = Some((t, frame));
        }
        // The peer's window opening again after a zero window, during a gap of the peer's
        // direction: the update that lets the held data go (RFC 9293 3.8.6.2.1).
        if seg.window > 0 && !seg.flags.syn() && !seg.flags.rst() {
            let held = &mut self.dirs[d.peer().index()];
            if held.zero_wnd_in_gap && held.window_opened.is_none() {
                held.window_opened = Some((t, frame));
            }
        }
        {
            // What `d` acknowledges: its ACK numbers advancing while none of its peer's packets
            // are captured shows a capture of one direction.
            let own = &mut self.dirs[d.index()];
            if seg.flags.ack() && !seg.flags.syn() {
                match own.first_ack {
                    None => own.first_ack = Some(seg.ack),
                    Some(a) if a != seg.ack => own.ack_moved = true,
                    Some(_) => {}
                }
            }
            own.fin_seen |= seg.flags.fin();
        }
        self.dirs[d.peer().index()].peer_last_seen = Some(t);
        if seg.len > 0 {
            self.dirs[d.peer().index()].peer_last_data = Some(t);
        }
        let s = &mut self.dirs[d.index()].sum;
        s.wire.packets += 1;
        s.wire.wire_bytes += u64::from(seg.wire_len);
        s.wire.payload_bytes += u64::from(seg.len);
        if seg.len > 0 {
            s.wire.data_segments += 1;
        }
        if seg.is_pure_ack() {
            s.wire.pure_acks += 1;
        }
        s.syn += u64::from(seg.flags.syn());
        s.fin += u64::from(seg.flags.fin());
        s.rst += u64::from(seg.flags.rst());
        s.max_segment = s.max_segment.max(seg.len);
        if seg.window == 0 && !seg.flags.syn() && !seg.flags.rst() {
            s.zero_windows += 1;
        }
        if !seg.flags.syn() {
            let own = &mut self.dirs[d.index()];
            own.adv_window_prev = own.adv_window;
            own.adv_window = Some(seg.window);
        }
    }

    /// The MSS direction `d` may send, and whether it is known (see [`DirSummary::mss`]).
    fn mss(&self, d: Endpoint) -> (u32, bool) {
        let dir = &self.dirs[d.index()];
        match dir.peer_mss_opt {
            // RFC 7323 / tcp_current_mss: the timestamp option takes 12 bytes of every segment.
            Some(m) => (u32::from(m).saturating_sub(if self.ts_in_use { 12 } else { 0 }).max(1), true),
            // Unknown: a segment below 536 bytes (RFC 9293 3.7.1's default MSS) is sub-MSS on
            // any path; above it, the largest segment seen is the best lower bound.
            None => (dir.sum.max_segment.max(DEFAULT_MSS), false),
        }
    }

    /// The peer's window scale as this direction must apply it: known once both SYNs were seen
    /// (RFC 7323 2.2: scaling is in effect only when both SYNs carry the option; otherwise 0).
    fn peer_wscale(&self, d: Endpoint) -> Option<u8> {
        match (self.dirs[d.index()].syn_wscale, self.dirs[d.peer().index()].syn_wscale) {
            (Some(Some(_)), Some(Some(peer))) => Some(peer.min(14)),
            (Some(_), Some(_)) => Some(0),
            _ => None,
        }
    }

    fn track_seq(&mut self, seg: &Segment, d: Endpoint, _t: Instant, _ev: Evidence) {
        let dir = &mut self.dirs[d.index()];
        let end = seg.end();
        if !dir.started || seg.flags.syn() {
            dir.started = true;
            dir.snd_una = seg.seq;
            dir.snd_nxt = end;
        } else if dir.snd_nxt < end {
            dir.snd_nxt = end;
        }
    }

    fn on_ack(&mut self, seg: &Segment, dir_of_acked: Endpoint, t: Instant, frame: Evidence) {
        let di = dir_of_acked.index();
        // An ACK stamped just after a segment can have released it only where the capture is
        // near the sender (the round trip between them under the reorder window); far from it,
        // the ACK had not reached the sender yet (cwd-navigation: 88 ms away, 0.35 ms after).
        // Asked only while a sign of Nagle off waits to be confirmed.
        let near_sender =
            self.dirs[di].nagle_off_candidate.is_none() || self.back(dir_of_acked, self.path_rtt()) <= RELEASE_SLACK;
        let gap_start = self.last_data.map(|(g, ..)| g);
        let dir = &mut self.dirs[di];
        if seg.window == 0 && !seg.flags.syn() && !seg.flags.rst() {
            dir.zero_wnd_in_gap = true;
        }
        if !dir.started {
            return;
        }
        let ack = seg.ack;
        if seg.sack_blocks > 0 {
            dir.on_sack(seg.sack_ranges(), ack);
        }
        dir.settle_ack_ahead(t, gap_start);
        dir.settle_nagle_off(t, near_sender.then_some(ack));
        if plausible_advance(dir.snd_nxt, ack) {
            // The peer acknowledges bytes not seen yet: either their timestamps were reordered
            // (the data shows up within ACK_AHEAD_WINDOW) or the capture missed them.
            if dir.ack_ahead.is_none_or(|(a, _)| a < ack) {
                dir.ack_ahead = Some((ack, t));
            }
        }
        if let Some((lo, hi)) = dir.hole {
            // The peer acknowledges across a hole that was never filled: the capture missed
            // those bytes (a filtered or overrun capture), the network delivered them.
            if hi <= ack && ack <= dir.snd_nxt {
                dir.sum.acked_unseen_bytes += u64::from(hi - lo);
                dir.hole = None;
            }
        }
        if dir.snd_una < ack && ack <= dir.snd_nxt {
            self.on_advancing_ack(seg, dir_of_acked, t, frame);
        } else if ack == dir.snd_una
            && seg.is_pure_ack()
            && !dir.outstanding.is_empty()
            && self.dirs[dir_of_acked.peer().index()].adv_window_prev.is_none_or(|w| w == seg.window)
        {
            on_dupack(&mut self.dirs[di], seg, t);
        }
    }

    /// An ACK that advances `snd_una` of `dir_of_acked`'s data: retires the acknowledged
    /// segments, takes RTT samples, and tells a pending gap what it needs to know.
    fn on_advancing_ack(&mut self, seg: &Segment, dir_of_acked: Endpoint, t: Instant, frame: Evidence) {
        let ack = seg.ack;
        let dir = &mut self.dirs[dir_of_acked.index()];
        dir.snd_una = ack;
        dir.dupacks = 0;
        dir.sack_in_dupacks = false;
        dir.third_dupack = None;
        dir.last_sack_dupack = None;
        dir.last_ack_t = Some(t);
        let earliest = retire_acked(dir, ack, t);
        // RFC 7323 4.1: RTT from the echoed TSval of an ACK that advances the window.
        if let Some((_, ecr)) = seg.ts {
            rtt_from_echo(dir, ecr, t);
        }
        let seen = AckSeen { t, frame, pure: seg.is_pure_ack(), ack, earliest_sent: earliest };
        dir.ack_in_gap = Some(seen);
        dir.first_ack_in_gap.get_or_insert(seen);
        let Some(p) = self.pending.as_mut() else { return };
        // Eifel (RFC 3522 2): the first ACK of a resent range that echoes a timestamp older
        // than the resend's own carries the original: the range had arrived, the resend was
        // spurious (Linux counts it in TCPSpuriousRtos / undoes with tcp_try_undo_loss).
        if let (Some((orig, retx)), None, Some((_, ecr))) = (p.eifel, p.spurious, seg.ts) {
            if p.held == dir_of_acked && p.seg.seq < ack {
                p.spurious = Some(ecr == orig || ts_before(ecr, retx));
            }
        }
        // An ACK stamped just after the data it released (see REORDER_WINDOW).
        // Only an ACK of the data outstanding before the gap (not of the released
        // segment itself), and only when no ACK during the gap explains the release.
        let tolerance = RELEASE_SLACK + p.path_rtt.unwrap_or(Duration::ZERO);
        let unexplained = p.ack.is_none_or(|a| p.end.since(a.t) > tolerance);
        let of_old_data = ack <= p.seg.seq;
        if p.held == dir_of_acked && seen.pure && unexplained && of_old_data && p.snap.out_count > 0 {
            p.ack = Some(seen);
            p.ack_after_release = true;
        }
    }

    /// A keep-alive probe with one garbage byte at snd_una - 1 and nothing outstanding (RFC 1122
    /// 4.2.3.6 allows the byte; BSD-derived and Windows stacks send it; Linux's
    /// `tcp_xmit_probe_skb` uses the same sequence number without data). It is not application
    /// data and must not end a gap as a "retransmission".
    fn is_keepalive(&self, seg: &Segment, d: Endpoint) -> bool {
        let dir = &self.dirs[d.index()];
        dir.started && seg.len <= 1 && dir.snd_una == dir.snd_nxt && seg.seq + 1 == dir.snd_una
    }

    fn on_data(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
        let seen = self.judge_data(seg, d, t, frame);
        // The gap detector: a gap in the connection's data flow ends here.
        if let Some(ctx) = self.gap_context(seg, d, t, frame, &seen) {
            self.flush_pending();
            self.pending = Some(ctx);
        }
        self.count_idle(seg, d, t, seen.mss, seen.mss_known);
        self.track_data_seq(seg, d, t, frame, seen.mss);
        // A new gap may start here: remember what each direction has outstanding.
        self.last_data = Some((t, d, frame));
        for e in [Endpoint::A, Endpoint::B] {
            self.snap[e.index()] = self.snapshot(e);
            self.dirs[e.index()].ack_in_gap = None;
            self.dirs[e.index()].first_ack_in_gap = None;
            self.dirs[e.index()].window_opened = None;
            self.dirs[e.index()].unseen_at_gap_start = self.dirs[e.index()].sum.acked_unseen_bytes;
            self.dirs[e.index()].zero_wnd_in_gap = self.dirs[e.peer().index()].adv_window.is_some_and(|w| w == 0);
        }
    }

    /// What a data segment is before it joins its direction's state: a resend or new data,
    /// what the writer's clock and writes say of it; notes a sign of Nagle being off.
    fn judge_data(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) -> DataSeen {
        let (mss, mss_known) = self.mss(d);
        let path = self.path_rtt();
        let path_dir = self.path_component(d);
        let back = self.back(d, path);
        let rinfo = resend_kind(&self.dirs[d.index()], seg, t);
        let mut resend = rinfo.kind;
        // A resend only the kernel saw: the capture shows new data, `tcp:tcp_retransmit_skb`
        // reported resending it just before (within the capture-to-sender path and 5 ms).
        let kernel_retx = self.dirs[d.index()].kernel_retx.filter(|&(kt, _, kseq, klen)| {
            kt <= t && t.since(kt) <= back + Duration::from_millis(5) && kseq <= seg.seq && seg.seq < kseq + klen.max(1)
        });
        if resend == Resend::No && kernel_retx.is_some() {
            resend = Resend::KernelOnly;
        }
        let new_data = resend == Resend::No;
        // The ID the peer's next packet must carry, when its IDs count its packets: another one
        // shows a packet of the peer's the capture missed (see `Dir::check_peer_id`).
        let peer_next_id = self.dirs[d.peer().index()].ip_ids.next();
        let dir = &mut self.dirs[d.index()];
        dir.settle_nagle_off(t, None);
        // The writer's clock, judged before this send joins it (pacing.rs).
        let clock = if new_data {
            // The peer's latest packet before this one (this segment's own was just recorded
            // on the peer's side, not on ours).
            dir.clock.on_send(t, dir.peer_last_seen, dir.peer_last_data, seg.len >= mss, RELEASE_SLACK + back)
        } else {
            None
        };
        let written = if new_data && dir.writes.seen { dir.writes.covering(seg.seq) } else { None };
        // Nagle visibly off: a sub-MSS segment of new data (no FIN: tcp_send_fin pushes with
        // TCP_NAGLE_OFF) sent while an earlier sub-MSS segment is unacknowledged (RFC 9293
        // 3.7.4; Linux tcp_nagle_check + tcp_minshall_check would have held it). Only with the
        // MSS from the handshake: an estimated MSS can make a full segment look small.
        // Not when a timer may have sent it: Linux's tail-loss probe sends new data with data
        // unacknowledged (`tcp_send_loss_probe`, RFC 8985 7.3) once the PTO passed since the
        // last transmission or ACK; that send shows a timer, not Nagle off.
        let quiet_since = dir.last_data_t.max(dir.last_ack_t).map(|q| t.since(q));
        let probe_possible = quiet_since.unwrap_or(Duration::ZERO)
            >= self.cfg.timers.pto_floor(path.unwrap_or(Duration::ZERO), dir.outstanding.len() == 1);
        // Small writes sent at once: a sub-MSS segment with nothing in flight sooner than the
        // probe timer (TCP_RTO_MIN less a jiffy) after the connection's latest data.
        let since_data = dir.last_data_t.max(dir.peer_last_data).map(|q| t.since(q));
        if new_data
            && seg.len < mss
            && dir.outstanding.is_empty()
            && since_data.is_some_and(|q| q + self.cfg.timers.jiffy < self.cfg.timers.rto_min)
        {
            dir.shown_uncorked = true;
        }
        if new_data
            && mss_known
            && seg.len < mss
            && !seg.flags.fin()
            && dir.nagle_off.is_none()
            && dir.out_small > 0
            && !probe_possible
        {
            if let Some(small) = dir.outstanding.iter().rev().find(|s| s.small) {
                if dir.nagle_off_candidate.is_none() {
                    let shown = crate::dir::NagleOffShown {
                        at: t,
                        frame,
                        bytes: seg.len,
                        unacked_frame: small.frame,
                        unacked_bytes: small.len,
                    };
                    dir.nagle_off_candidate = Some(crate::dir::NagleOffCandidate {
                        shown,
                        small_end: small.end,
                        own_end: seg.seq + seg.len,
                        peer_next_id,
                    });
                }
            }
        }
        DataSeen { mss, mss_known, path, path_dir, rinfo, resend, kernel_retx, clock, written, quiet_since }
    }

    /// The gap this data segment ends, when the connection's data flow paused long enough
    /// since the last data segment (of either side): everything the classifier needs.
    // long: one struct literal of the classifier's whole context, a field a line.
    fn gap_context(&self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence, s: &DataSeen) -> Option<GapContext> {
        let (t0, by, f0) = self.last_data?;
        let gap = t.since(t0);
        if gap < self.cfg.min_gap + s.path.unwrap_or(Duration::ZERO) {
            return None;
        }
        // The peer's data seen at t0 reached the held side and its answer came back to
        // the capture point: that share of the path is not the held side's wait.
        let turnaround = if by == d {
            gap
        } else {
            Duration(gap.0.saturating_sub(self.path_component(by).unwrap_or(Duration::ZERO).0))
        };
        let peer_packets = self.dirs[d.peer().index()].sum.wire.packets;
        let dir = &self.dirs[d.index()];
        // The capture skipped this sender's data during the gap: the peer acknowledged
        // bytes never captured, or this segment starts beyond what was seen.
        // (An ACK stamped just before the data it acknowledges, ACK_AHEAD_WINDOW, is
        // reordering, not a skip: the data starts at snd_nxt.)
        let capture_skipped = dir.sum.acked_unseen_bytes > dir.unseen_at_gap_start
            || (dir.started && dir.snd_nxt < seg.seq && s.resend == Resend::No);
        Some(GapContext {
            start: t0,
            start_frame: f0,
            end: t,
            end_frame: frame,
            held: d,
            seg: *seg,
            mss: s.mss,
            mss_known: s.mss_known,
            snap: self.snap[d.index()],
            held_ttl: dir.max_ttl,
            turnaround,
            ack: dir.ack_in_gap,
            first_ack: dir.first_ack_in_gap,
            zero_window: dir.zero_wnd_in_gap,
            window_opened: dir.window_opened,
            ack_after_release: false,
            resend: s.resend,
            resent_prev_tx: if s.resend == Resend::KernelOnly {
                s.written.map(|w| (w.t.max(t0), w.source))
            } else {
                s.rinfo.prev
            },
            prev_was_resend: s.rinfo.prev_was_resend,
            unseen_before: s.rinfo.unseen,
            eifel: match (s.rinfo.tsval, seg.ts) {
                (Some(o), Some((r, _))) if o != r => Some((o, r)),
                _ => None,
            },
            spurious: None,
            already_acked: if matches!(s.resend, Resend::No | Resend::KernelOnly) {
                None
            } else {
                dir.already_acked(seg.seq, seg.len)
            },
            answer: None,
            acked_before_answer: None,
            quiet_since: s.quiet_since,
            dupacks: dir.dupacks,
            sack_seen: dir.sack_in_dupacks,
            third_dupack: dir.third_dupack,
            last_sack_dupack: dir.last_sack_dupack,
            max_flight_segs: dir.sum.max_in_flight_segments as usize,
            lost_before: dir.sum.retransmissions > 0,
            path_rtt: s.path,
            peer_data_rtt_min: {
                let r = &self.dirs[d.peer().index()].sum.rtt_ack;
                if r.count >= 1 {
                    r.min()
                } else {
                    None
                }
            },
            rtt_from_handshake: self.handshake_rtt().is_some(),
            path_dir: s.path_dir,
            capture_point: self.capture_point(),
            super_packets: dir.sum.super_packets > 0,
            timers: self.cfg.timers,
            min_gap: self.cfg.min_gap,
            nagle_off: dir.nagle_off_at(t).map(|s| (s.at, s.frame)),
            clock: s.clock,
            written: s.written,
            kernel_retx: s.kernel_retx,
            kernel_cong: dir.kernel_cong,
            kernel_state: dir.kernel_state,
            icmp_frag: dir.icmp_frag,
            // None of the peer's packets, though it must have sent some: its ACK numbers
            // moved in the held side's packets, the held side sent data after its SYN (or
            // SYN-ACK) with no handshake packet of the peer's captured, or more data segments than TCP sends without an ACK (RFC 9293
            // 3.8.6.3: an ACK at least every second full segment).
            one_direction: peer_packets == 0
                && (dir.ack_moved
                    || dir.sum.wire.data_segments >= 10
                    || (dir.last_syn.is_some() && dir.sum.wire.data_segments > 0)),
            data_only: self.data_only(),
            shown_uncorked: dir.shown_uncorked,
            ts_tick: self.ticks.tick(),
            capture_skipped,
        })
    }

    /// The capture holds data segments only: no SYN, no pure ACK in either direction, yet data
    /// both ways (a capture filtered to data, `tcp[tcpflags] & tcp-push` or by length): the
    /// ACKs that release held data are missing, so a missing ACK proves nothing.
    pub(crate) fn data_only(&self) -> bool {
        let (a, b) = (&self.dirs[0].sum, &self.dirs[1].sum);
        self.hs.syn.is_none()
            && self.hs.syn_ack.is_none()
            && a.wire.pure_acks + b.wire.pure_acks == 0
            && a.wire.data_segments + b.wire.data_segments >= 4
            && a.wire.data_segments > 0
            && b.wire.data_segments > 0
    }

    /// Per-direction idle gaps and segments larger than the MSS.
    fn count_idle(&mut self, seg: &Segment, d: Endpoint, t: Instant, mss: u32, mss_known: bool) {
        let threshold = self.cfg.min_gap + self.path_rtt().unwrap_or(Duration::ZERO);
        let dir = &mut self.dirs[d.index()];
        if let Some(prev) = dir.last_data_t {
            let g = t.since(prev);
            if g >= threshold {
                dir.sum.idle_gaps += 1;
                dir.sum.longest_idle_ns = dir.sum.longest_idle_ns.max(g.as_nanos());
            }
        }
        dir.last_data_t = Some(t);
        if mss_known && seg.len > mss {
            dir.sum.super_packets += 1;
        }
    }

    /// Sequence tracking of a data segment: new data, a retransmission, or a segment filling a
    /// hole; the outstanding list and the TSvals sent.
    fn track_data_seq(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence, mss: u32) {
        let gap_start = self.last_data.map(|(g, ..)| g);
        let dir = &mut self.dirs[d.index()];
        let end = seg.end();
        let small = seg.len < mss;
        dir.settle_ack_ahead(t, gap_start);
        if !dir.started {
            dir.started = true;
            dir.snd_una = seg.seq;
            dir.snd_nxt = seg.seq;
        }
        let mut retx = false;
        if seg.seq < dir.snd_nxt {
            if in_hole(dir.hole, seg.seq) {
                dir.sum.out_of_order += 1;
                dir.hole = None;
            } else {
                retx = true;
                mark_resent(dir, seg, end, t, frame);
            }
        } else if dir.snd_nxt < seg.seq {
            // Data beyond what was seen: a loss before the capture point, or reordering.
            dir.hole = Some((dir.snd_nxt, seg.seq));
            dir.hole_at = Some(t);
        }
        if dir.snd_nxt < end {
            dir.snd_nxt = end;
            if !retx {
                if dir.outstanding.len() >= MAX_OUTSTANDING {
                    if let Some(s) = dir.outstanding.pop_front() {
                        dir.out_bytes -= u64::from(s.len);
                        dir.out_small -= usize::from(s.small);
                    }
                }
                let tsval = seg.ts.map(|ts| ts.0);
                dir.outstanding.push_back(Sent {
                    end,
                    t,
                    frame,
                    len: seg.len,
                    small,
                    retx: false,
                    last_tx: (t, frame),
                    tsval,
                });
                dir.out_bytes += u64::from(seg.len);
                dir.out_small += usize::from(small);
            }
        }
        dir.sum.max_in_flight_bytes = dir.sum.max_in_flight_bytes.max(dir.out_bytes);
        dir.sum.max_in_flight_segments = dir.sum.max_in_flight_segments.max(dir.outstanding.len() as u64);
        if let Some((v, _)) = seg.ts {
            if dir.tsvals.back().is_none_or(|&(last, _)| ts_before(last, v)) {
                if dir.tsvals.len() >= MAX_TSVALS {
                    dir.tsvals.pop_front();
                }
                dir.tsvals.push_back((v, t));
            }
        }
    }

    fn snapshot(&self, d: Endpoint) -> Snapshot {
        let dir = &self.dirs[d.index()];
        // The peer's last advertised window, scaled when the handshake told the scale
        // (RFC 7323 2.3: the window field of non-SYN segments is shifted by the peer's scale).
        let scale = self.peer_wscale(d);
        let peer_wnd = self.dirs[d.peer().index()].adv_window.map(|w| match scale {
            Some(shift) => (u64::from(w) << shift, true),
            None => (u64::from(w), false),
        });
        Snapshot {
            out_count: dir.outstanding.len(),
            out_bytes: dir.out_bytes,
            out_small: dir.out_small,
            last_small_len: dir.outstanding.iter().rev().find(|s| s.small).map_or(0, |s| s.len),
            last_sent: dir.outstanding.back().copied(),
            first_sent: dir.outstanding.front().copied(),
            peer_wnd,
            snd_nxt: dir.snd_nxt,
            snd_una: dir.snd_una,
        }
    }

    /// Round trip of the path without ACK delays: the handshake when it was seen, else the
    /// larger of the two directions' smallest ACK samples.
    /// Classifies a gap still pending when no packet came for it: the same waits `push` applies
    /// (the reorder window; a resend's first ACK up to EIFEL_WAIT), measured to `now` on the
    /// trace's clock. For a live watcher whose flow went quiet after a stall.
    pub fn settle(&mut self, now: Instant) {
        if let Some(p) = &self.pending {
            let awaiting_ack = p.awaits_answer(now) && now.since(p.end) <= EIFEL_WAIT;
            if now.since(p.end) > REORDER_WINDOW && !awaiting_ack {
                self.flush_pending();
            }
        }
    }

    /// The stall records classified so far, in order (a gap is classified once the packet
    /// after its release, or the reorder window, settles it): what a live watcher emits.
    pub fn stalls_so_far(&self) -> &[Stall] {
        &self.stalls
    }

    pub fn path_rtt(&self) -> Option<Duration> {
        let hs = self.handshake_rtt();
        // Each direction's smallest sample; at an endpoint one of them is ~0 (the local ACK),
        // so only the larger one measures the path. A direction with fewer than 3 samples may
        // hold only delayed ACKs (40 ms and more), which are no path RTT: then the smallest
        // sample of all is the estimate (low, not high: a delayed ACK must not hide stalls).
        let mins =
            |n: u64| self.dirs.iter().filter(move |d| d.sum.rtt_ack.count >= n).filter_map(|d| d.sum.rtt_ack.min());
        let samples = mins(3).max().or_else(|| mins(1).min());
        // Captured at an endpoint, that endpoint's data ACKs measure the whole path (a delayed
        // ACK only makes a sample longer); a
        // handshake slower than them was slowed by the far host's SYN processing (an embedded
        // stack, a VPN server), not by the path: the smaller is the path's round trip.
        // Elsewhere a direction's samples see only part of the path.
        // (The third smallest sample: one or two early outliers do not pull it down.)
        let local = match self.capture_point() {
            CapturePoint::AtA => self.dirs[0].rtt_lows.third(),
            CapturePoint::AtB => self.dirs[1].rtt_lows.third(),
            _ => None,
        };
        match (hs, local) {
            (Some(h), Some(m)) => Some(h.min(m)),
            _ => hs.or(samples),
        }
    }

    /// The handshake's round trip, only when neither the SYN nor the SYN-ACK was sent twice
    /// (Karn's rule, RFC 6298 3: a sample from a retransmitted segment is ambiguous).
    fn handshake_rtt(&self) -> Option<Duration> {
        if self.dirs[0].syn_resent || self.dirs[1].syn_resent {
            return None;
        }
        match (self.hs.syn, self.hs.ack) {
            (Some(s), Some(a)) => Some(a.since(s)),
            _ => None,
        }
    }

    /// The part of the path RTT between seeing `d`'s data and seeing the peer's ACK for it at
    /// this capture point (the whole RTT at d's side, ~0 at the peer's side).
    /// The round trip between the capture point and `d`, given the path's (`path_rtt()`): how
    /// soon after an ACK seen here a release by `d` can be seen (0 when not known).
    fn back(&self, d: Endpoint, path: Option<Duration>) -> Duration {
        let path_dir = self.path_component(d).unwrap_or(Duration::ZERO);
        Duration(path.unwrap_or(Duration::ZERO).0.saturating_sub(path_dir.0))
    }

    fn path_component(&self, d: Endpoint) -> Option<Duration> {
        let hs = match (self.handshake_rtt(), self.hs.syn, self.hs.syn_ack, self.hs.ack) {
            (Some(_), Some(s), Some(sa), Some(a)) => Some(if d == Endpoint::A { sa.since(s) } else { a.since(sa) }),
            _ => None,
        };
        match hs {
            Some(h) => Some(self.dirs[d.index()].sum.rtt_ack.min().map_or(h, |s| h.min(s))),
            // No handshake: this direction's own smallest sample may be a delayed ACK (its
            // first samples often are); the path estimate bounds it.
            None => match (self.dirs[d.index()].sum.rtt_ack.min(), self.path_rtt()) {
                (Some(s), Some(p)) => Some(s.min(p)),
                (s, p) => s.or(p),
            },
        }
    }

    /// Where the capture was taken, from the handshake's timing: at A the SYN -> SYN-ACK leg is
    /// the whole round trip and SYN-ACK -> ACK is ~0; at B the reverse; in the middle both are
    /// parts; on loopback both are ~0.
    pub fn capture_point(&self) -> CapturePoint {
        let (Some(s), Some(sa), Some(a), Some(_)) = (self.hs.syn, self.hs.syn_ack, self.hs.ack, self.handshake_rtt())
        else {
            return if self.same_host == Some(true) { CapturePoint::SameHost } else { CapturePoint::Unknown };
        };
        let total = a.since(s);
        match self.same_host {
            Some(true) => return CapturePoint::SameHost,
            // Timing alone: a round trip under 300 us is taken for loopback.
            None if total < Duration::from_micros(300) => return CapturePoint::SameHost,
            _ => {}
        }
        let (l1, l2) = (sa.since(s).as_nanos(), a.since(sa).as_nanos());
        if l2 * 5 < total.as_nanos() {
            CapturePoint::AtA
        } else if l1 * 5 < total.as_nanos() {
            CapturePoint::AtB
        } else {
            CapturePoint::Middle
        }
    }

    fn flush_pending(&mut self) {
        if let Some(ctx) = self.pending.take() {
            let st = classify(&ctx);
            let named_loss =
                matches!(st.cause, Cause::RetransmissionTimeout | Cause::TailLossProbe | Cause::FastRetransmit);
            if st.kind == crate::RecordKind::Stall && named_loss && ctx.resend != Resend::No {
                if self.resent.len() == MAX_REVISITED {
                    self.resent.pop_front();
                }
                let rtt = ctx.path_rtt.unwrap_or(Duration::ZERO);
                self.resent.push_back(Resent {
                    index: self.stalls.len(),
                    held: ctx.held,
                    seq: ctx.seg.seq,
                    eifel: ctx.eifel,
                    until: Instant(ctx.end.0 + 2 * rtt.0 + REVISIT_WAIT.0),
                });
            }
            self.stalls.push(st);
        }
    }

    /// A later packet of the receiver's shows a resend already named a loss was spurious: a
    /// D-SACK of the range (RFC 2883 4), or an ACK of it echoing the first transmission's
    /// timestamp (RFC 3522 2), within two round trips and three seconds of the resend (the proof
    /// can come after another resend of the range, or after an ACK that did not cover it; a
    /// phone's ACKs can arrive a second late in a burst). The record becomes a gap, saying why.
    /// (A live watcher has already emitted the record; `explain` gets the revised one.)
    fn revisit_resends(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
        if self.resent.is_empty() || !seg.flags.ack() {
            return;
        }
        self.resent.retain(|r| t <= r.until);
        let blocks = seg.sack_ranges();
        let dsack = crate::dir::is_dsack(blocks, seg.ack);
        let mut found = Vec::new();
        for (i, r) in self.resent.iter().enumerate() {
            if r.held.peer() != d {
                continue;
            }
            let by_dsack = dsack && blocks.first().is_some_and(|&b| in_block(b, r.seq));
            let by_echo = r.seq < seg.ack
                && matches!((r.eifel, seg.ts), (Some((orig, retx)), Some((_, ecr))) if ecr == orig || ts_before(ecr, retx));
            if by_dsack || by_echo {
                found.push((i, by_dsack));
            }
        }
        for &(i, by_dsack) in found.iter().rev() {
            let r = self.resent.remove(i).expect("index in range");
            let Some(st) = self.stalls.get_mut(r.index) else { continue };
            let p = crate::classify::side(d);
            let how = if by_dsack {
                format!("{p}'s later ACK D-SACKs them (RFC 2883): it received them twice")
            } else {
                format!("{p}'s later ACK of them echoes the first transmission's timestamp (Eifel, RFC 3522)")
            };
            st.evidence.push(crate::EvidenceItem { t, source: frame, what: how.clone() });
            st.detail = format!(
                "{} bytes resent, but the receiver already had them: {how}. The resend was spurious (the ACK came \
                 late or was lost, not the data): nobody waited for these bytes, not a stall [first read as {}]",
                st.bytes_held,
                st.cause.as_str()
            );
            st.kind = crate::RecordKind::Gap;
            st.cause = Cause::Application;
            st.confidence = crate::classify::confidence::GAP_SHOWN - 0.1;
            st.alternatives.clear();
            st.settle = None;
        }
    }
}
