//! What `tcpstall kernel` measured on a running kernel, what each Linux era profile predicts
//! for the same experiments, and which profile matches best. Pure: the measurements are made by
//! crates/fingerprint; here they are only classified and compared.
//!
//! Every experiment is classified into a small category ("delayed", "immediate", a count) with
//! wide margins, so two runs on a loaded machine give the same categories even though the times
//! differ. Behaviours that are build or administrator choices (HZ, congestion control, GRO) are
//! shown but not scored: they do not date a release.

use serde::{Deserialize, Serialize};

use crate::profile::{NagleRule, Profile};

pub mod experiments;
mod rows;

/// The shortest delayed-ACK timer, TCP_DELACK_MIN = HZ/25 = 40 ms (include/net/tcp.h), in ms:
/// the classifier's constant ([`analyze::Timers`]), the one owner of the delayed-ACK bounds.
const DELACK_MIN_MS: f64 = analyze::Timers::linux(1000).delack_min.0 as f64 / 1e6;
/// An ACK that came later than this (half the shortest timer, 20 ms) was held by a timer.
pub const DELAYED_MS: f64 = DELACK_MIN_MS / 2.0;
/// An ACK that came sooner than this (a quarter of it, 10 ms) was sent at once (loopback round
/// trips are microseconds; the margin absorbs scheduling on a loaded 2-core machine).
pub const IMMEDIATE_MS: f64 = DELACK_MIN_MS / 4.0;

/// The measurements. `None`: not measured (the reason is in `notes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// uname -r.
    pub kernel: String,
    /// The experiments ran in a private network namespace (else on the caller's loopback, and
    /// the TcpExt counters include other connections).
    pub private_netns: bool,
    /// Wall time of all experiments (s).
    pub seconds: f64,
    /// CONFIG_HZ from the resolution of CLOCK_MONOTONIC_COARSE (kernel/time/posix-timers.c
    /// `posix_get_coarse_res`: TICK_NSEC, one jiffy).
    pub hz: Option<u32>,
    /// Smallest k such that after k request/reply exchanges within `ato` the next request's ACK
    /// is delayed (tcp_event_data_sent -> inet_csk_inc_pingpong_cnt; inet_csk_in_pingpong_mode).
    pub pingpong_thresh: Option<u32>,
    /// net.ipv4.tcp_pingpong_thresh, where the sysctl exists (6.6+).
    pub pingpong_sysctl: Option<u32>,
    /// Delayed-ACK delays (ms) after the quick-ACK budget was spent, receiver not reading.
    pub delack_ms: Vec<f64>,
    /// The receiver's tcpi_ato (µs) after each of those (tcp_delack_timer_handler inflates it).
    pub ato_us: Vec<u32>,
    /// Delayed-ACK delays (ms, beyond the round trip) over a 400 ms path, where srtt no longer
    /// bounds the timeout: ato doubles to the maximum (TCP_DELACK_MAX). Empty: not measured.
    #[serde(default)]
    pub delack_max_ms: Vec<f64>,
    /// Immediate ACKs of one-byte-at-a-time data at connection start (tcp_incr_quickack).
    pub quickacks_at_start: Option<u32>,
    /// Immediate ACKs left after the receiver got one segment and then sent 10 data segments
    /// (059217c18be6: the old accounting spent a quick ACK per data segment sent).
    pub quickacks_after_data: Option<u32>,
    /// Immediate ACKs after an idle gap longer than the RTO (tcp_event_data_recv refill).
    pub quickacks_after_idle: Option<u32>,
    /// ACK delay (ms) of two full segments the receiver does not read (__tcp_ack_snd_check).
    pub two_seg_unread_ms: Option<f64>,
    /// ACK delay (ms) of two full segments the receiver reads at once (__tcp_cleanup_rbuf).
    pub two_seg_read_ms: Option<f64>,
    /// ACK delay (ms) of one full-MSS segment with PSH, read at once, out of quick-ACK mode
    /// (4720852ed9af).
    pub full_psh_read_ms: Option<f64>,
    /// Seed 004 shape (100,000 B then a 1 B reply, MSS 1448): slowest of its rounds (ms).
    pub seed004_max_ms: Option<f64>,
    /// net.ipv4.tcp_autocorking.
    pub autocork_sysctl: Option<u32>,
    /// TcpExt TCPAutoCorking over a burst of small TCP_NODELAY writes.
    pub autocork_events: Option<i64>,
    /// NODELAY on, NODELAY off, CORK on, three writes: still unsent 10 ms later (seed 001).
    pub nodelay_then_cork_held: Option<bool>,
    /// tcpi_rto and tcpi_rtt (µs) of an idle loopback connection.
    pub rto_us: Option<u32>,
    pub srtt_us: Option<u32>,
    /// net.ipv4.tcp_rto_min_us, where it exists.
    pub rto_min_us_sysctl: Option<u32>,
    /// TcpExt TCPLossProbes over all experiments.
    pub loss_probes: Option<i64>,
    /// net.ipv4.tcp_early_retrans (3 or 4: TLP enabled).
    pub early_retrans: Option<u32>,
    /// Two small segments in flight, receiver delaying its ACK: when the ACK came (ms) and how
    /// many TcpExt TCPLossProbes that exchange counted (tcp_schedule_loss_probe).
    pub tlp_ack_ms: Option<f64>,
    pub tlp_probes: Option<i64>,
    /// net.ipv4.tcp_congestion_control and net.core.default_qdisc.
    pub congestion_control: Option<String>,
    pub default_qdisc: Option<String>,
    /// ETHTOOL_GGRO on lo.
    pub gro_lo: Option<bool>,
    /// Dating sysctls found and not found under /proc/sys/net/ipv4.
    pub sysctls_present: Vec<String>,
    pub sysctls_absent: Vec<String>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
}

