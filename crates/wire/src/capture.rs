//! A streaming reader of pcap and pcapng files over any [`Read`].
//!
//! Written by hand rather than with the `pcap-file` crate (2.0) because that crate reads every
//! pcapng Enhanced Packet Block timestamp as nanoseconds whatever the interface's `if_tsresol`
//! says (tcpdump writes microseconds), reports errors without the byte offset, and buffers 8 MB
//! per reader. This reader keeps one read buffer (256 KiB, or the largest record) and parses
//! records where they lie in it, validates every claimed length against a bound *before*
//! allocating (a record claiming 4 GB is an error, not an allocation), never
//! panics on any input (see the fuzz target in fuzz/), and names the byte offset of whatever
//! it cannot read.
//!
//! Formats: pcap (draft-ietf-opsawg-pcap; magic a1b2c3d4 microseconds and a1b23c4d
//! nanoseconds, either byte order) and pcapng (draft-ietf-opsawg-pcapng: Section Header,
//! Interface Description with `if_tsresol`/`if_tsoffset`, Enhanced, Simple and obsolete Packet
//! Blocks; several sections and interfaces; other blocks are skipped without being buffered).

use crate::error::WireError;
use std::io::{self, Read};

/// Largest packet record accepted (bytes captured). Linux's maximum snaplen is 262144; a GSO
/// super-packet captured whole is at most 64 KiB + headers. 16 MiB leaves ample room while
/// keeping a corrupt length from allocating gigabytes.
pub const MAX_PACKET: u32 = 16 << 20;
/// Largest pcapng block whose body is buffered (packet blocks, interface descriptions).
const MAX_BLOCK: u32 = MAX_PACKET + 4096;
/// Bytes read from the input at a time. Records are parsed where they lie in this window, not
/// copied out one by one: a 100-byte record costs no read call and no copy of its own
/// (`tcpstall explain` on a million small packets spent 15% of its time in per-record reads).
const WINDOW: usize = 256 << 10;

/// The bytes read ahead of the parser: `buf[pos..end]` are read and not yet consumed. Records
/// are handed out as ranges of `buf`, valid until the next [`Window::take`].
struct Window {
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Window {
    /// Consumes up to `n` bytes (fewer only at the end of the input): (where they start in
    /// `buf`, how many). Reads from `inner` only when fewer than `n` are buffered; the buffer
    /// grows to `n` when `n` exceeds it (callers bound `n` by [`MAX_BLOCK`] first).
    fn take<R: Read>(&mut self, inner: &mut R, n: usize) -> io::Result<(usize, usize)> {
        if self.end - self.pos < n {
            self.refill(inner, n)?;
        }
        let start = self.pos;
        let got = n.min(self.end - self.pos);
        self.pos += got;
        Ok((start, got))
    }

    /// Reads until `n` bytes are buffered or the input ends.
    #[cold]
    fn refill<R: Read>(&mut self, inner: &mut R, n: usize) -> io::Result<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() < n.max(WINDOW) {
            self.buf.resize(n.max(WINDOW), 0);
        }
        while self.end < n {
            match inner.read(&mut self.buf[self.end..]) {
                Ok(0) => break,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Drops `n` bytes: those buffered, then the rest straight from `inner` (not buffered).
    /// Returns how many there were.
    fn skip<R: Read>(&mut self, inner: &mut R, n: u64) -> io::Result<u64> {
        let here = n.min((self.end - self.pos) as u64);
        self.pos += here as usize;
        if here == n {
            return Ok(n);
        }
        Ok(here + io::copy(&mut inner.take(n - here), &mut io::sink())?)
    }
}

/// One captured packet, borrowed from the reader's buffer until the next call.
#[derive(Debug)]
pub struct Packet<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub frame: u64,
    /// Absolute timestamp in nanoseconds since the Unix epoch (what the file says).
    pub ts_ns: u64,
    /// LINKTYPE_* value of the interface the packet was captured on.
    pub linktype: u32,
    /// Interface index within the pcapng section (0 for pcap).
    pub interface: u32,
    /// Bytes captured (may be fewer than `orig_len` when the snaplen cut the packet).
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Byte offset of the record in the file.
    pub offset: u64,
    /// The options of an Enhanced Packet Block (empty for other records).
    pub options: EpbOptions<'a>,
}

/// The options of an Enhanced Packet Block (pcapng draft section 4.3: after the packet data,
/// padded to 32 bits; each option a code u16, a length u16 and the value padded to 32 bits,
/// section 3.5), in the section's byte order.
#[derive(Debug, Clone, Copy, Default)]
pub struct EpbOptions<'a> {
    bytes: &'a [u8],
    big_endian: bool,
}

/// The direction an Enhanced Packet Block's `epb_flags` give (pcapng draft 4.3.1, bits 0-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// 00: not given (or no flags).
    Unknown,
    /// 01.
    Inbound,
    /// 10.
    Outbound,
}

