//! What a GSO super-packet stands for on the wire (pure): from its `struct virtio_net_hdr`
//! (include/uapi/linux/virtio_net.h: flags u8, gso_type u8, hdr_len le16, gso_size le16,
//! csum_start le16, csum_offset le16) and its IP/TCP headers, the number of segments the NIC
//! (or the kernel's software GSO) would cut it into, the largest one's IP length, and the bytes
//! all of them put on the wire: each segment repeats the headers (skb_segment, tcp_gso_segment).

/// `VIRTIO_NET_HDR_GSO_NONE`: a plain packet.
const GSO_NONE: u8 = 0;

/// Length of the IP and TCP headers of a packet (IPv4 IHL, IPv6's fixed 40 bytes, TCP's data
/// offset); None when it is not TCP or is cut short.
fn headers(p: &[u8]) -> Option<usize> {
    let ip = match p.first()? >> 4 {
        4 => {
            if *p.get(9)? != 6 {
                return None;
            }
            usize::from(p[0] & 0x0f) * 4
        }
        6 => {
            if *p.get(6)? != 6 {
                return None;
            }
            40
        }
        _ => return None,
    };
    let tcp = usize::from(p.get(ip + 12)? >> 4) * 4;
    Some(ip + tcp)
}

/// (segments, largest segment's length, wire bytes of all segments) of `packet` read after
/// the virtio header `vnet`. A plain packet is one segment of its own length.
pub fn segments(vnet: &[u8], packet: &[u8]) -> (u64, u64, u64) {
    let len = packet.len() as u64;
    let (Some(&gso_type), Some(size)) = (vnet.get(1), vnet.get(4..6)) else { return (1, len, len) };
    let gso_size = u64::from(u16::from_le_bytes([size[0], size[1]]));
    if gso_type == GSO_NONE || gso_size == 0 {
        return (1, len, len);
    }
    let Some(h) = headers(packet).map(|h| h as u64) else { return (1, len, len) };
    let payload = len.saturating_sub(h);
    if payload <= gso_size {
        return (1, len, len);
    }
    let segs = payload.div_ceil(gso_size);
    (segs, h + gso_size, len + (segs - 1) * h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 32 + payload];
        p[0] = 0x45;
        p[9] = 6;
        p[20 + 12] = 8 << 4; // 32-byte TCP header (timestamps)
        p
    }

    fn hdr(gso_type: u8, gso_size: u16) -> Vec<u8> {
        let mut h = vec![0u8; 10];
        h[1] = gso_type;
        h[4..6].copy_from_slice(&gso_size.to_le_bytes());
        h
    }

    /// tcp_gso_segment: a 64 KB TSO packet of MSS 1448 is 45 segments, each with its own 52
    /// bytes of headers on the wire.
    #[test]
    fn a_tso_packet_is_its_segments_on_the_wire() {
        let p = tcp4(1448 * 45);
        assert_eq!(segments(&hdr(1, 1448), &p), (45, 52 + 1448, p.len() as u64 + 44 * 52));
        // A partial last segment still counts.
        let p = tcp4(1448 * 2 + 10);
        assert_eq!(segments(&hdr(1, 1448), &p).0, 3);
    }

    #[test]
    fn plain_packets_are_one_segment() {
        let p = tcp4(100);
        assert_eq!(segments(&hdr(0, 0), &p), (1, p.len() as u64, p.len() as u64));
        assert_eq!(segments(&hdr(1, 1448), &p), (1, p.len() as u64, p.len() as u64));
        assert_eq!(segments(&[], &p).0, 1);
        let mut udp = tcp4(5000);
        udp[9] = 17;
        assert_eq!(segments(&hdr(1, 1448), &udp).0, 1);
    }
}
