//! The capture writers of tcpstall: pcapng ([`PcapNgWriter`]) is what `lab --capture` and the
//! link emulator's tap write; classic pcap ([`PcapWriter`]) is for the tests' and benchmarks'
//! synthetic captures that must be read as tcpdump's own files are.
//!
//! One Interface Description Block per capture point (section 4.2 of the pcapng draft,
//! draft-ietf-opsawg-pcapng), each with `if_tsresol = 9` (nanosecond timestamps), then one
//! Enhanced Packet Block per packet (section 4.3) with the captured bytes and the original
//! length. The reader of this crate ([`crate::CaptureReader`]), tcpdump and tshark read it.

use std::borrow::Cow;
use std::io::{self, Write};
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::DataLink;

use crate::Direction;

/// A capture point: one Interface Description Block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// `if_name`, e.g. "lo" or "tcpstall-c".
    pub name: String,
    /// `if_description`: where the packets were seen, in words.
    pub description: String,
    /// LINKTYPE_* of the frames ([`crate::linktype`]).
    pub linktype: u32,
    /// Largest number of bytes captured per packet (0 = no limit).
    pub snaplen: u32,
}

/// Writes a pcapng section to `W`. Interfaces are numbered from 0 in the order given.
pub struct PcapNgWriter<W: Write> {
    w: pcap_file::pcapng::PcapNgWriter<W>,
    interfaces: u32,
    packets: u64,
}

fn to_io(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

impl<W: Write> PcapNgWriter<W> {
    /// Writes the Section Header Block and one Interface Description Block per interface.
    pub fn new(out: W, interfaces: &[Interface]) -> io::Result<Self> {
        let w = pcap_file::pcapng::PcapNgWriter::new(out).map_err(to_io)?;
        let mut me = PcapNgWriter { w, interfaces: 0, packets: 0 };
        for i in interfaces {
            me.add_interface(i)?;
        }
        Ok(me)
    }

    /// Describes one more interface (an IDB may come anywhere in a section before the packets
    /// that use it, pcapng draft section 4.2); returns its number.
    pub fn add_interface(&mut self, i: &Interface) -> io::Result<u32> {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::from(i.linktype),
            snaplen: i.snaplen,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(i.name.clone())),
                InterfaceDescriptionOption::IfDescription(Cow::Owned(i.description.clone())),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        self.w.write_pcapng_block(idb).map_err(to_io)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// One packet on interface `iface` at `ts_ns` (nanoseconds since the Unix epoch), `data` as
    /// captured, `orig_len` its length on the wire (at least `data.len()`).
    pub fn packet(&mut self, iface: u32, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        self.packet_with(iface, ts_ns, data, orig_len, &[], Direction::Unknown)
    }

    /// [`PcapNgWriter::packet`] with `opt_comment`s (pcapng draft section 3.5: option 1, one
    /// per string, in order) and the direction in `epb_flags` (section 4.3.1: option 2, bits
    /// 0-1; none written for [`Direction::Unknown`]): what ptcpdump writes (see
    /// [`crate::comment`]).
    pub fn packet_with(
        &mut self,
        iface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
        comments: &[&str],
        direction: Direction,
    ) -> io::Result<()> {
        if iface >= self.interfaces {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface {iface} not described (the section has {})", self.interfaces),
            ));
        }
        let epb = EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_nanos(ts_ns),
            original_len: orig_len.max(data.len() as u32),
            data: Cow::Borrowed(data),
            options: comments
                .iter()
                .map(|c| EnhancedPacketOption::Comment(Cow::Borrowed(*c)))
                .chain(match direction {
                    Direction::Unknown => None,
                    Direction::Inbound => Some(EnhancedPacketOption::Flags(1)),
                    Direction::Outbound => Some(EnhancedPacketOption::Flags(2)),
                })
                .collect(),
        };
        self.w.write_pcapng_block(epb).map_err(to_io)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.get_mut().flush()
    }

    pub fn get_mut(&mut self) -> &mut W {
        self.w.get_mut()
    }

    pub fn into_inner(self) -> W {
        self.w.into_inner()
    }
}

