//! The calibration probe as the link sees it: its wire format (a UDP datagram to `PORT`
//! carrying a magic and a sequence number), how long the forwarder holds one, and what the
//! forwarder and the calibration share (`Calibration`, `ProbeSeen`). The forwarder recognises
//! probes here (`probe_seq`); `calibrate` sends them and reads what the forwarder saw.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};

/// The UDP port the probes are sent to and from (in the link's own namespaces, before the
/// user's commands start).
pub const PORT: u16 = 47_913;
/// The longest a probe is held by the forwarder: long enough for the forwarder and the
/// receiver to fall asleep as they do behind a real delay, short enough to keep link start
/// quick.
pub const PROBE_DELAY_NS: u64 = 10_000_000;
const MAGIC: &[u8; 16] = b"tcpstall-calib-1";

/// The sequence number of a calibration probe, if `ip` (an IPv4 packet) is one.
pub fn probe_seq(ip: &[u8]) -> Option<u32> {
    if ip.first()? >> 4 != 4 || *ip.get(9)? != 17 {
        return None;
    }
    let l3 = usize::from(ip[0] & 0x0f) * 4;
    let udp = ip.get(l3..l3 + 8)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != PORT {
        return None;
    }
    let payload = ip.get(l3 + 8..)?;
    if payload.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    let s = payload.get(MAGIC.len()..MAGIC.len() + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn probe(seq: u32) -> Vec<u8> {
    let mut p = MAGIC.to_vec();
    p.extend_from_slice(&seq.to_le_bytes());
    p
}

/// The sequence number of a probe's UDP payload `b`, if it is one.
pub(crate) fn seq_of(b: &[u8]) -> Option<u32> {
    if b.len() < MAGIC.len() + 4 || &b[..MAGIC.len()] != MAGIC {
        return None;
    }
    let s = &b[MAGIC.len()..MAGIC.len() + 4];
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Shared between a direction's thread and the calibration at link start (crate::calibrate).
#[derive(Debug, Default)]
pub struct Calibration {
    /// While set, the forwarder looks for calibration probes among the packets it reads.
    pub active: AtomicBool,
    /// What the forwarder saw of each probe.
    pub seen: std::sync::Mutex<Vec<ProbeSeen>>,
    /// Whether the probes measured the path.
    pub measured: AtomicBool,
    /// The measured overhead of the path's ends beyond a direct path (ns, `DirCalibration::
    /// ends_ns`): a packet's overhead besides its wake-up is its write(2) plus this.
    pub ends_ns: AtomicI64,
    /// The measured wake-up of the forwarder by a packet (ns): the median...
    pub wake_ns: AtomicU64,
    /// The probes' median run_delay after a wake-up (ns): a wake-up that waited much longer
    /// for a CPU found it busy, not idle as the probes did, and its packet is not counted as
    /// having paid the probes' wake-up.
    pub run_delay_ns: AtomicU64,
}

impl Calibration {
    pub fn new() -> Calibration {
        Calibration::default()
    }
}

/// The forwarder's times for one calibration probe (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy)]
pub struct ProbeSeen {
    pub seq: u32,
    /// When read(2) returned it.
    pub read: u64,
    /// How much earlier it was stamped (scheduler run_delay of the wake-up before).
    pub backdate: u64,
    /// Its deadline.
    pub due: u64,
    /// write(2) into the other device: called, returned.
    pub write_start: u64,
    pub write_end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn probes_are_recognised_by_port_and_magic() {
        assert_eq!(probe_seq(&udp4(PORT, &probe(7))), Some(7));
        assert_eq!(probe_seq(&udp4(PORT + 1, &probe(7))), None);
        assert_eq!(probe_seq(&udp4(PORT, b"tcpstall-calib-2xxxx")), None);
        assert_eq!(probe_seq(&udp4(PORT, &probe(7)[..10])), None);
        let mut tcp = udp4(PORT, &probe(7));
        tcp[9] = 6;
        assert_eq!(probe_seq(&tcp), None);
        assert_eq!(probe_seq(&[0x60; 60]), None);
        assert_eq!(probe_seq(&[]), None);
    }
}
