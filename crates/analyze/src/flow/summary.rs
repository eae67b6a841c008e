//! The end of a flow's analysis: windows still closed, the capture point's meaning, the notes.

use super::{FlowAnalysis, FlowAnalyzer};
use crate::classify::open_window_stall;
use trace::{CapturePoint, Endpoint, Instant};

impl FlowAnalyzer {
    pub fn finish(mut self) -> FlowAnalysis {
        self.flush_pending();
        self.close_open_windows();
        for d in [Endpoint::A, Endpoint::B] {
            let (mss, known) = self.mss(d);
            let s = &mut self.dirs[d.index()].sum;
            // An estimate is only worth reporting when this direction sent data.
            s.mss = (known || s.wire.data_segments > 0).then_some(mss);
            s.mss_known = known;
        }
        let cp = self.capture_point();
        let path = self.path_rtt();
        let capture_note = self.capture_note(cp);
        let notes = self.notes();
        let shown = [Endpoint::A, Endpoint::B].map(|d| {
            let dir = &self.dirs[d.index()];
            // A sign old enough at the flow's last packet counts.
            crate::ShownOptions {
                nagle_off: dir.nagle_off_at(self.last),
                held_coalescing: self
                    .stalls
                    .iter()
                    .find(|s| s.held == d && s.cause == trace::Cause::ProbeTimer && s.shows_a_wait())
                    .cloned(),
            }
        });
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
            shown,
        }
    }

    /// A window still closed at the end: the wait no data segment ended.
    fn close_open_windows(&mut self) {
        for d in [Endpoint::A, Endpoint::B] {
            let peer = &self.dirs[d.peer().index()];
            // A sender whose FIN was seen had nothing more to send: a window closed after it
            // held nothing.
            if self.dirs[d.index()].fin_seen {
                continue;
            }
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
    }

    /// What the capture point means for this flow's verdicts, for people.
    fn capture_note(&self, cp: CapturePoint) -> String {
        match cp {
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
            CapturePoint::Unknown if self.hs.syn.is_some() && self.hs.syn_ack.is_none() => {
                "unknown (the SYN was not answered with a SYN-ACK in the capture: refused, unanswered, or the answer \
                 not captured)"
                    .to_string()
            }
            CapturePoint::Unknown if self.hs.syn.is_some() && self.handshake_rtt().is_none() => {
                "unknown (the SYN or SYN-ACK was resent, so the handshake gives no RTT sample by Karn's rule): \
                 round trip estimated from data ACKs, confidence lowered"
                    .to_string()
            }
            CapturePoint::Unknown => "unknown (handshake not captured): round trip and ACK delays are estimated from \
                 ACK timing, confidence lowered"
                .to_string(),
        }
    }

    /// The flow's notes (a one-direction capture, bytes the capture missed, super-packets);
    /// also lets the classifier revisit Nagle verdicts of a sender shown to have Nagle off.
    fn notes(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        for d in [Endpoint::A, Endpoint::B] {
            let (own, peer) = (&self.dirs[d.index()], &self.dirs[d.peer().index()]);
            if !own.ack_moved && peer.sum.wire.packets == 0 && own.sum.wire.data_segments >= 10 {
                notes.push(format!(
                    "the capture holds one direction only: {d:?} sent {} data segments, yet none of {:?}'s packets \
                     (its ACKs) are in the capture; no wait of {d:?}'s can be shown (its gaps are listed as \
                     ambiguous)",
                    own.sum.wire.data_segments,
                    d.peer()
                ));
            }
            if own.ack_moved && peer.sum.wire.packets == 0 {
                notes.push(format!(
                    "the capture holds one direction only: {d:?}'s ACK numbers advance, so {:?} sent data, yet none of \
                     {:?}'s packets are in the capture; without its ACKs no wait of {d:?}'s can be shown (its gaps are \
                     listed as ambiguous), only resends",
                    d.peer(),
                    d.peer()
                ));
            }
            // Nagle shown off counts from that point on only: a program may set TCP_NODELAY
            // midway (OpenSSH after its key exchange), so earlier Nagle holds stand.
        }
        if self.data_only() {
            notes.push(
                "the capture holds data segments only (no SYN, no pure ACK: a filtered capture): the ACKs that \
                 release held data are not in it, so no verdict rests on a missing ACK; waits it cannot explain are \
                 listed as ambiguous"
                    .to_string(),
            );
        }
        if let Some(tick) = self.ticks.tick() {
            notes.push(format!(
                "the capture's timestamps come in {tick} ticks (every packet's time is a whole number of them): \
                 intervals shorter than a tick cannot be read, ACK delays and release windows are uncertain by a \
                 tick, and a rhythm of a few ticks is the file's, not a sender's clock"
            ));
        }
        for d in [Endpoint::A, Endpoint::B] {
            let s = &self.dirs[d.index()].sum;
            if s.acked_unseen_bytes > 0 {
                notes.push(format!(
                    "{} acknowledged {} bytes from {d:?} that the capture never saw: the capture missed them \
                     (filtered or overrun), which is not network loss",
                    d.peer().letter(),
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
        notes
    }
}
