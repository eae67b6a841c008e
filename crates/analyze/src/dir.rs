//! One direction of a connection: what it sent, what is outstanding, what the peer acknowledged.

use crate::pacing::AppClock;
use crate::stats::{DurationStats, WireCost};
use crate::write_log::WriteLog;
use serde::Serialize;
use std::collections::VecDeque;
use trace::{Duration, Evidence, Instant, Segment, SeqNum};

/// See [`Dir::nagle_off_candidate`]: how long an ACK stamped after a segment may still have
/// released it (the flow's REORDER_WINDOW).
const NAGLE_REORDER: Duration = Duration::from_millis(1);

/// Bound on remembered unacknowledged segments per direction (memory stays bounded even when
/// the capture misses ACKs); the oldest are forgotten first.
pub(crate) const MAX_OUTSTANDING: usize = 65_536;
/// Bound on remembered TSvals for timestamp RTT samples.
pub(crate) const MAX_TSVALS: usize = 4_096;
/// Bound on remembered SACKed ranges per direction (a SACK option carries at most 4 blocks,
/// RFC 2018 3).
pub(crate) const MAX_SACKED: usize = 16;
/// Linux's default MSS when none was negotiated (RFC 9293 3.7.1: 536 for IPv4).
pub(crate) const DEFAULT_MSS: u32 = 536;

/// TCP timestamps (RFC 7323 5.2, PAWS) are ordered as sequence numbers are: modulo 2^32, `a`
/// before `b` when `b` is ahead by less than 2^31 (the order of [`SeqNum`], whose module says
/// why it is correct and where it stops being so).
pub(crate) fn ts_before(a: u32, b: u32) -> bool {
    SeqNum(a) < SeqNum(b)
}

/// A data segment sent and not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sent {
    pub end: SeqNum,
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

impl Sent {
    /// Its first sequence number.
    pub(crate) fn start(&self) -> SeqNum {
        self.end - self.len
    }
}

