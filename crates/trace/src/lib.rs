//! The trace: the one shape every source of truth about a TCP connection is turned into.
//!
//! A lab run, a capture file and the model all produce [`Event`]s: time-ordered, with a
//! nanosecond timestamp, in one of the two directions of a flow. The analyser
//! (`tcpstall-analyze`) consumes them one at a time, so a trace never has to be held whole.
//!
//! This crate is pure: no clock, no OS. Time is a number of nanoseconds since an origin chosen
//! by the producer (the capture's first packet, the lab's start, the model's t = 0).

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
use serde::{Deserialize, Serialize};
use std::fmt;

mod seq;
pub mod testing;
mod time;
pub use seq::SeqNum;
pub use time::{Duration, Instant};

/// One of the two endpoints of a connection. `A` is the endpoint that opened it (sent the SYN,
/// or, when the handshake is not seen, the first packet seen); `B` is the other one. The lab and
/// the model map the client to `A` and the server to `B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Endpoint {
    A,
    B,
}

impl Endpoint {
    pub fn peer(self) -> Endpoint {
        match self {
            Endpoint::A => Endpoint::B,
            Endpoint::B => Endpoint::A,
        }
    }
    pub fn index(self) -> usize {
        match self {
            Endpoint::A => 0,
            Endpoint::B => 1,
        }
    }

    /// "A" or "B": the endpoint as the classifier's evidence and explain's tables name it.
    pub fn letter(self) -> &'static str {
        match self {
            Endpoint::A => "A",
            Endpoint::B => "B",
        }
    }

    /// "client" or "server": the endpoint by its role in the lab and the model (the client
    /// opens the connection, so it is `A`).
    pub fn role(self) -> &'static str {
        match self {
            Endpoint::A => "client",
            Endpoint::B => "server",
        }
    }

    /// "A (client)" or "B (server)": both names, for readers who meet both (the HTML report).
    pub fn letter_and_role(self) -> &'static str {
        match self {
            Endpoint::A => "A (client)",
            Endpoint::B => "B (server)",
        }
    }
}

/// TCP header flags (RFC 9293 section 3.1), as the low byte of the header's flags field.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;

    pub fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
    pub fn syn(self) -> bool {
        self.has(Self::SYN)
    }
    pub fn fin(self) -> bool {
        self.has(Self::FIN)
    }
    pub fn rst(self) -> bool {
        self.has(Self::RST)
    }
    pub fn ack(self) -> bool {
        self.has(Self::ACK)
    }
    pub fn psh(self) -> bool {
        self.has(Self::PSH)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u8, char); 8] = [
            (TcpFlags::SYN, 'S'),
            (TcpFlags::FIN, 'F'),
            (TcpFlags::RST, 'R'),
            (TcpFlags::PSH, 'P'),
            (TcpFlags::ACK, '.'),
            (TcpFlags::URG, 'U'),
            (TcpFlags::ECE, 'E'),
            (TcpFlags::CWR, 'W'),
        ];
        for (bit, c) in NAMES {
            if self.has(bit) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A TCP segment as seen at one observation point.
///
/// Sequence and acknowledgement numbers are the raw 32-bit values from the header, as
/// [`SeqNum`]s (ordered and subtracted modulo 2^32, RFC 9293 3.4); consumers that need relative
/// numbers subtract the ISN themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: TcpFlags,
    /// Payload bytes (for a TSO/GRO super-packet, the whole super-packet's payload).
    pub len: u32,
    /// Window field as sent, not yet scaled.
    pub window: u16,
    /// Window scale shift from this endpoint's SYN, if the SYN was seen (RFC 7323 2.2).
    pub wscale: Option<u8>,
    /// MSS option, on SYN segments (RFC 9293 3.7.1).
    pub mss: Option<u16>,
    /// Timestamps option TSval/TSecr (RFC 7323 3).
    pub ts: Option<(u32, u32)>,
    /// Number of SACK blocks carried (RFC 2018).
    pub sack_blocks: u8,
    /// The SACK blocks carried, left and right edges (RFC 2018 3), in option order (the first
    /// is a D-SACK when it lies below the ACK number or inside the second, RFC 2883 4);
    /// `sack_blocks` of them are valid.
    #[serde(default)]
    pub sack: [(SeqNum, SeqNum); 4],
    /// Bytes on the wire for this packet: link + IP + TCP headers + payload, as captured or
    /// estimated.
    pub wire_len: u32,
    /// IPv4 time to live (RFC 791 3.1) or IPv6 hop limit (RFC 8200 3) as captured; None when
    /// not known (the model's segments).
    #[serde(default)]
    pub ttl: Option<u8>,
    /// IPv4 identification (RFC 791 3.1) as captured; None for IPv6 and the model's segments.
    /// Linux numbers a connected TCP socket's packets consecutively (`ip_select_ident_segs`,
    /// include/net/ip.h: `inet_id += segs`), so a sender's IDs can show a packet the capture
    /// missed.
    #[serde(default)]
    pub ip_id: Option<u16>,
}

