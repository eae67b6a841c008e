//! The timer constants every classification rule uses, in one place.
//!
//! Linux keeps its TCP timers in jiffies (include/net/tcp.h): a timer of `HZ/25` fires after
//! 40 ms plus up to one jiffy of rounding, so the tolerance of every timer band is one jiffy.
//! The jiffy is the one HZ-dependent value: the model passes its profile's HZ and the lab its
//! kernel's; a capture of an unknown host gets the coarsest common one (HZ=100, 10 ms).

use trace::Duration;

/// Timer constants and the tolerance to match them with.
/// How soon after the ACK that releases it held data leaves, beyond the round trip between
/// the capture point and the sender: the ACK's softirq sends at once (`tcp_data_snd_check`
/// from `tcp_rcv_established`, no timer), so what remains is scheduling. 2 ms. The one slack
/// of every "did this ACK release that segment" test: the release window, the zero-window
/// update, a path-MTU or fast-retransmit resend after its trigger, the writer's clock, and the
/// flow's "capture near the sender" and late-ACK checks.
pub(crate) const RELEASE_SLACK: Duration = Duration::from_millis(2);

/// One kernel tick an ACK may spend on its way to the sender after the capture saw it (a veth
/// or loopback hop deferred to the next softirq run, `net_rx_action` out of budget): 4 ms,
/// HZ=250's jiffy, the Debian and Ubuntu kernels' default. Only added when the capture is not
/// at the sender (there the ACK is stamped as it arrives).
pub(crate) const ACK_TRIP_TICK: Duration = Duration::from_millis(4);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// One jiffy (1/HZ): the rounding of every kernel timer.
    pub jiffy: Duration,
    /// TCP_DELACK_MIN = TCP_ATO_MIN = HZ/25 (include/net/tcp.h): the shortest delayed-ACK timer.
    pub delack_min: Duration,
    /// The longest delayed ACK any stack is allowed: 500 ms (RFC 1122 4.2.3.2). Linux caps at
    /// TCP_DELACK_MAX = HZ/5 (200 ms).
    pub delack_max: Duration,
    /// TCP_RTO_MIN = HZ/5 (include/net/tcp.h): the shortest RTO, and the probe timer's base
    /// (`tcp_probe0_base` = max(rto, TCP_RTO_MIN)).
    pub rto_min: Duration,
    /// TCP_RTO_MAX = 120 s (include/net/tcp.h): no retransmission timer is longer, backoff
    /// included (RFC 6298 2.5 allows a maximum of at least 60 s).
    pub rto_max: Duration,
    /// TCP_TIMEOUT_INIT = 1 s (include/net/tcp.h; RFC 6298 2.1): the SYN's first RTO.
    pub syn_rto: Duration,
}

impl Timers {
    /// Linux's constants at the given HZ.
    pub const fn linux(hz: u64) -> Timers {
        Timers {
            jiffy: Duration::from_nanos(1_000_000_000 / hz),
            delack_min: Duration::from_millis(40),
            delack_max: Duration::from_millis(500),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_millis(120_000),
            syn_rto: Duration::from_millis(1_000),
        }
    }

    /// A host's timers from its tick rate (`hz`, CONFIG_HZ, as `sys::host::kernel_hz` reads
    /// it): Linux's constants at that HZ, or HZ=100's coarser tolerance ([`Timers::default`])
    /// when the tick is unknown or out of range.
    pub fn of_hz(hz: Option<u32>) -> Timers {
        match hz {
            Some(hz) if (24..=10_000).contains(&hz) => Timers::linux(hz as u64),
            _ => Timers::default(),
        }
    }

    /// The delayed-ACK band: an ACK this much later than the path explains was held by a
    /// delayed-ACK timer (40 ms on Linux, 100 ms on macOS, 200 ms on Windows, up to 500 ms by
    /// RFC 1122). The lower edge admits a timer armed one jiffy before the data arrived.
    pub fn is_delayed_ack(&self, d: Duration) -> bool {
        d.0 + self.jiffy.0 >= self.delack_min.0 && d.0 <= self.delack_max.0 + self.jiffy.0
    }

