//! [`Decoder`]: a capture file to per-flow trace events, in two halves that can run on two
//! threads. [`FrameHalf`] reads the file and turns each frame into a decoded packet (framing,
//! timestamps, copies written twice, 802.11 retries, IP reassembly, link to TCP headers);
//! [`FlowHalf`] turns decoded packets into flow events (the filter, the flow table, the
//! processes packet comments name). [`Decoder::next_event`] runs one after the other;
//! `analyze::session` runs the first on a thread of its own and the second beside the analysis,
//! so the flow table's work is not on the reading thread.

use std::io::Read;

use crate::comment::{FlowProcesses, PacketProcess};
use crate::decode::{decode_frame, Frame};
use crate::defrag::Defrag;
use crate::{
    count_dropped, frame_hash, frame_on_loopback, linktype, reassemble, wlan_mpdu, CaptureReader, DecodeStats, Decoded,
    Direction, FlowEvent, FlowFilter, FlowId, FlowLimits, FlowTable, Format, MpduId, Skip, WireError, COPY_LOOKBACK,
};

/// 802.11 frames remembered for duplicate detection: a retry follows its original within a few
/// frames of the same transmitter (a sender retries an MPDU before sending the next one, and
/// block-ack windows hold at most 64 to 1024).
const WLAN_RECENT: usize = 64;

/// A capture file turned into a stream of per-flow trace events.
pub struct Decoder<R: Read> {
    frames: FrameHalf<R>,
    flows: FlowHalf,
}

/// One frame decoded ([`FrameHalf::next_packet`]), with what [`FlowHalf::record`] needs of it.
#[derive(Debug, Clone)]
pub struct DecodedPacket {
    pub decoded: Decoded,
    /// Capture time, never earlier than the frame before (see [`DecodeStats::ts_backwards`]).
    pub ts_ns: u64,
    pub frame: u64,
    pub interface: u32,
    pub linktype: u32,
    /// The capture's first frame's time (of any frame, TCP or not): the flows' time origin.
    pub origin_ns: u64,
    /// Whether the file says the interface is a loopback (its pcapng name).
    pub interface_loopback: Option<bool>,
    /// ptcpdump's comment on the packet: the process, and whether the packet was inbound.
    pub process: Option<Box<(PacketProcess, bool)>>,
}

/// The first half of a [`Decoder`]: the file's frames to decoded packets.
pub struct FrameHalf<R: Read> {
    reader: CaptureReader<R>,
    /// What this half counts (frames, what is not TCP, reassembly, time steps, copies).
    stats: DecodeStats,
    /// The first frame's time.
    origin: Option<u64>,
    /// Latest timestamp seen (event time of a frame that goes back in time).
    last_ts: Option<u64>,
    /// The last IEEE 802.11 data frames' identities, for MAC-layer retransmissions.
    wlan_recent: std::collections::VecDeque<MpduId>,
    /// (timestamp, length, hash of the bytes) of the last [`COPY_LOOKBACK`] frames.
    recent_frames: std::collections::VecDeque<(u64, u32, u64)>,
    /// Fragmented IP datagrams being reassembled.
    defrag: Defrag,
}

/// The second half of a [`Decoder`]: decoded packets to flow events.
pub struct FlowHalf {
    flows: FlowTable,
    filter: FlowFilter,
    /// What this half counts: TCP packets kept and filtered out, ICMP errors.
    tcp_packets: u64,
    filtered_out: u64,
    icmp_errors: u64,
    icmp_no_flow: u64,
    interfaces_seen: u32,
    /// The processes packet comments named (ptcpdump's, [`crate::comment`]), by flow: only
    /// flows whose packets carry such comments have an entry.
    processes: std::collections::HashMap<FlowId, FlowProcesses>,
    /// Those of the flows [`FlowHalf::pop_ended`] handed out since the last packet recorded
    /// (the caller finishes them before recording the next).
    retired: Vec<(FlowId, FlowProcesses)>,
}