/// An ACK from the peer that advanced this direction's `snd_una`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AckSeen {
    pub t: Instant,
    pub frame: Evidence,
    pub pure: bool,
    /// The acknowledgement number: everything below it is acknowledged.
    pub ack: SeqNum,
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
    pub snd_nxt: SeqNum,
    pub snd_una: SeqNum,
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
pub(crate) struct Dir {
    pub(crate) sum: DirSummary,
    pub(crate) started: bool,
    pub(crate) snd_una: SeqNum,
    pub(crate) snd_nxt: SeqNum,
    /// One hole (left by a segment beyond snd_nxt) to tell reordering from retransmission.
    pub(crate) hole: Option<(SeqNum, SeqNum)>,
    /// When the hole opened (the later range was seen).
    pub(crate) hole_at: Option<Instant>,
    pub(crate) outstanding: VecDeque<Sent>,
    pub(crate) out_bytes: u64,
    pub(crate) out_small: usize,
    /// MSS option the PEER sent in its SYN (what this direction may send).
    pub(crate) peer_mss_opt: Option<u16>,
    /// This endpoint's SYN, when seen: its window-scale option (None: no option).
    pub(crate) syn_wscale: Option<Option<u8>>,
    /// This endpoint's latest SYN (time, frame, ISN), for SYN retransmissions.
    pub(crate) last_syn: Option<(Instant, Evidence, SeqNum)>,
    /// The SYN was sent more than once: its RTT sample is ambiguous (Karn, RFC 6298 3).
    pub(crate) syn_resent: bool,
    /// The interval between this endpoint's latest two SYNs (RFC 6298 5.5: a timer doubles).
    pub(crate) syn_interval: Option<Duration>,
    /// How many SYN resends in a row did not back off.
    pub(crate) syn_flat: u32,
    /// Last window field this endpoint advertised (raw, unscaled).
    pub(crate) adv_window: Option<u16>,
    pub(crate) tsvals: VecDeque<(u32, Instant)>,
    pub(crate) last_data_t: Option<Instant>,
    /// The latest advancing ACK from the peer since the last data segment of the connection.
    pub(crate) ack_in_gap: Option<AckSeen>,
    /// The first of them.
    pub(crate) first_ack_in_gap: Option<AckSeen>,
    /// The peer advertised a zero window since the last data segment of the connection.
    pub(crate) zero_wnd_in_gap: bool,
    pub(crate) dupacks: u32,
    /// A duplicate ACK carried SACK blocks (RFC 2018) since the last advance.
    pub(crate) sack_in_dupacks: bool,
    /// This endpoint's window has been zero since then (its first zero advertisement after an
    /// open window), and the peer's packets since (window probes) with the latest of them.
    pub(crate) zero_since: Option<(Instant, Evidence)>,
    pub(crate) probes_into_zero: u32,
    pub(crate) last_probe: Option<(Instant, Evidence)>,
    /// The largest IP TTL / hop limit of this direction's packets (the least decremented).
    pub(crate) max_ttl: Option<u8>,
    /// The peer acknowledged up to here, beyond the data seen so far, at this time.
    pub(crate) ack_ahead: Option<(SeqNum, Instant)>,
    /// This sender showed Nagle off (see [`NagleOffShown`]): the segments that showed it, for
    /// the verdicts and the endpoint's summary alike.
    pub(crate) nagle_off: Option<NagleOffShown>,
    /// The writer's own clock, if it keeps one (see pacing.rs).
    pub(crate) clock: AppClock,
    /// The writer's writes, when the trace reports them (lab, model, kernel evidence).
    pub(crate) writes: WriteLog,
    /// The latest peer ACK that advanced this direction.
    pub(crate) last_ack_t: Option<Instant>,
    /// The latest packet of any kind from the peer: an ACK that releases, or data a reply
    /// answers (what clocks a sender that is not on its own clock).
    pub(crate) peer_last_seen: Option<Instant>,
    /// Ranges of this direction's data the peer selectively acknowledged above snd_una
    /// (RFC 2018), newest last, at most [`MAX_SACKED`]: a resend of bytes in them is spurious.
    pub(crate) sacked: Vec<(SeqNum, SeqNum)>,
    /// A sub-MSS segment of new data left with nothing in flight sooner than the probe timer
    /// could have released it after the connection's last packet (see
    /// `classify::quiet::corked_after_a_pause`).
    pub(crate) shown_uncorked: bool,
    /// The three smallest data -> ACK samples of this direction (see [`Lows`]).
    pub(crate) rtt_lows: Lows,
    /// The latest data segment from the peer (what an answer answers).
    pub(crate) peer_last_data: Option<Instant>,
    /// When the third duplicate ACK since the last advance or resend came (RFC 5681 3.2).
    pub(crate) third_dupack: Option<Instant>,
    /// When the latest duplicate ACK with SACK blocks came.
    pub(crate) last_sack_dupack: Option<Instant>,
    /// The latest ICMP fragmentation-needed about this sender's segments (RFC 1191, RFC 8201):
    /// time, frame, next-hop MTU.
    pub(crate) icmp_frag: Option<(Instant, Evidence, u32)>,
    /// The latest kernel-reported resend (`tcp:tcp_retransmit_skb`): time, source, seq, len.
    pub(crate) kernel_retx: Option<(Instant, Evidence, SeqNum, u32)>,
    /// The latest kernel-reported congestion state (`tcp:tcp_cong_state_set`).
    pub(crate) kernel_cong: Option<(Instant, Evidence, u8)>,
    /// The latest kernel-reported window state (`tcp:tcp_probe`).
    pub(crate) kernel_state: Option<(Instant, Evidence, trace::KernelState)>,
    /// This sender's FIN was seen: it has nothing more to send.
    pub(crate) fin_seen: bool,
    /// A sign of Nagle off not yet confirmed (see [`NagleOffCandidate`]).
    pub(crate) nagle_off_candidate: Option<NagleOffCandidate>,
    /// This sender's IPv4 identification as a packet counter (see [`IdCounter`]).
    pub(crate) ip_ids: IdCounter,
    /// The window this side advertised before its latest segment (RFC 5681 2 (e): a duplicate
    /// ACK leaves the window unchanged).
    pub(crate) adv_window_prev: Option<u16>,
    /// `sum.acked_unseen_bytes` when this direction's latest gap began, and whether the capture
    /// skipped this sender's data since (bytes acknowledged but never captured, or data beyond
    /// what was seen): the gap is the capture's, not the connection's.
    pub(crate) unseen_at_gap_start: u64,
    /// The peer's window went from zero to open during the current gap.
    pub(crate) window_opened: Option<(Instant, Evidence)>,
    /// The first ACK number this side sent, and whether its ACK numbers moved since (it
    /// acknowledged data from its peer).
    pub(crate) first_ack: Option<SeqNum>,
    pub(crate) ack_moved: bool,
}

