//! The model's link: per-direction one-way delay, jitter (reordering only with `reorder`), rate
//! serialisation with an optional drop-tail queue, random loss and pure-ACK thinning, as `scenario::LinkSpec` describes it. Randomness comes
//! from a seeded RNG the caller passes in.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::Rng;
use scenario::{LinkSpec, QueueLimit};

/// One direction of the link.
#[derive(Debug, Clone)]
pub(crate) struct LinkDir {
    delay: u64,
    jitter: u64,
    rate_bps: Option<u64>,
    loss: f64,
    ack_loss: f64,
    ack_every: Option<u32>,
    queue: Option<QueueLimit>,
    reorder: bool,
    /// Departure times and sizes of the packets waiting at the bottleneck (with a queue limit).
    backlog: VecDeque<(u64, u32)>,
    backlog_bytes: u64,
    busy_until: u64,
    last_arrival: u64,
    pure_acks: u64,
    pub dropped: u64,
}

impl LinkDir {
    pub(crate) fn new(spec: &LinkSpec, delay: u64) -> LinkDir {
        LinkDir {
            delay,
            jitter: spec.jitter_ns,
            rate_bps: spec.rate_bps,
            loss: spec.loss,
            ack_loss: spec.ack_loss,
            ack_every: spec.ack_every,
            queue: spec.queue,
            reorder: spec.reorder,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            busy_until: 0,
            last_arrival: 0,
            pure_acks: 0,
            dropped: 0,
        }
    }

    /// One-way propagation delay.
    pub(crate) fn delay(&self) -> u64 {
        self.delay
    }

    /// A packet of `wire_bytes` enters at `now`; returns its arrival time, or None if dropped.
    pub(crate) fn send(&mut self, now: u64, wire_bytes: u32, pure_ack: bool, rng: &mut SmallRng) -> Option<u64> {
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
        // Drop-tail at the bottleneck: count what has not left yet.
        if let Some(limit) = self.queue {
            while let Some(&(depart, bytes)) = self.backlog.front() {
                if depart > now {
                    break;
                }
                self.backlog.pop_front();
                self.backlog_bytes -= u64::from(bytes);
            }
            let full = match limit {
                QueueLimit::Packets(p) => self.backlog.len() as u64 >= p,
                QueueLimit::Bytes(b) => self.backlog_bytes + u64::from(wire_bytes) > b,
            };
            if full {
                self.dropped += 1;
                return None;
            }
        }
        // Serialisation at the bottleneck: packets leave one after another.
        let start = now.max(self.busy_until);
        let tx = match self.rate_bps {
            Some(r) if r > 0 => (u64::from(wire_bytes) * 8 * 1_000_000_000).div_ceil(r),
            _ => 0,
        };
        self.busy_until = start + tx;
        if self.queue.is_some() && tx > 0 {
            self.backlog.push_back((self.busy_until, wire_bytes));
            self.backlog_bytes += u64::from(wire_bytes);
        }
        let mut delay = self.delay;
        if self.jitter > 0 {
            let j = rng.gen_range(0..=2 * self.jitter);
            delay = (delay + j).saturating_sub(self.jitter);
        }
        // Jitter reorders packets only with `reorder`; otherwise the link stays FIFO.
        let mut arrival = start + tx + delay;
        if !self.reorder {
            arrival = arrival.max(self.last_arrival);
        }
        self.last_arrival = arrival;
        Some(arrival)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Rate serialisation: 1500-byte packets at 12 Mbit/s leave every 1 ms; a 2-packet queue
    /// drops the rest of a burst (drop-tail, like the link emulator's queue).
    #[test]
    fn serialisation_and_drop_tail() {
        let spec: LinkSpec = "delay=1ms,rate=12mbit,queue=2p".parse().unwrap();
        let mut l = LinkDir::new(&spec, spec.delay_up_ns);
        let mut rng = SmallRng::seed_from_u64(1);
        let a: Vec<_> = (0..4).map(|_| l.send(0, 1500, false, &mut rng)).collect();
        assert_eq!(a[0], Some(2_000_000));
        assert_eq!(a[1], Some(3_000_000));
        assert_eq!(a[2], None);
        assert_eq!(l.dropped, 2);
        // Once the first has left, there is room again.
        assert_eq!(l.send(1_000_000, 1500, false, &mut rng), Some(4_000_000));
    }

    /// `ack-every=N` keeps one pure ACK in N; data is never thinned.
    #[test]
    fn ack_thinning_keeps_one_in_n() {
        let spec: LinkSpec = "ack-every=3".parse().unwrap();
        let mut l = LinkDir::new(&spec, 0);
        let mut rng = SmallRng::seed_from_u64(1);
        let kept = (0..9).filter(|_| l.send(0, 66, true, &mut rng).is_some()).count();
        assert_eq!(kept, 3);
        assert!(l.send(0, 1500, false, &mut rng).is_some());
    }
}
