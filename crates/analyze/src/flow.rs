//! Per-connection state: sequence tracking per direction, RTT samples, the gap detector.

use crate::classify::{classify, open_window_stall, syn_stall, GapContext, PauseCounts, Resend};
use crate::stats::{DurationStats, WireCost};
use crate::{Config, Stall};
use serde::Serialize;
use std::collections::VecDeque;
use trace::{CapturePoint, Duration, Endpoint, Event, EventKind, Evidence, Instant, Segment};

/// Bound on remembered unacknowledged segments per direction (memory stays bounded even when
/// the capture misses ACKs); the oldest are forgotten first.
const MAX_OUTSTANDING: usize = 65_536;
/// Bound on remembered TSvals for timestamp RTT samples.
const MAX_TSVALS: usize = 4_096;
/// Linux's default MSS when none was negotiated (RFC 9293 3.7.1: 536 for IPv4).
const DEFAULT_MSS: u32 = 536;

/// RFC 9293 3.4: sequence comparison modulo 2^32.
pub(crate) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
pub(crate) fn seq_le(a: u32, b: u32) -> bool {
    !seq_lt(b, a)
}

/// A data segment sent and not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sent {
    pub end: u32,
    pub t: Instant,
    pub frame: Evidence,
    pub len: u32,
    /// Sub-MSS when sent (what Nagle's and Minshall's rules look at).
    pub small: bool,
    /// Retransmitted: excluded from RTT samples (Karn's algorithm, RFC 6298 3).
    pub retx: bool,
    /// Its latest transmission (the first, or the latest retransmission): RFC 6298 5.5's
    /// backoff counts from there.
    pub last_tx: (Instant, Evidence),
    /// TSval of its first transmission (RFC 7323 3), for Eifel's spurious-retransmission test.
    pub tsval: Option<u32>,
}

/// An ACK from the peer that advanced this direction's `snd_una`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AckSeen {
    pub t: Instant,
    pub frame: Evidence,
    pub pure: bool,
    /// The acknowledgement number: everything below it is acknowledged.
    pub ack: u32,
    /// Send time of the earliest segment it newly acknowledged (when the peer's delayed-ACK
    /// timer would have been armed: `inet_csk_reset_xmit_timer(ICSK_TIME_DACK)` on the first
    /// unacknowledged segment).
    pub earliest_sent: Option<Instant>,
}

/// What one direction had outstanding at the start of a gap.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub out_count: usize,
    pub out_bytes: u64,
    pub out_small: usize,
    /// Size of the newest unacknowledged sub-MSS segment (what Minshall's rule looks at).
    pub last_small_len: u32,
    pub last_sent: Option<Sent>,
    /// The oldest unacknowledged segment.
    pub first_sent: Option<Sent>,
    /// Peer's advertised window in bytes (scaled), and whether the scale is known: both SYNs
    /// seen (RFC 7323 2.2: with no option on either SYN the window is unscaled, known exactly).
    pub peer_wnd: Option<(u64, bool)>,
    pub snd_nxt: u32,
    pub snd_una: u32,
}

/// Per-direction summary in the spirit of `tcptrace -l`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DirSummary {
    pub wire: WireCost,
    pub syn: u64,
    pub fin: u64,
    pub rst: u64,
    pub retransmissions: u64,
    pub out_of_order: u64,
    /// Zero-window advertisements sent by this endpoint.
    pub zero_windows: u64,
    /// Largest payload of one segment.
    #[serde(rename = "max_segment_bytes")]
    pub max_segment: u32,
    /// MSS this endpoint may send: the peer's SYN MSS option minus the timestamp option; without
    /// the handshake, an estimate (the largest segment seen, at least 536: RFC 9293 3.7.1).
    #[serde(rename = "mss_bytes")]
    pub mss: Option<u32>,
    /// Whether `mss` came from the SYN's option (else it is estimated).
    pub mss_known: bool,
    /// Segments larger than the MSS: GRO/TSO super-packets (capture taken at an endpoint).
    pub super_packets: u64,
    pub max_in_flight_bytes: u64,
    /// RTT from data to the ACK that covers it (includes the peer's ACK delay).
    pub rtt_ack: DurationStats,
    /// RTT from TSval to its echo in an advancing ACK (RFC 7323 4.1).
    pub rtt_ts: DurationStats,
    /// Gaps between this direction's data segments longer than the stall threshold.
    pub idle_gaps: u64,
    /// Keep-alive probes (not counted as data for stalls, RFC 1122 4.2.3.6).
    pub keepalives: u64,
    /// Bytes this endpoint sent that the peer acknowledged but the capture never saw: capture
    /// loss (a filtered or overrun capture), not network loss.
    pub acked_unseen_bytes: u64,
    /// SYNs (or SYN-ACKs) sent again: connect stalls.
    pub syn_retransmissions: u64,
    pub max_in_flight_segments: u64,
    pub longest_idle_ns: u64,
}

