//! From what a run measured to a verdict: did it stall, and which mechanism did it. Pure: the
//! numbers come in as arguments; nothing here touches a socket or a clock.
//!
//! The rules use the kernel's timer constants (include/net/tcp.h): a delayed ACK fires after
//! `ato`, at least TCP_ATO_MIN = HZ/25 (40 ms) and at most TCP_DELACK_MAX = HZ/5 (200 ms); the
//! probe timer that releases corked or Nagle-held data with nothing in flight and the
//! retransmission timer are at least TCP_RTO_MIN = HZ/5 (200 ms) (`tcp_probe0_when`,
//! `tcp_rto_min`). A stall whose length matches a timer, on a run whose sender had the matching
//! mechanism switched on, is blamed on that mechanism; the evidence used is named in the text.

use trace::{Cause, VerdictKey};

/// TCP_ATO_MIN / TCP_DELACK_MIN (include/net/tcp.h): 40 ms.
pub const DELACK_MIN_US: f64 = 40_000.0;
/// TCP_DELACK_MAX (include/net/tcp.h): 200 ms.
pub const DELACK_MAX_US: f64 = 200_000.0;
/// TCP_RTO_MIN (include/net/tcp.h): 200 ms; the probe timer is max(RTO, TCP_RTO_MIN).
pub const RTO_MIN_US: f64 = 200_000.0;

/// What one side did and what its socket reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SideFacts {
    /// This side sends application data during the measured rounds.
    pub sends: bool,
    /// Nagle is in force for this side's small writes: TCP_NODELAY was not set, or was cleared
    /// again (nodelay-then-cork leaves it set between messages).
    pub nagle: bool,
    /// The side holds data on purpose (TCP_CORK or MSG_MORE), which the probe timer releases if
    /// nothing else does.
    pub corks: bool,
    /// TCP_QUICKACK re-armed after every recv.
    pub quickack_each: bool,
    /// tcpi_ato at the end (µs): the delayed-ACK timeout this side would use.
    pub ato_us: u32,
    pub snd_cwnd: u32,
    /// Writes held inside this side's TCP longer than the stall threshold, from SO_TIMESTAMPING
    /// (None when timestamps were not available).
    pub held: Option<Held>,
}

/// Writes a side's TCP held before sending them (SCHED timestamp minus write time).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    /// Writes held longer than the stall threshold.
    pub count: u64,
    /// Median hold of those (µs).
    pub median_us: f64,
}

impl Held {
    /// Summarise hold times (ns) against a threshold (µs).
    pub fn from_holds(holds_ns: &[i64], threshold_us: f64) -> Held {
        let long: Vec<f64> = holds_ns.iter().map(|&h| h as f64 / 1000.0).filter(|&h| h > threshold_us).collect();
        Held { count: long.len() as u64, median_us: median(&long) }
    }
}

/// Everything the inference looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Measured rounds (the per-round rate is stalls / rounds).
    pub rounds: u64,
    /// Length of every stall (µs), in the order they happened.
    pub stalls_us: Vec<f64>,
    /// How many rounds had at least one stall.
    pub stall_rounds: u64,
    pub threshold_us: f64,
    /// When samples are reads (seed 002): samples per round and the position (0-based) within
    /// the round of every stalled sample.
    pub reads_per_round: Option<u32>,
    pub stall_positions: Vec<u32>,
    pub client: SideFacts,
    pub server: SideFacts,
    /// TcpExt DelayedACKs delta (None when the run did not own its namespace).
    pub delayed_acks: Option<i64>,
    /// Retransmitted segments, both sides.
    pub retransmits: u64,
    /// The client's minimum RTT (tcpi_min_rtt, µs).
    pub min_rtt_us: u32,
}

/// When a stall is a whole number (2 to 8) of round trips on a link with a real RTT (>= 1 ms),
/// that number: the sender waited for ACKs that each take a round trip (Nagle with prompt ACKs,
/// or a congestion window that opens once per RTT, RFC 5681 3.1), not for a timer.
pub fn round_trips(len_us: f64, min_rtt_us: u32) -> Option<u32> {
    if min_rtt_us < 1000 {
        return None;
    }
    let k = len_us / f64::from(min_rtt_us);
    let n = k.round();
    ((2.0..=8.0).contains(&n) && (k - n).abs() <= 0.25).then_some(n as u32)
}