/// The time a frame is given, or None for a frame written twice (counted). A frame stamped
/// earlier than the one before it (clock steps, several capture queues merged out of order) is
/// counted and given the previous frame's time, so the analyser's clock never runs backwards;
/// file order is kept. A frame written twice: a stepped-back frame identical to a recent one,
/// with the same timestamp, is that frame again (a second packet on the wire would carry its
/// own time and, for IPv4, its own ID).
fn frame_time(
    stats: &mut DecodeStats,
    recent: &mut std::collections::VecDeque<(u64, u32, u64)>,
    last_ts: &mut Option<u64>,
    p: &crate::Packet<'_>,
) -> Option<u64> {
    let h = frame_hash(p.data);
    let stepped_back = last_ts.is_some_and(|last| p.ts_ns < last);
    if stepped_back && recent.contains(&(p.ts_ns, p.orig_len, h)) {
        stats.stepped_back_copies += 1;
        return None;
    }
    if recent.len() == COPY_LOOKBACK {
        recent.pop_front();
    }
    recent.push_back((p.ts_ns, p.orig_len, h));
    let ts_ns = match *last_ts {
        Some(last) if p.ts_ns < last => {
            stats.ts_backwards += 1;
            stats.ts_largest_step_back_ns = stats.ts_largest_step_back_ns.max(last - p.ts_ns);
            last
        }
        _ => p.ts_ns,
    };
    *last_ts = Some(ts_ns);
    Some(ts_ns)
}

impl<R: Read> FrameHalf<R> {
    /// The next frame that decoded to a TCP segment or an ICMP error; `Ok(None)` at the end.
    /// Every other frame is counted in this half's statistics.
    pub fn next_packet(&mut self) -> Result<Option<DecodedPacket>, WireError> {
        self.next_with(|p| p)
    }

    /// [`FrameHalf::next_packet`], the packet pushed onto `out`; `Ok(false)` at the end, and
    /// `out` unchanged then or on an error.
    pub fn next_packet_into(&mut self, out: &mut Vec<DecodedPacket>) -> Result<bool, WireError> {
        // With `next_with` inlined the packet is built in `out`'s slot, not copied there
        // through return values (~200 bytes a packet for a batch bound to another thread).
        Ok(self.next_with(|p| out.push(p))?.is_some())
    }

    /// The next packet, handed to `emit` as it is built.
    #[inline(always)]
    fn next_with<T>(&mut self, emit: impl FnOnce(DecodedPacket) -> T) -> Result<Option<T>, WireError> {
        loop {
            let Some(p) = self.reader.next_packet()? else {
                self.defrag.finish();
                count_dropped(&mut self.defrag, &mut self.stats);
                return Ok(None);
            };
            self.stats.frames += 1;
            let Some(ts_ns) = frame_time(&mut self.stats, &mut self.recent_frames, &mut self.last_ts, &p) else {
                continue;
            };
            let origin_ns = *self.origin.get_or_insert(ts_ns);
            if !self.defrag.is_empty() {
                self.defrag.expire(ts_ns);
                count_dropped(&mut self.defrag, &mut self.stats);
            }
            let (ts, frame, iface, lt) = (ts_ns, p.frame, p.interface, p.linktype);
            // ptcpdump's comments: the process of the socket that sent it (received it, inbound).
            let process = if p.options.is_empty() {
                None
            } else {
                PacketProcess::parse(p.options.comments())
                    .map(|pp| Box::new((pp, p.options.direction() == Direction::Inbound)))
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
                Ok(Frame::Packet(d)) => d,
                Err(skip) => {
                    self.skipped(skip);
                    continue;
                }
                Ok(Frame::Fragment(f)) => {
                    self.stats.ip_fragments += 1;
                    let wire_len = p.orig_len.max(p.data.len() as u32);
                    let on_lo = frame_on_loopback(lt, p.data);
                    let done = reassemble(&mut self.defrag, &mut self.stats, &f, (iface, ts, wire_len, on_lo));
                    count_dropped(&mut self.defrag, &mut self.stats);
                    match done {
                        Some(Ok(d)) => d,
                        Some(Err(skip)) => {
                            self.skipped(skip);
                            continue;
                        }
                        None => continue,
                    }
                }
            };
            let interface_loopback = self.reader.interface_loopback(iface);
            return Ok(Some(emit(DecodedPacket {
                decoded,
                ts_ns: ts,
                frame,
                interface: iface,
                linktype: lt,
                origin_ns,
                interface_loopback,
                process,
            })));
        }
    }