/// Writes a classic pcap file (draft-ietf-opsawg-pcap: a 24-byte file header, then a 16-byte
/// record header per packet), little-endian, version 2.4, snaplen 65535, through `pcap-file`'s
/// writer.
pub struct PcapWriter<W: Write> {
    w: pcap_file::pcap::PcapWriter<W>,
    nanos: bool,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header: link type `linktype` (LINKTYPE_*), timestamps in nanoseconds
    /// (magic a1b23c4d) when `nanos`, else microseconds (a1b2c3d4).
    pub fn new(out: W, linktype: u32, nanos: bool) -> io::Result<Self> {
        use pcap_file::{pcap::PcapHeader, Endianness, TsResolution};
        let header = PcapHeader {
            datalink: DataLink::from(linktype),
            ts_resolution: if nanos { TsResolution::NanoSecond } else { TsResolution::MicroSecond },
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        Ok(PcapWriter { w: pcap_file::pcap::PcapWriter::with_header(out, header).map_err(to_io)?, nanos })
    }

    /// One record as it is stored: seconds, the fraction of a second in the file's unit
    /// (microseconds, or nanoseconds for a nanosecond file), the bytes captured and the
    /// length on the wire. Written as given, unchecked (a test may want a record a reader must
    /// refuse).
    pub fn record(&mut self, ts_sec: u32, ts_frac: u32, data: &[u8], orig_len: u32) -> io::Result<()> {
        let raw = pcap_file::pcap::RawPcapPacket {
            ts_sec,
            ts_frac,
            incl_len: data.len() as u32,
            orig_len,
            data: Cow::Borrowed(data),
        };
        self.w.write_raw_packet(&raw).map(|_| ()).map_err(to_io)
    }

    /// One packet at `ts_ns` (nanoseconds since the Unix epoch; cut to microseconds in a
    /// microsecond file), `data` as captured, `orig_len` its length on the wire (at least
    /// `data.len()`).
    pub fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        let sec = u32::try_from(ts_ns / 1_000_000_000).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "timestamp beyond 2106: pcap holds 32-bit seconds")
        })?;
        let ns = (ts_ns % 1_000_000_000) as u32;
        self.record(sec, if self.nanos { ns } else { ns / 1000 }, data, orig_len.max(data.len() as u32))
    }

    pub fn into_inner(self) -> W {
        self.w.into_writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{linktype, CaptureReader};

    #[test]
    fn what_it_writes_reads_back_with_nanoseconds_and_original_lengths() {
        let ifaces = [
            Interface { name: "lo".into(), description: "row 1".into(), linktype: linktype::ETHERNET, snaplen: 128 },
            Interface { name: "tun".into(), description: "x".into(), linktype: linktype::IPV4, snaplen: 0 },
        ];
        let mut w = PcapNgWriter::new(Vec::new(), &ifaces).unwrap();
        w.packet(0, 1_700_000_000_123_456_789, &[1u8; 60], 1514).unwrap();
        w.packet(1, 1_700_000_000_123_456_790, &[2u8; 40], 0).unwrap();
        assert!(w.packet(2, 0, &[], 0).is_err(), "undescribed interface");
        assert_eq!(w.packets(), 2);
        let bytes = w.into_inner();
        let mut r = CaptureReader::new(&bytes[..]).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.linktype, p.orig_len, p.data.len(), p.interface), (linktype::ETHERNET, 1514, 60, 0));
        let t0 = p.ts_ns;
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.linktype, p.orig_len, p.interface), (linktype::IPV4, 40, 1));
        assert_eq!(p.ts_ns - t0, 1, "nanosecond resolution");
        assert_eq!(r.interface_name(0), Some("lo"));
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn pcap_reads_back_in_either_unit() {
        for nanos in [false, true] {
            let mut w = PcapWriter::new(Vec::new(), linktype::ETHERNET, nanos).unwrap();
            w.packet(1_700_000_000_123_456_789, &[1u8; 60], 1514).unwrap();
            let bytes = w.into_inner();
            let magic: u32 = if nanos { 0xa1b23c4d } else { 0xa1b2c3d4 };
            assert_eq!(&bytes[..4], &magic.to_le_bytes());
            let mut r = CaptureReader::new(&bytes[..]).unwrap();
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!((p.linktype, p.orig_len, p.data.len()), (linktype::ETHERNET, 1514, 60));
            let want = if nanos { 1_700_000_000_123_456_789 } else { 1_700_000_000_123_456_000 };
            assert_eq!(p.ts_ns, want);
        }
    }
}