/// The verdict: the comparable key and one line for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub key: VerdictKey,
    pub text: String,
}

/// Median of a non-empty slice (sorted copy).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

pub(crate) fn fmt_ms(us: f64) -> String {
    let ms = us / 1000.0;
    if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

fn per_round(n: usize, rounds: u64) -> String {
    if rounds == 0 {
        return String::new();
    }
    let r = n as f64 / rounds as f64;
    if (r - r.round()).abs() < 0.05 && r >= 1.0 {
        format!("x{} per round", r.round() as u64)
    } else if r >= 1.0 {
        format!("x{r:.1} per round")
    } else {
        format!("in {n} of {rounds} rounds")
    }
}

/// Which of the two sides a flag pair names.
pub(crate) fn who(c: bool, s: bool) -> &'static str {
    match (c, s) {
        (true, true) => "client and server",
        (true, false) => "client",
        (false, true) => "server",
        (false, false) => "neither side",
    }
}

/// Decide stall and cause from the facts.
pub fn infer(f: &Facts) -> Verdict {
    if f.stalls_us.is_empty() {
        return Verdict { key: VerdictKey { stalls: false, cause: None }, text: "no stalls".into() };
    }
    let len = median(&f.stalls_us);
    let mut head = format!("stalls ~{} {}", fmt_ms(len), per_round(f.stalls_us.len(), f.rounds));
    if let (Some(k), Some(&p)) = (f.reads_per_round, f.stall_positions.first()) {
        if k > 1 && f.stall_positions.iter().all(|&q| q == p) {
            head.push_str(&format!(" (read {} of {k})", p + 1));
        }
    }
    let nagle_c = f.client.sends && f.client.nagle;
    let nagle_s = f.server.sends && f.server.nagle;
    let any_nagle = nagle_c || nagle_s;
    let any_cork = (f.client.sends && f.client.corks) || (f.server.sends && f.server.corks);
    let ato_us = f.client.ato_us.max(f.server.ato_us);

    let mut evidence = Vec::new();
    let held = |h: Option<Held>| h.filter(|h| h.count > 0);
    let (held_c, held_s) = (held(f.client.held).is_some(), held(f.server.held).is_some());
    for (name, h) in [("client", held(f.client.held)), ("server", held(f.server.held))] {
        if let Some(h) = h {
            evidence.push(format!("{name} writes held ~{} in TCP x{} (SO_TIMESTAMPING)", fmt_ms(h.median_us), h.count));
        }
    }
    if f.client.held.is_some() && f.server.held.is_some() && !held_c && !held_s {
        evidence.push("no write held in TCP (SO_TIMESTAMPING)".into());
    }
    if ato_us > 0 {
        evidence.push(format!("tcpi_ato {}", fmt_ms(f64::from(ato_us))));
    }
    if let Some(d) = f.delayed_acks {
        evidence.push(format!("DelayedACKs +{d}"));
    }

    // Delayed-ACK range: from 3/4 of TCP_ATO_MIN (timer slack on a loaded host) to 5/4 of
    // TCP_DELACK_MAX (include/net/tcp.h; `tcp_send_delayed_ack` in net/ipv4/tcp_output.c).
    let in_delack = (0.75 * DELACK_MIN_US..=1.25 * DELACK_MAX_US).contains(&len);
    // At or above TCP_RTO_MIN the probe and retransmission timers are candidates too.
    let at_rto = len >= 0.9 * RTO_MIN_US;

    let cause = if at_rto && f.retransmits > 0 {
        evidence.push(format!("retransmits +{}", f.retransmits));
        Some(Cause::RetransmissionTimeout)
    } else if at_rto && any_cork && !matches!(f.delayed_acks, Some(d) if d > 0) {
        evidence.push(format!("{} corks", who(f.client.corks, f.server.corks)));
        Some(Cause::ProbeTimer)
    } else if in_delack && f.delayed_acks == Some(0) {
        // The length says delayed ACK, but the namespace's counter says the timer never fired.
        None
    } else if in_delack && (held_c || held_s) {
        // Timestamps name the side whose TCP held the data. Held with Nagle on: Nagle waited for
        // the peer's delayed ACK (tcp_nagle_check). Held with Nagle off and no cork: only the
        // congestion or receive window can hold data (tcp_write_xmit, tcp_cwnd_test).
        let (nc, ns) = (held_c && f.client.nagle, held_s && f.server.nagle);
        if nc || ns {
            evidence.push(format!("Nagle on at {}", who(nc, ns)));
            Some(Cause::NagleDelayedAck)
        } else {
            evidence.push(format!("snd_cwnd {}", f.client.snd_cwnd.min(f.server.snd_cwnd)));
            Some(Cause::CwndLimited)
        }
    } else if in_delack && any_nagle {
        evidence.push(format!("Nagle on at {}", who(nagle_c, nagle_s)));
        Some(Cause::NagleDelayedAck)
    } else if in_delack {
        let cwnd = f.client.snd_cwnd.min(f.server.snd_cwnd);
        // With Nagle off, a sender only waits for an ACK when its window is full (RFC 5681 3.1);
        // initial windows are 10 segments (RFC 6928), so a small cwnd is the sign.
        if cwnd > 0 && cwnd <= 4 {
            evidence.push(format!("snd_cwnd {cwnd}"));
            Some(Cause::CwndLimited)
        } else {
            evidence.push("Nagle off".into());
            Some(Cause::DelayedAck)
        }
    } else {
        None
    };

    // Waits that match no TCP timer and happen in a minority of rounds are the host, not TCP: on
    // shared cores a thread can lose the CPU for a scheduler tick or two. A mechanism repeats
    // every round (or every few); noise does not. They are reported, not blamed.
    let stalled_rounds = f.stall_rounds.max(1);
    if cause.is_none() && !in_delack && (stalled_rounds as f64) < 0.5 * f.rounds as f64 {
        let text = format!(
            "no TCP stalls ({} wait(s) of ~{} in {} of {} rounds match no TCP timer: scheduling noise)",
            f.stalls_us.len(),
            fmt_ms(len),
            stalled_rounds,
            f.rounds
        );
        return Verdict { key: VerdictKey { stalls: false, cause: None }, text };
    }
    let rtts = if cause.is_none() { round_trips(len, f.min_rtt_us) } else { None };
    let why = match cause {
        Some(c) => c.explain().to_string(),
        None if rtts.is_some() => format!(
            "{} round trips of {}: the sender waits for ACKs that each take a round trip (Nagle with prompt ACKs, or the congestion window opening once per RTT), no timer",
            rtts.unwrap_or(0),
            fmt_ms(f64::from(f.min_rtt_us))
        ),
        None if in_delack => {
            "the length matches the delayed-ACK timer but the timer did not fire: cause unclear".into()
        }
        None => format!(
            "not a TCP timer (delayed ACK is {}-{}, probe/RTO >= {}): scheduling or the link",
            fmt_ms(DELACK_MIN_US),
            fmt_ms(DELACK_MAX_US),
            fmt_ms(RTO_MIN_US)
        ),
    };
    let text =
        if evidence.is_empty() { format!("{head}: {why}") } else { format!("{head}: {why} ({})", evidence.join(", ")) };
    // A mechanism that bites in one round in ten or fewer is reported but does not make the
    // comparable verdict a stall: such rows flip between runs with thread scheduling (seed 002's
    // shape depends on whether two writes coalesce), and the key must be stable.
    if f.stall_rounds * 10 <= f.rounds {
        return Verdict { key: VerdictKey { stalls: false, cause: None }, text: format!("occasional {text}") };
    }
    Verdict { key: VerdictKey { stalls: true, cause }, text }
}

