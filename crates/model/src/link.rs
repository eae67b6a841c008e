//! The model's link: per-direction one-way delay, jitter, rate serialisation (a FIFO bottleneck),
//! random loss and pure-ACK thinning, as `scenario::LinkSpec` describes it. Randomness comes
//! from a seeded RNG the caller passes in.

use rand::rngs::SmallRng;
use rand::Rng;
use scenario::LinkSpec;

/// One direction of the link.
#[derive(Debug, Clone)]
pub(crate) struct LinkDir {
    delay: u64,
    jitter: u64,
    rate_bps: Option<u64>,
    loss: f64,
    ack_loss: f64,
    ack_every: Option<u32>,
    busy_until: u64,
    last_arrival: u64,
    pure_acks: u64,
    pub dropped: u64,
}

impl LinkDir {
    pub fn new(spec: &LinkSpec, delay: u64) -> LinkDir {
        LinkDir {
            delay,
            jitter: spec.jitter_ns,
            rate_bps: spec.rate_bps,
            loss: spec.loss,
            ack_loss: spec.ack_loss,
            ack_every: spec.ack_every,
            busy_until: 0,
            last_arrival: 0,
            pure_acks: 0,
            dropped: 0,
        }
    }

    /// One-way propagation delay.
    pub fn delay(&self) -> u64 {
        self.delay
    }

    /// A packet of `wire_bytes` enters at `now`; returns its arrival time, or None if dropped.
    pub fn send(&mut self, now: u64, wire_bytes: u32, pure_ack: bool, rng: &mut SmallRng) -> Option<u64> {
        if pure_ack {
            self.pure_acks += 1;
            if let Some(n) = self.ack_every {
                // iptables -m statistic --mode nth --every N: keep one pure ACK in N.
                if !self.pure_acks.is_multiple_of(u64::from(n)) {
                    self.dropped += 1;
                    return None;
                }
            }
            if self.ack_loss > 0.0 && rng.gen::<f64>() < self.ack_loss {
                self.dropped += 1;
                return None;
            }
        }
        if self.loss > 0.0 && rng.gen::<f64>() < self.loss {
            self.dropped += 1;
            return None;
        }
        // Serialisation at the bottleneck: packets leave one after another.
        let start = now.max(self.busy_until);
        let tx = match self.rate_bps {
            Some(r) if r > 0 => (u64::from(wire_bytes) * 8 * 1_000_000_000).div_ceil(r),
            _ => 0,
        };
        self.busy_until = start + tx;
        let mut delay = self.delay;
        if self.jitter > 0 {
            let j = rng.gen_range(0..=2 * self.jitter);
            delay = (delay + j).saturating_sub(self.jitter);
        }
        // FIFO: jitter never reorders packets (LinkSpec.reorder is not modelled).
        let arrival = (start + tx + delay).max(self.last_arrival);
        self.last_arrival = arrival;
        Some(arrival)
    }
}
