//! The labeler (pure: time is data). From what a program wrote (its log), what left its host
//! (the capture at the sender), what the receiver acknowledged (the capture at the receiver)
//! and what the kernel resent (tcp:tcp_retransmit_skb with tcp:tcp_cong_state_set), it says for
//! every data segment that ended a quiet spell of the connection whether bytes waited, and why.
//! None of it is the classifier's.
//!
//! A candidate is a data segment that left after the connection's data flow, as the sender's
//! capture shows it, was quiet for longer than the path's round trip plus the margin (the
//! spells the classifier examines, docs/explain.md "What is a stall"). For its bytes:
//! - resent (they left before): a wait when they left again more than rtt + margin after they
//!   first left, unless the receiver had acknowledged them before the resend (spurious, a
//!   negative); the cause is the kernel's congestion state at the resend (`tcp_retransmit_skb`
//!   after `tcp_set_ca_state`): Loss (4) a retransmission timeout (`tcp_enter_loss`, RFC 6298
//!   5.5), Recovery (3) fast retransmit (`tcp_enter_recovery`, RFC 5681 3.2), Open (0) or
//!   Disorder (1) a tail-loss probe (`tcp_send_loss_probe`, RFC 8985 7.3);
//! - first sent: a negative when they left within the margin of their write (nothing held
//!   them: think time, a periodic writer); a wait when they left more than rtt + margin after
//!   it, named by what held them, in this order: the peer's window had no room for them (RFC
//!   9293 3.8.6.2.1, `tcp_snd_wnd_test`); the flight filled the kernel's cwnd (`tcp_cwnd_test`,
//!   RFC 5681 3.1, the cwnd from tcp:tcp_probe); Nagle on, a sub-MSS segment unacknowledged
//!   when they were written, and they left right after the peer's ACK arrived (RFC 9293 3.7.4,
//!   `tcp_nagle_check`/`tcp_minshall_check`); corked or MSG_MORE with nothing in flight and no
//!   ACK releasing them (`tcp_probe_timer`, tcp(7) TCP_CORK); earlier data unacknowledged, no
//!   ACK, about a probe timeout after the last send (new data as a loss probe,
//!   `tcp_send_loss_probe`, RFC 8985 7.2); else unknown;
//! - in between (held less than a round trip plus the margin): `short`, not scored.

use serde::{Deserialize, Serialize};
use trace::{Cause, Endpoint, SeqNum};

use crate::log::Side;
use crate::packets::Pkt;

/// One write call, as the labeler needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub t_ns: u64,
    /// Stream offset of its first byte (0 = the first data byte).
    pub offset: u64,
    pub len: u32,
    pub more: bool,
    pub nodelay: bool,
    pub cork: bool,
}

/// A kernel resend (tcp:tcp_retransmit_skb) and the congestion state then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resend {
    pub t_ns: u64,
    /// Raw sequence number of its first byte.
    pub seq: u32,
    pub len: u32,
    /// enum tcp_ca_state (include/net/inet_connection_sock.h... tcp.h): 0 open, 1 disorder,
    /// 2 cwr, 3 recovery, 4 loss.
    pub ca_state: u8,
}

/// The kernel's congestion window at a time (tcp:tcp_probe), in segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cwnd {
    pub t_ns: u64,
    pub cwnd: u32,
}

/// One direction of a connection: the data of `side`.
#[derive(Debug, Clone, Default)]
pub struct Direction {
    pub writes: Vec<Write>,
    /// Both ends' segments at the sender's capture point.
    pub at_sender: Vec<Pkt>,
    /// Both ends' segments at the receiver's (empty: no spurious check).
    pub at_receiver: Vec<Pkt>,
    pub resends: Vec<Resend>,
    pub cwnd: Vec<Cwnd>,
}

/// Thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// The path's round trip (ns).
    pub rtt_ns: u64,
    /// The classifier's default `--min-gap`, 10 ms.
    pub margin_ns: u64,
    /// "Right after the ACK": a release this soon after an ACK arrived was caused by it.
    pub release_ns: u64,
}

impl Params {
    pub fn new(rtt_ns: u64) -> Params {
        Params { rtt_ns, margin_ns: analyze::DEFAULT_MIN_GAP.0, release_ns: 3_000_000 }
    }
}

