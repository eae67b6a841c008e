//! A packet-script harness, in the style of smoltcp's `send!` / `recv!` and packetdrill: two
//! endpoints driven by application calls at given times over a fixed one-way delay. The rule
//! tests expect segments on the wire at given times, or nothing until a time
//! (rules_tests.rs); `tcpstall kernel`'s experiments are replayed on it (experiments.rs).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::tcp::{Action, Seg, Tcp, TimerId};
use crate::Profile;

pub(crate) const A: usize = 0;
pub(crate) const B: usize = 1;
#[cfg(test)]
const TOL: u64 = 10_000; // 10 us: model times are exact; scripts write them rounded

/// Milliseconds (as the scripts write them) to nanoseconds.
pub(crate) fn ns_of_ms(x: f64) -> u64 {
    (x * 1e6).round() as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive { to: usize, seq: u64, len: u32, ack: u64, psh: bool, timer: Option<u64> },
    Timer { ep: usize, t: u8 },
}

pub(crate) struct Script {
    pub eps: [Tcp; 2],
    pub now: u64,
    one_way: u64,
    q: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    n: u64,
    /// Every segment put on the wire: (time, sender, segment).
    pub sent: Vec<(u64, usize, Seg)>,
    #[cfg_attr(not(test), allow(dead_code))]
    seen: usize,
    out: Vec<Action>,
    /// Drop the next N segments each side sends (the link loses them).
    drop: [u32; 2],
    /// Side i's application sits in recv(2) and reads whatever arrives at once.
    pub auto_read: [bool; 2],
}

impl Script {
    /// Both ends run `profile`; sender MSS `mss` (advmss = mss + 12, timestamps on).
    /// Timers fire exactly (timer_hz = 0) so scripts read in round milliseconds; the tick
    /// rounding has its own test.
    #[cfg(test)]
    pub(crate) fn new(profile: &str, mss: u32) -> Script {
        let mut p = Profile::builtin(profile).expect("profile");
        p.timer_hz = 0;
        Script::pair(&p, &p, mss)
    }
    pub(crate) fn pair(a: &Profile, b: &Profile, mss: u32) -> Script {
        Script {
            eps: [Tcp::new(a, mss, mss + 12, true), Tcp::new(b, mss, mss + 12, true)],
            now: 0,
            one_way: 50_000, // 50 us each way
            q: BinaryHeap::new(),
            n: 0,
            sent: Vec::new(),
            seen: 0,
            out: Vec::new(),
            drop: [0; 2],
            auto_read: [false; 2],
        }
    }

    /// Set the one-way delay of the link (ns).
    pub(crate) fn one_way(mut self, ns: u64) -> Script {
        self.one_way = ns;
        self
    }

    /// Process the next queued event (an arrival or a timer), if any and not later than
    /// `limit` (ns); returns its time.
    pub(crate) fn step(&mut self, limit: u64) -> Option<u64> {
        let Reverse((when, _, _)) = self.q.peek()?;
        if *when > limit {
            return None;
        }
        let Reverse((when, _, ev)) = self.q.pop()?;
        self.now = when;
        match ev {
            Ev::Arrive { to, seq, len, ack, psh, timer } => {
                let seg = Seg { seq, len, ack, psh, delack_since: timer };
                self.eps[to].on_segment(when, seg, &mut self.out);
                self.drain(to);
                if self.auto_read[to] && self.eps[to].readable() > 0 {
                    let n = self.eps[to].readable();
                    self.eps[to].app_read(when, n, &mut self.out);
                    self.drain(to);
                }
            }
            Ev::Timer { ep, t } => {
                self.eps[ep].on_timer(when, TimerId::from_index(t), &mut self.out);
                self.drain(ep);
            }
        }
        Some(when)
    }

    /// Run events until `done` holds (checked now and after each event) and return that time
    /// (ns), or None when `limit_ns` passes first (the clock then stands at the limit).
    pub(crate) fn run_until(&mut self, limit_ns: u64, done: impl Fn(&Script) -> bool) -> Option<u64> {
        loop {
            if done(self) {
                return Some(self.now);
            }
            if self.step(limit_ns).is_none() {
                self.now = self.now.max(limit_ns);
                return None;
            }
        }
    }

    /// Everything `side` wrote has been acknowledged.
    pub(crate) fn acked(&self, side: usize) -> bool {
        self.eps[side].queued() == 0
    }

    fn drain(&mut self, i: usize) {
        for a in std::mem::take(&mut self.out) {
            self.n += 1;
            match a {
                Action::Tx(s) => {
                    self.sent.push((self.now, i, s));
                    if self.drop[i] > 0 {
                        self.drop[i] -= 1;
                        continue;
                    }
                    let ev =
                        Ev::Arrive { to: 1 - i, seq: s.seq, len: s.len, ack: s.ack, psh: s.psh, timer: s.delack_since };
                    self.q.push(Reverse((self.now + self.one_way, self.n, ev)));
                }
                Action::Arm { timer, at } => {
                    self.q.push(Reverse((at, self.n, Ev::Timer { ep: i, t: timer as u8 })));
                }
                Action::Release { .. } | Action::Fired(_) => {}
            }
        }
    }

