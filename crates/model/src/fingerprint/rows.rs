//! The rows of [`super::compare`], one function per group of behaviours, each row with the
//! kernel function or commit it tests beside it; and how a measurement falls into a category.

use super::{ack_category, after_data_category, pacing, Fingerprint, Row, DELAYED_MS};
use crate::profile::Profile;

/// The rows being built, with what each profile's prediction is made from.
pub(super) struct Rows<'a> {
    profiles: &'a [Profile],
    /// `tcpstall kernel`'s experiments replayed on each profile's model.
    replays: Vec<Fingerprint>,
    pub rows: Vec<Row>,
}

impl<'a> Rows<'a> {
    pub(super) fn new(profiles: &'a [Profile]) -> Self {
        Rows { profiles, replays: profiles.iter().map(super::experiments::replay).collect(), rows: Vec::new() }
    }

    fn row(&mut self, behaviour: &str, rule: &str, measured: String, category: String, pred: Predict, scored: bool) {
        let (predicted, replayed) = match pred {
            Predict::Replay(f) => (self.replays.iter().map(f).collect(), true),
            Predict::Fact(f) => (self.profiles.iter().map(f).collect(), false),
        };
        self.rows.push(Row {
            behaviour: behaviour.into(),
            rule: rule.into(),
            measured,
            category,
            predicted,
            scored,
            replayed,
        });
    }
}