/// What a stream run (seed 003) measured: the sender's write waits and the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamFacts {
    /// Payload bytes the sender sent and the seconds it spent writing them.
    pub bytes: u64,
    pub wall_s: f64,
    /// The sender's data segments and the receiver's pure ACKs.
    pub data_segs: u64,
    pub pure_acks: u64,
    /// Writes, and those that waited longer than the threshold (µs).
    pub writes: u64,
    pub waits_over: u64,
    pub threshold_us: f64,
    pub max_wait_us: f64,
    pub p99_wait_us: f64,
    /// Retransmitted segments (tcp_info) and TcpExt TCPTimeouts (None when not counted).
    pub retransmits: u64,
    pub timeouts: Option<i64>,
}

/// A rate in bytes per second for people, never rounded to zero.
pub fn fmt_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} GB/s", bps / 1e9)
    } else if bps >= 10e6 {
        format!("{:.0} MB/s", bps / 1e6)
    } else if bps >= 1e6 {
        format!("{:.1} MB/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kB/s", bps / 1e3)
    } else {
        format!("{bps:.0} B/s")
    }
}

/// The verdict of a stream. A write that waits is normal (the send buffer is full: flow and
/// congestion control); waits of TCP_RTO_MIN or more with retransmission timeouts counted
/// (TcpExt TCPTimeouts, `tcp_retransmit_timer` in net/ipv4/tcp_timer.c) or retransmissions are
/// stalls: the sender sat idle until the retransmission timer fired (RFC 6298 5.4-5.6).
pub fn infer_stream(f: &StreamFacts) -> Verdict {
    let ratio = f.data_segs as f64 / f.pure_acks.max(1) as f64;
    let tail = format!(
        "{} one way; the receiver sent {} pure ACKs, one per {ratio:.1} data segments",
        fmt_rate(f.bytes as f64 / f.wall_s.max(1e-9)),
        f.pure_acks
    );
    let mut evidence = Vec::new();
    if let Some(t) = f.timeouts.filter(|&t| t > 0) {
        evidence.push(format!("TCPTimeouts +{t}"));
    }
    if f.retransmits > 0 {
        evidence.push(format!("retransmits +{}", f.retransmits));
    }
    let rto = f.timeouts.is_some_and(|t| t > 0) || f.retransmits > 0;
    if f.waits_over == 0 {
        let text = if rto {
            format!("no stall measured (stream, {}): {tail}", evidence.join(", "))
        } else {
            format!("no stall measured (stream): {tail}")
        };
        return Verdict { key: VerdictKey { stalls: false, cause: None }, text };
    }
    let waits = format!(
        "{} of {} writes waited over {} (longest {}, p99 {})",
        f.waits_over,
        f.writes,
        fmt_ms(f.threshold_us),
        fmt_ms(f.max_wait_us),
        fmt_ms(f.p99_wait_us)
    );
    if rto && f.max_wait_us >= 0.9 * RTO_MIN_US {
        let text = format!(
            "stalls (stream): {waits}: {} ({}); {tail}",
            Cause::RetransmissionTimeout.explain(),
            evidence.join(", ")
        );
        return Verdict { key: VerdictKey { stalls: true, cause: Some(Cause::RetransmissionTimeout) }, text };
    }
    let why = if rto {
        format!("waiting for room in the send buffer while losses were repaired ({})", evidence.join(", "))
    } else {
        "waiting for room in the send buffer (flow or congestion control, no retransmission)".to_string()
    };
    Verdict {
        key: VerdictKey { stalls: false, cause: None },
        text: format!("no TCP timer stall (stream): {waits}, {why}; {tail}"),
    }
}

