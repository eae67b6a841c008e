//! pcap/pcapng and packet decoding into trace events (pure: works on any [`std::io::Read`]).
//!
//! [`Decoder`] streams a capture: one read buffer and one small entry per flow alive, whatever
//! the file size (ended flows are forgotten and reported by [`Decoder::pop_ended`]). Each TCP packet becomes a [`trace::Event`] of its flow (see [`FlowEvent`]) with
//! `t` in nanoseconds since the capture's first packet and `evidence = Frame(n)`; so does each
//! ICMP error quoting a segment of a flow ([`trace::EventKind::Icmp`], see [`IcmpPacket`]).
//!
//! ```no_run
//! let file = std::io::BufReader::new(std::fs::File::open("x.pcap").unwrap());
//! let mut dec = tcpstall_wire::Decoder::new(file, Default::default()).unwrap();
//! while let Ok(Some(ev)) = dec.next_event() {
//!     println!("{:?} {:?}", ev.flow, ev.event);
//! }
//! ```

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
mod capture;
pub mod comment;
mod decode;
mod decoder;
mod defrag;
pub mod encode;
mod error;
mod flows;
pub mod synth;
pub mod write;

pub use capture::{loopback_name, pcap_linktype, CaptureReader, Direction, EpbOptions, Format, Packet, MAX_PACKET};
pub use decode::{
    decode, decode_any, frame_on_loopback, linktype, wlan_mpdu, Decoded, IcmpPacket, MpduId, Skip, TcpPacket, MAX_DEPTH,
};
pub use decoder::{DecodedPacket, Decoder, FlowHalf, FrameHalf};
pub use error::WireError;
pub use flows::{EndReason, FlowEnd, FlowEvent, FlowFilter, FlowId, FlowKey, FlowLimits, FlowTable};

use decode::{decode_datagram, Frame};
use defrag::{Defrag, Fragment};
use std::collections::BTreeMap;
use std::io::Read;

/// What the decoder saw besides TCP packets.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodeStats {
    pub frames: u64,
    pub tcp_packets: u64,
    /// Frames that are not TCP over IP (ARP, UDP, ICMP).
    pub not_tcp: u64,
    /// Frames whose headers are cut by the snaplen or inconsistent (see [`Skip::Malformed`]).
    pub malformed: u64,
    /// ICMP errors quoting a segment of a flow (RFC 792, RFC 4443; see [`IcmpPacket`]): each
    /// became an [`trace::EventKind::Icmp`] event of that flow. Not counted in `not_tcp`.
    pub icmp_errors: u64,
    /// ICMP errors quoting a TCP segment of no flow this capture has (its packets were not
    /// captured, were filtered out, or the flow had ended): counted and ignored.
    pub icmp_no_flow: u64,
    /// Frames inside an encapsulation that is recognised but not decoded, by its name
    /// ("IPsec ESP (RFC 4303)" -> 12): "12 packets inside IPsec ESP (RFC 4303), not decoded".
    pub not_decoded_inside: BTreeMap<&'static str, u64>,
    /// Frames that were IP fragments (RFC 791 3.2, RFC 8200 4.5), held for reassembly.
    pub ip_fragments: u64,
    /// Datagrams reassembled from those fragments; each is then counted once as what it
    /// carries (`tcp_packets`, `not_tcp`, `malformed`, ...).
    pub reassembled: u64,
    /// Fragments whose datagram could not be reassembled, by reason: never completed (a
    /// fragment was not captured), overlapping or inconsistent fragments, the memory limit.
    /// When the first fragment came and shows the datagram carried no TCP (UDP, ICMP), its
    /// fragments are counted in `not_tcp` instead.
    pub not_reassembled: BTreeMap<&'static str, u64>,
    /// Frames whose timestamp is earlier than the frame before them (file order). Each is given
    /// the previous frame's time, so events stay in file order with time never going back.
    pub ts_backwards: u64,
    /// The largest step back in time between consecutive frames, in nanoseconds.
    pub ts_largest_step_back_ns: u64,
    /// Frames on a link type this decoder does not know, with the first such link type.
    pub unknown_linktype: u64,
    pub first_unknown_linktype: Option<u32>,
    /// TCP packets dropped by the flow filter.
    pub filtered_out: u64,
    /// TCP packets dropped as copies of a packet just seen (a capture taken before and after a
    /// router, or a mirror port duplicating frames; see [`FlowTable::event`]). Not counted in
    /// `tcp_packets`.
    pub duplicates: u64,
    /// TCP packets that came after their connection's close completed (both FINs acknowledged,
    /// or a RST), within the linger: retransmitted FINs, stray RSTs. Not analysed.
    pub after_close: u64,
    /// IEEE 802.11 frames the transmitter sent again at the MAC layer (Retry flag) after a
    /// frame with the same transmitter and sequence number that was captured: one packet seen
    /// twice over the air, not a TCP retransmission, so only the first copy is decoded (as the
    /// receiver's duplicate detection does, see [`MpduId`]).
    pub wlan_retries: u64,
    /// Frames stamped earlier than the frame before them that are byte for byte a frame of the
    /// last [`COPY_LOOKBACK`], with the same timestamp: one frame written twice (merged or
    /// replayed capture files), not a second packet on the wire. Dropped, counted here.
    pub stepped_back_copies: u64,
    /// Bytes of the file consumed.
    pub bytes: u64,
}

