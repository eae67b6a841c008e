//! IEEE 802.11 frames, bare (LINKTYPE_IEEE802_11, 105) or after a radiotap header
//! (LINKTYPE_IEEE802_11_RADIOTAP, 127): monitor-mode captures of Wi-Fi.
//!
//! Only data frames that carry an MSDU are opened (IEEE 802.11-2020 9.2.4.1.3 Table 9-1):
//! management and control frames and the data subtypes without a body (Null, QoS Null, CF-Ack,
//! CF-Poll) are not IP. Protected frames (encrypted with WEP, TKIP or CCMP) are counted apart,
//! as are A-MSDU aggregates and fragments, which this decoder does not reassemble.

use super::{llc_snap, Layer, Skip};

/// IEEE 802.11-2020 9.2.4.1.1: the Frame Control field, first octet: protocol version (bits
/// 0-1), type (bits 2-3), subtype (bits 4-7); second octet: flags.
const TYPE_DATA: u8 = 2;
/// 9.2.4.1.3 Table 9-1: subtypes with bit 3 set are QoS data subtypes (QoS Control present).
const SUBTYPE_QOS: u8 = 0x08;
/// Subtypes with bit 2 set carry no frame body (Null, CF-Ack, CF-Poll, CF-Ack+CF-Poll and
/// their QoS forms).
const SUBTYPE_NO_DATA: u8 = 0x04;
/// 9.2.4.1.1 Figure 9-2 flags: To DS, From DS, More Fragments, Retry, Protected Frame,
/// +HTC/Order.
const FLAG_TO_DS: u8 = 0x01;
const FLAG_FROM_DS: u8 = 0x02;
const FLAG_MORE_FRAGMENTS: u8 = 0x04;
const FLAG_RETRY: u8 = 0x08;
const FLAG_PROTECTED: u8 = 0x40;
const FLAG_ORDER: u8 = 0x80;

/// radiotap.org "Flags" field (present bit 1, one byte; Linux include/net/ieee80211_radiotap.h
/// `IEEE80211_RADIOTAP_F_*`): 0x10 the frame includes the FCS at its end; 0x20 the 802.11
/// header is padded to a multiple of 4 bytes before the body; 0x40 the frame failed its FCS
/// check.
const RT_FLAG_FCS: u8 = 0x10;
const RT_FLAG_DATAPAD: u8 = 0x20;
const RT_FLAG_BADFCS: u8 = 0x40;

/// A radiotap header (radiotap.org "Radiotap header"): version 0 (1 byte), pad (1), length of
/// the whole radiotap header (2, little-endian), then presence bitmaps (4 bytes each,
/// little-endian; bit 31 set = another bitmap follows), then the fields in bit order, each
/// aligned to its natural size from the header's start. Only the first two fields are needed:
/// TSFT (bit 0, 8 bytes, 8-aligned) and Flags (bit 1, 1 byte). With the FCS flag the last 4
/// bytes of the frame are the FCS (stripped, unless the snaplen cut them off: `cut`); a frame
/// that failed its FCS check is malformed (its bytes are not what was sent).
pub(super) fn radiotap(d: &[u8], cut: bool) -> Result<Layer<'_>, Skip> {
    let (frame, flags) = radiotap_split(d, cut)?;
    mac(frame, flags & RT_FLAG_DATAPAD != 0)
}

/// The 802.11 frame after a radiotap header (FCS stripped) and the radiotap Flags byte.
fn radiotap_split(d: &[u8], cut: bool) -> Result<(&[u8], u8), Skip> {
    let h = d.get(..8).ok_or(Skip::Malformed)?;
    if h[0] != 0 {
        return Err(Skip::Inside("radiotap of an unknown version"));
    }
    let len = usize::from(u16::from_le_bytes([h[2], h[3]]));
    let present = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    // Skip the extended presence bitmaps.
    let mut at = 8;
    let mut word = present;
    while word & 0x8000_0000 != 0 {
        let w = d.get(at..at + 4).ok_or(Skip::Malformed)?;
        word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        at += 4;
    }
    if len < at || d.len() < len {
        return Err(Skip::Malformed);
    }
    let mut flags = 0u8;
    if present & 0b10 != 0 {
        if present & 0b01 != 0 {
            at = at.div_ceil(8) * 8 + 8; // TSFT
        }
        if at >= len {
            return Err(Skip::Malformed);
        }
        flags = d[at];
    }
    if flags & RT_FLAG_BADFCS != 0 {
        return Err(Skip::Malformed);
    }
    let mut frame = &d[len..];
    if flags & RT_FLAG_FCS != 0 && !cut {
        frame = frame.get(..frame.len().checked_sub(4).ok_or(Skip::Malformed)?).ok_or(Skip::Malformed)?;
    }
    Ok((frame, flags))
}