/// Wire cost of one row, for comparing rows: total segments both ways and payload bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub stalls: bool,
    pub segments: u64,
    /// Estimated wire bytes, both directions.
    pub wire_bytes: u64,
}

/// For rows without stalls, the text that compares their segment count with the cheapest
/// stall-free row ("fewest segments", "7.1x the segments of the best fix") and, when `base`
/// (the default row) is given, their wire bytes with it, as seed 000 compared tshark byte
/// counts. None for stalled rows or when there is nothing to compare with.
pub fn compare_cost(rows: &[Cost], base: Option<Cost>) -> Vec<Option<String>> {
    let best = rows.iter().filter(|r| !r.stalls && r.segments > 0).map(|r| r.segments).min();
    let others = rows.iter().filter(|r| !r.stalls).count();
    rows.iter()
        .map(|r| {
            let best = best?;
            if r.stalls || others < 2 || r.segments == 0 {
                return None;
            }
            let ratio = r.segments as f64 / best as f64;
            let mut text = if ratio < 1.15 {
                "fewest segments".to_string()
            } else {
                format!("{ratio:.1}x the segments of the best fix")
            };
            if let Some(b) = base.filter(|b| b.wire_bytes > 0) {
                let w = r.wire_bytes as f64 / b.wire_bytes as f64;
                if w >= 1.15 {
                    text.push_str(&format!(" ({w:.1}x the wire bytes of default)"));
                }
            }
            Some(text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(nagle: bool) -> SideFacts {
        SideFacts { sends: true, nagle, corks: false, quickack_each: false, ato_us: 40_000, snd_cwnd: 10, held: None }
    }

    fn facts(stalls_us: Vec<f64>, rounds: u64) -> Facts {
        Facts {
            rounds,
            stall_rounds: (stalls_us.len() as u64).min(rounds),
            stalls_us,
            threshold_us: 10_000.0,
            client: side(true),
            server: side(true),
            delayed_acks: Some(200),
            ..Default::default()
        }
    }

    #[test]
    fn seed_000_default_is_nagle_waiting_for_a_delayed_ack() {
        // Two ~40 ms waits per round, Nagle on both sides (tcp_nagle_check, tcp_output.c) and the
        // peer's delayed-ACK timer at TCP_ATO_MIN (include/net/tcp.h).
        let v = infer(&facts(vec![41_000.0; 200], 100));
        assert_eq!(v.key, VerdictKey { stalls: true, cause: Some(Cause::NagleDelayedAck) });
        assert!(v.text.starts_with("stalls ~41 ms x2 per round: Nagle holds"), "{}", v.text);
        assert!(v.text.contains("DelayedACKs +200"), "{}", v.text);
    }

    #[test]
    fn no_stall_has_no_cause() {
        let v = infer(&facts(vec![], 100));
        assert_eq!(v.key, VerdictKey { stalls: false, cause: None });
    }

    #[test]
    fn nagle_off_with_a_full_window_is_cwnd() {
        // RFC 5681 3.1: the sender may not exceed cwnd; seed 001's kernel had cwnd 2-3.
        let mut f = facts(vec![40_000.0; 10], 10);
        f.client = SideFacts { snd_cwnd: 2, ..side(false) };
        f.server = SideFacts { snd_cwnd: 10, ..side(false) };
        assert_eq!(infer(&f).key.cause, Some(Cause::CwndLimited));
        f.client.snd_cwnd = 10;
        assert_eq!(infer(&f).key.cause, Some(Cause::DelayedAck));
    }

    #[test]
    fn two_hundred_ms_with_retransmits_is_rto_and_with_cork_is_probe() {
        // TCP_RTO_MIN = 200 ms (include/net/tcp.h); tcp_probe_timer releases corked data.
        let mut f = facts(vec![205_000.0; 3], 3);
        f.retransmits = 2;
        assert_eq!(infer(&f).key.cause, Some(Cause::RetransmissionTimeout));
        f.retransmits = 0;
        f.delayed_acks = Some(0);
        f.client.corks = true;
        assert_eq!(infer(&f).key.cause, Some(Cause::ProbeTimer));
    }

    #[test]
    fn a_delack_length_without_the_timer_firing_is_not_blamed() {
        let mut f = facts(vec![45_000.0; 5], 5);
        f.delayed_acks = Some(0);
        let v = infer(&f);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: None });
        assert!(v.text.contains("did not fire"), "{}", v.text);
    }

    #[test]
    fn short_stalls_are_not_a_tcp_timer() {
        // Frequent: reported as unexplained stalls.
        let mut f = facts(vec![15_000.0; 60], 100);
        f.stall_rounds = 60;
        let v = infer(&f);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: None });
        assert!(v.text.contains("not a TCP timer"), "{}", v.text);
        // Rare: host noise, not a TCP stall.
        let mut f = facts(vec![15_000.0; 2], 100);
        f.stall_rounds = 2;
        let v = infer(&f);
        assert_eq!(v.key, VerdictKey { stalls: false, cause: None });
        assert!(v.text.contains("in 2 of 100 rounds match no TCP timer"), "{}", v.text);
    }

    #[test]
    fn waits_of_whole_round_trips_are_not_timers() {
        // 20 ms link: 41 ms waits are two round trips, and DelayedACKs stayed at 0.
        let mut f = facts(vec![41_000.0; 3], 5);
        f.stall_rounds = 3;
        f.delayed_acks = Some(0);
        f.min_rtt_us = 20_300;
        let v = infer(&f);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: None });
        assert!(v.text.contains("2 round trips of 20 ms"), "{}", v.text);
        assert_eq!(round_trips(41_000.0, 500), None, "loopback RTTs are not a link");
        assert_eq!(round_trips(30_000.0, 20_000), None);
    }

    #[test]
    fn a_stall_in_one_round_in_ten_or_fewer_is_occasional() {
        let mut f = facts(vec![41_000.0], 20);
        f.stall_rounds = 1;
        let v = infer(&f);
        assert_eq!(v.key, VerdictKey { stalls: false, cause: None });
        assert!(v.text.starts_with("occasional stalls ~41 ms in 1 of 20 rounds: Nagle"), "{}", v.text);
        f.stalls_us = vec![41_000.0; 2];
        f.stall_rounds = 2;
        assert!(!infer(&f).key.stalls, "2 of 20 is one round in ten");
        f.stalls_us = vec![41_000.0; 3];
        f.stall_rounds = 3;
        assert_eq!(infer(&f).key.cause, Some(Cause::NagleDelayedAck));
    }

    #[test]
    fn timestamps_name_the_side_that_held_the_data() {
        // Seed 002: only the server's third reply waits (Nagle behind its unacknowledged second).
        let mut f = facts(vec![42_000.0; 20], 20);
        f.client.held = Some(Held { count: 0, median_us: 0.0 });
        f.server.held = Some(Held::from_holds(&[41_500_000; 20], 10_000.0));
        let v = infer(&f);
        assert_eq!(v.key.cause, Some(Cause::NagleDelayedAck));
        assert!(v.text.contains("server writes held ~42 ms in TCP x20 (SO_TIMESTAMPING)"), "{}", v.text);
        assert!(v.text.contains("Nagle on at server)"), "{}", v.text);
        // Held with Nagle off: only a window can hold data (RFC 5681 3.1).
        f.server.nagle = false;
        assert_eq!(infer(&f).key.cause, Some(Cause::CwndLimited));
    }

    #[test]
    fn read_position_is_named_when_constant() {
        // Seed 002: every third read waits.
        let mut f = facts(vec![42_000.0; 20], 20);
        f.reads_per_round = Some(3);
        f.stall_positions = vec![2; 20];
        let v = infer(&f);
        assert!(v.text.starts_with("stalls ~42 ms x1 per round (read 3 of 3)"), "{}", v.text);
    }

    #[test]
    fn a_stream_with_long_waits_and_timeouts_stalls_on_the_rto() {
        // QA's ack-loss=75% run: 598 retransmits, TCPTimeouts +2, longest write wait 257 ms >=
        // TCP_RTO_MIN (include/net/tcp.h; RFC 6298 5.5 backs the timer off).
        let mut f = StreamFacts {
            bytes: 200_000,
            wall_s: 1.0,
            data_segs: 150,
            pure_acks: 40,
            writes: 1000,
            waits_over: 12,
            threshold_us: 10_000.0,
            max_wait_us: 257_000.0,
            p99_wait_us: 22_800.0,
            retransmits: 598,
            timeouts: Some(2),
        };
        let v = infer_stream(&f);
        assert_eq!(v.key, VerdictKey { stalls: true, cause: Some(Cause::RetransmissionTimeout) });
        assert!(v.text.contains("12 of 1000 writes waited over 10 ms (longest 257 ms, p99 23 ms)"), "{}", v.text);
        assert!(v.text.contains("TCPTimeouts +2, retransmits +598"), "{}", v.text);
        assert!(v.text.contains("200.0 kB/s one way"), "never rounded to 0 MB/s: {}", v.text);
        // Waits without any loss repair: a full send buffer, not a stall.
        f.retransmits = 0;
        f.timeouts = Some(0);
        let v = infer_stream(&f);
        assert!(!v.key.stalls);
        assert!(v.text.contains("room in the send buffer"), "{}", v.text);
        f.waits_over = 0;
        assert!(infer_stream(&f).text.starts_with("no stall measured (stream): 200.0 kB/s"));
        assert_eq!(fmt_rate(2.5e9), "2.50 GB/s");
        assert_eq!(fmt_rate(3.3e6), "3.3 MB/s");
        assert_eq!(fmt_rate(12.0), "12 B/s");
    }

    #[test]
    fn cost_comparison_names_the_cheapest_fix() {
        let rows = [
            Cost { stalls: true, segments: 600, wire_bytes: 250_000 },
            Cost { stalls: false, segments: 20_000, wire_bytes: 1_500_000 },
            Cost { stalls: false, segments: 600, wire_bytes: 210_000 },
        ];
        let c = compare_cost(&rows, Some(rows[0]));
        assert_eq!(c[0], None);
        assert_eq!(c[1].as_deref(), Some("33.3x the segments of the best fix (6.0x the wire bytes of default)"));
        assert_eq!(c[2].as_deref(), Some("fewest segments"));
    }
}