impl Segment {
    /// A pure ACK: no payload, no SYN/FIN/RST, ACK set. This is what seed 003's iptables rule
    /// `-m length --length 52` selects and what tcp_info's `segs_out - data_segs_out` counts
    /// (plus SYN/FIN/RST without data, see `tcp_info` in include/uapi/linux/tcp.h).
    pub fn is_pure_ack(&self) -> bool {
        self.len == 0 && self.flags.ack() && !self.flags.syn() && !self.flags.fin() && !self.flags.rst()
    }
    /// Sequence space consumed: payload plus one for SYN and one for FIN (RFC 9293 3.4).
    pub fn seq_space(&self) -> u32 {
        self.len + u32::from(self.flags.syn()) + u32::from(self.flags.fin())
    }
    /// The sequence number after the space this segment consumes (`seq + seq_space`).
    pub fn end(&self) -> SeqNum {
        self.seq + self.seq_space()
    }
    /// The SACK blocks it carries (at most 4, RFC 2018 3).
    pub fn sack_ranges(&self) -> &[(SeqNum, SeqNum)] {
        &self.sack[..usize::from(self.sack_blocks.min(4))]
    }
}

/// Timers the model (and, when it can tell, the lab) reports firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimerKind {
    /// Delayed-ACK timer (Linux `tcp_delack_timer`, RFC 9293 3.8.6.3).
    DelayedAck,
    /// Retransmission timeout (RFC 6298).
    Retransmit,
    /// Zero-window / tail probe that releases corked or Nagle-held data (Linux `tcp_probe_timer`).
    Probe,
}

/// Where a trace's packets were observed; decides what an analysis can and cannot see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapturePoint {
    /// At endpoint A (the client): A's sends are seen when A sends them; B's when they arrive.
    AtA,
    /// At endpoint B (the server).
    AtB,
    /// Somewhere in between (a router, the link emulator).
    #[default]
    Middle,
    /// Loopback or both endpoints on the capturing host: both views coincide (round trip under
    /// 300 µs).
    SameHost,
    /// Unknown: a capture whose origin cannot be told.
    Unknown,
}

/// What a trace event is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A segment travelling from `from` to its peer, observed at the trace's capture point.
    Segment(Segment),
    /// The application at `from` handed `bytes` to TCP in one call (write, send, sendmsg).
    Write { bytes: u32, more: bool },
    /// The application at `from` got `bytes` from TCP in one call.
    Read { bytes: u32 },
    /// A timer fired at `from`.
    Timer(TimerKind),
    /// What `from`'s kernel reported through a TCP tracepoint (kernel evidence, `watch --kernel`
    /// and the lab): facts a capture cannot show, such as when the application wrote.
    Kernel(KernelEvent),
    /// An ICMP error about a segment `from` sent, carried in the capture (RFC 792, RFC 4443):
    /// the ICMP message quotes the segment's headers, which name the flow and its sequence number.
    Icmp(IcmpError),
}