#[derive(Debug, Default)]
struct Dir {
    sum: DirSummary,
    started: bool,
    snd_una: u32,
    snd_nxt: u32,
    /// One hole (left by a segment beyond snd_nxt) to tell reordering from retransmission.
    hole: Option<(u32, u32)>,
    outstanding: VecDeque<Sent>,
    out_bytes: u64,
    out_small: usize,
    /// MSS option the PEER sent in its SYN (what this direction may send).
    peer_mss_opt: Option<u16>,
    /// This endpoint's SYN, when seen: its window-scale option (None: no option).
    syn_wscale: Option<Option<u8>>,
    /// This endpoint's latest SYN (time, frame, ISN), for SYN retransmissions.
    last_syn: Option<(Instant, Evidence, u32)>,
    /// The SYN was sent more than once: its RTT sample is ambiguous (Karn, RFC 6298 3).
    syn_resent: bool,
    /// Last window field this endpoint advertised (raw, unscaled).
    adv_window: Option<u16>,
    tsvals: VecDeque<(u32, Instant)>,
    last_data_t: Option<Instant>,
    /// The latest advancing ACK from the peer since the last data segment of the connection.
    ack_in_gap: Option<AckSeen>,
    /// The peer advertised a zero window since the last data segment of the connection.
    zero_wnd_in_gap: bool,
    dupacks: u32,
    /// A duplicate ACK carried SACK blocks (RFC 2018) since the last advance.
    sack_in_dupacks: bool,
    /// This endpoint's window has been zero since then (its first zero advertisement after an
    /// open window), and the peer's packets since (window probes) with the latest of them.
    zero_since: Option<(Instant, Evidence)>,
    probes_into_zero: u32,
    last_probe: Option<(Instant, Evidence)>,
    /// Earlier pauses of this sender with nothing in flight that ended in a sub-MSS segment and
    /// lasted between half the probe interval and ten times it: (at the probe timer's interval,
    /// at other lengths). A writer that pauses at many lengths makes a pause at the timer's
    /// interval likely its own (the base rate of `classify`'s probe-timer rule).
    quiet_pauses: PauseCounts,
    /// The largest IP TTL / hop limit of this direction's packets (the least decremented).
    max_ttl: Option<u8>,
    /// The peer acknowledged up to here, beyond the data seen so far, at this time.
    ack_ahead: Option<(u32, Instant)>,
}

/// The receiver's ACK can be stamped before the data it acknowledges (the link emulator writes
/// a packet into the TUN device and stamps it after the kernel answered; per-CPU stamping).
/// Data acknowledged in advance and seen within this window is that reordering; bytes still
/// unseen after it were missed by the capture.
const ACK_AHEAD_WINDOW: Duration = Duration::from_millis(2);

