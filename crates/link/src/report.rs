//! What a link did during a run, and the summary lines printed after a lab table.

use std::path::PathBuf;

use hdrhistogram::Histogram;
use report::cells::ms_or_us;

use crate::model::{Dir, DirCounters, DropReason};
use crate::LinkSpec;

/// Counters and delay histograms of both directions.
#[derive(Debug, Clone)]
pub struct LinkReport {
    pub spec: LinkSpec,
    /// Index 0 = client->server, 1 = server->client.
    pub dirs: Vec<DirReport>,
    /// The capture file and the number of packet records written to it.
    pub capture: Option<(PathBuf, u64)>,
    /// Per direction, packets the kernel dropped at the sending side's TUN device before the
    /// forwarder read them (its queue, netns::DEFAULT_TXQUEUELEN packets, was full): the emulator's own capacity
    /// limit, not part of the configured link. None if it could not be read.
    pub device_drops: [Option<u64>; 2],
    /// What the probes at link start measured of the path's fixed overhead (crate::calibrate),
    /// or why it was not measured.
    pub calibration: Result<crate::calibrate::CalibrationReport, crate::calibrate::CalibrationError>,
}

/// What one direction measured.
#[derive(Debug, Clone)]
pub struct DirReport {
    pub counters: DirCounters,
    /// The emulator's error as a user's packet feels it end to end (ns): how late the packet
    /// was written out against its deadline, plus the parts of the path the forwarder cannot
    /// see by its own clock, measured at link start by probes ([`crate::calibrate`]): the rest
    /// of the path beyond a direct one (`rest_ns`, every packet) and, for a packet that woke
    /// the forwarder, its wake-up (`wake_ns`) less what the packet was stamped earlier for it.
    pub overhead: Histogram<u64>,
    /// The model's delay for each delivered packet beyond `delay_base_ns`: delivery time
    /// minus arrival minus the base (ns), i.e. jitter, serialisation and queueing. Recording
    /// the excess keeps nanosecond resolution for small values (the histogram keeps 3
    /// significant digits).
    pub link_delay_excess: Histogram<u64>,
    /// The smallest delay the model can apply (configured delay minus jitter).
    pub delay_base_ns: u64,
    /// The configured one-way delay, for reading the histograms.
    pub configured_delay_ns: u64,
    /// How late the thread ran after each wake-up from its sleep (scheduler run_delay, ns):
    /// packets read then were stamped that much earlier, so `overhead` includes it.
    pub wake_late: Histogram<u64>,
    /// How late the timer woke the thread after each sleep it ended, less the time it then
    /// waited for a CPU (ns, counted from before ppoll): the spin before a deadline follows it
    /// (`forward::spin`).
    pub timer_late: Histogram<u64>,
    /// The spin before a deadline when the thread stopped (ns).
    pub spin_ns: u64,
    /// How long each write(2) into the other device took (ns): the receiving side's stack
    /// runs inside it (tun_get_user -> netif_receive_skb), up to waking the receiver.
    pub write_time: Histogram<u64>,
    /// The calibrated overhead of the path's ends beyond a direct path (ns; a packet's
    /// overhead besides its wake-up is its write(2) plus this); None when not measured.
    pub ends_ns: Option<i64>,
    /// The calibrated wake-up of the forwarder by a packet's arrival (ns): from the packet
    /// entering the TUN device (its software transmit timestamp, skb_tx_timestamp in
    /// tun_net_xmit) to the forwarder's stamp of it.
    pub wake_ns: u64,
    /// Packets that would have left before their arrival plus their delay, held back to it
    /// instead (never emitted early): 0 unless the stamping rule is broken (docs/link.md,
    /// "Never early").
    pub early: u64,
    /// Packets stamped before their read (the first read after a wake-up by the input).
    pub backdated: u64,
    /// Packets read while the thread was spinning before a deadline (not after a sleep).
    pub read_while_spinning: u64,
}