/// One kernel tracepoint report about a socket of the flow (kernel evidence). The endpoint of
/// the [`Event`] is the socket's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelEvent {
    /// `tcp:tcp_sendmsg_locked`: the application handed `bytes` to TCP in one call; they take
    /// the sequence space from `seq` (the socket's `write_seq` before the call).
    Sendmsg { bytes: u32, seq: u32 },
    /// `tcp:tcp_retransmit_skb`: the kernel resent `[seq, seq + len)` (also resends the capture
    /// never saw first).
    Retransmit { seq: u32, len: u32 },
    /// `tcp:tcp_probe`: the sender's window state when a segment arrived.
    State(KernelState),
    /// `tcp:tcp_rcv_space_adjust`: the application read from the socket.
    Read,
    /// `tcp:tcp_cong_state_set`: the congestion state changed (enum tcp_ca_state: 0 open,
    /// 1 disorder, 2 cwr, 3 recovery, 4 loss).
    CongState { state: u8 },
}

/// The window state `tcp:tcp_probe` reports (include/trace/events/tcp.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelState {
    pub snd_una: u32,
    pub snd_nxt: u32,
    /// Congestion window, in segments (`snd_cwnd`).
    #[serde(rename = "snd_cwnd_segments")]
    pub snd_cwnd: u32,
    /// Slow-start threshold, in segments.
    #[serde(rename = "ssthresh_segments")]
    pub ssthresh: u32,
    /// The peer's advertised window, scaled, in bytes (`snd_wnd`).
    #[serde(rename = "snd_wnd_bytes")]
    pub snd_wnd: u32,
    /// Smoothed RTT in microseconds (`srtt_us >> 3`).
    #[serde(rename = "srtt_us")]
    pub srtt_us: u32,
    /// This side's receive window, in bytes.
    #[serde(rename = "rcv_wnd_bytes")]
    pub rcv_wnd: u32,
}

/// An ICMP error quoting a TCP segment of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcmpError {
    pub kind: IcmpKind,
    /// Sequence number of the quoted segment (its first 8 TCP header bytes are always quoted,
    /// RFC 792; RFC 1812 4.3.2.3).
    pub seq: u32,
}

/// What an ICMP error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IcmpKind {
    /// ICMPv4 type 3 code 4 (RFC 1191) or ICMPv6 Packet Too Big (RFC 8201): path MTU discovery;
    /// `mtu` is the next-hop MTU it names (0 when the router left it out).
    FragNeeded { mtu: u32 },
    /// Destination unreachable, any other code (RFC 792, RFC 4443 3.1).
    Unreachable { code: u8 },
    /// Time exceeded (RFC 792, RFC 4443 3.3).
    TimeExceeded,
    /// Any other ICMP error that quotes the flow.
    Other { icmp_type: u8, code: u8 },
}

/// One time-stamped event of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub t: Instant,
    /// The endpoint that sent the segment, made the call, or whose timer fired.
    pub from: Endpoint,
    pub kind: EventKind,
    /// Where it came from: a capture frame number, a model step, a lab counter.
    pub evidence: Evidence,
}

impl KernelState {
    /// Bytes sent and not yet acknowledged: `snd_nxt - snd_una` in sequence space.
    pub fn in_flight(&self) -> u32 {
        SeqNum(self.snd_nxt) - SeqNum(self.snd_una)
    }
}