/// What a label is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Bytes waited longer than rtt + margin: `cause` says why.
    Wait,
    /// Nothing held the bytes (they left as written, or a resend the receiver did not need):
    /// the classifier must not name a stall here.
    Negative,
    /// Held longer than the margin but less than a round trip more: not scored.
    Short,
}

/// One labelled segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Label {
    /// The side whose bytes they are (the held side for a wait).
    pub held: Side,
    pub kind: Kind,
    /// Cause of a wait (`unknown` when nothing known held them); None for the others.
    pub cause: Option<Cause>,
    /// Stream offsets [start, end) of the segment's bytes.
    pub start: u64,
    pub end: u64,
    /// When the earliest of them was written (realtime ns), if the log has it.
    pub written_at: Option<u64>,
    /// When they first left (the sender's capture).
    pub first_left: u64,
    /// When this segment left (= `first_left` unless resent).
    pub left_at: u64,
    /// How long the connection's data flow had been quiet when it left (ns).
    pub quiet_ns: u64,
    /// The facts behind the label, for people.
    pub note: String,
}

/// Per-connection timeline of what the sender had heard from its peer: cumulative ACK and the
/// window's right edge (offsets), from the peer's segments at the sender's capture.
struct Peer {
    t: Vec<u64>,
    una: Vec<u64>,
    edge: Vec<u64>,
    /// Times at which the ACK advanced.
    advanced: Vec<u64>,
}

impl Peer {
    fn at(&self, t: u64) -> Option<(u64, u64)> {
        let i = self.t.partition_point(|&x| x <= t);
        (i > 0).then(|| (self.una[i - 1], self.edge[i - 1]))
    }
    /// The last time the ACK advanced at or before `t`.
    fn last_advance(&self, t: u64) -> Option<u64> {
        let i = self.advanced.partition_point(|&x| x <= t);
        (i > 0).then(|| self.advanced[i - 1])
    }
}

/// Sequence offsets of one side: raw seq - ISN - 1 (RFC 9293 3.4: the SYN takes one).
#[derive(Debug, Clone, Copy)]
struct Space {
    isn: SeqNum,
}

impl Space {
    fn off(&self, seq: SeqNum) -> u64 {
        u64::from(seq - (self.isn + 1))
    }
}

/// The MSS the sender uses: the peer's SYN MSS option less 12 bytes when timestamps are on
/// (RFC 7323 3, `tcp_sync_mss` subtracts the options), 536 without one (RFC 9293 3.7.1).
fn sender_mss(pkts: &[Pkt], side: Endpoint) -> u32 {
    let peer_syn = pkts.iter().find(|p| p.from != side && p.seg.flags.syn());
    match peer_syn.and_then(|p| p.seg.mss.map(|m| (m, p.seg.ts.is_some()))) {
        Some((m, ts)) => u32::from(m) - if ts { 12 } else { 0 },
        None => 536,
    }
}

// long: one pass over the sender's capture keeps the peer's ACK/window timeline and the
// quiet spells; splitting it would pass the same state around.
/// Labels the data of `side` in one direction.
pub fn label(side: Side, d: &Direction, p: &Params) -> Vec<Label> {
    let me = side.endpoint();
    let Some(syn) = d.at_sender.iter().find(|x| x.from == me && x.seg.flags.syn()) else { return Vec::new() };
    let space = Space { isn: syn.seg.seq };
    let peer_wscale = d.at_sender.iter().find(|x| x.from != me && x.seg.flags.syn()).and_then(|x| x.seg.wscale);
    let mss = sender_mss(&d.at_sender, me);
    let mut peer = Peer { t: Vec::new(), una: Vec::new(), edge: Vec::new(), advanced: Vec::new() };
    for x in d.at_sender.iter().filter(|x| x.from != me && x.seg.flags.ack()) {
        let una = space.off(x.seg.ack);
        let scale = if x.seg.flags.syn() { 0 } else { peer_wscale.unwrap_or(0) };
        let edge = una + (u64::from(x.seg.window) << scale);
        if peer.una.last().is_none_or(|&u| una > u) && una < (1 << 40) {
            peer.advanced.push(x.t_ns);
        }
        peer.t.push(x.t_ns);
        peer.una.push(una.max(peer.una.last().copied().unwrap_or(0)));
        peer.edge.push(edge);
    }
    // First transmissions: (time, start, end).
    let mut sent: Vec<(u64, u64, u64)> = Vec::new();
    let mut high = 0u64;
    let mut last_data: Option<u64> = None;
    let mut last_mine: Option<u64> = None;
    let mut out = Vec::new();
    for x in &d.at_sender {
        if x.seg.len == 0 || x.seg.flags.syn() {
            if x.seg.flags.syn() {
                last_data.get_or_insert(x.t_ns);
            }
            continue;
        }
        let t = x.t_ns;
        if x.from != me {
            last_data = Some(t);
            continue;
        }
        let (s, e) = (space.off(x.seg.seq), space.off(x.seg.seq) + u64::from(x.seg.len));
        let quiet = last_data.map_or(0, |l| t.saturating_sub(l));
        if quiet > p.rtt_ns + p.margin_ns {
            let ctx = Ctx { d, p, peer: &peer, space, mss, sent: &sent, last_mine };
            if let Some(l) = if s < high { ctx.resent(side, x, s, e) } else { ctx.fresh(side, t, s, e) } {
                out.push(Label { quiet_ns: quiet, ..l });
            }
        }
        if e > high {
            sent.push((t, s.max(high), e));
            high = e;
        }
        last_data = Some(t);
        last_mine = Some(t);
    }
    out
}