/// How a row's prediction is made.
enum Predict<'a> {
    /// Replay the experiment on the profile's model ([`super::experiments::replay`]) and
    /// classify the replay exactly as the measurement.
    Replay(&'a dyn Fn(&Fingerprint) -> String),
    /// A fact of the profile the model does not simulate.
    Fact(&'a dyn Fn(&Profile) -> String),
}

fn measured_ms(x: Option<f64>) -> String {
    x.map_or_else(|| "not measured".into(), report::cells::ms_1dp)
}

fn count(x: Option<u32>) -> String {
    x.map_or_else(|| "not measured".into(), |v| v.to_string())
}

/// The delayed-ACK timer: when an ACK waits (pingpong mode) and for how long (the minimum,
/// ato's growth, the maximum).
pub(super) fn delayed_ack(b: &mut Rows, fp: &Fingerprint) {
    let pingpong = |f: &Fingerprint| f.pingpong_thresh.map(|t| t.to_string()).unwrap_or_default();
    b.row(
        "pingpong threshold",
        "tcp_event_data_sent, inet_csk_in_pingpong_mode; 4a41f453bedf, 4d8f24eeedc5",
        match (fp.pingpong_thresh, fp.pingpong_sysctl) {
            (Some(t), Some(s)) => format!("{t} (sysctl tcp_pingpong_thresh = {s})"),
            (Some(t), None) => format!("{t} (no tcp_pingpong_thresh sysctl)"),
            (None, _) => "not measured".into(),
        },
        pingpong(fp),
        Predict::Replay(&pingpong),
        true,
    );
    b.row(
        "delayed-ACK minimum",
        "tcp_send_delayed_ack; TCP_DELACK_MIN = TCP_ATO_MIN = HZ/25",
        match delack_min(fp) {
            Some(m) => format!(
                "{m:.1} ms (delays {})",
                fp.delack_ms.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join("/")
            ),
            None => "not measured".into(),
        },
        cat_delack_min(fp),
        Predict::Replay(&cat_delack_min),
        true,
    );
    b.row(
        "ato growth (timer bound by srtt)",
        "tcp_delack_timer_handler inflates ato; tcp_send_delayed_ack caps at max(srtt, 40 ms)",
        if fp.ato_us.is_empty() {
            "not measured".into()
        } else {
            format!("tcpi_ato {} ms", fp.ato_us.iter().map(|a| (a / 1000).to_string()).collect::<Vec<_>>().join(" -> "))
        },
        cat_ato(fp),
        Predict::Replay(&cat_ato),
        true,
    );
    b.row(
        "delayed-ACK maximum",
        "tcp_send_delayed_ack: min(ato, TCP_DELACK_MAX) for a pushed segment once srtt is above it",
        if fp.delack_max_ms.is_empty() {
            "not measured".into()
        } else {
            format!(
                "{:.1} ms over rtt 400 ms (delays {})",
                fp.delack_max_ms.iter().copied().fold(0.0, f64::max),
                fp.delack_max_ms.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join("/")
            )
        },
        cat_delack_max(fp),
        Predict::Replay(&cat_delack_max),
        true,
    );
}

/// The fastest of the measured delayed-ACK delays.
fn delack_min(fp: &Fingerprint) -> Option<f64> {
    fp.delack_ms.iter().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
}

/// The fastest delay, named by the timer it shows: TCP_DELACK_MIN = HZ/25 = 40 ms
/// (include/net/tcp.h) within a wide margin, else its own value.
fn cat_delack_min(fp: &Fingerprint) -> String {
    delack_min(fp)
        .map(|m| if (30.0..60.0).contains(&m) { "40 ms".into() } else { format!("{m:.0} ms") })
        .unwrap_or_default()
}

/// The largest delay, rounded to the timer it shows: 200 ms (TCP_DELACK_MAX = HZ/5) plus at
/// most a few ticks, else its own value.
fn cat_delack_max(fp: &Fingerprint) -> String {
    if fp.delack_max_ms.is_empty() {
        return String::new();
    }
    let m = fp.delack_max_ms.iter().copied().fold(0.0, f64::max);
    if (190.0..260.0).contains(&m) {
        "200 ms".into()
    } else {
        format!("{:.0} ms", (m / 10.0).round() * 10.0)
    }
}

/// tcp_delack_timer_handler inflates ato after each delayed ACK and tcp_send_delayed_ack caps
/// the timeout at max(srtt, TCP_DELACK_MIN): ato grows while the delay stays near 40 ms.
fn cat_ato(fp: &Fingerprint) -> String {
    match (fp.ato_us.first(), fp.ato_us.last(), delack_min(fp)) {
        (Some(a), Some(b), Some(_)) if b > a && fp.delack_ms.iter().all(|d| *d < 70.0) => "grows, 40 ms".into(),
        (Some(a), Some(b), Some(_)) if b > a => "grows, delay too".into(),
        (Some(_), Some(_), Some(_)) => "does not grow".into(),
        _ => String::new(),
    }
}

/// Quick-ACK mode: how many immediate ACKs a receiver sends, what spends them, what refills
/// them.
pub(super) fn quick_acks(b: &mut Rows, fp: &Fingerprint) {
    let quick = |f: &Fingerprint| f.quickacks_at_start.map(|n| n.to_string()).unwrap_or_default();
    b.row(
        "quick ACKs at start",
        "tcp_event_data_recv -> tcp_incr_quickack; TCP_MAX_QUICKACKS",
        count(fp.quickacks_at_start),
        quick(fp),
        Predict::Replay(&quick),
        true,
    );
    // The budget the measurement is read against: what this kernel showed at start.
    let budget = fp.quickacks_at_start.unwrap_or(16);
    let spent = |f: &Fingerprint| f.quickacks_after_data.map(|n| after_data_category(n, budget)).unwrap_or_default();
    b.row(
        "quick ACKs spent",
        "tcp_dec_quickack_mode; 059217c18be6",
        fp.quickacks_after_data.map_or("not measured".into(), |n| format!("{n} left after sending 10 data segments")),
        spent(fp),
        Predict::Replay(&spent),
        true,
    );
    let idle = |f: &Fingerprint| {
        f.quickacks_after_idle.map(|n| if n > 0 { "refilled" } else { "not refilled" }.to_string()).unwrap_or_default()
    };
    b.row(
        "quick ACKs after idle",
        "tcp_event_data_recv: gap > rto -> tcp_incr_quickack",
        fp.quickacks_after_idle.map_or("not measured".into(), |n| format!("{n} immediate after idle > RTO")),
        idle(fp),
        Predict::Replay(&idle),
        true,
    );
}

/// What makes a receiver ACK at once instead of arming the timer (RFC 1122 4.2.3.2: at least
/// every second full-sized segment).
pub(super) fn ack_triggers(b: &mut Rows, fp: &Fingerprint) {
    b.row(
        "two full segments, unread",
        "__tcp_ack_snd_check: > 1 rcv_mss and __tcp_select_window() >= rcv_wnd",
        measured_ms(fp.two_seg_unread_ms),
        ack_category(fp.two_seg_unread_ms),
        // With default buffers the window would not shrink, so the ACK is sent at once (the
        // model assumes large buffers); a small receive buffer (packetdrill's) makes it wait.
        Predict::Replay(&|f| ack_category(f.two_seg_unread_ms)),
        true,
    );
    b.row(
        "two full segments, read",
        "__tcp_cleanup_rbuf: more than one rcv_mss unacknowledged",
        measured_ms(fp.two_seg_read_ms),
        ack_category(fp.two_seg_read_ms),
        Predict::Replay(&|f| ack_category(f.two_seg_read_ms)),
        true,
    );
    b.row(
        "one full segment with PSH, read",
        "tcp_measure_rcv_mss; 4720852ed9af",
        measured_ms(fp.full_psh_read_ms),
        ack_category(fp.full_psh_read_ms),
        Predict::Replay(&|f| ack_category(f.full_psh_read_ms)),
        true,
    );
}

/// The sender's hold rules: Nagle's variant, autocork, cork after NODELAY.
pub(super) fn sender(b: &mut Rows, fp: &Fingerprint) {
    let nagle = |f: &Fingerprint| {
        f.seed004_max_ms
            .map(|m| if m < DELAYED_MS { "minshall".to_string() } else { "classic".to_string() })
            .unwrap_or_default()
    };
    b.row(
        "Nagle (seed 004, MSS parity)",
        "tcp_nagle_check, tcp_minshall_check",
        fp.seed004_max_ms.map_or("not measured".into(), |m| format!("slowest round {m:.1} ms")),
        nagle(fp),
        Predict::Replay(&nagle),
        true,
    );
    b.row(
        "autocork",
        "tcp_should_autocork; f54b311142a9",
        match (fp.autocork_sysctl, fp.autocork_events) {
            (Some(s), Some(e)) => format!("tcp_autocorking = {s}, {e} TCPAutoCorking events"),
            (Some(s), None) => format!("tcp_autocorking = {s}"),
            _ => "not measured".into(),
        },
        match fp.autocork_sysctl {
            Some(_) => "present".into(),
            None => String::new(),
        },
        Predict::Fact(&|p| if p.linux.as_ref().is_some_and(|l| l.autocork) { "present" } else { "absent" }.into()),
        true,
    );
    let cork = |f: &Fingerprint| {
        f.nodelay_then_cork_held.map(|h| if h { "held" } else { "sent" }.to_string()).unwrap_or_default()
    };
    b.row(
        "NODELAY then CORK (seed 001)",
        "tcp_skb_entail clears TCP_NAGLE_PUSH",
        fp.nodelay_then_cork_held.map_or("not measured".into(), |h| {
            if h { "writes held until uncork" } else { "writes sent at once" }.into()
        }),
        cork(fp),
        Predict::Replay(&cork),
        true,
    );
}

/// The loss-recovery timers: the RTO's floor and the tail-loss probe.
pub(super) fn loss_timers(b: &mut Rows, fp: &Fingerprint) {
    b.row(
        "RTO minimum",
        "tcp_rtt_estimator, __tcp_set_rto; TCP_RTO_MIN",
        match (fp.rto_us, fp.srtt_us) {
            (Some(r), Some(s)) => format!(
                "tcpi_rto {:.1} ms at srtt {:.2} ms{}",
                f64::from(r) / 1e3,
                f64::from(s) / 1e3,
                fp.rto_min_us_sysctl.map(|m| format!(" (tcp_rto_min_us = {m})")).unwrap_or_default()
            ),
            _ => "not measured".into(),
        },
        cat_rto(fp),
        Predict::Replay(&cat_rto),
        true,
    );
    b.row(
        "tail-loss probe",
        "tcp_schedule_loss_probe: 2 srtt + TCP_TIMEOUT_MIN with 2+ out (RFC 8985); 6ba8a3b19e76",
        match (fp.tlp_ack_ms, fp.tlp_probes, fp.early_retrans) {
            (Some(d), Some(n), _) => format!("2 out: ACK after {d:.1} ms, {n} probe(s)"),
            (Some(d), None, _) => format!("2 out: ACK after {d:.1} ms"),
            (None, _, Some(e)) => format!("tcp_early_retrans = {e}"),
            _ => "not measured".into(),
        },
        cat_tlp(fp),
        Predict::Replay(&cat_tlp),
        true,
    );
}

/// TCP_RTO_MIN = HZ/5 = 200 ms (include/net/tcp.h, `__tcp_set_rto`) within a margin, else
/// its own value.
fn cat_rto(fp: &Fingerprint) -> String {
    fp.rto_us
        .map(|r| {
            let r = f64::from(r) / 1e3;
            if (195.0..260.0).contains(&r) {
                "200 ms".to_string()
            } else {
                format!("{r:.0} ms")
            }
        })
        .unwrap_or_default()
}

/// RFC 8985 7.2: the probe timeout is 2 srtt (Linux adds TCP_TIMEOUT_MIN, `tcp_schedule_loss_probe`).
fn cat_tlp(fp: &Fingerprint) -> String {
    match (fp.tlp_ack_ms, fp.tlp_probes, fp.early_retrans) {
        // A probe counted, or the ACK came well before the 40 ms delayed-ACK timer could
        // send it (the probe fires at 2 srtt + 2 ticks; srtt includes earlier delayed ACKs).
        (_, Some(n), _) if n > 0 => "present".into(),
        (Some(d), _, _) if d < 35.0 => "present".into(),
        (Some(_), _, _) => "absent".into(),
        (None, _, Some(3 | 4)) => "present".into(),
        (None, _, Some(_)) => "disabled".into(),
        _ => String::new(),
    }
}

/// Facts of a release or a build the model does not simulate: dating sysctls (scored),
/// congestion control, HZ and GRO (shown, not scored).
pub(super) fn facts(b: &mut Rows, fp: &Fingerprint) {
    b.row(
        "dating sysctls",
        "the release each sysctl appeared in (cited in the profiles)",
        if fp.sysctls_present.is_empty() && fp.sysctls_absent.is_empty() {
            "not measured".into()
        } else {
            format!("present: {}; absent: {}", join_or_none(&fp.sysctls_present), join_or_none(&fp.sysctls_absent))
        },
        String::new(),
        Predict::Fact(&|p| sysctl_category(p, &fp.sysctls_present, &fp.sysctls_absent)),
        true,
    );
    b.row(
        "congestion control, pacing",
        "tcp_congestion_control sysctl; bbr or fq qdisc pace (4.13+ internal pacing)",
        match (&fp.congestion_control, &fp.default_qdisc) {
            (Some(c), q) => format!(
                "{c}, qdisc {}, pacing {}",
                q.as_deref().unwrap_or("?"),
                if pacing(c, q.as_deref().unwrap_or("")) { "yes" } else { "no" }
            ),
            _ => "not measured".into(),
        },
        fp.congestion_control.clone().unwrap_or_default(),
        Predict::Fact(&|p| p.linux.as_ref().map_or("reno".into(), |l| l.congestion_control.clone())),
        false,
    );
    b.row(
        "HZ",
        "clock_getres(CLOCK_MONOTONIC_COARSE) = TICK_NSEC",
        count(fp.hz),
        fp.hz.map(|h| h.to_string()).unwrap_or_default(),
        Predict::Fact(&|p| p.timer_hz.to_string()),
        false,
    );
    b.row(
        "GRO on lo",
        "ETHTOOL_GGRO; loopback_xmit delivers with netif_rx (no GRO pass)",
        fp.gro_lo.map_or("not measured".into(), |g| if g { "on (flag)" } else { "off" }.into()),
        fp.gro_lo.map(|g| if g { "on" } else { "off" }.to_string()).unwrap_or_default(),
        Predict::Fact(&|_| "-".into()),
        false,
    );
}

/// The era a set of dating sysctls points to: the profile whose `sysctls` are all present and
/// whose `absent_sysctls` are all absent.
fn sysctl_category(p: &Profile, present: &[String], absent: &[String]) -> String {
    let Some(l) = &p.linux else { return "-".into() };
    let ok = l.sysctls.iter().all(|s| present.contains(s)) && l.absent_sysctls.iter().all(|s| absent.contains(s));
    if ok {
        format!("{}+", l.release)
    } else {
        "no".to_string()
    }
}

fn join_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}