impl KernelEvent {
    /// One phrase for people, naming the tracepoint's fact ("kernel: sendmsg 54 bytes").
    pub fn describe(&self) -> String {
        match *self {
            KernelEvent::Sendmsg { bytes, .. } => format!("kernel: sendmsg {bytes} bytes"),
            KernelEvent::Retransmit { len, .. } => format!("kernel: retransmit {len} bytes"),
            KernelEvent::State(s) => format!(
                "kernel: cwnd {} segments, peer window {} bytes, {} bytes in flight, srtt {} us",
                s.snd_cwnd,
                s.snd_wnd,
                s.in_flight(),
                s.srtt_us
            ),
            KernelEvent::Read => "kernel: read".to_string(),
            KernelEvent::CongState { state } => format!(
                "kernel: congestion state {}",
                match state {
                    0 => "open",
                    1 => "disorder",
                    2 => "cwr",
                    3 => "recovery",
                    4 => "loss",
                    _ => "other",
                }
            ),
        }
    }
}

impl IcmpError {
    /// One phrase for people ("ICMP fragmentation needed, next-hop MTU 1492").
    pub fn describe(&self) -> String {
        match self.kind {
            IcmpKind::FragNeeded { mtu } => format!("ICMP fragmentation needed, next-hop MTU {mtu}"),
            IcmpKind::Unreachable { code } => format!("ICMP destination unreachable (code {code})"),
            IcmpKind::TimeExceeded => "ICMP time exceeded".to_string(),
            IcmpKind::Other { icmp_type, code } => format!("ICMP type {icmp_type} code {code}"),
        }
    }
}

/// The evidence behind an event, so a report can point the user at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// Frame number (1-based, as Wireshark counts) in a capture file.
    Frame(u64),
    /// Step number in a model run.
    Model(u64),
    /// Measured by the lab on its own sockets.
    Lab,
    /// Reported by the kernel through a TCP tracepoint (kernel evidence); the number counts
    /// the kernel events of the run, from 1.
    Kernel(u64),
}

/// The stall causes tcpstall names. One vocabulary for the lab, captures and the model, so
/// their verdicts can be compared cell by cell. The classifier (`tcpstall-analyze`, classify.rs)
/// is the only code that decides which one a stall gets; each rule cites its source there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// A sub-MSS segment held by Nagle (RFC 9293 3.7.4; Linux `tcp_nagle_check` with
    /// `tcp_minshall_check`) while an earlier small segment is unacknowledged, released by the
    /// peer's delayed ACK.
    NagleDelayedAck,
    /// The sender waited for the peer's delayed ACK (RFC 9293 3.8.6.3) and the packets do not
    /// show what else held the data.
    DelayedAck,
    /// Flight size reached the congestion window (RFC 5681 3.1) and the sender waited for an ACK.
    CwndLimited,
    /// The peer's receive window was full or zero (RFC 9293 3.8.6.2; zero-window probes).
    RwndLimited,
    /// A retransmission timeout (RFC 6298 5): the oldest unacknowledged range resent.
    RetransmissionTimeout,
    /// A tail-loss probe (RFC 8985 7; Linux `tcp_send_loss_probe`): the last segment resent
    /// about two round trips after it was sent.
    TailLossProbe,
    /// Fast retransmit after duplicate ACKs (RFC 5681 3.2, RFC 6675).
    FastRetransmit,
    /// Segments too big for the path: a router dropped them and answered ICMP
    /// fragmentation-needed (Packet Too Big), and the sender resent at the smaller size (path
    /// MTU discovery, RFC 1191, RFC 8201; Linux `tcp_v4_mtu_reduced`, `tcp_simple_retransmit`).
    PathMtu,
    /// Corked, MSG_MORE or Nagle-held data with nothing in flight, released by the 200 ms probe
    /// timer (Linux `tcp_probe_timer`, `tcp_probe0_base`; TCP_CORK's 200 ms ceiling, tcp(7)).
    ProbeTimer,
    /// The writer had not written yet (think time, idle): not a TCP stall. Listed apart and
    /// excluded from stall counts.
    Application,
    /// Something held the data but the evidence shows no mechanism's signature.
    Unknown,
}