    /// A delay at one of the usual delayed-ACK timers' own intervals: Linux 40 ms
    /// (TCP_DELACK_MIN), macOS 100 ms (`tcp_delack`), 200 ms (Linux TCP_DELACK_MAX, Windows
    /// TcpDelAckTicks=2), each within one jiffy before and two after (timer wheel slack).
    pub fn at_timer_interval(&self, d: Duration) -> bool {
        [40u64, 100, 200].iter().any(|&ms| {
            let t = Duration::from_millis(ms).0;
            d.0 + self.jiffy.0 >= t && d.0 <= t + 2 * self.jiffy.0
        })
    }

    /// The probe timer's interval for data held with nothing in flight: max(RTO, TCP_RTO_MIN)
    /// (`tcp_probe0_base`). Linux's RTO is srtt + rttvar with rttvar kept at or above
    /// TCP_RTO_MIN (`tcp_rtt_estimator`, `__tcp_set_rto`), so the interval is at least
    /// TCP_RTO_MIN plus the smoothed RTT once the path RTT is known (`srtt_known`), and at most
    /// TCP_RTO_MIN plus the RTO's excess (two round trips); within a jiffy before and three after.
    /// `d` is the held side's own wait: a gap that began with the peer's data must first have
    /// the path from that data to the held side's answer taken out (see `GapContext::turnaround`).
    /// The earliest a Linux tail-loss probe can fire after the last transmission or ACK
    /// (`tcp_schedule_loss_probe`): PTO = 2 x SRTT, plus TCP_RTO_MIN when one segment is out
    /// (so the peer's delayed ACK can come first) or TCP_TIMEOUT_MIN (2 jiffies) otherwise,
    /// capped by the RTO; less a jiffy of rounding. `srtt` is the path's round trip.
    pub fn pto_floor(&self, srtt: Duration, one_out: bool) -> Duration {
        // With one segment out the RTO (at least SRTT + TCP_RTO_MIN, `__tcp_set_rto`) caps
        // 2 x SRTT + TCP_RTO_MIN first.
        let pto = if one_out { srtt.0 + self.rto_min.0 } else { 2 * srtt.0 + 2 * self.jiffy.0 };
        Duration(pto.saturating_sub(self.jiffy.0))
    }

    pub fn is_probe_interval(&self, d: Duration, path_rtt: Duration, srtt_known: bool) -> bool {
        let (lo, hi) = self.probe_band(path_rtt, srtt_known);
        d.0 >= lo.0 && d.0 <= hi.0
    }

    /// The band [`Timers::is_probe_interval`] accepts.
    pub fn probe_band(&self, path_rtt: Duration, srtt_known: bool) -> (Duration, Duration) {
        let floor = self.rto_min.0 + if srtt_known { path_rtt.0 } else { 0 };
        (Duration(floor.saturating_sub(self.jiffy.0)), Duration(self.rto_min.0 + 3 * self.jiffy.0 + 2 * path_rtt.0))
    }
}

impl Default for Timers {
    /// For captures of an unknown host: Linux's constants with HZ=100's 10 ms jiffy, the
    /// coarsest tolerance in common use.
    fn default() -> Self {
        Timers::linux(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// include/net/tcp.h: TCP_DELACK_MIN = HZ/25, TCP_RTO_MIN = HZ/5; one jiffy of rounding.
    #[test]
    fn bands_follow_the_kernel_constants_with_one_jiffy() {
        let t = Timers::linux(250);
        assert!(t.is_delayed_ack(Duration::from_millis(40)));
        assert!(t.is_delayed_ack(Duration::from_millis(37)));
        assert!(!t.is_delayed_ack(Duration::from_millis(30)));
        assert!(t.at_timer_interval(Duration::from_millis(44)));
        assert!(!t.at_timer_interval(Duration::from_millis(60)));
        assert!(t.is_probe_interval(Duration::from_millis(204), Duration::ZERO, true));
        // A 265 ms server think time is not the probe timer (the false claim).
        assert!(!t.is_probe_interval(Duration::from_millis(265), Duration::ZERO, true));
        assert!(!t.is_probe_interval(Duration::from_millis(190), Duration::ZERO, true));
        // tcp_rtt_estimator keeps rttvar >= TCP_RTO_MIN, so with a known 300 ms srtt the RTO
        // (and the probe timer) is at least 500 ms: 290 ms is not it, 520 ms can be.
        let rtt = Duration::from_millis(300);
        assert!(!t.is_probe_interval(Duration::from_millis(290), rtt, true));
        assert!(t.is_probe_interval(Duration::from_millis(520), rtt, true));
        assert!(t.is_probe_interval(Duration::from_millis(290), rtt, false));
    }
}