    /// Run the network and the timers up to time `t` (ms).
    /// Give both ends the handshake's RTT sample (Tcp::handshake_rtt), as the simulator does.
    pub(crate) fn handshake(&mut self) -> &mut Self {
        let rtt = 2 * self.one_way;
        for e in &mut self.eps {
            e.handshake_rtt(rtt);
        }
        self
    }

    pub(crate) fn at(&mut self, t_ms: f64) -> &mut Self {
        let t = ns_of_ms(t_ms).max(self.now);
        while self.step(t).is_some() {}
        self.now = t;
        self
    }

    /// The link loses the next `n` segments `side` sends.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn lose_next(&mut self, side: usize, n: u32) -> &mut Self {
        self.drop[side] += n;
        self
    }
    pub(crate) fn write(&mut self, side: usize, n: u64) -> &mut Self {
        let now = self.now;
        self.eps[side].app_write(now, n, false, false, &mut self.out);
        self.drain(side);
        self
    }
    /// send(2) with MSG_MORE.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn write_more(&mut self, side: usize, n: u64) -> &mut Self {
        let now = self.now;
        self.eps[side].app_write(now, n, true, false, &mut self.out);
        self.drain(side);
        self
    }
    #[cfg(test)]
    pub(crate) fn read(&mut self, side: usize, n: u64) -> &mut Self {
        let got = self.read_some(side, n);
        assert_eq!(got, n, "read at {} ms: only {got} of {n} bytes readable", self.now as f64 / 1e6);
        self
    }
    /// recv(2) of at most `n` bytes; returns how many were read.
    pub(crate) fn read_some(&mut self, side: usize, n: u64) -> u64 {
        let now = self.now;
        let got = self.eps[side].app_read(now, n, &mut self.out);
        self.drain(side);
        got
    }
    pub(crate) fn nodelay(&mut self, side: usize, on: bool) -> &mut Self {
        let now = self.now;
        self.eps[side].set_nodelay(now, on, &mut self.out);
        self.drain(side);
        self
    }
    #[cfg(test)]
    pub(crate) fn cork(&mut self, side: usize, on: bool) -> &mut Self {
        assert!(self.try_cork(side, on), "the profile has no TCP_CORK");
        self
    }
    /// TCP_CORK; false (and nothing done) where the profile has none.
    pub(crate) fn try_cork(&mut self, side: usize, on: bool) -> bool {
        let now = self.now;
        let ok = self.eps[side].set_cork(now, on, &mut self.out);
        self.drain(side);
        ok
    }
    #[cfg(test)]
    pub(crate) fn quickack(&mut self, side: usize) -> &mut Self {
        let now = self.now;
        assert!(self.eps[side].set_quickack(now, &mut self.out));
        self.drain(side);
        self
    }

    #[cfg(test)]
    /// The next segment on the wire is from `from`, carries `len` bytes, and left at `t_ms`
    /// (within 10 us). Runs the model up to that time first.
    pub(crate) fn expect_segment(&mut self, t_ms: f64, from: usize, len: u32) -> &mut Self {
        let t = ns_of_ms(t_ms);
        if self.now < t + TOL {
            self.at((t + TOL) as f64 / 1e6);
        }
        let Some(&(when, who, seg)) = self.sent.get(self.seen) else {
            panic!("expected a {len}-byte segment from {} at {t_ms} ms; nothing was sent", name(from));
        };
        assert!(
            who == from && seg.len == len && when + TOL >= t && when <= t + TOL,
            "expected a {len}-byte segment from {} at {t_ms} ms; got {} bytes from {} at {:.3} ms",
            name(from),
            seg.len,
            name(who),
            when as f64 / 1e6
        );
        self.seen += 1;
        self
    }

    #[cfg(test)]
    /// A pure ACK from `from` at `t_ms`.
    pub(crate) fn expect_ack(&mut self, t_ms: f64, from: usize) -> &mut Self {
        self.expect_segment(t_ms, from, 0)
    }

    #[cfg(test)]
    /// Nothing new goes on the wire before `t_ms`.
    pub(crate) fn expect_nothing_until(&mut self, t_ms: f64) -> &mut Self {
        let t = ns_of_ms(t_ms);
        let end = t.saturating_sub(1);
        if self.now < end {
            self.at(end as f64 / 1e6);
        }
        if let Some(&(when, who, seg)) = self.sent.get(self.seen) {
            assert!(
                when >= end,
                "expected nothing until {t_ms} ms; {} sent {} bytes at {:.3} ms",
                name(who),
                seg.len,
                when as f64 / 1e6
            );
        }
        self
    }
}

#[cfg(test)]
fn name(i: usize) -> &'static str {
    if i == A {
        "A (client)"
    } else {
        "B (server)"
    }
}
