//! Stack profiles: the rules of one TCP implementation as data (`profiles/*.toml`, embedded at
//! build time). Every value in those files carries a comment citing its source; values nobody
//! has checked are listed under `unverified` and shown by `tcpstall simulate --profile NAME`.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::ModelError;

/// Which rule decides whether a sub-MSS tail segment may leave while data is unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NagleRule {
    /// No Nagle at all (as if TCP_NODELAY were always set).
    Off,
    /// RFC 896 / RFC 9293 3.7.4: hold while any data is unacknowledged.
    Classic,
    /// draft-minshall-nagle-01, Linux `tcp_minshall_check`: hold only while an earlier *small*
    /// segment is unacknowledged.
    Minshall,
    /// XNU `tcp_output`: send if idle or the last segment sent was full-size (TF_MAXSEGSNT).
    XnuMaxseg,
}

/// How the receiver decides to ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckPolicy {
    /// Linux: `__tcp_ack_snd_check` (more than one rcv_mss unacked, quick-ACK mode), the adaptive
    /// `ato` of `tcp_event_data_recv` / `tcp_send_delayed_ack`, pingpong, `__tcp_cleanup_rbuf`.
    Linux,
    /// BSD / RFC 1122 4.2.3.2: ACK every `ack_every` segments, otherwise a fixed delayed-ACK timer.
    Count,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SenderRules {
    pub nagle: NagleRule,
    pub initial_cwnd: u32,
    pub timestamps: bool,
    pub restart_after_idle: bool,
    pub rto_min_ms: u64,
    pub rto_initial_ms: u64,
    /// Linux `tcp_rtt_estimator`/`__tcp_set_rto`: RTO = srtt + max(4 * rttvar, rto_min);
    /// otherwise RFC 6298 2.3: RTO = max(srtt + 4 * rttvar, rto_min).
    pub rto_rttvar_floor: bool,
    pub probe_timer: bool,
    pub probe_min_ms: u64,
    pub cork: bool,
    pub msg_more: bool,
    pub sndbuf: u64,
    /// Linux congestion-window validation (tcp_cwnd_validate, tcp_is_cwnd_limited; RFC 7661):
    /// cwnd grows only while the sender uses it, and shrinks towards what was used after an RTO
    /// of application-limited sending (tcp_cwnd_application_limited; RFC 2861).
    #[serde(default)]
    pub cwnd_validation: bool,
    /// The floor of that shrinking: 0 = the initial window (current kernels), else segments
    /// (2 in 2.4/2.6 kernels: `max(tp->snd_cwnd_used, 2U)`).
    #[serde(default)]
    pub app_limited_floor: u32,
    /// Old-kernel bug (seed 001): TCP_NAGLE_PUSH left by TCP_NODELAY is never cleared when a new
    /// skb is queued, so a later TCP_CORK does not hold anything.
    #[serde(default)]
    pub sticky_nagle_push: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverRules {
    pub policy: AckPolicy,
    pub delack_min_ms: u64,
    pub delack_max_ms: u64,
    pub ack_every: u32,
    pub count_full_only: bool,
    pub quickack_budget: u32,
    pub quickack_after_idle: bool,
    pub pingpong_thresh: u32,
    pub quickack_sockopt: bool,
    pub rcv_wnd: u32,
    /// Before 059217c18be6 ("tcp: fix quick-ack counting to count actual ACKs of new data",
    /// 6.6): `tcp_event_ack_sent(sk, tcp_skb_pcount(skb), ...)` -> `tcp_dec_quickack_mode(sk,
    /// pkts)` spent one quick ACK per segment of every skb sent with the ACK flag, data included,
    /// whether or not it acknowledged new data. After it, one per ACK of new data only
    /// (`inet_csk_ack_scheduled`).
    #[serde(default)]
    pub quickack_counts_data_segs: bool,
    /// 4720852ed9af ("tcp: fix delayed ACKs for MSS boundary condition", 6.6):
    /// `tcp_measure_rcv_mss` marks ICSK_ACK_PUSHED for a full-sized (>= rcv_mss) segment with
    /// PSH, so reading it ACKs at once (`__tcp_cleanup_rbuf`). Before, only sub-MSS segments did.
    #[serde(default)]
    pub full_psh_pushed: bool,
}

/// Facts about one Linux release that `tcpstall kernel` can observe but the model does not
/// simulate (the fingerprint compares them; see crates/model/src/fingerprint.rs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxEra {
    /// The mainline release this profile stands for, as first tagged (x.y.0).
    pub release: String,
    /// Tail-loss probe (6ba8a3b19e76, 3.10; `tcp_schedule_loss_probe`).
    pub tlp: bool,
    /// Autocorking (f54b311142a9, 3.14; `tcp_should_autocork`).
    pub autocork: bool,
    /// Default congestion control (CONFIG_DEFAULT_TCP_CONG; cubic since 2.6.19).
    pub congestion_control: String,
    /// Sysctls under /proc/sys/net/ipv4 whose presence dates the release (each cited in the file).
    pub sysctls: Vec<String>,
    /// Sysctls this release does not have yet (the newer ones of the list above).
    #[serde(default)]
    pub absent_sysctls: Vec<String>,
}