/// The receiver's ACK can be stamped before the data it acknowledges (the link emulator writes
/// a packet into the TUN device and stamps it after the kernel answered; per-CPU stamping).
/// Data acknowledged in advance and seen within this window is that reordering; bytes still
/// unseen after it were missed by the capture.
pub(crate) const ACK_AHEAD_WINDOW: Duration = Duration::from_millis(2);

/// The segments that showed a sender's Nagle off (the classifier's decision, `Dir::nagle_off`):
/// a sub-MSS segment of new data sent while an earlier sub-MSS segment was unacknowledged, with
/// no loss probe possible (RFC 9293 3.7.4; Linux `tcp_nagle_check` with `tcp_minshall_check`
/// would have held it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NagleOffShown {
    /// When the small segment was sent, and its frame.
    pub at: Instant,
    pub frame: Evidence,
    pub bytes: u32,
    /// The earlier sub-MSS segment still unacknowledged then: its frame and size.
    pub unacked_frame: Evidence,
    pub unacked_bytes: u32,
}

impl NagleOffShown {
    /// "segment of 12 bytes (frame 9) at 0.004 s sent while 95 bytes (frame 7) were
    /// unacknowledged", times from `first` (the flow's first packet).
    pub fn describe(&self, first: Instant) -> String {
        format!(
            "segment of {} bytes ({}) at {:.3} s sent while the {} bytes of {} were unacknowledged",
            self.bytes,
            evidence_name(self.frame),
            self.at.since(first).0 as f64 / 1e9,
            self.unacked_bytes,
            evidence_name(self.unacked_frame),
        )
    }
}

/// A sign of Nagle off not yet confirmed: the segments, the end of the earlier small segment and
/// of the segment itself (an ACK of the earlier one that does not also cover the segment itself,
/// stamped within [`NAGLE_REORDER`] after it, may have released it: reordered stamps), and the
/// IP ID the peer's next packet must carry when the peer's IDs count its packets (see
/// [`IdCounter`]): another ID means the capture missed a packet of the peer's around the sign,
/// perhaps the ACK that released the segment (a capture that drops packets shows a held
/// segment as one sent with another unacknowledged).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NagleOffCandidate {
    pub shown: NagleOffShown,
    pub small_end: SeqNum,
    pub own_end: SeqNum,
    pub peer_next_id: Option<u16>,
}

impl NagleOffCandidate {
    /// Past the reorder window, and the peer's next ID (if asked for) seen as expected.
    pub(crate) fn counts_at(&self, now: Instant) -> bool {
        now.since(self.shown.at) > NAGLE_REORDER && self.peer_next_id.is_none()
    }
}

/// Steps between a sender's single-segment packets seen before its IPv4 IDs are taken to count
/// its packets.
const ID_STEPS: u32 = 4;

/// A sender's IPv4 identification as a packet counter. Linux numbers a connected TCP socket's
/// packets consecutively, pure ACKs included (`ip_select_ident_segs`, include/net/ip.h:
/// `inet_id += segs`; a GSO super-packet takes one ID per segment). Where at least [`ID_STEPS`]
/// steps from a single-segment packet to the next were seen and four in five of them were +1
/// (a capture that misses packets makes the others), the next packet's ID is known, and another
/// ID reveals a packet the capture missed (or, from a host-wide counter on a quiet host, one of
/// another flow's: either way the capture cannot show that no ACK came between). Random IDs,
/// zero IDs, a byte-swapped counter and IPv6 never count: no claim.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct IdCounter {
    last: Option<u16>,
    /// The last packet was a single segment (at most one MSS of payload).
    single: bool,
    steps: u32,
    ones: u32,
}