impl Cause {
    pub const ALL: [Cause; 11] = [
        Cause::NagleDelayedAck,
        Cause::DelayedAck,
        Cause::CwndLimited,
        Cause::RwndLimited,
        Cause::RetransmissionTimeout,
        Cause::TailLossProbe,
        Cause::FastRetransmit,
        Cause::PathMtu,
        Cause::ProbeTimer,
        Cause::Application,
        Cause::Unknown,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::NagleDelayedAck => "nagle-delayed-ack",
            Cause::DelayedAck => "delayed-ack",
            Cause::CwndLimited => "cwnd-limited",
            Cause::RwndLimited => "rwnd-limited",
            Cause::RetransmissionTimeout => "retransmission-timeout",
            Cause::TailLossProbe => "tail-loss-probe",
            Cause::FastRetransmit => "fast-retransmit",
            Cause::PathMtu => "path-mtu",
            Cause::ProbeTimer => "probe-timer",
            Cause::Application => "application",
            Cause::Unknown => "unknown",
        }
    }
    /// A wait TCP caused (everything but [`Cause::Application`]): what stall counts count.
    pub fn is_tcp_stall(self) -> bool {
        self != Cause::Application
    }
    /// A TCP stall whose mechanism the evidence shows (everything but `application` and
    /// `unknown`): what verdict keys and fix rankings count.
    pub fn names_a_mechanism(self) -> bool {
        self.is_tcp_stall() && self != Cause::Unknown
    }
    /// One sentence for people: what held the data.
    pub fn explain(self) -> &'static str {
        match self {
            Cause::NagleDelayedAck => "Nagle holds the next small write until the peer's delayed ACK",
            Cause::DelayedAck => "the sender waits for the peer's delayed ACK",
            Cause::CwndLimited => "the congestion window is full and the sender waits for the ACK that opens it",
            Cause::RwndLimited => "the receiver's window is full or zero",
            Cause::RetransmissionTimeout => "a segment was lost and resent after the retransmission timeout",
            Cause::TailLossProbe => "the last segment was lost or late and resent by the tail-loss probe",
            Cause::FastRetransmit => "a segment was lost and resent after duplicate ACKs",
            Cause::PathMtu => "segments too big for the path were dropped and resent smaller after ICMP fragmentation-needed (path MTU discovery)",
            Cause::ProbeTimer => "corked or held data waits for the 200 ms probe timer",
            Cause::Application => "the writer had not written yet (application think time or idle): not a TCP stall",
            Cause::Unknown => "data waited, but the packets show no mechanism's signature",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Cause {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cause::ALL.into_iter().find(|c| c.as_str() == s).ok_or_else(|| format!("unknown cause '{s}'"))
    }
}

/// The comparable summary of a run: did it stall, and why. The agreement test between the lab
/// and the model compares these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictKey {
    pub stalls: bool,
    pub cause: Option<Cause>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_ack_excludes_syn_fin_rst_and_data() {
        let mut s = Segment { window: 100, wire_len: 52, ..testing::segment(1, 1, TcpFlags::ACK, 0) };
        assert!(s.is_pure_ack());
        s.flags = TcpFlags(TcpFlags::ACK | TcpFlags::FIN);
        assert!(!s.is_pure_ack());
        assert_eq!(s.seq_space(), 1);
        s.flags = TcpFlags(TcpFlags::ACK);
        s.len = 10;
        assert!(!s.is_pure_ack());
    }

    #[test]
    fn cause_round_trips_through_its_name() {
        for c in Cause::ALL {
            assert_eq!(c.as_str().parse::<Cause>().unwrap(), c);
        }
        assert!("nagle".parse::<Cause>().is_err());
    }

    #[test]
    fn only_causes_with_a_shown_mechanism_name_one() {
        let named: Vec<Cause> = Cause::ALL.into_iter().filter(|c| c.names_a_mechanism()).collect();
        assert_eq!(named.len(), Cause::ALL.len() - 2);
        assert!(!Cause::Unknown.names_a_mechanism() && Cause::Unknown.is_tcp_stall());
        assert!(!Cause::Application.names_a_mechanism() && !Cause::Application.is_tcp_stall());
    }
}
