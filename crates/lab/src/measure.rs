//! What the client records while it runs, and the statistics made from it afterwards.
//!
//! In the loop the recorder only stores numbers into vectors allocated before the first round
//! (no allocation, no printing, no locking): one latency sample per round or per read, and every
//! *wait* longer than a floor. A wait is the time one socket call of the client took (the clock
//! is read after each call, never inside it). Stalls are the waits above the threshold, decided
//! after the run, so the threshold can be derived from what the run measured.

/// Waits shorter than this are not kept (a wait this short is never a stall).
pub const WAIT_FLOOR_NS: u64 = 1_000_000;

/// One wait above the floor: which sample it fell in and how long it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub sample: u32,
    pub ns: u64,
}

/// Preallocated storage for one run.
#[derive(Debug)]
pub struct Recorder {
    pub samples: Vec<u64>,
    pub waits: Vec<Wait>,
    /// Waits above the floor that did not fit (never expected: capacity is generous).
    pub waits_lost: u64,
}

impl Recorder {
    /// Room for `samples` samples and `waits` long waits.
    pub fn with_capacity(samples: usize, waits: usize) -> Self {
        Recorder { samples: Vec::with_capacity(samples), waits: Vec::with_capacity(waits), waits_lost: 0 }
    }

    /// Record one wait; `sample` is the index of the sample in progress.
    #[inline]
    pub fn wait(&mut self, ns: u64) {
        if ns >= WAIT_FLOOR_NS {
            if self.waits.len() < self.waits.capacity() {
                self.waits.push(Wait { sample: self.samples.len() as u32, ns });
            } else {
                self.waits_lost += 1;
            }
        }
    }

    /// Record one sample (never reallocates past the capacity given: extra samples are dropped).
    #[inline]
    pub fn sample(&mut self, ns: u64) {
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(ns);
        }
    }
}

/// The lab's histogram of nanosecond values (1 ns to 1 hour, 3 significant digits): report's
/// one definition, for the streams that keep no samples.
pub use report::histogram_ns as histogram;

/// The stall threshold: `over` above the no-stall baseline. The baseline of a wait for the peer
/// is one round trip, so it is the connection's minimum RTT as the kernel measured it
/// (tcpi_min_rtt); on loopback that is a few microseconds, behind an emulated link the link's RTT.
pub fn threshold_ns(over_ns: u64, min_rtt_us: u32) -> u64 {
    over_ns + u64::from(min_rtt_us) * 1000
}

/// The waits above `threshold_ns`.
pub fn stalls(waits: &[Wait], threshold_ns: u64) -> Vec<Wait> {
    waits.iter().copied().filter(|w| w.ns > threshold_ns).collect()
}

/// Header bytes per segment for the wire estimate: Ethernet 14 (loopback captures show the same
/// 14-byte pseudo header) + IPv4 20 or IPv6 40 + TCP 20 (RFC 9293 3.1) + 12 when the timestamps
/// option is on (RFC 7323 3: 10 bytes, padded with two NOPs). Payload is added by the caller.
pub fn header_bytes(ipv6: bool, timestamps: bool) -> u64 {
    14 + if ipv6 { 40 } else { 20 } + 20 + if timestamps { 12 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_never_grows() {
        let mut r = Recorder::with_capacity(2, 1);
        let (sp, wp) = (r.samples.as_ptr(), r.waits.as_ptr());
        r.wait(10);
        r.wait(2_000_000);
        r.wait(3_000_000);
        for _ in 0..5 {
            r.sample(1);
        }
        assert_eq!(r.samples.len(), 2);
        assert_eq!(r.waits, vec![Wait { sample: 0, ns: 2_000_000 }]);
        assert_eq!(r.waits_lost, 1);
        assert_eq!((sp, wp), (r.samples.as_ptr(), r.waits.as_ptr()));
    }

    /// Every established-connection frame of a kept loopback capture of `tcpstall lab`
    /// (testdata/captures/lab-seed000-default.pcap, `tcpdump -i lo`, Ethernet link type) is as
    /// long as `header_bytes` + its payload, the payload read from the IPv4 total length minus
    /// the IPv4 and TCP header lengths (RFC 791 3.1, RFC 9293 3.1): the wire column's estimate,
    /// checked against frames the kernel really built rather than against itself.
    #[test]
    fn header_estimate_matches_a_loopback_capture() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/captures/lab-seed000-default.pcap");
        let d = std::fs::read(path).expect("kept capture");
        let u32le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!(u32le(&d[0..4]), 0xa1b2_c3d4, "little-endian microsecond pcap");
        assert_eq!(u32le(&d[20..24]), 1, "LINKTYPE_ETHERNET");
        let (mut at, mut checked) = (24, 0);
        while at + 16 <= d.len() {
            let (incl, orig) = (u32le(&d[at + 8..]) as usize, u64::from(u32le(&d[at + 12..])));
            let f = &d[at + 16..at + 16 + incl];
            at += 16 + incl;
            if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 6 {
                continue; // not IPv4 + TCP
            }
            let ihl = usize::from(f[14] & 0x0f) * 4;
            let total = u64::from(u16::from_be_bytes([f[16], f[17]]));
            let tcp = &f[14 + ihl..];
            let (doff, syn) = (u64::from(tcp[12] >> 4) * 4, tcp[13] & 0x02 != 0);
            if syn {
                continue; // the handshake carries MSS, SACK-permitted and window-scale options too
            }
            let payload = total - ihl as u64 - doff;
            assert_eq!(doff, 32, "TCP header with the timestamps option only, frame {checked}");
            assert_eq!(orig, header_bytes(false, true) + payload, "frame {checked}: payload {payload}");
            checked += 1;
        }
        assert!(checked > 100, "only {checked} frames checked");
        // IPv6 replaces the 20-byte IPv4 header with 40 bytes (RFC 8200 3).
        assert_eq!(header_bytes(true, true) - header_bytes(false, true), 20);
    }

    #[test]
    fn threshold_is_over_the_round_trip() {
        assert_eq!(threshold_ns(10_000_000, 20_000), 30_000_000);
        let w = [Wait { sample: 0, ns: 41_000_000 }, Wait { sample: 1, ns: 2_000_000 }];
        assert_eq!(stalls(&w, 10_000_000).len(), 1);
    }
}