impl IdCounter {
    /// A packet with IP ID `id`, `single` when it carried at most one MSS.
    pub(crate) fn on_packet(&mut self, id: Option<u16>, single: bool) {
        // After a super-packet the step is its segment count, not known here: not counted.
        if let (Some(i), Some(l), true) = (id, self.last, self.single) {
            self.steps += 1;
            self.ones += u32::from(i.wrapping_sub(l) == 1);
        }
        self.last = id;
        self.single = single;
    }

    /// The ID the sender's next packet must carry, when its IDs count its packets.
    pub(crate) fn next(&self) -> Option<u16> {
        let counts = self.steps >= ID_STEPS && self.ones * 5 >= self.steps * 4;
        self.last.filter(|_| counts && self.single).map(|l| l.wrapping_add(1))
    }
}

fn evidence_name(e: Evidence) -> String {
    match e {
        Evidence::Frame(n) => format!("frame {n}"),
        Evidence::Model(n) => format!("model step {n}"),
        Evidence::Lab => "the lab's measure".into(),
        Evidence::Kernel(n) => format!("kernel event {n}"),
    }
}

impl Dir {
    /// When and how this sender showed Nagle off, as known at `now`: a candidate counts once no
    /// ACK stamped right after it can have released it and the peer's IP IDs, where they count
    /// packets, show no packet the capture missed. The one rule behind the verdicts
    /// (`classify::Context::nagle_off`) and what a capture shows (`FlowAnalysis::shown`).
    pub(crate) fn nagle_off_at(&self, now: Instant) -> Option<NagleOffShown> {
        self.nagle_off.or_else(|| self.nagle_off_candidate.filter(|c| c.counts_at(now)).map(|c| c.shown))
    }

    /// Confirms a candidate that counts (see [`NagleOffCandidate::counts_at`]), and cancels one
    /// that an ACK of the earlier small segment, stamped within the reorder window, may have
    /// released. An ACK that also covers the segment itself was sent after the segment reached
    /// the peer (a cumulative ACK, RFC 9293 3.4): it cannot have released it, and cancels
    /// nothing. `acked_to`: the ACK, None when it cannot have reached the sender yet (captured
    /// far from it).
    pub(crate) fn settle_nagle_off(&mut self, now: Instant, acked_to: Option<SeqNum>) {
        let Some(c) = self.nagle_off_candidate else { return };
        if c.counts_at(now) {
            self.nagle_off.get_or_insert(c.shown);
            self.nagle_off_candidate = None;
        } else if now.since(c.shown.at) <= NAGLE_REORDER && acked_to.is_some_and(|a| c.small_end <= a && a < c.own_end)
        {
            self.nagle_off_candidate = None;
        }
    }

    /// The peer sent a packet with IP ID `id`: a candidate waiting for the peer's next ID keeps
    /// its sign if it is the one expected, and loses it if not (the capture missed a packet of
    /// the peer's since the sign, or just before it: it may have been the ACK that released the
    /// segment).
    pub(crate) fn check_peer_id(&mut self, id: Option<u16>) {
        let Some(c) = &mut self.nagle_off_candidate else { return };
        let Some(want) = c.peer_next_id else { return };
        if id == Some(want) {
            c.peer_next_id = None;
        } else {
            self.nagle_off_candidate = None;
        }
    }

    /// Counts `bytes` acknowledged but never captured, shown by an ACK at `acked_at`. When that
    /// ACK came before the current gap began at `gap_start` (settled only now), the bytes were skipped before
    /// the gap, not during it: a watch --write capture holds the handshake, then a reply that
    /// acknowledges the rounds it left out, then a stall whose own packets are all there, and
    /// that stall is not the capture's (`capture_skipped` in flow.rs compares against
    /// `unseen_at_gap_start`).
    fn count_unseen(&mut self, bytes: u64, acked_at: Instant, gap_start: Option<Instant>) {
        self.sum.acked_unseen_bytes += bytes;
        if gap_start.is_some_and(|g| acked_at < g) {
            self.unseen_at_gap_start += bytes;
        }
    }