impl DirReport {
    /// Quantile of the model's delay (ns).
    pub fn link_delay_at(&self, q: f64) -> Option<u64> {
        (!self.link_delay_excess.is_empty()).then(|| self.delay_base_ns + self.link_delay_excess.value_at_quantile(q))
    }
    /// Quantile of the emulator's added delay beyond the model (ns).
    pub fn overhead_at(&self, q: f64) -> Option<u64> {
        (!self.overhead.is_empty()).then(|| self.overhead.value_at_quantile(q))
    }
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("histogram bounds")
}

/// A drop no link spec asks for: the emulator failing ([`LinkReport::unasked_drops`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaskedDrop {
    /// The OS refused the packet when the forwarder wrote it out ([`DropReason::WriteError`]).
    WriteError,
    /// The TUN device's queue overflowed before the forwarder read the packet: it fell behind.
    DeviceQueue,
}

impl UnaskedDrop {
    /// As the summary lines name it.
    pub fn label(self) -> &'static str {
        match self {
            UnaskedDrop::WriteError => DropReason::WriteError.label(),
            UnaskedDrop::DeviceQueue => "device queue",
        }
    }
}

impl LinkReport {
    pub fn dir(&self, d: Dir) -> Option<&DirReport> {
        self.dirs.get(d.index())
    }

