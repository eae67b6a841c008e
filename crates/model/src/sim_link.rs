//! The simulator's link: the one link model (crates/linkmodel), the forwarder's too, fed the
//! simulated segments at the simulated time, one random generator per direction from the run's
//! seed ([`linkmodel::rngs`]). What it drops, delays and reorders is what `tcpstall lab --link`
//! does with the same spec and seed (the `one_link` test below).

use linkmodel::{Dir, LinkModel, PacketKind, Verdict};
use rand::rngs::SmallRng;
use scenario::LinkSpec;

/// Both directions of the simulated link; index 0 = the client's segments (up).
pub(crate) struct SimLink {
    model: LinkModel,
    rngs: [SmallRng; 2],
}

/// The link's direction for segments endpoint `from` sends (0 = client, 1 = server).
fn dir(from: usize) -> Dir {
    if from == 0 {
        Dir::Up
    } else {
        Dir::Down
    }
}

impl SimLink {
    pub(crate) fn new(spec: &LinkSpec, seed: u64) -> SimLink {
        SimLink { model: LinkModel::new(spec), rngs: linkmodel::rngs(seed) }
    }

    /// Endpoint `from` sends, at `now`, a segment of `payload` bytes under a TCP header of
    /// `tcp_hdr` bytes: when it arrives at the peer, or None if the link drops it. The link
    /// sees its IP bytes (a 20-byte IPv4 header, the TCP header, the payload: what the
    /// forwarder reads from a TUN device, no Ethernet framing). A segment without payload is a
    /// pure ACK: the simulated stacks set ACK on every segment they send, and the handshake
    /// (SYN, SYN-ACK) does not cross the simulated link.
    pub(crate) fn send(&mut self, now: u64, from: usize, payload: u32, tcp_hdr: u32) -> Option<u64> {
        let bytes = u64::from(payload) + u64::from(tcp_hdr) + 20;
        let kind = if payload == 0 { PacketKind::PureAck } else { PacketKind::TcpData };
        let d = dir(from);
        match self.model.direction_mut(d).on_packet_of_kind(now, bytes, kind, &mut self.rngs[d.index()]) {
            Verdict::Deliver { at_ns } => Some(at_ns),
            Verdict::Drop(_) => None,
        }
    }

    /// The one-way delay of the segments endpoint `from` sends.
    pub(crate) fn delay(&self, from: usize) -> u64 {
        self.model.direction(dir(from)).delay_ns()
    }

    /// Segments the link dropped, both directions.
    pub(crate) fn dropped(&self) -> u64 {
        Dir::BOTH.iter().map(|&d| self.model.direction(d).counters.total_drops()).sum()
    }
}

#[cfg(test)]
#[path = "one_link_tests.rs"]
mod one_link;