/// The comparison's rows and the replay agreement are the `kernel` document's types: one
/// definition, in crates/report (report::kernel), which the model fills.
pub use report::kernel::{Comparison, ReplayAgreement, Row};

fn ack_category(ms: Option<f64>) -> String {
    match ms {
        Some(x) if x >= DELAYED_MS => "delayed".into(),
        Some(x) if x < IMMEDIATE_MS => "immediate".into(),
        Some(_) => "early (loss probe?)".into(),
        None => String::new(),
    }
}

/// Quick ACKs left after the receiver got one segment (one quick ACK spent) and sent `data`
/// data segments: include/net/tcp.h tcp_dec_quickack_mode before and after 059217c18be6.
/// (The table predicts by replaying the experiment; this closed form builds the tests' fingerprints.)
#[cfg(test)]
pub fn predicted_quickacks_after_data(p: &Profile, data: u32) -> u32 {
    let left = p.receiver.quickack_budget.saturating_sub(1);
    if p.receiver.quickack_counts_data_segs {
        left.saturating_sub(data)
    } else {
        left
    }
}

/// The category of "quick ACKs left after 10 data segments sent": the old accounting leaves at
/// most budget - 11, the new one budget - 1; halfway between separates them.
fn after_data_category(n: u32, budget: u32) -> String {
    if n + 5 >= budget.saturating_sub(1) {
        "per new-data ACK".into()
    } else {
        "per segment".into()
    }
}