    /// Drops of one reason, both directions.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.dirs.iter().map(|d| d.counters.drops_of(r)).sum()
    }

    /// The drops the link spec did not ask for, per direction (client->server first), in the
    /// order the summary lines name them: the emulator failing, not the experiment. Loss,
    /// ack-loss, ack-every, queue (a bottleneck) and mtu are what the spec asks for.
    pub fn unasked_drops(&self) -> Vec<(Dir, UnaskedDrop, u64)> {
        let mut out = Vec::new();
        for (d, r) in Dir::BOTH.iter().zip(&self.dirs) {
            let write_errors = r.counters.drops_of(DropReason::WriteError);
            let device = self.device_drops[d.index()].unwrap_or(0);
            for (kind, n) in [(UnaskedDrop::WriteError, write_errors), (UnaskedDrop::DeviceQueue, device)] {
                if n > 0 {
                    out.push((*d, kind, n));
                }
            }
        }
        out
    }

    /// The warning to show when the link dropped packets it was not asked to drop
    /// ([`LinkReport::unasked_drops`]): the numbers measured behind it are not trustworthy.
    pub fn unasked_drops_warning(&self) -> Option<String> {
        let found: Vec<String> =
            self.unasked_drops().iter().map(|(d, k, n)| format!("{}: {} {n}", d.label(), k.label())).collect();
        (!found.is_empty()).then(|| {
            format!(
                "the emulated link dropped packets it was not configured to drop ({}): it could not keep up, so the \
                 numbers above are not trustworthy (lower rate=, or re-run on an idle host)",
                found.join("; ")
            )
        })
    }

    /// Lines for humans: per direction, what was carried and dropped (by reason), the delay the
    /// link applied (p50/p99 against the configured one-way delay) and the emulator's own added
    /// delay beyond its model (p50/p99).
    pub fn summary_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (d, r) in Dir::BOTH.iter().zip(&self.dirs) {
            let c = &r.counters;
            // The device queue's drops come last: `unasked_drops` names them in this order.
            let drops: Vec<String> = DropReason::ALL
                .iter()
                .filter(|&&x| c.drops_of(x) > 0)
                .map(|&x| format!("{} {}", x.label(), c.drops_of(x)))
                .collect();
            let mut drops = drops;
            if let Some(n) = self.device_drops[d.index()].filter(|&n| n > 0) {
                drops.push(format!(
                    "device queue {n} (the TUN device's; an error of the emulator: the forwarder fell behind; not counted as in)"
                ));
            }
            let drops = if drops.is_empty() { "none".to_string() } else { drops.join(", ") };
            out.push(format!(
                "link {}: {} packets in ({} data segments, {} pure ACKs), {} delivered; drops: {}",
                d.label(),
                c.packets_in,
                c.data_segments_in,
                c.pure_acks_in,
                c.delivered,
                drops
            ));
            if let (Some(p50), Some(p99)) = (r.link_delay_at(0.5), r.link_delay_at(0.99)) {
                let fixed = match (&self.calibration, r.ends_ns) {
                    (Ok(cal), Some(ends)) => {
                        let c = &cal.dirs[d.index()];
                        format!(
                            " (counting the path beyond a direct one of {}, measured at start by {} probes: each packet's \
                             write(2) into the TUN device, {}{:.1} us at the path's ends, and {} more on a packet that wakes \
                             the forwarder)",
                            ms_or_us(c.direct_ns),
                            c.probes,
                            if ends < 0 { "-" } else { "+" },
                            ends.unsigned_abs() as f64 / 1e3,
                            ms_or_us(r.wake_ns),
                        )
                    }
                    (Err(why), _) => format!(" (not counting the path's fixed overhead: not measured, {why})"),
                    (Ok(_), None) => " (not counting the path's fixed overhead: not measured)".to_string(),
                };
                out.push(format!(
                    "link {}: delay p50 {} p99 {} (configured {}); emulator added p50 {} p99 {} end to end{fixed}",
                    d.label(),
                    ms_or_us(p50),
                    ms_or_us(p99),
                    ms_or_us(r.configured_delay_ns),
                    ms_or_us(r.overhead_at(0.5).unwrap_or(0)),
                    ms_or_us(r.overhead_at(0.99).unwrap_or(0)),
                ));
            }
        }
        let lost: u64 = self.device_drops.iter().flatten().sum();
        if lost > 0 {
            out.push(format!(
                "emulator error: {lost} packets dropped at the TUN devices' queues before the forwarder read them (not by \
                 the link model: the forwarder fell behind the offered rate)"
            ));
        }
        let early: u64 = self.dirs.iter().map(|r| r.early).sum();
        if early > 0 {
            // docs/link.md "Never early": a bug to count and report, never to emit.
            out.push(format!(
                "emulator error: {early} packets would have left before their arrival plus their delay (a bug in the \
                 forwarder's stamps; each was held to its deadline, none left early)"
            ));
        }
        if let Some((p, n)) = &self.capture {
            out.push(format!("capture: {} ({n} packet records, both ends of the link)", p.display()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DirCounters;

    #[test]
    fn summary_names_each_drop_reason_and_the_delays() {
        let mut up = DirCounters { packets_in: 10, delivered: 7, data_segments_in: 10, ..Default::default() };
        up.drops[DropReason::Loss.index()] = 3;
        let mut h = histogram();
        h.record(0).unwrap();
        let mut o = histogram();
        o.record(12_000).unwrap();
        let down = DirCounters { packets_in: 5, delivered: 5, pure_acks_in: 5, ..Default::default() };
        let r = LinkReport {
            spec: "rtt=20ms".parse().unwrap(),
            dirs: vec![
                DirReport {
                    counters: up,
                    overhead: o,
                    link_delay_excess: h,
                    delay_base_ns: 10_000_000,
                    configured_delay_ns: 10_000_000,
                    wake_late: histogram(),
                    timer_late: histogram(),
                    spin_ns: 100_000,
                    write_time: histogram(),
                    ends_ns: Some(5_000),
                    wake_ns: 30_000,
                    early: 0,
                    backdated: 0,
                    read_while_spinning: 0,
                },
                DirReport {
                    counters: down,
                    overhead: histogram(),
                    link_delay_excess: histogram(),
                    delay_base_ns: 10_000_000,
                    configured_delay_ns: 10_000_000,
                    wake_late: histogram(),
                    timer_late: histogram(),
                    spin_ns: 100_000,
                    write_time: histogram(),
                    ends_ns: None,
                    wake_ns: 30_000,
                    early: 0,
                    backdated: 0,
                    read_while_spinning: 0,
                },
            ],
            capture: None,
            device_drops: [Some(0), Some(4)],
            calibration: Ok(crate::calibrate::CalibrationReport::default()),
        };
        let lines = r.summary_lines();
        assert!(lines[0].contains("client->server: 10 packets in") && lines[0].contains("drops: loss 3"), "{lines:?}");
        assert!(
            lines[1].contains("delay p50 10.000 ms p99 10.000 ms (configured 10.000 ms)")
                && lines[1].contains("emulator added p50 12.0 us")
                && lines[1]
                    .contains("+5.0 us at the path's ends, and 30.0 us more on a packet that wakes the forwarder)"),
            "{lines:?}"
        );
        assert!(lines[2].contains("server->client") && lines[2].contains("5 pure ACKs"), "{lines:?}");
        assert!(lines[2].contains("drops: device queue 4 (the TUN device's; an error of the emulator"), "{lines:?}");
        assert!(
            lines.last().unwrap().starts_with("emulator error: 4 packets dropped at the TUN devices' queues"),
            "{lines:?}"
        );
        assert_eq!(r.drops(DropReason::Loss), 3);
    }

    fn dir(counters: DirCounters) -> DirReport {
        DirReport {
            counters,
            overhead: histogram(),
            link_delay_excess: histogram(),
            delay_base_ns: 1_000_000,
            configured_delay_ns: 1_000_000,
            wake_late: histogram(),
            timer_late: histogram(),
            spin_ns: 100_000,
            write_time: histogram(),
            ends_ns: None,
            wake_ns: 0,
            early: 0,
            backdated: 0,
            read_while_spinning: 0,
        }
    }

    #[test]
    fn drops_the_link_was_not_asked_for_are_a_warning() {
        let mut up = DirCounters { packets_in: 10, delivered: 7, data_segments_in: 10, ..Default::default() };
        up.drops[DropReason::Loss.index()] = 3;
        let mut down = DirCounters { packets_in: 5, delivered: 5, pure_acks_in: 5, ..Default::default() };
        down.drops[DropReason::AckLoss.index()] = 1;
        let mut r = LinkReport {
            spec: "rtt=2ms,loss=30%".parse().unwrap(),
            dirs: vec![dir(up), dir(down)],
            capture: None,
            device_drops: [Some(0), None],
            calibration: Ok(crate::calibrate::CalibrationReport::default()),
        };
        assert_eq!(r.unasked_drops_warning(), None, "configured loss is the experiment");
        r.device_drops[1] = Some(25);
        r.dirs[1].counters.drops[DropReason::WriteError.index()] = 2;
        assert_eq!(
            r.unasked_drops(),
            [(Dir::Down, UnaskedDrop::WriteError, 2), (Dir::Down, UnaskedDrop::DeviceQueue, 25)]
        );
        let w = r.unasked_drops_warning().unwrap();
        assert!(w.contains("(server->client: write-error 2; server->client: device queue 25)"), "{w}");
        assert!(w.contains("not trustworthy"), "{w}");
        // The summary names the same drops.
        let lines = r.summary_lines();
        assert!(lines.iter().any(|l| l.contains("write-error 2, device queue 25 (")), "{lines:?}");
    }

    /// docs/link.md "Never early": a packet that would have left early is counted and said,
    /// never silently carried; none, no line.
    #[test]
    fn a_packet_held_back_as_early_is_an_emulator_error_line() {
        let up = DirCounters { packets_in: 10, delivered: 10, ..Default::default() };
        let mut r = LinkReport {
            spec: "rtt=2ms".parse().unwrap(),
            dirs: vec![dir(up.clone()), dir(up)],
            capture: None,
            device_drops: [Some(0), Some(0)],
            calibration: Ok(crate::calibrate::CalibrationReport::default()),
        };
        assert!(!r.summary_lines().iter().any(|l| l.contains("before their arrival")));
        r.dirs[1].early = 2;
        let lines = r.summary_lines();
        assert!(lines.iter().any(|l| l.starts_with("emulator error: 2 packets would have left before")), "{lines:?}");
    }
}