    /// Bytes the peer acknowledged that the capture never showed within [`ACK_AHEAD_WINDOW`]:
    /// the capture missed them (filtered or overrun): not network loss. Accept the ACK.
    /// `gap_start`: when the flow's current gap began (`FlowAnalyzer::last_data`).
    pub(crate) fn settle_ack_ahead(&mut self, now: Instant, gap_start: Option<Instant>) {
        let Some((ack, t)) = self.ack_ahead else { return };
        if self.snd_nxt >= ack {
            self.ack_ahead = None;
            // The data beyond showed up, but the ACK had covered a hole before it: the capture
            // missed the hole's bytes, as that ACK (at t) showed.
            if let Some((lo, hi)) = self.hole.filter(|&(_, hi)| hi <= ack) {
                self.hole = None;
                self.count_unseen(u64::from(hi - lo), t, gap_start);
            }
        } else if now.since(t) > ACK_AHEAD_WINDOW {
            self.ack_ahead = None;
            self.count_unseen(u64::from(ack - self.snd_nxt), t, gap_start);
            self.snd_nxt = ack;
            self.hole = None;
            if self.snd_una < ack {
                self.snd_una = ack;
                while let Some(s) = self.outstanding.pop_front() {
                    self.out_bytes -= u64::from(s.len);
                    self.out_small -= usize::from(s.small);
                }
            }
        }
    }
}

/// How the segment that ended a gap relates to what was sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// New data.
    No,
    /// Resends the oldest unacknowledged range (snd_una): what an RTO or fast retransmit sends.
    Head,
    /// Resends the newest outstanding segment while older ones are unacknowledged: a TLP.
    Tail,
    /// Resends some other range already seen.
    Other,
    /// Fills a hole the capture saw open (a later range arrived first): the range was lost
    /// between the sender and the capture point.
    FillsHole,
    /// New data to the capture, but the kernel reported resending it (`tcp:tcp_retransmit_skb`):
    /// the first transmission was lost before the capture point.
    KernelOnly,
}

/// What the segment that ends a gap resends, if anything.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ResendInfo {
    pub kind: Resend,
    /// When the resent range was last sent (RFC 6298 5.5's backoff counts from there).
    pub prev: Option<(Instant, Evidence)>,
    /// That last transmission was itself a resend: the timer is backing off.
    pub prev_was_resend: bool,
    /// TSval of the range's first transmission (Eifel, RFC 3522).
    pub tsval: Option<u32>,
    /// Below snd_nxt, not acknowledged, yet no transmission of it was captured: the capture
    /// missed the first transmission (the peer acknowledged bytes it never showed, or the
    /// outstanding list overflowed). Not a resend as far as the capture shows.
    pub unseen: bool,
}

/// Whether a data segment resends sequence space already seen, which range, and when that range
/// was last sent (see [`Resend`]).
/// A segment that fills a hole opened less than this before was captured out of order (two
/// queues, a reordering link), not resent: no timer resends that soon.
pub(crate) const HOLE_REORDER: Duration = Duration::from_millis(1);

pub(crate) fn resend_kind(dir: &Dir, seg: &Segment, t: Instant) -> ResendInfo {
    let none = ResendInfo { kind: Resend::No, prev: None, prev_was_resend: false, tsval: None, unseen: false };
    if !dir.started || seg.seq >= dir.snd_nxt {
        return none;
    }
    let covering = dir.outstanding.iter().find(|s| seg.seq < s.end && s.start() <= seg.seq);
    let kind = if in_hole(dir.hole, seg.seq) {
        if dir.hole_at.is_some_and(|h| t.since(h) < HOLE_REORDER) {
            return none;
        }
        Resend::FillsHole
    } else if covering.is_none() && dir.snd_una <= seg.seq {
        return ResendInfo { unseen: true, ..none };
    } else if seg.seq == dir.snd_una {
        Resend::Head
    } else {
        match dir.outstanding.back() {
            Some(last) if dir.outstanding.len() >= 2 && seg.seq == last.start() => Resend::Tail,
            _ => Resend::Other,
        }
    };
    ResendInfo {
        kind,
        prev: covering.map(|s| s.last_tx),
        prev_was_resend: covering.is_some_and(|s| s.retx),
        tsval: covering.and_then(|s| s.tsval),
        unseen: false,
    }
}

