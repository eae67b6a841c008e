//! Derived views of a capture, written with the project's one pcap writer (crates/wire
//! `PcapNgWriter`): one direction only, data only (no pure ACKs, no SYN), and coarse
//! timestamps (10 ms ticks): what filtered or cheap captures give the classifier.

use std::net::Ipv4Addr;
use std::path::Path;

use wire::write::{Interface, PcapNgWriter};

/// A derived view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Only the packets the connection's opener (A, the client) sent.
    OneDirection,
    /// Only segments with payload (or FIN/RST): no pure ACKs, no SYN.
    DataOnly,
    /// Every packet, its timestamp floored to a 10 ms tick.
    Coarse,
}

impl View {
    pub const ALL: [View; 3] = [View::OneDirection, View::DataOnly, View::Coarse];
    pub fn suffix(self) -> &'static str {
        match self {
            View::OneDirection => "onedir",
            View::DataOnly => "data",
            View::Coarse => "coarse",
        }
    }
}

/// The IPv4/TCP facts a view filters on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub src: Ipv4Addr,
    pub syn: bool,
    pub fin_or_rst: bool,
    pub payload: u32,
}

/// IPv4 + TCP facts of a frame (Ethernet or raw IP; RFC 791 3.1, RFC 9293 3.1). Lengths come
/// from the headers, so a frame cut by the snaplen still says its payload.
pub fn facts(linktype: u32, data: &[u8]) -> Option<Facts> {
    let ip = match linktype {
        1 if data.len() > 14 && data[12..14] == [0x08, 0x00] => &data[14..],
        12 | 101 | 228 => data,
        _ => return None,
    };
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip.len() < ihl + 14 {
        return None;
    }
    let tcp = &ip[ihl..];
    let doff = usize::from(tcp[12] >> 4) * 4;
    let flags = tcp[13];
    Some(Facts {
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        syn: flags & 0x02 != 0,
        fin_or_rst: flags & 0x05 != 0,
        payload: total.saturating_sub(ihl + doff) as u32,
    })
}

/// What a view keeps of a packet, and its timestamp there.
pub fn keep(view: View, f: Option<Facts>, client: Ipv4Addr, ts_ns: u64) -> Option<u64> {
    const TICK: u64 = 10_000_000;
    match view {
        View::OneDirection => f.filter(|f| f.src == client).map(|_| ts_ns),
        View::DataOnly => f.filter(|f| !f.syn && (f.payload > 0 || f.fin_or_rst)).map(|_| ts_ns),
        View::Coarse => Some(ts_ns - ts_ns % TICK),
    }
}

/// Writes `view` of `input` to `out` (pcapng, one interface).
pub fn write(input: &Path, out: &Path, view: View, client: Ipv4Addr) -> anyhow::Result<u64> {
    let f = std::fs::File::open(input).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
    let mut r = wire::CaptureReader::new(std::io::BufReader::new(f)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let o = std::fs::File::create(out).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    let mut w: Option<PcapNgWriter<std::io::BufWriter<std::fs::File>>> = None;
    let mut o = Some(std::io::BufWriter::new(o));
    while let Some(p) = r.next_packet().map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))? {
        if w.is_none() {
            let i = Interface {
                name: format!("{}-{}", input.file_stem().and_then(|s| s.to_str()).unwrap_or("capture"), view.suffix()),
                description: format!("tcpstall-truth view: {}", view.suffix()),
                linktype: p.linktype,
                snaplen: 0,
            };
            w = Some(PcapNgWriter::new(o.take().expect("one writer"), &[i])?);
        }
        let Some(ts) = keep(view, facts(p.linktype, p.data), client, p.ts_ns) else { continue };
        if let Some(w) = w.as_mut() {
            w.packet(0, ts, p.data, p.orig_len)?;
        }
    }
    let n = w.as_ref().map_or(0, |w| w.packets());
    if let Some(mut w) = w {
        w.flush()?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src: [u8; 4], flags: u8, payload: u16) -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&[198, 18, 1, 2]);
        let total = 20 + 32 + payload;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let mut tcp = vec![0u8; 32];
        tcp[12] = 8 << 4;
        tcp[13] = flags;
        ip.extend_from_slice(&tcp);
        ip
    }

    #[test]
    fn facts_read_the_headers_not_the_captured_length() {
        let f = facts(101, &frame([198, 18, 0, 1], 0x18, 300)).unwrap();
        assert_eq!((f.payload, f.syn, f.src), (300, false, Ipv4Addr::new(198, 18, 0, 1)));
    }

    #[test]
    fn views_keep_what_they_say() {
        let c = Ipv4Addr::new(198, 18, 0, 1);
        let ack = facts(101, &frame([198, 18, 1, 2], 0x10, 0));
        let syn = facts(101, &frame([198, 18, 0, 1], 0x02, 0));
        let data = facts(101, &frame([198, 18, 0, 1], 0x18, 10));
        assert_eq!(keep(View::OneDirection, ack, c, 5), None);
        assert_eq!(keep(View::OneDirection, data, c, 5), Some(5));
        assert_eq!(keep(View::DataOnly, ack, c, 5), None);
        assert_eq!(keep(View::DataOnly, syn, c, 5), None);
        assert_eq!(keep(View::DataOnly, data, c, 5), Some(5));
        assert_eq!(keep(View::Coarse, ack, c, 123_456_789), Some(120_000_000));
    }
}