/// What identifies one MPDU of a transmitter for duplicate detection (IEEE 802.11-2020 10.3.2.14
/// "Duplicate detection and recovery"; 9.3.2.10 in 802.11-2012): the transmitter address
/// (Address 2), the traffic identifier of a QoS data frame (its sequence numbers are counted per
/// TID) and the Sequence Control field (sequence number and fragment number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpduId {
    pub transmitter: [u8; 6],
    pub tid: u8,
    pub seq_ctl: u16,
}

/// The MPDU identity of an 802.11 data frame on link type 105 or 127, with its Retry flag
/// (9.2.4.1.5: set "in any Data or Management frame that is a retransmission of an earlier
/// frame"). A sniffer that captured both transmissions sees one packet twice; the receiver
/// discards the second as a duplicate (10.3.2.14), and so should the analysis: it is not a TCP
/// retransmission. None for anything else.
pub fn mpdu(linktype: u32, d: &[u8], cut: bool) -> Option<(MpduId, bool)> {
    let f = match linktype {
        super::linktype::IEEE802_11 => d,
        super::linktype::IEEE802_11_RADIOTAP => radiotap_split(d, cut).ok()?.0,
        _ => return None,
    };
    let h = f.get(..24)?;
    let (ty, subtype, flags) = ((h[0] >> 2) & 0x03, h[0] >> 4, h[1]);
    if h[0] & 0x03 != 0 || ty != TYPE_DATA {
        return None;
    }
    let tid = if subtype & SUBTYPE_QOS != 0 {
        let at = if flags & FLAG_TO_DS != 0 && flags & FLAG_FROM_DS != 0 { 30 } else { 24 };
        *f.get(at)? & 0x0f
    } else {
        0
    };
    let id = MpduId { transmitter: h[10..16].try_into().ok()?, tid, seq_ctl: u16::from_le_bytes([h[22], h[23]]) };
    Some((id, flags & FLAG_RETRY != 0))
}

/// LINKTYPE_IEEE802_11: the 802.11 frame as it is (an FCS, when present, is announced by the
/// pcapng interface's `if_fcslen` and stripped by the reader).
pub(super) fn ieee802_11(d: &[u8]) -> Result<Layer<'_>, Skip> {
    mac(d, false)
}

/// The MAC header of a data frame (IEEE 802.11-2020 9.3.2.1, Figure 9-57): Frame Control (2),
/// Duration/ID (2), Address 1, 2, 3 (6 each), Sequence Control (2): 24 bytes; Address 4 (6)
/// when both To DS and From DS are set (9.2.4.1.4 Table 9-4, a mesh or WDS frame); QoS
/// Control (2) for QoS subtypes (9.2.4.5); HT Control (4) when a QoS data frame has the
/// +HTC/Order flag (9.2.4.1.10, 9.2.4.6). `datapad`: radiotap says the header is padded to a
/// multiple of 4. The body of an MSDU starts with LLC/SNAP (IEEE 802.2 with RFC 1042).
fn mac(d: &[u8], datapad: bool) -> Result<Layer<'_>, Skip> {
    let fc = d.get(..2).ok_or(Skip::Malformed)?;
    let (version, ty, subtype, flags) = (fc[0] & 0x03, (fc[0] >> 2) & 0x03, fc[0] >> 4, fc[1]);
    if version != 0 {
        return Err(Skip::Inside("IEEE 802.11 frames of an unknown protocol version"));
    }
    if ty != TYPE_DATA || subtype & SUBTYPE_NO_DATA != 0 {
        return Err(Skip::NotTcp); // management, control, null data
    }
    if flags & FLAG_PROTECTED != 0 {
        return Err(Skip::Inside("protected (encrypted) IEEE 802.11 frames"));
    }
    let qos = subtype & SUBTYPE_QOS != 0;
    let mut hlen = 24;
    if flags & FLAG_TO_DS != 0 && flags & FLAG_FROM_DS != 0 {
        hlen += 6;
    }
    if qos {
        // QoS Control bit 7 (9.2.4.5.9): the body is an A-MSDU, several MSDUs with their own
        // subframe headers (9.3.2.2).
        let qc = *d.get(hlen).ok_or(Skip::Malformed)?;
        if qc & 0x80 != 0 {
            return Err(Skip::Inside("IEEE 802.11 A-MSDU aggregates"));
        }
        hlen += 2;
        if flags & FLAG_ORDER != 0 {
            hlen += 4;
        }
    }
    // Sequence Control (9.2.4.4): fragment number in its low 4 bits.
    let seq_ctl = d.get(22..24).ok_or(Skip::Malformed)?;
    if flags & FLAG_MORE_FRAGMENTS != 0 || seq_ctl[0] & 0x0f != 0 {
        return Err(Skip::Inside("fragmented IEEE 802.11 frames"));
    }
    if datapad {
        hlen = hlen.div_ceil(4) * 4;
    }
    llc_snap(d.get(hlen..).ok_or(Skip::Malformed)?)
}