impl<'a> EpbOptions<'a> {
    /// (code, value) of each option up to `opt_endofopt` (code 0) or the end.
    fn each(self) -> impl Iterator<Item = (u16, &'a [u8])> {
        let (b, be) = (self.bytes, self.big_endian);
        let mut i = 0;
        std::iter::from_fn(move || {
            if i + 4 > b.len() {
                return None;
            }
            let (code, len) = (u16_at(b, i, be), usize::from(u16_at(b, i + 2, be)));
            if code == 0 || i + 4 + len > b.len() {
                return None;
            }
            let v = &b[i + 4..i + 4 + len];
            i += 4 + len.div_ceil(4) * 4;
            Some((code, v))
        })
    }

    /// The `opt_comment`s (code 1, UTF-8; pcapng draft 3.5), in order; a comment that is not
    /// UTF-8 is skipped.
    pub fn comments(self) -> impl Iterator<Item = &'a str> {
        self.each().filter(|(c, _)| *c == 1).filter_map(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// Whether there are options at all (a packet without them costs nothing more).
    pub fn is_empty(self) -> bool {
        self.bytes.len() < 4
    }

    /// The direction in `epb_flags` (option 2, 32 bits).
    pub fn direction(self) -> Direction {
        let be = self.big_endian;
        match self.each().find(|(c, v)| *c == 2 && v.len() == 4).map(|(_, v)| u32_at(v, 0, be) & 3) {
            Some(1) => Direction::Inbound,
            Some(2) => Direction::Outbound,
            _ => Direction::Unknown,
        }
    }
}

/// The container format detected from the first four bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pcap { nanos: bool, big_endian: bool },
    PcapNg,
}

#[derive(Debug, Clone)]
struct Interface {
    linktype: u32,
    /// Bytes of frame check sequence at the end of every frame (stripped before decoding).
    fcs_len: u32,
    /// `if_name` option (pcapng 4.2), e.g. "lo" or "tcpstall-c0".
    name: Option<String>,
    /// What `name` says about loopback (see [`loopback_name`]); None without a name.
    loopback: Option<bool>,
    /// Timestamp units per second as a ratio: value * num / den = nanoseconds.
    tsres: TsRes,
    ts_offset_s: i64,
}

#[derive(Debug, Clone, Copy)]
enum TsRes {
    /// 10^-n seconds.
    Dec(u8),
    /// 2^-n seconds.
    Bin(u8),
}

