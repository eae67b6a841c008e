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
pub use error::WireError;
pub use flows::{EndReason, FlowEnd, FlowEvent, FlowFilter, FlowId, FlowKey, FlowLimits, FlowTable};

use comment::{FlowProcesses, PacketProcess};
use decode::{decode_datagram, decode_frame, Frame};
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

/// A capture file turned into a stream of per-flow trace events.
pub struct Decoder<R: Read> {
    reader: CaptureReader<R>,
    flows: FlowTable,
    filter: FlowFilter,
    stats: DecodeStats,
    interfaces_seen: u32,
    /// Latest timestamp seen (event time of a frame that goes back in time).
    last_ts: Option<u64>,
    /// The last IEEE 802.11 data frames' identities, for MAC-layer retransmissions.
    wlan_recent: std::collections::VecDeque<MpduId>,
    /// (timestamp, length, hash of the bytes) of the last [`COPY_LOOKBACK`] frames.
    recent_frames: std::collections::VecDeque<(u64, u32, u64)>,
    /// Fragmented IP datagrams being reassembled.
    defrag: Defrag,
    /// The processes packet comments named (ptcpdump's, [`comment`]), by flow: only flows whose
    /// packets carry such comments have an entry.
    processes: std::collections::HashMap<FlowId, FlowProcesses>,
    /// Those of the flows [`Decoder::pop_ended`] handed out since the last event (the caller
    /// finishes them before asking for the next event).
    retired: Vec<(FlowId, FlowProcesses)>,
}

/// 802.11 frames remembered for duplicate detection: a retry follows its original within a few
/// frames of the same transmitter (a sender retries an MPDU before sending the next one, and
/// block-ack windows hold at most 64 to 1024).
const WLAN_RECENT: usize = 64;

impl<R: Read> Decoder<R> {
    pub fn new(input: R, filter: FlowFilter) -> Result<Self, WireError> {
        Self::with_limits(input, filter, FlowLimits::default())
    }

    /// A decoder whose flow table uses `limits` (linger after close, idle timeout, duplicate
    /// window) instead of the defaults.
    pub fn with_limits(input: R, filter: FlowFilter, limits: FlowLimits) -> Result<Self, WireError> {
        Ok(Decoder {
            reader: CaptureReader::new(input)?,
            flows: FlowTable::with_limits(limits),
            filter,
            stats: DecodeStats::default(),
            interfaces_seen: 0,
            last_ts: None,
            wlan_recent: std::collections::VecDeque::new(),
            recent_frames: std::collections::VecDeque::with_capacity(COPY_LOOKBACK),
            defrag: Defrag::default(),
            processes: Default::default(),
            retired: Vec::new(),
        })
    }

    pub fn format(&self) -> Format {
        self.reader.format()
    }

    /// The next event of a kept flow; `Ok(None)` at the end; an error ends the stream (events
    /// returned before it stay valid).
    pub fn next_event(&mut self) -> Result<Option<FlowEvent>, WireError> {
        self.retired.clear();
        loop {
            let Some(p) = self.reader.next_packet()? else {
                self.flows.end_of_input();
                self.defrag.finish();
                count_dropped(&mut self.defrag, &mut self.stats);
                return Ok(None);
            };
            self.stats.frames += 1;
            // A frame stamped earlier than the one before it (clock steps, several capture
            // queues merged out of order): counted, and given the previous frame's time so the
            // analyser's clock never runs backwards. File order is kept.
            // A frame written twice: a stepped-back frame identical to a recent one, with the
            // same timestamp, is that frame again (a second packet on the wire would carry its
            // own time and, for IPv4, its own ID).
            let h = frame_hash(p.data);
            let stepped_back = self.last_ts.is_some_and(|last| p.ts_ns < last);
            if stepped_back && self.recent_frames.contains(&(p.ts_ns, p.orig_len, h)) {
                self.stats.stepped_back_copies += 1;
                continue;
            }
            if self.recent_frames.len() == COPY_LOOKBACK {
                self.recent_frames.pop_front();
            }
            self.recent_frames.push_back((p.ts_ns, p.orig_len, h));
            let ts_ns = match self.last_ts {
                Some(last) if p.ts_ns < last => {
                    self.stats.ts_backwards += 1;
                    self.stats.ts_largest_step_back_ns = self.stats.ts_largest_step_back_ns.max(last - p.ts_ns);
                    last
                }
                _ => p.ts_ns,
            };
            self.last_ts = Some(ts_ns);
            self.flows.set_origin(ts_ns);
            if !self.defrag.is_empty() {
                self.defrag.expire(ts_ns);
                count_dropped(&mut self.defrag, &mut self.stats);
            }
            let (ts, frame, iface, lt) = (ts_ns, p.frame, p.interface, p.linktype);
            // ptcpdump's comments: the process of the socket that sent it (received it, inbound).
            let process = if p.options.is_empty() {
                None
            } else {
                PacketProcess::parse(p.options.comments()).map(|pp| (pp, p.options.direction() == Direction::Inbound))
            };
            let cut = p.data.len() < p.orig_len as usize;
            if let Some((id, retry)) = wlan_mpdu(lt, p.data, cut) {
                if retry && self.wlan_recent.contains(&id) {
                    self.stats.wlan_retries += 1;
                    continue;
                }
                if self.wlan_recent.len() == WLAN_RECENT {
                    self.wlan_recent.pop_front();
                }
                self.wlan_recent.push_back(id);
            }
            let decoded = match decode_frame(lt, p.data, p.orig_len) {
                Ok(Frame::Packet(d)) => Ok(d),
                Err(skip) => Err(skip),
                Ok(Frame::Fragment(f)) => {
                    self.stats.ip_fragments += 1;
                    let wire_len = p.orig_len.max(p.data.len() as u32);
                    let on_lo = frame_on_loopback(lt, p.data);
                    let done = reassemble(&mut self.defrag, &mut self.stats, &f, (iface, ts, wire_len, on_lo));
                    count_dropped(&mut self.defrag, &mut self.stats);
                    match done {
                        Some(d) => d,
                        None => continue,
                    }
                }
            };
            if let Some(ev) = self.record(decoded, ts, frame, iface, lt, process) {
                return Ok(Some(ev));
            }
        }
    }