/// One stack's rules.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub summary: String,
    pub sender: SenderRules,
    pub receiver: ReceiverRules,
    /// Timer tick rate (Linux CONFIG_HZ). Non-zero: timers are kept in ticks and fire on a tick
    /// boundary at least one tick after their expiry (kernel/time/timer.c `calc_index` rounds
    /// up so that no timer fires early). 0: timers fire exactly.
    #[serde(default)]
    pub timer_hz: u32,
    /// Where each rule comes from.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// Values nobody has checked against the stack's source or a capture.
    #[serde(default)]
    pub unverified: Vec<String>,
    /// Linux only: release facts for `tcpstall kernel`.
    #[serde(default)]
    pub linux: Option<LinuxEra>,
}

const BUILTIN: &[(&str, &str)] = &[
    ("linux", include_str!("../profiles/linux.toml")),
    ("linux-2.6", include_str!("../profiles/linux-2.6.toml")),
    ("rfc-classic", include_str!("../profiles/rfc-classic.toml")),
    ("macos", include_str!("../profiles/macos.toml")),
    ("freebsd", include_str!("../profiles/freebsd.toml")),
    ("windows", include_str!("../profiles/windows.toml")),
];

/// Linux by era: mainline releases as first tagged, differing exactly in the behaviours that
/// changed (each difference cites its commit in the file). Not part of `all`.
const ERAS: &[(&str, &str)] = &[
    ("linux:4.19", include_str!("../profiles/linux-4.19.toml")),
    ("linux:5.4", include_str!("../profiles/linux-5.4.toml")),
    ("linux:5.10", include_str!("../profiles/linux-5.10.toml")),
    ("linux:5.15", include_str!("../profiles/linux-5.15.toml")),
    ("linux:6.1", include_str!("../profiles/linux-6.1.toml")),
    ("linux:6.6", include_str!("../profiles/linux-6.6.toml")),
    ("linux:6.12", include_str!("../profiles/linux-6.12.toml")),
    ("linux", include_str!("../profiles/linux.toml")),
];

impl Profile {
    /// Parse a profile file's text; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Profile, ModelError> {
        let p: Profile = toml::from_str(text).map_err(|e| ModelError::Profile {
            file: file.into(),
            msg: e.message().split_whitespace().collect::<Vec<_>>().join(" "),
        })?;
        if p.sender.initial_cwnd == 0 || p.receiver.ack_every == 0 {
            return Err(ModelError::Profile {
                file: file.into(),
                msg: "initial_cwnd and ack_every must be at least 1".into(),
            });
        }
        Ok(p)
    }

    /// Names of the built-in profiles, in display order.
    pub fn names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// All built-in profiles.
    pub fn all() -> Vec<Profile> {
        BUILTIN
            .iter()
            .map(|(n, t)| Profile::from_toml(n, t).unwrap_or_else(|e| panic!("built-in profile is invalid: {e}")))
            .collect()
    }

    /// The Linux era profiles, oldest first, ending with `linux` (the newest).
    pub fn eras() -> Vec<Profile> {
        ERAS.iter()
            .map(|(n, t)| Profile::from_toml(n, t).unwrap_or_else(|e| panic!("built-in profile is invalid: {e}")))
            .collect()
    }

    /// Names of the era profiles, oldest first.
    pub fn era_names() -> Vec<&'static str> {
        ERAS.iter().map(|(n, _)| *n).collect()
    }

    pub fn builtin(name: &str) -> Result<Profile, ModelError> {
        BUILTIN.iter().chain(ERAS).find(|(n, _)| *n == name).map(|(n, t)| Profile::from_toml(n, t)).unwrap_or_else(
            || {
                let mut known = Profile::names();
                known.extend(Profile::era_names().into_iter().filter(|n| *n != "linux"));
                Err(ModelError::UnknownProfile { name: name.into(), known: known.join(", ") })
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_parses_and_cites_its_sources() {
        for p in Profile::all() {
            assert!(!p.sources.is_empty(), "{} cites nothing", p.name);
            assert!(p.sender.initial_cwnd >= 1);
        }
        assert_eq!(Profile::names(), ["linux", "linux-2.6", "rfc-classic", "macos", "freebsd", "windows"]);
        for p in Profile::eras() {
            assert!(p.linux.is_some(), "{} has no [linux] release facts", p.name);
            assert!(p.sources.contains_key("quickack_accounting") || p.name == "linux", "{}", p.name);
        }
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let e = Profile::builtin("solaris").unwrap_err().to_string();
        assert!(e.contains("linux, linux-2.6, rfc-classic"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let mut t = include_str!("../profiles/linux.toml").to_string();
        t = t.replace("[sender]\n", "[sender]\ncolour = 1\n");
        assert!(Profile::from_toml("x", &t).is_err());
    }
}
