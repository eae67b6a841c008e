//! The flight recorder: a flow's handshake and its last packets, so that the packets around a
//! stall can be written (`watch --write`) once the stall is classified, seconds after they
//! passed.

use std::collections::VecDeque;

/// One captured packet as the ring gave it (headers only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkt {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The packet's length on the wire.
    pub orig_len: u32,
    /// The bytes kept.
    pub data: Vec<u8>,
}

/// A flow's recent packets.
#[derive(Debug, Default)]
pub struct Recorder {
    /// The handshake's packets (SYN, SYN-ACK, ACK), written once with the flow's first stall so
    /// that the capture keeps the MSS, window scale and RTT explain needs.
    syn: Vec<Pkt>,
    recent: VecDeque<Pkt>,
    /// Packets handed out up to this time (ns, Unix).
    written_to: u64,
    syn_written: bool,
}

impl Recorder {
    /// Keeps `pkt` (`syn`: it carries SYN), then forgets packets beyond `keep_packets` or older
    /// than `keep_ns` before it.
    pub fn push(&mut self, pkt: Pkt, syn: bool, keep_packets: usize, keep_ns: u64) {
        // The handshake: the flow's packets up to the first one without SYN after a SYN, when
        // they are the flow's first packets.
        if self.syn.len() < 3 && (syn || self.syn.len() == 2) && self.recent.len() == self.syn.len() {
            self.syn.push(pkt.clone());
        }
        let now = pkt.ts_ns;
        self.recent.push_back(pkt);
        while self.recent.len() > keep_packets
            || self.recent.front().is_some_and(|x| now.saturating_sub(x.ts_ns) > keep_ns)
        {
            self.recent.pop_front();
        }
    }

    /// The packets to write for a stall starting at `start_unix_ns`: from shortly before it
    /// (the two packets before its start: the last data and the ACK before the gap) up to the
    /// newest, each packet once over the flow's life, after the flow's handshake if not handed
    /// out yet.
    pub fn around(&mut self, start_unix_ns: u64) -> Vec<Pkt> {
        let before = self.recent.iter().rposition(|p| p.ts_ns <= start_unix_ns).map_or(0, |i| i.saturating_sub(2));
        let fresh = |p: &&Pkt| p.ts_ns > self.written_to;
        let first = self.recent.iter().skip(before).find(fresh).map_or(u64::MAX, |p| p.ts_ns);
        let mut out = Vec::new();
        if !self.syn_written {
            // The handshake first: its MSS, window scale and round trip are what the capture's
            // reader needs to classify the same way.
            out.extend(self.syn.iter().filter(|p| p.ts_ns < first).cloned());
            self.syn_written = true;
        }
        out.extend(self.recent.iter().skip(before).filter(fresh).cloned());
        if let Some(last) = self.recent.back() {
            self.written_to = self.written_to.max(last.ts_ns);
        }
        out
    }

    /// Packets kept now.
    pub fn len(&self) -> usize {
        self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(ts_ns: u64) -> Pkt {
        Pkt { ts_ns, orig_len: 60, data: vec![ts_ns as u8] }
    }

    fn times(v: &[Pkt]) -> Vec<u64> {
        v.iter().map(|p| p.ts_ns).collect()
    }

    #[test]
    fn keeps_at_most_n_packets_and_none_older_than_the_window() {
        let mut r = Recorder::default();
        for t in 1..=10 {
            r.push(p(t * 100), false, 4, 1_000);
        }
        assert_eq!(times(&r.recent.iter().cloned().collect::<Vec<_>>()), [700, 800, 900, 1000]);
        r.push(p(2_000), false, 4, 1_000);
        // 1000 is exactly keep_ns old: kept; older ones are not.
        assert_eq!(times(&r.recent.iter().cloned().collect::<Vec<_>>()), [1000, 2000]);
    }

    #[test]
    fn hands_out_the_handshake_once_then_each_packet_once_from_two_before_the_start() {
        let mut r = Recorder::default();
        r.push(p(1), true, 100, u64::MAX);
        r.push(p(2), true, 100, u64::MAX);
        r.push(p(3), false, 100, u64::MAX);
        for t in 4..=20 {
            r.push(p(t * 10), false, 3, u64::MAX);
        }
        // Only 180, 190, 200 are still recent; the handshake was kept aside.
        assert_eq!(times(&r.around(195)), [1, 2, 3, 180, 190, 200]);
        assert!(r.around(195).is_empty(), "nothing new since");
        r.push(p(210), false, 3, u64::MAX);
        assert_eq!(times(&r.around(205)), [210]);
    }

    #[test]
    fn a_flow_seen_mid_connection_has_no_handshake() {
        let mut r = Recorder::default();
        r.push(p(1), false, 100, u64::MAX);
        r.push(p(2), true, 100, u64::MAX);
        assert!(r.syn.is_empty());
        assert_eq!(times(&r.around(2)), [1, 2]);
    }
}