    /// Counts what one frame (or reassembled datagram) carried; the event of a kept flow.
    fn record(
        &mut self,
        decoded: Result<Decoded, Skip>,
        ts: u64,
        frame: u64,
        iface: u32,
        lt: u32,
        process: Option<(PacketProcess, bool)>,
    ) -> Option<FlowEvent> {
        match decoded {
            Ok(Decoded::Tcp(mut tcp)) => {
                if !self.filter.matches(tcp.src, tcp.dst) {
                    self.stats.filtered_out += 1;
                    return None;
                }
                // The interface's name, when the file gives one, outranks the BSD loopback
                // encapsulation: macOS captures its utun tunnels (VPNs) with DLT_NULL too.
                match self.reader.interface_loopback(iface) {
                    Some(true) => tcp.loopback = true,
                    Some(false) if matches!(lt, linktype::NULL | linktype::LOOP) => tcp.loopback = false,
                    _ => {}
                }
                let ev = self.flows.event(&tcp, ts, frame, iface)?;
                if let Some((pp, inbound)) = process {
                    // The comment names the local end: the sender, or the receiver of an
                    // inbound packet.
                    let a = (ev.event.from == trace::Endpoint::A) != inbound;
                    self.processes.entry(ev.flow).or_default().note(a, pp);
                }
                self.stats.tcp_packets += 1;
                self.interfaces_seen = self.interfaces_seen.max(iface + 1);
                return Some(ev);
            }
            Ok(Decoded::Icmp(icmp)) => match self.flows.icmp(&icmp, ts, frame, iface) {
                Some(ev) => {
                    self.stats.icmp_errors += 1;
                    return Some(ev);
                }
                None => self.stats.icmp_no_flow += 1,
            },
            Err(Skip::NotTcp) => self.stats.not_tcp += 1,
            Err(Skip::Malformed) => self.stats.malformed += 1,
            Err(Skip::Inside(kind)) => *self.stats.not_decoded_inside.entry(kind).or_insert(0) += 1,
            // decode_frame hands fragments over whole (Frame::Fragment), never as this.
            Err(Skip::Fragment) => *self.stats.not_reassembled.entry(defrag::NEVER_COMPLETED).or_insert(0) += 1,
            Err(Skip::LinkType(l)) => {
                self.stats.unknown_linktype += 1;
                self.stats.first_unknown_linktype.get_or_insert(l);
            }
        }
        None
    }

    pub fn stats(&self) -> DecodeStats {
        DecodeStats {
            bytes: self.reader.offset(),
            duplicates: self.flows.duplicates(),
            after_close: self.flows.after_close(),
            ..self.stats.clone()
        }
    }

    /// True when TCP packets came from more than one capture interface.
    pub fn several_interfaces(&self) -> bool {
        self.interfaces_seen > 1
    }

    /// The name (`if_name`) of a capture interface, when the file gives one.
    pub fn interface_name(&self, id: u32) -> Option<&str> {
        self.reader.interface_name(id)
    }

    /// Whether capture interface `id` is a loopback interface, as far as the file says: its
    /// pcapng `if_name` ("lo", "lo0", `\Device\NPF_Loopback`, see [`loopback_name`]), else
    /// its link type (BSD loopback encapsulation, NULL and LOOP). None when neither tells;
    /// frames on Linux cooked or Ethernet link types may still show it per packet (see
    /// [`frame_on_loopback`] and [`FlowEvent::loopback`], which combines both).
    pub fn interface_loopback(&self, id: u32) -> Option<bool> {
        self.reader.interface_loopback(id).or_else(|| {
            let lt = self.reader.interface_linktype(id)?;
            matches!(lt, linktype::NULL | linktype::LOOP).then_some(true)
        })
    }

    pub fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// The next flow that ended (closed and lingered, idle, or its pair reused) since the last
    /// call: none of its events come any more, so its analysis can be finished and freed. Flows
    /// still alive at the end of the capture are not reported: the caller finishes them.
    pub fn pop_ended(&mut self) -> Option<FlowEnd> {
        let end = self.flows.pop_ended()?;
        if let Some(p) = self.processes.remove(&end.flow) {
            self.retired.push((end.flow, p));
        }
        Some(end)
    }

    /// The processes the packet comments of flow `id` named (ptcpdump's, see [`comment`]):
    /// for a flow alive, or one [`Decoder::pop_ended`] handed out since the last event.
    pub fn processes(&self, id: FlowId) -> Option<&FlowProcesses> {
        self.processes.get(&id).or_else(|| self.retired.iter().find(|(f, _)| *f == id).map(|(_, p)| p))
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