impl Dir {
    /// Bytes the peer acknowledged that the capture never showed within [`ACK_AHEAD_WINDOW`]:
    /// the capture missed them (filtered or overrun): not network loss. Accept the ACK.
    fn settle_ack_ahead(&mut self, now: Instant) {
        let Some((ack, t)) = self.ack_ahead else { return };
        if !seq_lt(self.snd_nxt, ack) {
            self.ack_ahead = None;
        } else if now.since(t) > ACK_AHEAD_WINDOW {
            self.ack_ahead = None;
            self.sum.acked_unseen_bytes += u64::from(ack.wrapping_sub(self.snd_nxt));
            self.snd_nxt = ack;
            self.hole = None;
            if seq_lt(self.snd_una, ack) {
                self.snd_una = ack;
                while let Some(s) = self.outstanding.pop_front() {
                    self.out_bytes -= u64::from(s.len);
                    self.out_small -= usize::from(s.small);
                }
            }
        }
    }
}

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
        let EventKind::Segment(seg) = &ev.kind else { return };
        let t = ev.t;
        if let Some(p) = &self.pending {
            // A resend waits (at most EIFEL_WAIT) for the first ACK of its range, which tells
            // whether it was spurious.
            let awaiting_ack = p.eifel.is_some() && p.spurious.is_none() && t.since(p.end) <= EIFEL_WAIT;
            if (t.since(p.end) > REORDER_WINDOW && !awaiting_ack) || seg.len > 0 {
                self.flush_pending();
            }
        }
        self.first.get_or_insert(t);
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
            if dir.started && seq_lt(dir.snd_nxt, seg.seq) && seg.seq.wrapping_sub(dir.snd_nxt) < 1 << 30 {
                dir.hole = Some((dir.snd_nxt, seg.seq));
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
                    let st = syn_stall(d, (t0, f0), (t, frame), what, &self.cfg.timers);
                    self.stalls.push(st);
                }
            }
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

    fn account(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
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
            && (seg.len == 1 || (own.started && seq_lt(seg.seq, own.snd_una)));
        let peer = &mut self.dirs[d.peer().index()];
        if probe && peer.zero_since.is_some_and(|(t0, _)| t0 < t) {
            peer.probes_into_zero += 1;
            peer.last_probe = Some((t, frame));
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
            self.dirs[d.index()].adv_window = Some(seg.window);
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
        let end = seg.seq.wrapping_add(seg.seq_space());
        if !dir.started || seg.flags.syn() {
            dir.started = true;
            dir.snd_una = seg.seq;
            dir.snd_nxt = end;
        } else if seq_lt(dir.snd_nxt, end) {
            dir.snd_nxt = end;
        }
    }

    fn on_ack(&mut self, seg: &Segment, dir_of_acked: Endpoint, t: Instant, frame: Evidence) {
        let di = dir_of_acked.index();
        let dir = &mut self.dirs[di];
        if seg.window == 0 && !seg.flags.syn() && !seg.flags.rst() {
            dir.zero_wnd_in_gap = true;
        }
        if !dir.started {
            return;
        }
        let ack = seg.ack;
        dir.settle_ack_ahead(t);
        if seq_lt(dir.snd_nxt, ack) && ack.wrapping_sub(dir.snd_nxt) < 1 << 30 {
            // The peer acknowledges bytes not seen yet: either their timestamps were reordered
            // (the data shows up within ACK_AHEAD_WINDOW) or the capture missed them.
            if dir.ack_ahead.is_none_or(|(a, _)| seq_lt(a, ack)) {
                dir.ack_ahead = Some((ack, t));
            }
        }
        if let Some((lo, hi)) = dir.hole {
            // The peer acknowledges across a hole that was never filled: the capture missed
            // those bytes (a filtered or overrun capture), the network delivered them.
            if seq_le(hi, ack) && seq_le(ack, dir.snd_nxt) {
                dir.sum.acked_unseen_bytes += u64::from(hi.wrapping_sub(lo));
                dir.hole = None;
            }
        }
        if seq_lt(dir.snd_una, ack) && seq_le(ack, dir.snd_nxt) {
            dir.snd_una = ack;
            dir.dupacks = 0;
            dir.sack_in_dupacks = false;
            let mut earliest: Option<Instant> = None;
            let mut exact_rtt = None;
            while let Some(s) = dir.outstanding.front().copied() {
                if !seq_le(s.end, ack) {
                    break;
                }
                dir.outstanding.pop_front();
                dir.out_bytes -= u64::from(s.len);
                dir.out_small -= usize::from(s.small);
                if !s.retx {
                    earliest = Some(earliest.map_or(s.t, |e: Instant| e.min(s.t)));
                    if s.end == ack {
                        exact_rtt = Some(t.since(s.t));
                    }
                }
            }
            if let Some(r) = exact_rtt {
                dir.sum.rtt_ack.add(r);
            }
            // RFC 7323 4.1: RTT from the echoed TSval of an ACK that advances the window.
            if let Some((_, ecr)) = seg.ts {
                while let Some(&(v, vt)) = dir.tsvals.front() {
                    if seq_lt(v, ecr) {
                        dir.tsvals.pop_front();
                    } else {
                        if v == ecr {
                            dir.sum.rtt_ts.add(t.since(vt));
                            dir.tsvals.pop_front();
                        }
                        break;
                    }
                }
            }
            let seen = AckSeen { t, frame, pure: seg.is_pure_ack(), ack, earliest_sent: earliest };
            dir.ack_in_gap = Some(seen);
            // Eifel (RFC 3522 2): the first ACK of a resent range that echoes a timestamp older
            // than the resend's own carries the original: the range had arrived, the resend was
            // spurious (Linux counts it in TCPSpuriousRtos / undoes with tcp_try_undo_loss).
            if let Some(p) = self.pending.as_mut() {
                if let (Some((orig, retx)), None, Some((_, ecr))) = (p.eifel, p.spurious, seg.ts) {
                    if p.held == dir_of_acked && seq_lt(p.seg.seq, ack) {
                        p.spurious = Some(ecr == orig || seq_lt(ecr, retx));
                    }
                }
            }
            // An ACK stamped just after the data it released (see REORDER_WINDOW).
            if let Some(p) = self.pending.as_mut() {
                // Only an ACK of the data outstanding before the gap (not of the released
                // segment itself), and only when no ACK during the gap explains the release.
                let tolerance = Duration::from_millis(2) + p.path_rtt.unwrap_or(Duration::ZERO);
                let unexplained = p.ack.is_none_or(|a| p.end.since(a.t) > tolerance);
                let of_old_data = seq_le(ack, p.seg.seq);
                if p.held == dir_of_acked && seen.pure && unexplained && of_old_data && p.snap.out_count > 0 {
                    p.ack = Some(seen);
                    p.ack_after_release = true;
                }
            }
        } else if ack == dir.snd_una && seg.is_pure_ack() && !dir.outstanding.is_empty() {
            // RFC 5681 2 (DUPLICATE ACKNOWLEDGMENT), RFC 6675 for SACK blocks.
            dir.dupacks += 1;
            dir.sack_in_dupacks |= seg.sack_blocks > 0;
        }
    }

    /// A keep-alive probe with one garbage byte at snd_una - 1 and nothing outstanding (RFC 1122
    /// 4.2.3.6 allows the byte; BSD-derived and Windows stacks send it; Linux's
    /// `tcp_xmit_probe_skb` uses the same sequence number without data). It is not application
    /// data and must not end a gap as a "retransmission".
    fn is_keepalive(&self, seg: &Segment, d: Endpoint) -> bool {
        let dir = &self.dirs[d.index()];
        dir.started && seg.len <= 1 && dir.snd_una == dir.snd_nxt && seg.seq.wrapping_add(1) == dir.snd_una
    }

    fn on_data(&mut self, seg: &Segment, d: Endpoint, t: Instant, frame: Evidence) {
        let (mss, mss_known) = self.mss(d);
        // The gap detector: a gap in the connection's data flow ends here.
        if let Some((t0, by, f0)) = self.last_data {
            let gap = t.since(t0);
            let path = self.path_rtt();
            if gap >= self.cfg.min_gap + path.unwrap_or(Duration::ZERO) {
                let snap = self.snap[d.index()];
                let quiet_pauses = self.dirs[d.index()].quiet_pauses;
                let timers = self.cfg.timers;
                // The peer's data seen at t0 reached the held side and its answer came back to
                // the capture point: that share of the path is not the held side's wait.
                let turnaround = if by == d {
                    gap
                } else {
                    Duration(gap.0.saturating_sub(self.path_component(by).unwrap_or(Duration::ZERO).0))
                };
                let srtt_known = self.handshake_rtt().is_some();
                if snap.out_count == 0
                    && seg.len < mss
                    && gap.0 * 2 >= timers.rto_min.0
                    && gap.0 <= 10 * timers.rto_min.0
                {
                    let q = &mut self.dirs[d.index()].quiet_pauses;
                    if timers.is_probe_interval(turnaround, path.unwrap_or(Duration::ZERO), srtt_known) {
                        q.at_probe_interval += 1;
                    } else {
                        q.other += 1;
                    }
                }
                let dir = &self.dirs[d.index()];
                let (resend, resent_prev_tx, orig_tsval) = resend_kind(dir, seg);
                let ctx = GapContext {
                    start: t0,
                    start_frame: f0,
                    end: t,
                    end_frame: frame,
                    held: d,
                    seg: *seg,
                    mss,
                    mss_known,
                    snap,
                    quiet_pauses,
                    held_ttl: dir.max_ttl,
                    turnaround,
                    ack: dir.ack_in_gap,
                    zero_window: dir.zero_wnd_in_gap,
                    ack_after_release: false,
                    resend,
                    resent_prev_tx,
                    eifel: match (orig_tsval, seg.ts) {
                        (Some(o), Some((r, _))) if o != r => Some((o, r)),
                        _ => None,
                    },
                    spurious: None,
                    dupacks: dir.dupacks,
                    sack_seen: dir.sack_in_dupacks,
                    max_flight_segs: dir.sum.max_in_flight_segments as usize,
                    lost_before: dir.sum.retransmissions > 0,
                    path_rtt: path,
                    rtt_from_handshake: self.handshake_rtt().is_some(),
                    path_dir: self.path_component(d),
                    capture_point: self.capture_point(),
                    super_packets: dir.sum.super_packets > 0,
                    timers: self.cfg.timers,
                };
                self.flush_pending();
                self.pending = Some(ctx);
            }
        }
        // Per-direction idle gaps.
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
        // Sequence tracking: new data, retransmission, or a segment filling a hole.
        let end = seg.seq.wrapping_add(seg.seq_space());
        let small = seg.len < mss;
        dir.settle_ack_ahead(t);
        if !dir.started {
            dir.started = true;
            dir.snd_una = seg.seq;
            dir.snd_nxt = seg.seq;
        }
        let mut retx = false;
        if seq_lt(seg.seq, dir.snd_nxt) {
            if in_hole(dir.hole, seg.seq) {
                dir.sum.out_of_order += 1;
                dir.hole = None;
            } else {
                dir.sum.retransmissions += 1;
                retx = true;
                for s in dir.outstanding.iter_mut() {
                    if seq_lt(seg.seq, s.end) && seq_lt(s.end.wrapping_sub(s.len), end) {
                        s.retx = true;
                        s.last_tx = (t, frame);
                    }
                }
            }
        } else if seq_lt(dir.snd_nxt, seg.seq) {
            // Data beyond what was seen: a loss before the capture point, or reordering.
            dir.hole = Some((dir.snd_nxt, seg.seq));
        }
        if seq_lt(dir.snd_nxt, end) {
            dir.snd_nxt = end;
            if !retx {
                if dir.outstanding.len() >= MAX_OUTSTANDING {
                    if let Some(s) = dir.outstanding.pop_front() {
                        dir.out_bytes -= u64::from(s.len);
                        dir.out_small -= usize::from(s.small);
                    }
                }
                dir.outstanding.push_back(Sent {
                    end,
                    t,
                    frame,
                    len: seg.len,
                    small,
                    retx: false,
                    last_tx: (t, frame),
                    tsval: seg.ts.map(|ts| ts.0),
                });
                dir.out_bytes += u64::from(seg.len);
                dir.out_small += usize::from(small);
            }
        }
        dir.sum.max_in_flight_bytes = dir.sum.max_in_flight_bytes.max(dir.out_bytes);
        dir.sum.max_in_flight_segments = dir.sum.max_in_flight_segments.max(dir.outstanding.len() as u64);
        if let Some((v, _)) = seg.ts {
            if dir.tsvals.back().is_none_or(|&(last, _)| seq_lt(last, v)) {
                if dir.tsvals.len() >= MAX_TSVALS {
                    dir.tsvals.pop_front();
                }
                dir.tsvals.push_back((v, t));
            }
        }
        // A new gap may start here: remember what each direction has outstanding.
        self.last_data = Some((t, d, frame));
        for e in [Endpoint::A, Endpoint::B] {
            self.snap[e.index()] = self.snapshot(e);
            self.dirs[e.index()].ack_in_gap = None;
            self.dirs[e.index()].zero_wnd_in_gap = self.dirs[e.peer().index()].adv_window.is_some_and(|w| w == 0);
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
            let awaiting_ack = p.eifel.is_some() && p.spurious.is_none() && now.since(p.end) <= EIFEL_WAIT;
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
        hs.or(samples)
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
            self.stalls.push(classify(&ctx));
        }
    }

    pub fn finish(mut self) -> FlowAnalysis {
        self.flush_pending();
        // A window still closed at the end: the wait no data segment ended.
        for d in [Endpoint::A, Endpoint::B] {
            let peer = &self.dirs[d.peer().index()];
            if let Some(zero) = peer.zero_since {
                // Data `d` sent after the window closed (a byte probe) ended a gap already
                // classified: the open wait starts after it.
                let start = self.dirs[d.index()].last_data_t.filter(|&t| zero.0 < t).unwrap_or(zero.0);
                if self.dirs[d.index()].started && self.last.since(start) >= self.cfg.min_gap {
                    let stall = open_window_stall(d, zero, start, self.last, peer.probes_into_zero, peer.last_probe);
                    self.stalls.push(stall);
                }
            }
        }
        for d in [Endpoint::A, Endpoint::B] {
            let (mss, known) = self.mss(d);
            let s = &mut self.dirs[d.index()].sum;
            // An estimate is only worth reporting when this direction sent data.
            s.mss = (known || s.wire.data_segments > 0).then_some(mss);
            s.mss_known = known;
        }
        let cp = self.capture_point();
        let path = self.path_rtt();
        let capture_note = match cp {
            CapturePoint::SameHost => {
                "same host (loopback): both ends' views coincide, every stall is seen as it happened".to_string()
            }
            CapturePoint::Middle => "between the endpoints: each side's send and receive times are shifted by part of \
                 the round trip; ACK delays are estimated by subtracting it"
                .to_string(),
            CapturePoint::AtA => "at endpoint A (the SYN sender): A's sends are seen when they leave, B's when they \
                 arrive; B's ACK delays include the network round trip, subtracted using the handshake"
                .to_string(),
            CapturePoint::AtB => "at endpoint B (the SYN receiver): B's sends are seen when they leave, A's when they \
                 arrive; A's ACK delays include the network round trip, subtracted using the handshake"
                .to_string(),
            CapturePoint::Unknown if self.hs.syn.is_some() && self.handshake_rtt().is_none() => {
                "unknown (the SYN or SYN-ACK was resent, so the handshake gives no RTT sample by Karn's rule): \
                 round trip estimated from data ACKs, confidence lowered"
                    .to_string()
            }
            CapturePoint::Unknown => "unknown (handshake not captured): round trip and ACK delays are estimated from \
                 ACK timing, confidence lowered"
                .to_string(),
        };
        let mut notes = Vec::new();
        for d in [Endpoint::A, Endpoint::B] {
            let s = &self.dirs[d.index()].sum;
            if s.acked_unseen_bytes > 0 {
                notes.push(format!(
                    "{} acknowledged {} bytes from {d:?} that the capture never saw: the capture missed them \
                     (filtered or overrun), which is not network loss",
                    match d.peer() {
                        Endpoint::A => "A",
                        Endpoint::B => "B",
                    },
                    s.acked_unseen_bytes
                ));
            }
            if s.super_packets > 0 {
                notes.push(format!(
                    "{d:?} sent {} segments larger than its MSS: GRO/TSO super-packets, so the capture was taken at an \
                     endpoint above the NIC; packet boundaries and times inside them are hidden",
                    s.super_packets
                ));
            }
        }
        FlowAnalysis {
            first: self.first.unwrap_or(Instant::ZERO),
            last: self.last,
            handshake: self.hs,
            capture_point: cp,
            capture_note,
            path_rtt: path,
            path_rtt_from_handshake: self.handshake_rtt().is_some(),
            dirs: [self.dirs[0].sum.clone(), self.dirs[1].sum.clone()],
            stalls: self.stalls,
            notes,
        }
    }
}