pub(crate) fn in_hole(hole: Option<(SeqNum, SeqNum)>, seq: SeqNum) -> bool {
    hole.is_some_and(|(a, b)| a <= seq && seq < b)
}

/// `x` lies in the SACK block `b` (left edge inclusive, right edge exclusive, RFC 2018 3).
pub(crate) fn in_block(b: (SeqNum, SeqNum), x: SeqNum) -> bool {
    b.0 <= x && x < b.1
}

/// RFC 2883 4: the first SACK block reports a duplicate segment (a D-SACK) when it lies below
/// the cumulative ACK, or inside the second block.
pub(crate) fn is_dsack(blocks: &[(SeqNum, SeqNum)], ack: SeqNum) -> bool {
    match blocks {
        [first, rest @ ..] => first.1 <= ack || rest.first().is_some_and(|s| s.0 <= first.0 && first.1 <= s.1),
        [] => false,
    }
}

impl Dir {
    /// Records the SACK blocks of the peer's ACK `ack` (a D-SACK block is not new
    /// information about what arrived above snd_una) and forgets ranges the ACK covers.
    pub(crate) fn on_sack(&mut self, blocks: &[(SeqNum, SeqNum)], ack: SeqNum) {
        self.sacked.retain(|b| ack < b.1);
        let skip = usize::from(is_dsack(blocks, ack));
        for &b in &blocks[skip..] {
            if ack < b.1 && b.0 < b.1 && !self.sacked.contains(&b) {
                if self.sacked.len() == MAX_SACKED {
                    self.sacked.remove(0);
                }
                self.sacked.push(b);
            }
        }
    }

    /// Whether the peer had already acknowledged the range `[seq, seq + len)` before it was
    /// sent again: cumulatively, or in a SACK block (RFC 2018; a resend of it is spurious,
    /// RFC 3708 2).
    pub(crate) fn already_acked(&self, seq: SeqNum, len: u32) -> Option<&'static str> {
        let end = seq + len;
        if len > 0 && end <= self.snd_una {
            Some("cumulatively acknowledged")
        } else if len > 0 && self.sacked.iter().any(|&b| b.0 <= seq && end <= b.1) {
            Some("selectively acknowledged (SACK)")
        } else {
            None
        }
    }
}

/// The three smallest of a series of samples: the third is a floor that one or two outliers
/// (a packet a link delivered early, an ACK matched to the wrong segment) cannot pull down.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Lows([Option<Duration>; 3]);

impl Lows {
    pub(crate) fn add(&mut self, d: Duration) {
        let mut v = d;
        for slot in self.0.iter_mut() {
            match slot {
                Some(x) if x.0 <= v.0 => {}
                Some(x) => std::mem::swap(x, &mut v),
                None => {
                    *slot = Some(v);
                    return;
                }
            }
        }
    }

    /// The third smallest sample, once there are three.
    pub(crate) fn third(&self) -> Option<Duration> {
        self.0[2]
    }
}

#[cfg(test)]
mod lows_tests {
    use super::*;

    #[test]
    fn the_third_smallest_ignores_two_outliers() {
        let mut l = Lows::default();
        for ms in [80, 40, 85, 90, 10, 82, 100] {
            l.add(Duration::from_millis(ms));
        }
        assert_eq!(l.third(), Some(Duration::from_millis(80)));
        let mut two = Lows::default();
        two.add(Duration::from_millis(5));
        two.add(Duration::from_millis(6));
        assert_eq!(two.third(), None);
    }
}
