//! `tcpstall kernel`'s experiments (crates/fingerprint) replayed on the model: the same application
//! calls, on two endpoints following a profile, over a loopback-like link (5 us each way, the
//! handshake's RTT sample given). The result is a [`Fingerprint`] of what the model does, which
//! [`super::compare`] classifies exactly like a measurement: a profile's prediction
//! for each behaviour is what its model does in the experiment, not a reading of its parameters.
//!
//! Each function mirrors the kernel crate's function of the same name; keep them in step.

use super::{Fingerprint, DELAYED_MS};
use crate::script::{Script, A, B};
use crate::Profile;

const MS: u64 = 1_000_000;
/// The kernel experiments' longest wait for one ACK (fingerprint::ACK_TIMEOUT).
const ACK_TIMEOUT: u64 = 1_500 * MS;
/// One way on loopback: the model's loopback link (crate::loopback_link).
const ONE_WAY: u64 = 5_000;
/// TCP_MAXSEG 1460 with timestamps: 1448-byte segments, as the kernel experiments set.
const MSS_1500: u32 = 1448;
/// Loopback's own MSS (MTU 65536 minus IPv4, TCP and timestamp headers).
const MSS_LO: u32 = 65_483;

/// A connected pair over a path `one_way` ns each way; both ends TCP_NODELAY, as fingerprint::pair.
fn pair_over(p: &Profile, mss: u32, one_way: u64) -> Script {
    let mut s = Script::pair(p, p, mss).one_way(one_way);
    s.handshake();
    s.nodelay(A, true).nodelay(B, true);
    s
}

/// A connected pair over loopback.
fn pair(p: &Profile, mss: u32) -> Script {
    pair_over(p, mss, ONE_WAY)
}

/// Write `n` bytes from `side` and wait until the peer acknowledged everything; the time (ms),
/// or None after ACK_TIMEOUT.
fn write_acked(s: &mut Script, side: usize, n: u64) -> Option<f64> {
    let t0 = s.now;
    s.write(side, n);
    wait_acked(s, side, t0)
}

fn wait_acked(s: &mut Script, side: usize, t0: u64) -> Option<f64> {
    s.run_until(t0 + ACK_TIMEOUT, |s| s.acked(side)).map(|t| (t - t0) as f64 / 1e6)
}

/// fingerprint::count_quick: one-byte writes, each after the previous was ACKed, until an ACK is
/// delayed; (quick ACKs counted, the first delayed ACK's delay).
fn count_quick(s: &mut Script, cap: u32) -> (u32, Option<f64>) {
    let mut n = 0;
    while n < cap {
        match write_acked(s, A, 1) {
            Some(d) if d < DELAYED_MS => n += 1,
            d => return (n, d),
        }
    }
    (n, None)
}

/// Advance the clock by `ms`, running the network and the timers.
fn sleep(s: &mut Script, ms: f64) {
    let t = s.now as f64 / 1e6 + ms;
    s.at(t);
}

/// The model's answers to every experiment the model can run (autocork, sysctls, congestion
/// control, HZ and GRO are facts of the profile, not replayed).
pub fn replay(p: &Profile) -> Fingerprint {
    let mut fp = Fingerprint { kernel: format!("model: {}", p.name), ..Fingerprint::default() };
    quick_and_delack(p, &mut fp);
    fp.delack_max_ms = delack_max(p);
    fp.two_seg_unread_ms = two_segments_unread(p);
    fp.quickacks_after_data = quickacks_after_data(p);
    fp.pingpong_thresh = pingpong_threshold(p);
    let (max, rto, rtt) = seed004(p);
    fp.seed004_max_ms = max;
    fp.rto_us = Some(rto);
    fp.srtt_us = Some(rtt);
    fp.nodelay_then_cork_held = Some(nodelay_then_cork(p));
    if let Some((d, probes)) = tlp_probe(p) {
        fp.tlp_ack_ms = Some(d);
        fp.tlp_probes = Some(probes);
    }
    fp
}