struct Ctx<'a> {
    d: &'a Direction,
    p: &'a Params,
    peer: &'a Peer,
    space: Space,
    mss: u32,
    sent: &'a [(u64, u64, u64)],
    last_mine: Option<u64>,
}

impl Ctx<'_> {
    fn writes(&self, s: u64, e: u64) -> impl Iterator<Item = &Write> {
        self.d.writes.iter().filter(move |w| w.offset < e && w.offset + u64::from(w.len) > s)
    }

    fn label(&self, held: Side, kind: Kind, cause: Option<Cause>, (s, e): (u64, u64), (first, t): (u64, u64)) -> Label {
        Label {
            held,
            kind,
            cause,
            start: s,
            end: e,
            written_at: self.writes(s, e).map(|w| w.t_ns).min(),
            first_left: first,
            left_at: t,
            quiet_ns: 0,
            note: String::new(),
        }
    }

    /// A resend: its kernel record's congestion state names it; a receiver that had the bytes
    /// makes it spurious.
    fn resent(&self, side: Side, x: &Pkt, s: u64, e: u64) -> Option<Label> {
        let t = x.t_ns;
        let first = self.sent.iter().find(|&&(_, a, b)| a <= s && s < b).map_or(t, |&(ft, _, _)| ft);
        if t.saturating_sub(first) <= self.p.rtt_ns + self.p.margin_ns {
            return Some(self.label(side, Kind::Short, None, (s, e), (first, t)));
        }
        // RFC 3522 / RFC 2883 in spirit: the receiver's own capture shows it acknowledged them.
        let me = side.endpoint();
        let had = self
            .d
            .at_receiver
            .iter()
            .any(|r| r.from != me && r.seg.flags.ack() && r.t_ns < t && self.space.off(r.seg.ack) >= e);
        if had {
            let mut l = self.label(side, Kind::Negative, None, (s, e), (first, t));
            l.note = "spurious resend: the receiver had acknowledged the bytes".into();
            return Some(l);
        }
        let k = self
            .d
            .resends
            .iter()
            .filter(|r| SeqNum(r.seq) == x.seg.seq && r.t_ns <= t + 1_000_000 && t.saturating_sub(r.t_ns) < 50_000_000)
            .min_by_key(|r| t.abs_diff(r.t_ns));
        let (cause, note) = match k.map(|r| r.ca_state) {
            Some(4) => (Cause::RetransmissionTimeout, "kernel resend in state Loss".to_string()),
            Some(3) => (Cause::FastRetransmit, "kernel resend in state Recovery".to_string()),
            Some(st @ (0 | 1)) => (Cause::TailLossProbe, format!("kernel resend in state {st} (loss probe)")),
            Some(st) => (Cause::Unknown, format!("kernel resend in state {st}")),
            None => (Cause::Unknown, "resend with no kernel record".to_string()),
        };
        let mut l = self.label(side, Kind::Wait, Some(cause), (s, e), (first, t));
        l.note = note;
        Some(l)
    }

    /// First transmission of bytes after a quiet spell.
    fn fresh(&self, side: Side, t: u64, s: u64, e: u64) -> Option<Label> {
        let ws: Vec<&Write> = self.writes(s, e).collect();
        let w_first = ws.iter().map(|w| w.t_ns).min()?;
        let held = t.saturating_sub(w_first);
        let p = self.p;
        if held <= p.margin_ns {
            let mut l = self.label(side, Kind::Negative, None, (s, e), (t, t));
            l.note = "left as written".into();
            return Some(l);
        }
        if held <= p.rtt_ns + p.margin_ns {
            return Some(self.label(side, Kind::Short, None, (s, e), (t, t)));
        }
        let (cause, note) = self.why_held(&ws, w_first, t, s, e);
        let mut l = self.label(side, Kind::Wait, Some(cause), (s, e), (t, t));
        l.note = format!("held {:.1} ms: {note}", held as f64 / 1e6);
        Some(l)
    }

    fn why_held(&self, ws: &[&Write], w_first: u64, t: u64, s: u64, e: u64) -> (Cause, String) {
        let (una_w, _) = self.peer.at(w_first).unwrap_or((0, u64::MAX));
        // RFC 9293 3.8.6.2.1 / tcp_snd_wnd_test: the bytes did not fit the peer's window as the
        // sender knew it just before the last segment from the peer preceding their departure
        // (the window update that released them, if one did).
        let i = self.peer.t.partition_point(|&x| x <= t);
        let before = match i.checked_sub(1).map(|j| self.peer.t[j]) {
            Some(last) if last > w_first => last - 1,
            _ => w_first,
        };
        let (_, edge) = self.peer.at(before).unwrap_or((0, u64::MAX));
        if edge < e {
            return (Cause::RwndLimited, format!("peer window ended at {edge}, the bytes at {e}"));
        }
        let flight = self.sent.iter().filter(|&&(ts, _, b)| ts <= w_first && b > una_w).count() as u32;
        // tcp_cwnd_test: packets in flight >= snd_cwnd (tcp:tcp_probe's report before the write).
        let cwnd = self.d.cwnd.iter().rev().find(|c| c.t_ns <= t).map(|c| c.cwnd);
        if let Some(c) = cwnd.filter(|&c| c > 0 && flight >= c) {
            return (Cause::CwndLimited, format!("{flight} segments in flight, cwnd {c}"));
        }
        let release = self.peer.last_advance(t).filter(|&a| a >= w_first && t - a <= self.p.release_ns);
        let first = ws.iter().min_by_key(|w| w.t_ns).copied();
        let nagle_on = first.is_some_and(|w| !w.nodelay && !w.cork && !w.more);
        // tcp_nagle_check + tcp_minshall_check: a sub-MSS segment unacknowledged at the write.
        let small_out = self.sent.iter().any(|&(ts, a, b)| ts <= w_first && b > una_w && b - a < u64::from(self.mss));
        if nagle_on && small_out {
            if let Some(a) = release {
                return (
                    Cause::NagleDelayedAck,
                    format!("Nagle behind a small segment, released {} us after the ACK", (t - a) / 1000),
                );
            }
        }
        let corked = ws.iter().any(|w| w.cork) || ws.iter().max_by_key(|w| w.offset).is_some_and(|w| w.more);
        let (una_t, _) = self.peer.at(t.saturating_sub(1)).unwrap_or((0, u64::MAX));
        if corked && una_t >= s && release.is_none() {
            return (Cause::ProbeTimer, "corked/MSG_MORE, nothing in flight, no ACK released it".into());
        }
        // A loss probe sending new data: earlier data unacknowledged, no ACK, about
        // 2 x srtt (+ TCP_RTO_MIN with one segment out) after the last send (tcp_schedule_loss_probe).
        if !corked && una_t < s && release.is_none() {
            if let Some(last) = self.last_mine {
                let since = t.saturating_sub(last);
                if since >= 2 * self.p.rtt_ns && since <= 2 * self.p.rtt_ns + 260_000_000 {
                    return (Cause::TailLossProbe, "new data sent as a loss probe".into());
                }
            }
        }
        (Cause::Unknown, format!("nothing known held them ({flight} in flight, nagle {nagle_on})"))
    }
}

#[cfg(test)]
mod tests;