/// Compare a fingerprint with profiles (usually [`Profile::eras`]). Behaviours the model
/// simulates are predicted by replaying `tcpstall kernel`'s experiments on each profile's model
/// ([`experiments`]); the others (autocork, dating sysctls, build choices) from the
/// profile's facts.
pub fn compare(fp: &Fingerprint, profiles: &[Profile]) -> Comparison {
    let mut b = rows::Rows::new(profiles);
    rows::delayed_ack(&mut b, fp);
    rows::quick_acks(&mut b, fp);
    rows::ack_triggers(&mut b, fp);
    rows::sender(&mut b, fp);
    rows::loss_timers(&mut b, fp);
    rows::facts(&mut b, fp);
    let rows = b.rows;
    let (scores, scored_rows) = score(&rows, profiles.len());
    let top = scores.iter().copied().max().unwrap_or(0);
    let best = profiles.iter().zip(&scores).filter(|(_, s)| **s == top).map(|(p, _)| p.name.clone()).collect();
    Comparison { profiles: profiles.iter().map(|p| p.name.clone()).collect(), rows, scores, scored_rows, best }
}

/// Per profile, the scored rows whose prediction agrees with the measured category; and how
/// many scored rows have a measurement. The dating-sysctl row is scored by whether the
/// profile's own release window matches.
fn score(rows: &[Row], profiles: usize) -> (Vec<u32>, u32) {
    let mut scores = vec![0u32; profiles];
    let mut scored_rows = 0;
    for r in rows.iter().filter(|r| r.scored) {
        if r.behaviour == "dating sysctls" {
            if r.measured == "not measured" {
                continue;
            }
            scored_rows += 1;
            for (i, p) in r.predicted.iter().enumerate() {
                if p.ends_with('+') {
                    scores[i] += 1;
                }
            }
            continue;
        }
        if r.category.is_empty() {
            continue;
        }
        scored_rows += 1;
        for (i, p) in r.predicted.iter().enumerate() {
            if *p == r.category {
                scores[i] += 1;
            }
        }
    }
    (scores, scored_rows)
}

/// The second agreement figure of issue 13: replaying the experiments on `profile`'s model
/// (usually `linux:here`, this kernel's measured rules), how many of the measured behaviour
/// rows the model reproduces. Only rows predicted by the replay count.
pub fn replay_agreement(fp: &Fingerprint, profile: &Profile) -> ReplayAgreement {
    let c = compare(fp, std::slice::from_ref(profile));
    let mut a = ReplayAgreement { profile: profile.name.clone(), agree: 0, rows: 0, disagree: Vec::new() };
    for r in c.rows.iter().filter(|r| r.scored && r.replayed && !r.category.is_empty()) {
        a.rows += 1;
        if r.predicted[0] == r.category {
            a.agree += 1;
        } else {
            a.disagree.push(format!("{}: measured {}, model {}", r.behaviour, r.category, r.predicted[0]));
        }
    }
    a
}

/// Whether TCP paces: bbr asks for internal pacing (tcp_needs_internal_pacing, 4.13+), and the
/// fq qdisc paces every flow.
pub fn pacing(cc: &str, qdisc: &str) -> bool {
    cc.starts_with("bbr") || qdisc == "fq"
}