fn quick_and_delack(p: &Profile, fp: &mut Fingerprint) {
    let mut s = pair(p, MSS_1500);
    let mss = u64::from(MSS_1500);
    let (quick, first) = count_quick(&mut s, 40);
    fp.quickacks_at_start = first.map(|_| quick);
    if let Some(d) = first {
        fp.delack_ms.push(d);
        fp.ato_us.push((s.eps[B].ato / 1000) as u32);
        for _ in 0..3 {
            let Some(d) = write_acked(&mut s, A, 1) else { break };
            fp.delack_ms.push(d);
            fp.ato_us.push((s.eps[B].ato / 1000) as u32);
        }
    }
    let n = s.eps[B].readable();
    s.read_some(B, n);
    // A reader blocked in recv (fingerprint::reader starts it 15 ms before the write).
    s.auto_read[B] = true;
    sleep(&mut s, 15.0);
    fp.full_psh_read_ms = write_acked(&mut s, A, mss);
    sleep(&mut s, 15.0);
    fp.two_seg_read_ms = write_acked(&mut s, A, 2 * mss);
    s.auto_read[B] = false;
    count_quick(&mut s, 40);
    let rto_ms = s.eps[B].rto as f64 / 1e6;
    sleep(&mut s, rto_ms + 60.0);
    fp.quickacks_after_idle = Some(count_quick(&mut s, 3).0);
}

/// fingerprint::delack_max: a 400 ms round trip (200 ms each way), three rounds of 8 one-byte writes
/// 2 ms apart (each round ACKed before the next: separate segments within IW 10), then six one-byte writes each after the previous was ACKed; their ACK delays beyond the RTT.
fn delack_max(p: &Profile) -> Vec<f64> {
    const RTT: u64 = 400 * MS;
    let mut s = pair_over(p, MSS_1500, RTT / 2);
    for _ in 0..3 {
        for _ in 0..8 {
            s.write(A, 1);
            sleep(&mut s, 2.0);
        }
        if s.run_until(s.now + 3_000 * MS, |s| s.acked(A)).is_none() {
            return Vec::new();
        }
    }
    let mut v = Vec::new();
    for _ in 0..6 {
        let t0 = s.now;
        s.write(A, 1);
        let Some(t) = s.run_until(t0 + 3_000 * MS, |s| s.acked(A)) else { break };
        v.push((t.saturating_sub(t0 + RTT)) as f64 / 1e6);
    }
    v
}

fn two_segments_unread(p: &Profile) -> Option<f64> {
    let mut s = pair(p, MSS_1500);
    let (_, first) = count_quick(&mut s, 40);
    first?;
    write_acked(&mut s, A, 2 * u64::from(MSS_1500))
}

fn quickacks_after_data(p: &Profile) -> Option<u32> {
    let mut s = pair(p, MSS_LO);
    write_acked(&mut s, A, 1)?;
    sleep(&mut s, 80.0);
    for _ in 0..10 {
        write_acked(&mut s, B, 100)?;
    }
    let (n, first) = count_quick(&mut s, 40);
    first.map(|_| n)
}

fn pingpong_threshold(p: &Profile) -> Option<u32> {
    for k in 0..=4u32 {
        let mut s = pair(p, MSS_LO);
        for _ in 0..k {
            // The server's thread sits in read(10) and answers at once; so does the client's.
            s.write(A, 10);
            s.run_until(s.now + ACK_TIMEOUT, |s| s.eps[B].readable() >= 10)?;
            s.read_some(B, 10);
            s.write(B, 10);
            s.run_until(s.now + ACK_TIMEOUT, |s| s.eps[A].readable() >= 10)?;
            s.read_some(A, 10);
        }
        let d = write_acked(&mut s, A, 10)?;
        if d >= DELAYED_MS {
            return if k == 0 { None } else { Some(k) };
        }
    }
    None
}

/// Seed 004: 100,000 bytes then a 1-byte reply, 4 rounds, Nagle on at the writer; the slowest
/// round (ms), and the writer's RTO and srtt (us) at the end.
fn seed004(p: &Profile) -> (Option<f64>, u32, u32) {
    const N: u64 = 100_000;
    let mut s = pair(p, MSS_1500);
    s.nodelay(A, false);
    s.auto_read[B] = true;
    s.auto_read[A] = true;
    let mut worst: Option<f64> = None;
    for r in 1..=4u64 {
        let t0 = s.now;
        s.write(A, N);
        if s.run_until(t0 + 10 * ACK_TIMEOUT, |s| s.eps[B].copied >= r * N).is_none() {
            break;
        }
        s.write(B, 1);
        let Some(t) = s.run_until(s.now + ACK_TIMEOUT, |s| s.eps[A].copied >= r) else { break };
        let d = (t - t0) as f64 / 1e6;
        worst = Some(worst.map_or(d, |w| w.max(d)));
    }
    let a = &s.eps[A];
    (worst, (a.rto / 1000) as u32, (a.srtt.unwrap_or(0) / 1000) as u32)
}