    /// Counts a frame that carried neither a TCP segment nor an ICMP error.
    fn skipped(&mut self, skip: Skip) {
        match skip {
            Skip::NotTcp => self.stats.not_tcp += 1,
            Skip::Malformed => self.stats.malformed += 1,
            Skip::Inside(kind) => *self.stats.not_decoded_inside.entry(kind).or_insert(0) += 1,
            // decode_frame hands fragments over whole (Frame::Fragment), never as this.
            Skip::Fragment => *self.stats.not_reassembled.entry(crate::defrag::NEVER_COMPLETED).or_insert(0) += 1,
            Skip::LinkType(l) => {
                self.stats.unknown_linktype += 1;
                self.stats.first_unknown_linktype.get_or_insert(l);
            }
        }
    }

    pub fn format(&self) -> Format {
        self.reader.format()
    }

    /// The name (`if_name`) of a capture interface, when the file gives one.
    pub fn interface_name(&self, id: u32) -> Option<&str> {
        self.reader.interface_name(id)
    }

    /// See [`CaptureReader::sections`]: a new section names its interfaces anew.
    pub fn sections(&self) -> u32 {
        self.reader.sections()
    }
}

impl FlowHalf {
    /// The flow event of one decoded packet, or None (filtered out, a copy, an ICMP error
    /// about no flow of the capture).
    // Inlined, as `FlowTable::event` is into it: the flow event (112 bytes) is then built where
    // the caller keeps it, not copied out through two return values (explain's analysing
    // thread, issue 35).
    #[inline(always)]
    pub fn record(&mut self, p: &DecodedPacket) -> Option<FlowEvent> {
        self.retired.clear();
        self.flows.set_origin(p.origin_ns);
        let (ts, frame, iface, lt) = (p.ts_ns, p.frame, p.interface, p.linktype);
        match &p.decoded {
            Decoded::Tcp(tcp) => {
                if !self.filter.matches(tcp.src, tcp.dst) {
                    self.filtered_out += 1;
                    return None;
                }
                // The interface's name, when the file gives one, outranks the BSD loopback
                // encapsulation: macOS captures its utun tunnels (VPNs) with DLT_NULL too.
                let loopback = match p.interface_loopback {
                    Some(true) => true,
                    Some(false) if matches!(lt, linktype::NULL | linktype::LOOP) => false,
                    _ => tcp.loopback,
                };
                // The packet is read in place (it lies in the decoder's batch); a copy only
                // when the interface's name changes what its link header said.
                let copy;
                let tcp = if loopback == tcp.loopback {
                    tcp
                } else {
                    copy = crate::TcpPacket { loopback, ..*tcp };
                    &copy
                };
                let ev = self.flows.event(tcp, ts, frame, iface)?;
                if let Some(pp) = &p.process {
                    let (pp, inbound) = &**pp;
                    // The comment names the local end: the sender, or the receiver of an
                    // inbound packet.
                    let a = (ev.event.from == trace::Endpoint::A) != *inbound;
                    self.processes.entry(ev.flow).or_default().note(a, pp);
                }
                self.tcp_packets += 1;
                self.interfaces_seen = self.interfaces_seen.max(iface + 1);
                Some(ev)
            }
            Decoded::Icmp(icmp) => match self.flows.icmp(icmp, ts, frame, iface) {
                Some(ev) => {
                    self.icmp_errors += 1;
                    Some(ev)
                }
                None => {
                    self.icmp_no_flow += 1;
                    None
                }
            },
        }
    }

    /// The input ended: a flow closing is ended now.
    pub fn end_of_input(&mut self) {
        self.flows.end_of_input();
    }

    /// True when TCP packets came from more than one capture interface.
    pub fn several_interfaces(&self) -> bool {
        self.interfaces_seen > 1
    }

    pub fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// See [`Decoder::pop_ended`].
    pub fn pop_ended(&mut self) -> Option<crate::FlowEnd> {
        let end = self.flows.pop_ended()?;
        if let Some(p) = self.processes.remove(&end.flow) {
            self.retired.push((end.flow, p));
        }
        Some(end)
    }

    /// See [`Decoder::processes`].
    pub fn processes(&self, id: FlowId) -> Option<&FlowProcesses> {
        self.processes.get(&id).or_else(|| self.retired.iter().find(|(f, _)| *f == id).map(|(_, p)| p))
    }
}