/// `linux:here`: the newest linux profile with every rule the fingerprint measured set to what
/// was measured. Rules not measured keep the newest kernel's value (listed as unverified).
pub fn to_profile(fp: &Fingerprint, newest: &Profile) -> Profile {
    let mut p = newest.clone();
    p.name = "linux:here".into();
    p.summary = format!("this machine's kernel ({}), as `tcpstall kernel` measured it", fp.kernel);
    p.unverified = vec!["rules the fingerprint did not measure keep the newest linux profile's values".into()];
    let mut set = |k: &str, v: String| {
        p.sources.insert(k.into(), v);
    };
    if let Some(t) = fp.pingpong_thresh {
        set("pingpong", format!("measured: threshold {t}"));
    }
    if let Some(h) = fp.hz {
        set("timer_hz", format!("measured: clock_getres(CLOCK_MONOTONIC_COARSE) = 1/{h} s"));
    }
    if let Some(t) = fp.pingpong_thresh {
        p.receiver.pingpong_thresh = t;
    }
    if let Some(h) = fp.hz {
        p.timer_hz = h;
    }
    if let Some(n) = fp.quickacks_at_start {
        if (1..=64).contains(&n) {
            p.receiver.quickack_budget = n;
        }
    }
    if let Some(n) = fp.quickacks_after_data {
        p.receiver.quickack_counts_data_segs = after_data_category(n, p.receiver.quickack_budget) == "per segment";
    }
    if let Some(n) = fp.quickacks_after_idle {
        p.receiver.quickack_after_idle = n > 0;
    }
    match ack_category(fp.full_psh_read_ms).as_str() {
        "immediate" => p.receiver.full_psh_pushed = true,
        "delayed" => p.receiver.full_psh_pushed = false,
        _ => {}
    }
    if let Some(m) = fp.seed004_max_ms {
        if m >= DELAYED_MS {
            p.sender.nagle = NagleRule::Classic;
        }
    }
    if let Some(h) = fp.nodelay_then_cork_held {
        p.sender.sticky_nagle_push = !h;
    }
    // The largest delayed-ACK delay over the long path, in whole ticks (as the minimum below).
    let dmax = fp.delack_max_ms.iter().copied().fold(0.0, f64::max);
    if dmax >= DELAYED_MS {
        let tick = 1000.0 / f64::from(p.timer_hz.max(1));
        let v = ((dmax / tick).floor() * tick).round() as u64;
        if (100..=1000).contains(&v) {
            p.receiver.delack_max_ms = v;
            p.sources.insert("delack_max".into(), format!("measured: {dmax:.1} ms over a 400 ms path"));
        }
    }
    let delack_min = fp.delack_ms.iter().copied().fold(f64::INFINITY, f64::min);
    if delack_min.is_finite() && delack_min >= DELAYED_MS {
        // The timer fires on a tick boundary at or after its expiry (kernel/time/timer.c
        // calc_index rounds up): the configured minimum is the fastest delay rounded down to
        // whole ticks.
        let tick = 1000.0 / f64::from(p.timer_hz.max(1));
        let v = ((delack_min / tick).floor() * tick).round() as u64;
        if (20..=500).contains(&v) {
            p.receiver.delack_min_ms = v;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn era(name: &str) -> Profile {
        Profile::builtin(name).unwrap()
    }

    /// A fingerprint as each era would produce it, built from the profile's own rules.
    fn as_measured_on(p: &Profile) -> Fingerprint {
        let l = p.linux.clone().unwrap();
        let all = era("linux").linux.unwrap().sysctls;
        Fingerprint {
            kernel: l.release.clone(),
            pingpong_thresh: Some(p.receiver.pingpong_thresh),
            delack_ms: vec![42.0, 43.5, 42.0],
            ato_us: vec![80_000, 160_000, 204_000],
            quickacks_at_start: Some(16),
            quickacks_after_data: Some(predicted_quickacks_after_data(p, 10)),
            quickacks_after_idle: Some(3),
            two_seg_unread_ms: Some(0.3),
            two_seg_read_ms: Some(0.2),
            full_psh_read_ms: Some(if p.receiver.full_psh_pushed { 0.3 } else { 41.0 }),
            seed004_max_ms: Some(2.0),
            autocork_sysctl: Some(1),
            nodelay_then_cork_held: Some(true),
            rto_us: Some(201_000),
            srtt_us: Some(30),
            early_retrans: Some(3),
            sysctls_present: l.sysctls.clone(),
            sysctls_absent: all.into_iter().filter(|s| !l.sysctls.contains(s)).collect(),
            ..Fingerprint::default()
        }
    }

    /// Each era's own fingerprint matches that era best, and alone: the profiles differ exactly
    /// where a cited commit changed a rule (4a41f453bedf, 4d8f24eeedc5, 059217c18be6,
    /// 4720852ed9af) or a dating sysctl appeared.
    #[test]
    fn every_era_is_recognised_from_its_own_behaviour() {
        let eras = Profile::eras();
        for p in &eras {
            let c = compare(&as_measured_on(p), &eras);
            assert_eq!(c.best, vec![p.name.clone()], "{}: scores {:?}", p.name, c.scores);
            let i = eras.iter().position(|e| e.name == p.name).unwrap();
            assert_eq!(c.scores[i], c.scored_rows, "{}: every scored row agrees", p.name);
        }
    }

    /// The same through the model: each era's replayed experiments (plus its dating sysctls,
    /// which the model does not replay) pick that era alone, every replayed row agreeing.
    #[test]
    fn every_era_is_recognised_from_its_own_replay() {
        let eras = Profile::eras();
        for p in &eras {
            let mut fp = experiments::replay(p);
            let m = as_measured_on(p);
            fp.sysctls_present = m.sysctls_present;
            fp.sysctls_absent = m.sysctls_absent;
            let c = compare(&fp, &eras);
            assert_eq!(c.best, vec![p.name.clone()], "{}: scores {:?}", p.name, c.scores);
            let a = replay_agreement(&fp, p);
            assert_eq!(a.agree, a.rows, "{}: {:?}", p.name, a.disagree);
            assert!(a.rows >= 12, "{}: {} rows", p.name, a.rows);
        }
    }

    /// 4a41f453bedf (5.1) raised the pingpong threshold to 3; 4d8f24eeedc5 reverted it.
    #[test]
    fn pingpong_threshold_by_era() {
        let t: Vec<u32> = Profile::eras().iter().map(|p| p.receiver.pingpong_thresh).collect();
        assert_eq!(t, [1, 3, 3, 3, 1, 1, 1, 1]);
    }

    /// 059217c18be6 (tcp_dec_quickack_mode): 10 data segments sent cost 10 quick ACKs before.
    #[test]
    fn quick_ack_accounting_by_era() {
        assert_eq!(predicted_quickacks_after_data(&era("linux:6.1"), 10), 5);
        assert_eq!(predicted_quickacks_after_data(&era("linux:6.6"), 10), 15);
    }

    #[test]
    fn unmeasured_rows_are_not_scored_and_build_choices_never_are() {
        let eras = Profile::eras();
        let c = compare(
            &Fingerprint { hz: Some(1000), congestion_control: Some("bbr".into()), ..Default::default() },
            &eras,
        );
        assert_eq!(c.scored_rows, 0);
        assert_eq!(c.best.len(), eras.len(), "no evidence: every profile ties");
    }

    /// The margins derive from TCP_DELACK_MIN (include/net/tcp.h) as the classifier holds it.
    #[test]
    fn delays_are_classified_with_wide_margins() {
        assert_eq!((DELAYED_MS, IMMEDIATE_MS), (20.0, 10.0));
        assert_eq!(ack_category(Some(0.4)), "immediate");
        assert_eq!(ack_category(Some(9.0)), "immediate");
        assert_eq!(ack_category(Some(41.0)), "delayed");
        assert_eq!(ack_category(Some(14.0)), "early (loss probe?)");
    }

    #[test]
    fn here_profile_takes_the_measured_rules() {
        let newest = era("linux");
        let mut fp = as_measured_on(&era("linux:5.10"));
        fp.hz = Some(1000);
        fp.delack_ms = vec![40.9, 41.0];
        let p = to_profile(&fp, &newest);
        assert_eq!(p.name, "linux:here");
        assert_eq!(p.receiver.pingpong_thresh, 3);
        assert!(p.receiver.quickack_counts_data_segs);
        assert!(!p.receiver.full_psh_pushed);
        assert_eq!(p.timer_hz, 1000);
        assert_eq!(p.receiver.delack_min_ms, 40);
        let mut fp = as_measured_on(&newest);
        fp.hz = Some(250);
        let p = to_profile(&fp, &newest);
        assert_eq!(p.receiver.delack_min_ms, 40, "42-43.5 ms at HZ 250 is a 40 ms timer");
    }
}