fn nodelay_then_cork(p: &Profile) -> bool {
    let mut s = pair(p, MSS_LO);
    s.nodelay(A, true).nodelay(A, false).try_cork(A, true);
    let before = s.eps[A].c.data_segs_out;
    for n in [275, 24, 292] {
        s.write(A, n);
    }
    sleep(&mut s, 10.0);
    s.eps[A].c.data_segs_out == before
}

fn tlp_probe(p: &Profile) -> Option<(f64, i64)> {
    let mut s = pair(p, MSS_LO);
    let (_, first) = count_quick(&mut s, 40);
    first?;
    let probes = s.eps[A].c.loss_probes;
    let t0 = s.now;
    s.write(A, 10).write(A, 10);
    let d = wait_acked(&mut s, A, t0)?;
    Some((d, (s.eps[A].c.loss_probes - probes) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest profile's model, replaying the experiments, behaves as this project measured
    /// Linux 6.18 (docs/model.md): 16 quick ACKs, 40-44 ms delayed ACKs with ato growing,
    /// pingpong after one exchange, Minshall's Nagle (seed 004 fast), NODELAY-then-CORK held, a
    /// tail-loss probe ACKed well before the delayed-ACK timer, RTO 200 ms.
    #[test]
    fn newest_linux_replays_as_measured_on_6_18() {
        let fp = replay(&Profile::builtin("linux").unwrap());
        eprintln!("{fp:?}");
        assert_eq!(fp.quickacks_at_start, Some(16), "{fp:?}");
        // ato doubles to TCP_DELACK_MAX (200 ms) once srtt (400 ms) no longer bounds it.
        let max = fp.delack_max_ms.iter().copied().fold(0.0, f64::max);
        assert!((200.0..210.0).contains(&max), "{:?}", fp.delack_max_ms);
        assert!(fp.delack_ms.iter().all(|d| (40.0..45.0).contains(d)), "{:?}", fp.delack_ms);
        assert!(fp.ato_us.last() > fp.ato_us.first(), "{:?}", fp.ato_us);
        assert_eq!(fp.pingpong_thresh, Some(1));
        assert!(fp.seed004_max_ms.unwrap() < DELAYED_MS, "{:?}", fp.seed004_max_ms);
        assert_eq!(fp.nodelay_then_cork_held, Some(true));
        assert_eq!(fp.tlp_probes, Some(1));
        assert!(fp.tlp_ack_ms.unwrap() < 35.0, "{:?}", fp.tlp_ack_ms);
        assert!((195_000..260_000).contains(&fp.rto_us.unwrap()), "{:?}", fp.rto_us);
        assert!(fp.two_seg_unread_ms.unwrap() < 1.0);
        assert!(fp.full_psh_read_ms.unwrap() < 1.0);
        assert_eq!(fp.quickacks_after_idle.map(|n| n > 0), Some(true));
    }

    /// Replays differ where the era profiles differ (4a41f453bedf: pingpong threshold 3 in
    /// 5.1-5.18; 4720852ed9af: a full PSH segment read is ACKed at once from 6.6; 059217c18be6:
    /// data segments sent spent quick ACKs before 6.6), and classic Nagle stalls seed 004.
    #[test]
    fn era_differences_show_in_the_replay() {
        let fp = replay(&Profile::builtin("linux:5.10").unwrap());
        assert_eq!(fp.pingpong_thresh, Some(3));
        assert!(fp.full_psh_read_ms.unwrap() >= DELAYED_MS, "{:?}", fp.full_psh_read_ms);
        let old = replay(&Profile::builtin("linux:6.1").unwrap()).quickacks_after_data.unwrap();
        let new = replay(&Profile::builtin("linux:6.6").unwrap()).quickacks_after_data.unwrap();
        assert!(old + 5 < new, "6.1 {old}, 6.6 {new}");
        let classic = replay(&Profile::builtin("rfc-classic").unwrap());
        assert!(classic.seed004_max_ms.unwrap() >= DELAYED_MS, "{:?}", classic.seed004_max_ms);
        assert_eq!(classic.tlp_probes, Some(0), "no TLP in RFC 1122's stack");
    }
}