/// How many frames back a stepped-back frame is compared with (see
/// [`DecodeStats::stepped_back_copies`]).
pub const COPY_LOOKBACK: usize = 256;

/// A hash of a frame's bytes (foldhash, the hash hashbrown uses; fixed seed): enough to tell
/// copies from different frames of the same length and time. It is computed for every frame,
/// so its speed counts: foldhash folds 16 bytes per multiply where a byte-serial hash took
/// 5% of `tcpstall explain`'s time on small packets.
fn frame_hash(data: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0).hash_one(data)
}

impl DecodeStats {
    /// "12 packets inside IPsec ESP (RFC 4303), not decoded; 3 packets inside CAPWAP (RFC
    /// 5415), not decoded; 2 IP fragments not reassembled: datagram never completed (...)", or
    /// None when every encapsulation met was opened and every fragmented datagram reassembled.
    pub fn not_decoded_note(&self) -> Option<String> {
        let s = |n: u64| if n == 1 { "" } else { "s" };
        let parts: Vec<String> = (self.not_decoded_inside.iter())
            .map(|(k, n)| format!("{n} packet{} inside {k}, not decoded", s(*n)))
            .chain(self.not_reassembled.iter().map(|(k, n)| format!("{n} IP fragment{} not reassembled: {k}", s(*n))))
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Frames that carry or may carry TCP the decoder could not read: inside encapsulations it
    /// does not open, and fragments it could not reassemble.
    pub fn not_decoded(&self) -> u64 {
        self.not_decoded_inside.values().sum::<u64>() + self.not_reassembled.values().sum::<u64>()
    }

    /// "12 IP fragments reassembled into 4 packets", or None.
    pub fn fragments_note(&self) -> Option<String> {
        (self.reassembled > 0).then(|| {
            let s = |n: u64| if n == 1 { "" } else { "s" };
            let (f, r) = (self.ip_fragments, self.reassembled);
            format!("{f} IP fragment{} reassembled into {r} packet{}", s(f), s(r))
        })
    }

    /// When frames were read and none gave a TCP packet (and the flow filter dropped none), the
    /// one line that says why, naming each kind of frame skipped: "no TCP packets decoded from
    /// 10 frames: 4 packets inside IPComp (RFC 3173), not decoded; 6 not TCP".
    /// A report without a flow would read as a capture without stalls; the caller says this
    /// beside it.
    pub fn no_tcp(&self) -> Option<String> {
        if self.tcp_packets > 0 || self.filtered_out > 0 || self.frames == 0 {
            return None;
        }
        let mut parts: Vec<String> = self.not_decoded_note().into_iter().collect();
        for (n, what) in [
            (self.malformed, "malformed (headers cut or inconsistent)"),
            (self.not_tcp, "not TCP"),
            (self.unknown_linktype, "on link types this decoder does not know"),
            (self.icmp_no_flow, "ICMP errors about connections not in the capture"),
            (self.wlan_retries, "IEEE 802.11 MAC-layer retransmissions"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        if parts.is_empty() {
            parts.push("none carried a TCP segment".into());
        }
        let frames = if self.frames == 1 { "1 frame".to_string() } else { format!("{} frames", self.frames) };
        Some(format!("no TCP packets decoded from {frames}: {}", parts.join("; ")))
    }

    /// "2 ICMP errors quote the flows' segments (evidence); 1 ICMP error quotes a connection
    /// not in the capture (ignored)", or None.
    pub fn icmp_note(&self) -> Option<String> {
        let (n, x) = (self.icmp_errors, self.icmp_no_flow);
        let say = |k: u64, what: &str| match k {
            0 => None,
            1 => Some(format!("1 ICMP error quotes {what}")),
            k => Some(format!("{k} ICMP errors quote {what}")),
        };
        let parts: Vec<String> =
            [say(n, "the flows' segments (evidence)"), say(x, "a connection not in the capture (ignored)")]
                .into_iter()
                .flatten()
                .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// "4 IEEE 802.11 MAC-layer retransmissions of frames already captured counted once", or
    /// None.
    pub fn wlan_retries_note(&self) -> Option<String> {
        (self.wlan_retries > 0).then(|| {
            format!(
                "{} IEEE 802.11 MAC-layer retransmission{} of frames already captured counted once",
                self.wlan_retries,
                if self.wlan_retries == 1 { "" } else { "s" }
            )
        })
    }

    /// "4 frames were copies of earlier frames (same bytes, same timestamp) written again out
    /// of time order: dropped", or None.
    pub fn stepped_back_copies_note(&self) -> Option<String> {
        (self.stepped_back_copies > 0).then(|| {
            format!(
                "{} frame{} stamped earlier than the frame before {} byte for byte an earlier frame with the same \
                 timestamp (a frame written twice, as merged capture files do): dropped, not a retransmission",
                self.stepped_back_copies,
                if self.stepped_back_copies == 1 { "" } else { "s" },
                if self.stepped_back_copies == 1 { "it was" } else { "them were" }
            )
        })
    }

    /// "timestamps went back 3 times (largest step 1.250 s); those frames were given the time of
    /// the frame before them", or None.
    pub fn ts_backwards_note(&self) -> Option<String> {
        (self.ts_backwards > 0).then(|| {
            format!(
                "timestamps went back {} time{} (largest step {:.6} s); those frames were given the time of the frame before them",
                self.ts_backwards,
                if self.ts_backwards == 1 { "" } else { "s" },
                self.ts_largest_step_back_ns as f64 / 1e9
            )
        })
    }

    /// When no TCP packet came out because the frames are on a link type this decoder does not
    /// know (and none were only filtered out), the one line that says so, naming the link type
    /// and the supported ones: "no TCP packets decoded: link type 9999 is not supported
    /// (supported: 0 BSD loopback, 1 Ethernet, ...); 394 of 394 frames are on it".
    pub fn unsupported_linktype(&self) -> Option<String> {
        if self.tcp_packets > 0 || self.filtered_out > 0 || self.unknown_linktype == 0 {
            return None;
        }
        let lt = self.first_unknown_linktype.map_or_else(|| "?".to_string(), |l| l.to_string());
        let on = if self.unknown_linktype == self.frames {
            format!("all {} frames are on it", self.frames)
        } else {
            format!("{} of {} frames are on unsupported link types", self.unknown_linktype, self.frames)
        };
        Some(format!(
            "no TCP packets decoded: link type {lt} is not supported (supported: {}); {on}",
            linktype::supported_list()
        ))
    }
}

/// Feeds fragment `f` (from interface, capture time, bytes on the wire, on a loopback) to the
/// reassembly: None while its datagram waits for other fragments; else what the datagram
/// carries, decoded. A datagram that is itself a fragment of a tunnelled one (IP in IP, GRE)
/// is reassembled in turn, as deep as [`MAX_DEPTH`].
fn reassemble(
    defrag: &mut Defrag,
    stats: &mut DecodeStats,
    f: &Fragment<'_>,
    (iface, ts, wire_len, on_lo): (u32, u64, u32, bool),
) -> Option<Result<Decoded, Skip>> {
    let mut whole = defrag.push(f, iface, ts, wire_len)?;
    for _ in 0..MAX_DEPTH {
        stats.reassembled += 1;
        match decode_datagram(&whole.datagram, whole.cut, whole.wire_len, on_lo) {
            Ok(Frame::Packet(d)) => return Some(Ok(d)),
            Err(skip) => return Some(Err(skip)),
            Ok(Frame::Fragment(inner)) => whole = defrag.push(&inner, iface, ts, whole.wire_len)?,
        }
    }
    Some(Err(Skip::Inside("encapsulations nested deeper than 16")))
}

/// Counts the frames of the datagrams the reassembly gave up: as not TCP when the first
/// fragment shows the datagram carried none (UDP, ICMP), else by the reason it was given up.
fn count_dropped(defrag: &mut Defrag, stats: &mut DecodeStats) {
    while let Some(d) = defrag.pop_dropped() {
        match d.partial.as_deref().map(|p| decode_datagram(p, true, 0, false)) {
            Some(Err(Skip::NotTcp) | Ok(Frame::Packet(Decoded::Icmp(_)))) => stats.not_tcp += d.frames,
            _ => *stats.not_reassembled.entry(d.reason).or_insert(0) += d.frames,
        }
    }
}

/// The gzip member header's first two bytes (RFC 1952 2.3.1: ID1 = 31, ID2 = 139).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A capture as it was saved: `tcpdump -z gzip` and Wireshark write `.pcap.gz` / `.pcapng.gz`,
/// which Wireshark and tshark read as they are. A stream that starts with gzip's magic is
/// decompressed on the fly (every member, as `gzip -d` does with concatenated files); any other
/// is passed through unchanged. Reads nothing beyond what `input` has buffered.
pub fn decompressed<'a, R: std::io::BufRead + Send + 'a>(mut input: R) -> std::io::Result<Box<dyn Read + Send + 'a>> {
    let head = input.fill_buf()?;
    if head.len() >= 2 && head[..2] == GZIP_MAGIC {
        Ok(Box::new(std::io::BufReader::with_capacity(1 << 16, flate2::bufread::MultiGzDecoder::new(input))))
    } else {
        Ok(Box::new(input))
    }
}