/// Whether a data segment resends sequence space already seen, which range, and when that range
/// was last sent (see [`Resend`]).
/// and the TSval of its first transmission (Eifel, RFC 3522).
fn resend_kind(dir: &Dir, seg: &Segment) -> (Resend, Option<(Instant, Evidence)>, Option<u32>) {
    if !dir.started || !seq_lt(seg.seq, dir.snd_nxt) {
        return (Resend::No, None, None);
    }
    let covering =
        dir.outstanding.iter().find(|s| seq_lt(seg.seq, s.end) && seq_le(s.end.wrapping_sub(s.len), seg.seq));
    let (prev, tsval) = (covering.map(|s| s.last_tx), covering.and_then(|s| s.tsval));
    let kind = if in_hole(dir.hole, seg.seq) {
        Resend::FillsHole
    } else if seg.seq == dir.snd_una {
        Resend::Head
    } else {
        match dir.outstanding.back() {
            Some(last) if dir.outstanding.len() >= 2 && seg.seq == last.end.wrapping_sub(last.len) => Resend::Tail,
            _ => Resend::Other,
        }
    };
    (kind, prev, tsval)
}

fn in_hole(hole: Option<(u32, u32)>, seq: u32) -> bool {
    hole.is_some_and(|(a, b)| seq_le(a, seq) && seq_lt(seq, b))
}