impl<R: Read> Decoder<R> {
    pub fn new(input: R, filter: FlowFilter) -> Result<Self, WireError> {
        Self::with_limits(input, filter, FlowLimits::default())
    }

    /// A decoder whose flow table uses `limits` (linger after close, idle timeout, duplicate
    /// window) instead of the defaults.
    pub fn with_limits(input: R, filter: FlowFilter, limits: FlowLimits) -> Result<Self, WireError> {
        Ok(Decoder {
            frames: FrameHalf {
                reader: CaptureReader::new(input)?,
                stats: DecodeStats::default(),
                origin: None,
                last_ts: None,
                wlan_recent: std::collections::VecDeque::new(),
                recent_frames: std::collections::VecDeque::with_capacity(COPY_LOOKBACK),
                defrag: Defrag::default(),
            },
            flows: FlowHalf {
                flows: FlowTable::with_limits(limits),
                filter,
                tcp_packets: 0,
                filtered_out: 0,
                icmp_errors: 0,
                icmp_no_flow: 0,
                interfaces_seen: 0,
                processes: Default::default(),
                retired: Vec::new(),
            },
        })
    }

    /// The two halves, to run on two threads: the first's packets, in order, to the second's
    /// [`FlowHalf::record`], and [`FlowHalf::end_of_input`] after its last.
    pub fn halves(&mut self) -> (&mut FrameHalf<R>, &mut FlowHalf) {
        (&mut self.frames, &mut self.flows)
    }

    pub fn format(&self) -> Format {
        self.frames.format()
    }

    /// The next event of a kept flow; `Ok(None)` at the end; an error ends the stream (events
    /// returned before it stay valid).
    pub fn next_event(&mut self) -> Result<Option<FlowEvent>, WireError> {
        loop {
            let Some(p) = self.frames.next_packet()? else {
                self.flows.end_of_input();
                return Ok(None);
            };
            if let Some(ev) = self.flows.record(&p) {
                return Ok(Some(ev));
            }
        }
    }

    pub fn stats(&self) -> DecodeStats {
        let f = &self.flows;
        DecodeStats {
            bytes: self.frames.reader.offset(),
            duplicates: f.flows.duplicates(),
            after_close: f.flows.after_close(),
            tcp_packets: f.tcp_packets,
            filtered_out: f.filtered_out,
            icmp_errors: f.icmp_errors,
            icmp_no_flow: f.icmp_no_flow,
            ..self.frames.stats.clone()
        }
    }

    /// True when TCP packets came from more than one capture interface.
    pub fn several_interfaces(&self) -> bool {
        self.flows.several_interfaces()
    }

    /// The name (`if_name`) of a capture interface, when the file gives one.
    pub fn interface_name(&self, id: u32) -> Option<&str> {
        self.frames.interface_name(id)
    }

    /// Whether capture interface `id` is a loopback interface, as far as the file says: its
    /// pcapng `if_name` ("lo", "lo0", `\Device\NPF_Loopback`, see [`crate::loopback_name`]),
    /// else its link type (BSD loopback encapsulation, NULL and LOOP). None when neither tells;
    /// frames on Linux cooked or Ethernet link types may still show it per packet (see
    /// [`frame_on_loopback`] and [`FlowEvent::loopback`], which combines both).
    pub fn interface_loopback(&self, id: u32) -> Option<bool> {
        let reader = &self.frames.reader;
        reader.interface_loopback(id).or_else(|| {
            let lt = reader.interface_linktype(id)?;
            matches!(lt, linktype::NULL | linktype::LOOP).then_some(true)
        })
    }

    pub fn flows(&self) -> &FlowTable {
        self.flows.flows()
    }

    /// The next flow that ended (closed and lingered, idle, or its pair reused) since the last
    /// call: none of its events come any more, so its analysis can be finished and freed. Flows
    /// still alive at the end of the capture are not reported: the caller finishes them.
    pub fn pop_ended(&mut self) -> Option<crate::FlowEnd> {
        self.flows.pop_ended()
    }

    /// The processes the packet comments of flow `id` named (ptcpdump's, see
    /// [`crate::comment`]): for a flow alive, or one [`Decoder::pop_ended`] handed out since
    /// the last event.
    pub fn processes(&self, id: FlowId) -> Option<&FlowProcesses> {
        self.flows.processes(id)
    }
}