impl TsRes {
    fn to_nanos(self, v: u64) -> u64 {
        let v = u128::from(v);
        let ns = match self {
            TsRes::Dec(n) if n <= 9 => v * 10u128.pow(u32::from(9 - n)),
            TsRes::Dec(n) => v / 10u128.pow(u32::from(n - 9).min(38)),
            TsRes::Bin(n) => (v * 1_000_000_000) >> n.min(127),
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// (start, len, ts_ns, (linktype, interface), orig_len, offset) of a packet in the buffer.
type PacketAt = (usize, usize, u64, (u32, u32), u32, u64);

/// Streaming pcap/pcapng reader. Memory: one read buffer (256 KiB, or the largest record) plus
/// one entry per interface.
pub struct CaptureReader<R: Read> {
    inner: R,
    offset: u64,
    format: Format,
    big_endian: bool,
    /// pcap: the single linktype; pcapng: per-interface descriptions of the current section.
    interfaces: Vec<Interface>,
    win: Window,
    /// Where the body of the block being parsed starts in the window's buffer.
    at: usize,
    /// Where the last Enhanced Packet Block's options are in the window's buffer (start, end).
    opts: (usize, usize),
    frame: u64,
    /// pcapng Section Header Blocks read so far (a new section starts its interfaces afresh).
    sections: u32,
    done: bool,
}

fn u16_at(b: &[u8], i: usize, be: bool) -> u16 {
    let a = [b[i], b[i + 1]];
    if be {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

fn u32_at(b: &[u8], i: usize, be: bool) -> u32 {
    let a = [b[i], b[i + 1], b[i + 2], b[i + 3]];
    if be {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header (pcap) or the first Section Header Block (pcapng).
    pub fn new(mut inner: R) -> Result<Self, WireError> {
        let mut win = Window { buf: Vec::new(), pos: 0, end: 0 };
        let (at, got) = win.take(&mut inner, 4).map_err(|e| WireError::io(0, "cannot read the file", e))?;
        if got == 0 {
            return Err(WireError::new(0, "empty file: not a pcap or pcapng capture"));
        }
        if got < 4 {
            return Err(WireError::new(0, format!("file too short ({got} bytes) to be a pcap or pcapng capture")));
        }
        let m = u32_at(&win.buf, at, false);
        let format = match m {
            0xa1b2c3d4 => Format::Pcap { nanos: false, big_endian: false },
            0xa1b23c4d => Format::Pcap { nanos: true, big_endian: false },
            0xd4c3b2a1 => Format::Pcap { nanos: false, big_endian: true },
            0x4d3cb2a1 => Format::Pcap { nanos: true, big_endian: true },
            0x0a0d0d0a => Format::PcapNg,
            _ => return Err(WireError::new(0, format!("unknown magic number {m:08x}: not a pcap or pcapng capture"))),
        };
        let mut r = CaptureReader {
            inner,
            offset: 4,
            format,
            big_endian: false,
            interfaces: Vec::new(),
            win,
            at: 0,
            opts: (0, 0),
            frame: 0,
            sections: 0,
            done: false,
        };
        match format {
            Format::Pcap { big_endian, nanos } => {
                r.big_endian = big_endian;
                let mut h = [0u8; 20];
                r.fill(&mut h, 0, || "truncated pcap file header (24 bytes expected)".into())?;
                let (linktype, fcs_len) = pcap_linktype(u32_at(&h, 16, big_endian));
                let tsres = if nanos { TsRes::Dec(9) } else { TsRes::Dec(6) };
                r.interfaces.push(Interface { linktype, fcs_len, name: None, loopback: None, tsres, ts_offset_s: 0 });
            }
            Format::PcapNg => {
                let mut len = [0u8; 4];
                r.fill(&mut len, 0, || "truncated pcapng section header block".into())?;
                r.section_header(0, len)?
            }
        }
        Ok(r)
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The `if_name` of an interface of the current pcapng section, when it has one.
    pub fn interface_name(&self, id: u32) -> Option<&str> {
        self.interfaces.get(id as usize).and_then(|i| i.name.as_deref())
    }

    /// What the `if_name` of an interface of the current pcapng section says: `Some(true)` for
    /// a loopback interface's name, `Some(false)` for any other name, None without a name (see
    /// [`loopback_name`]).
    pub fn interface_loopback(&self, id: u32) -> Option<bool> {
        self.interfaces.get(id as usize).and_then(|i| i.loopback)
    }

    /// The link type of an interface of the current pcapng section (of the file, for pcap).
    pub fn interface_linktype(&self, id: u32) -> Option<u32> {
        self.interfaces.get(id as usize).map(|i| i.linktype)
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next packet, `Ok(None)` at a clean end of file. After an error, returns `Ok(None)`.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, WireError> {
        if self.done {
            return Ok(None);
        }
        self.opts = (0, 0);
        let r = match self.format {
            Format::Pcap { .. } => self.next_pcap(),
            Format::PcapNg => self.next_pcapng(),
        };
        match r {
            Ok(Some(p)) => {
                self.frame += 1;
                let (start, len, ts_ns, (linktype, interface), orig_len, offset) = p;
                Ok(Some(Packet {
                    frame: self.frame,
                    ts_ns,
                    linktype,
                    interface,
                    data: &self.win.buf[start..start + len],
                    orig_len,
                    offset,
                    options: EpbOptions { bytes: &self.win.buf[self.opts.0..self.opts.1], big_endian: self.big_endian },
                }))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Fills `out` completely or fails naming `start` and `what`.
    /// `what` names the read in an error; it is only built when the read fails (a packet
    /// record's message is per packet).
    fn fill(&mut self, out: &mut [u8], start: u64, what: impl Fn() -> String) -> Result<(), WireError> {
        self.fill_buf(out.len(), start, what)?;
        out.copy_from_slice(&self.win.buf[self.at..self.at + out.len()]);
        Ok(())
    }

    /// Consumes `len` bytes (never beyond MAX_BLOCK), which then start at `self.at` in the
    /// window's buffer.
    fn fill_buf(&mut self, len: usize, start: u64, what: impl Fn() -> String) -> Result<(), WireError> {
        let (at, got) = self.win.take(&mut self.inner, len).map_err(|e| WireError::io(start, what(), e))?;
        self.offset += got as u64;
        if got < len {
            return Err(WireError::new(start, format!("{}: file ends after {got} of {len} bytes", what())));
        }
        self.at = at;
        Ok(())
    }

    /// Returns (start, len, ts_ns, linktype, orig_len, offset) of the packet in `self.buf`.
    fn next_pcap(&mut self) -> Result<Option<PacketAt>, WireError> {
        let start = self.offset;
        let (at, got) =
            self.win.take(&mut self.inner, 16).map_err(|e| WireError::io(start, "cannot read packet record", e))?;
        self.offset += got as u64;
        if got == 0 {
            return Ok(None);
        }
        if got < 16 {
            return Err(WireError::new(
                start,
                format!("truncated packet record header: file ends after {got} of 16 bytes"),
            ));
        }
        let (be, h) = (self.big_endian, &self.win.buf[at..at + 16]);
        let (sec, frac, incl, orig) = (u32_at(h, 0, be), u32_at(h, 4, be), u32_at(h, 8, be), u32_at(h, 12, be));
        if incl > MAX_PACKET {
            return Err(WireError::new(
                start,
                format!("packet record claims {incl} captured bytes (limit {MAX_PACKET}): corrupt file"),
            ));
        }
        self.fill_buf(incl as usize, start, || format!("truncated packet record ({incl} bytes claimed)"))?;
        let iface = &self.interfaces[0];
        let frac_ns = iface.tsres.to_nanos(u64::from(frac));
        let ts_ns = u64::from(sec).saturating_mul(1_000_000_000).saturating_add(frac_ns);
        let (len, orig) = strip_fcs(incl, orig.max(incl), iface.fcs_len);
        Ok(Some((self.at, len as usize, ts_ns, (iface.linktype, 0), orig, start)))
    }

    /// The rest of a Section Header Block whose type (and `len_bytes`, its length field in a
    /// byte order not yet known) were read: byte-order magic, then skip to the block's end.
    fn section_header(&mut self, start: u64, len_bytes: [u8; 4]) -> Result<(), WireError> {
        let mut bom = [0u8; 4];
        self.fill(&mut bom, start, || "truncated pcapng section header block".into())?;
        let be = match u32::from_le_bytes(bom) {
            0x1a2b3c4d => false,
            0x4d3c2b1a => true,
            m => {
                return Err(WireError::new(start, format!("pcapng section header has a bad byte-order magic {m:08x}")))
            }
        };
        let len = u32_at(&len_bytes, 0, be);
        if len < 28 || !len.is_multiple_of(4) || len > MAX_BLOCK {
            return Err(WireError::new(start, format!("pcapng section header block has a bad length {len}")));
        }
        self.big_endian = be;
        // Version, section length, options and the trailing length are not needed.
        self.skip(u64::from(len) - 12, start, || "truncated pcapng section header block".into())?;
        self.interfaces.clear();
        self.sections += 1;
        Ok(())
    }

    /// pcapng: the Section Header Blocks read so far (the interface ids of a packet name the
    /// interfaces of the latest); pcap: 0.
    pub fn sections(&self) -> u32 {
        self.sections
    }

    fn skip(&mut self, n: u64, start: u64, what: impl Fn() -> String) -> Result<(), WireError> {
        let got = self.win.skip(&mut self.inner, n).map_err(|e| WireError::io(start, what(), e))?;
        self.offset += got;
        if got < n {
            return Err(WireError::new(start, format!("{}: file ends {} bytes early", what(), n - got)));
        }
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<PacketAt>, WireError> {
        loop {
            let start = self.offset;
            let (at, got) =
                self.win.take(&mut self.inner, 8).map_err(|e| WireError::io(start, "cannot read pcapng block", e))?;
            if got == 0 {
                return Ok(None);
            }
            self.offset += got as u64;
            if got < 8 {
                return Err(WireError::new(
                    start,
                    format!("truncated pcapng block header: file ends after {got} of 8 bytes"),
                ));
            }
            let mut h = [0u8; 8];
            h.copy_from_slice(&self.win.buf[at..at + 8]);
            if h[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                // A new section; its byte order may differ from the previous one's.
                self.section_header(start, [h[4], h[5], h[6], h[7]])?;
                continue;
            }
            let be = self.big_endian;
            let btype = u32_at(&h, 0, be);
            let len = u32_at(&h, 4, be);
            if len < 12 || !len.is_multiple_of(4) {
                return Err(WireError::new(
                    start,
                    format!(
                        "pcapng block type {btype:#x} has a bad length {len} (must be a multiple of 4, at least 12)"
                    ),
                ));
            }
            let body = len - 12;
            match btype {
                1 | 2 | 3 | 6 => {
                    if len > MAX_BLOCK {
                        return Err(WireError::new(
                            start,
                            format!(
                                "pcapng block type {btype:#x} claims {len} bytes (limit {MAX_BLOCK}): corrupt file"
                            ),
                        ));
                    }
                    self.fill_buf(body as usize + 4, start, || {
                        format!("truncated pcapng block ({len} bytes claimed)")
                    })?;
                    let trailer = u32_at(&self.win.buf, self.at + body as usize, be);
                    if trailer != len {
                        return Err(WireError::new(
                            start,
                            format!("pcapng block lengths disagree: {len} at the start, {trailer} at the end"),
                        ));
                    }
                    if btype == 1 {
                        self.interface_description(start, body as usize)?;
                        continue;
                    }
                    return self.packet_block(btype, start, body as usize).map(Some);
                }
                _ => {
                    self.skip(u64::from(body) + 4, start, || format!("truncated pcapng block type {btype:#x}"))?;
                }
            }
        }
    }

    fn interface_description(&mut self, start: u64, body: usize) -> Result<(), WireError> {
        let be = self.big_endian;
        let b = &self.win.buf[self.at..self.at + body];
        if b.len() < 8 {
            return Err(WireError::new(start, "pcapng interface description block too short"));
        }
        let mut iface = Interface {
            linktype: u32::from(u16_at(b, 0, be)),
            fcs_len: 0,
            name: None,
            loopback: None,
            tsres: TsRes::Dec(6),
            ts_offset_s: 0,
        };
        // Options: code u16, length u16, value padded to 4 (pcapng 3.5).
        let mut i = 8;
        while i + 4 <= b.len() {
            let code = u16_at(b, i, be);
            let olen = usize::from(u16_at(b, i + 2, be));
            let v = i + 4;
            if code == 0 || v + olen > b.len() {
                break;
            }
            match (code, olen) {
                (2, _) => {
                    iface.name = Some(String::from_utf8_lossy(&b[v..v + olen]).trim_end_matches('\0').to_string())
                }
                // if_tsresol: MSB clear = negative power of 10, set = negative power of 2.
                (9, 1) => {
                    let r = b[v];
                    iface.tsres = if r & 0x80 == 0 { TsRes::Dec(r) } else { TsRes::Bin(r & 0x7f) };
                }
                // if_fcslen (pcapng 4.2, option 13): the FCS length in bits.
                (13, 1) => iface.fcs_len = u32::from(b[v]) / 8,
                // if_tsoffset: seconds to add to every timestamp.
                (14, 8) => {
                    let lo = u64::from(u32_at(b, v, be));
                    let hi = u64::from(u32_at(b, v + 4, be));
                    iface.ts_offset_s = (if be { (lo << 32) | hi } else { (hi << 32) | lo }) as i64;
                }
                _ => {}
            }
            i = v + olen.div_ceil(4) * 4;
        }
        iface.loopback = iface.name.as_deref().map(loopback_name);
        if self.interfaces.len() >= 65536 {
            return Err(WireError::new(start, "more than 65536 interfaces in one pcapng section"));
        }
        self.interfaces.push(iface);
        Ok(())
    }

    fn packet_block(&mut self, btype: u32, start: u64, body: usize) -> Result<PacketAt, WireError> {
        let be = self.big_endian;
        let b = &self.win.buf[self.at..self.at + body];
        let (if_id, ts, caplen, orig, data_at) = match btype {
            // Enhanced Packet Block.
            6 => {
                if b.len() < 20 {
                    return Err(WireError::new(start, "pcapng enhanced packet block too short"));
                }
                let ts = (u64::from(u32_at(b, 4, be)) << 32) | u64::from(u32_at(b, 8, be));
                (u32_at(b, 0, be) as usize, ts, u32_at(b, 12, be), u32_at(b, 16, be), 20)
            }
            // Obsolete Packet Block.
            2 => {
                if b.len() < 20 {
                    return Err(WireError::new(start, "pcapng packet block too short"));
                }
                let ts = (u64::from(u32_at(b, 4, be)) << 32) | u64::from(u32_at(b, 8, be));
                (usize::from(u16_at(b, 0, be)), ts, u32_at(b, 12, be), u32_at(b, 16, be), 20)
            }
            // Simple Packet Block: no timestamp, interface 0, captured = block body.
            _ => {
                if b.len() < 4 {
                    return Err(WireError::new(start, "pcapng simple packet block too short"));
                }
                let orig = u32_at(b, 0, be);
                let cap = orig.min((b.len() - 4) as u32);
                (0, 0, cap, orig, 4)
            }
        };
        let Some(iface) = self.interfaces.get(if_id) else {
            return Err(WireError::new(
                start,
                format!(
                    "pcapng packet block names interface {if_id}, but only {} are described",
                    self.interfaces.len()
                ),
            ));
        };
        if caplen as usize > b.len() - data_at {
            return Err(WireError::new(
                start,
                format!("pcapng packet block claims {caplen} captured bytes but holds {}", b.len() - data_at),
            ));
        }
        let ts_ns = iface.tsres.to_nanos(ts);
        let off_ns = iface.ts_offset_s.saturating_mul(1_000_000_000);
        let ts_ns =
            if off_ns >= 0 { ts_ns.saturating_add(off_ns as u64) } else { ts_ns.saturating_sub(off_ns.unsigned_abs()) };
        // pcapng 4.3.1: an Enhanced Packet Block's epb_flags (option 2, 32 bits) give the FCS
        // length of this packet in bytes in bits 5-8 (0 = not given: the interface's if_fcslen).
        let mut fcs_len = iface.fcs_len;
        if btype == 6 {
            let at = (data_at + (caplen as usize).div_ceil(4) * 4).min(b.len());
            let opts = EpbOptions { bytes: &b[at..], big_endian: be };
            if let Some((_, v)) = opts.each().find(|(c, v)| *c == 2 && v.len() == 4) {
                let from_flags = (u32_at(v, 0, be) >> 5) & 0x0f;
                if from_flags != 0 {
                    fcs_len = from_flags;
                }
            }
            self.opts = (self.at + at, self.at + b.len());
        }
        let (len, orig) = strip_fcs(caplen, orig.max(caplen), fcs_len);
        Ok((self.at + data_at, len as usize, ts_ns, (iface.linktype, if_id as u32), orig, start))
    }
}

/// Whether an interface name (pcapng `if_name`) is a loopback interface's: Linux `lo` (and its
/// aliases `lo:N`), the BSDs' and macOS's `lo0`, `lo1`, ...; on Windows, Npcap's loopback
/// adapter `\Device\NPF_Loopback` (npcap.com/guide "Loopback capture") and names starting
/// "Loopback" ("Loopback Pseudo-Interface 1", Windows' own loopback adapter), either case.
pub fn loopback_name(name: &str) -> bool {
    let n = name.strip_prefix("\\Device\\").unwrap_or(name);
    let lower = n.to_ascii_lowercase();
    let lo_unix = n
        .strip_prefix("lo")
        .is_some_and(|rest| rest.is_empty() || rest.bytes().all(|b| b.is_ascii_digit()) || rest.starts_with(':'));
    lo_unix || lower.starts_with("npf_loopback") || lower.starts_with("loopback")
}

/// The link type and FCS length (bytes) of a pcap file header's link-type field.
///
/// libpcap (pcap-common.h): `LT_LINKTYPE(x) = x & 0x03FFFFFF`; `LT_FCS_LENGTH_PRESENT(x) = x &
/// 0x04000000`; `LT_FCS_LENGTH(x) = (x & 0xF0000000) >> 28`, in 16-bit words ("1 means 16 bits
/// of FCS, 2 means 32 bits"). draft-ietf-opsawg-pcap 4 draws the same field as FCS(3 bits, top)
/// and an f bit (0x10000000); a file written that way (f bit set, libpcap's flag clear) is
/// read by the draft's layout.
pub fn pcap_linktype(field: u32) -> (u32, u32) {
    let linktype = field & 0x03ff_ffff;
    let words = if field & 0x0400_0000 != 0 {
        (field & 0xf000_0000) >> 28
    } else if field & 0x1000_0000 != 0 {
        field >> 29
    } else {
        0
    };
    (linktype, words * 2)
}

/// Captured and original lengths without the FCS: the FCS is the last `fcs` bytes on the wire,
/// so a frame the snaplen cut before them keeps all its captured bytes.
fn strip_fcs(caplen: u32, orig: u32, fcs: u32) -> (u32, u32) {
    if fcs == 0 {
        return (caplen, orig);
    }
    let orig = orig.saturating_sub(fcs);
    (caplen.min(orig), orig)
}
