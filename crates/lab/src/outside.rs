//! Waits outside the measured rounds: in the prologue (before the first measured round) and in
//! the epilogue (after the last one). The samples, the stalls and ms/round cover the measured
//! rounds only (the model's cover the same window), so such a wait changes none of them; but a
//! wait there longer than the stall threshold is named in the verdict instead of being dropped.
//!
//! Seed 004's bulk-ack at depth 2 ends with one on Linux: after its last measured round the
//! client only reads the last application ack, so nothing carries an ACK for the server's
//! previous 1-byte ack any more; the client delays that ACK (RFC 1122 4.2.3.2;
//! `tcp_send_delayed_ack`, at least TCP_ATO_MIN = 40 ms) and the server's last 1-byte ack waits
//! for it behind Nagle (RFC 896; `tcp_nagle_check` with Minshall's rule, the previous small
//! segment is unacknowledged). A capture shows the hold on the server; the client's last read
//! waits for it.
//!
//! Pure: the waits and the sides' options come in as arguments.

use trace::Cause;

use crate::verdict::{fmt_ms, who, DELACK_MAX_US, DELACK_MIN_US, RTO_MIN_US};

/// Which part of the program, outside the measured rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    Prologue,
    Epilogue,
}

impl Span {
    /// How the verdict names it; every note starts with this (see [`insert_before_notes`]).
    pub fn describe(self) -> &'static str {
        match self {
            Span::Prologue => "prologue before the measured rounds",
            Span::Epilogue => "epilogue after the measured rounds",
        }
    }
}

/// What one side did in one span.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanSide {
    /// How long each of the side's socket calls waited (ns); only those above the recorder's
    /// floor are kept, so an empty list means no call waited 1 ms.
    pub waits_ns: Vec<u64>,
    /// Nagle was in force for data this side could have had queued in the span (it sends there,
    /// or, for the epilogue, it sent in the last measured round).
    pub nagle: bool,
    /// TCP_CORK or MSG_MORE held such data.
    pub corks: bool,
}

/// Which timer a wait of `len_us` could be, given what could have held data: the same length
/// ranges as `verdict::infer` (from 3/4 of TCP_ATO_MIN to 5/4 of TCP_DELACK_MAX for a delayed
/// ACK, at least 0.9 x TCP_RTO_MIN for the probe timer; include/net/tcp.h). Returns the cause
/// and the words that justify it.
fn likely(len_us: f64, c: &SpanSide, s: &SpanSide) -> (Option<Cause>, String) {
    let in_delack = (0.75 * DELACK_MIN_US..=1.25 * DELACK_MAX_US).contains(&len_us);
    let at_rto = len_us >= 0.9 * RTO_MIN_US;
    if at_rto && (c.corks || s.corks) {
        // Held data with nothing in flight goes out on the probe timer (`tcp_probe_timer`).
        let text = format!("the probe timer's length, with cork or MSG_MORE at {}", who(c.corks, s.corks));
        (Some(Cause::ProbeTimer), text)
    } else if in_delack && (c.nagle || s.nagle) {
        // Nagle holds a small segment while an earlier one is unacknowledged (`tcp_nagle_check`)
        // and the peer's delayed ACK releases it.
        let text = format!("the delayed-ACK timer's length, with Nagle on at {}", who(c.nagle, s.nagle));
        (Some(Cause::NagleDelayedAck), text)
    } else if in_delack {
        (Some(Cause::DelayedAck), "the delayed-ACK timer's length, Nagle off".to_string())
    } else {
        (None, "matching no TCP timer (transfer time, scheduling or the link)".to_string())
    }
}

/// The verdict's note for waits longer than `threshold_ns` in one span, or None when there are
/// none. Each side's waits are listed apart (one hold can make both sides wait); the likely
/// timer is that of the longest.
///
/// "epilogue after the measured rounds (not in the samples or ms/round): 1 wait of 43 ms by the
/// client, the delayed-ACK timer's length, with Nagle on at server (nagle-delayed-ack)"
pub fn note(span: Span, client: &SpanSide, server: &SpanSide, threshold_ns: u64) -> Option<String> {
    let long = |s: &SpanSide| -> Vec<u64> { s.waits_ns.iter().copied().filter(|&w| w > threshold_ns).collect() };
    let (lc, ls) = (long(client), long(server));
    let mut parts = Vec::new();
    for (name, waits) in [("client", &lc), ("server", &ls)] {
        let Some(&max) = waits.iter().max() else { continue };
        let ms = fmt_ms(max as f64 / 1e3);
        parts.push(match waits.len() {
            1 => format!("1 wait of {ms} by the {name}"),
            n => format!("{n} waits up to {ms} by the {name}"),
        });
    }
    let longest = lc.iter().chain(&ls).copied().max()?;
    let (cause, why) = likely(longest as f64 / 1e3, client, server);
    let cause = cause.map(|c| format!(" ({c})")).unwrap_or_default();
    Some(format!("{} (not in the samples or ms/round): {}, {why}{cause}", span.describe(), parts.join(" and ")))
}

/// Insert `text` (", fewest segments") into a verdict before its prologue/epilogue notes, so it
/// stays beside the part of the verdict it qualifies.
pub fn insert_before_notes(verdict: &mut String, text: &str) {
    let at = [Span::Prologue, Span::Epilogue]
        .iter()
        .filter_map(|s| verdict.find(&format!("; {}", s.describe())))
        .min()
        .unwrap_or(verdict.len());
    verdict.insert_str(at, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(waits_ms: &[f64], nagle: bool) -> SpanSide {
        SpanSide { waits_ns: waits_ms.iter().map(|&m| (m * 1e6) as u64).collect(), nagle, corks: false }
    }

    /// Seed 004 at depth 2 on Linux: the client's last read waits ~43 ms for the server's last
    /// ack, held by Nagle (`tcp_nagle_check`) until the client's delayed ACK
    /// (`tcp_send_delayed_ack`, TCP_ATO_MIN 40 ms, include/net/tcp.h).
    #[test]
    fn a_delayed_ack_length_in_the_epilogue_is_named_with_nagle() {
        let n = note(Span::Epilogue, &side(&[43.2], false), &side(&[], true), 10_000_000).unwrap();
        assert_eq!(
            n,
            "epilogue after the measured rounds (not in the samples or ms/round): 1 wait of 43 ms by the client, \
             the delayed-ACK timer's length, with Nagle on at server (nagle-delayed-ack)"
        );
    }

    #[test]
    fn waits_under_the_threshold_make_no_note() {
        assert_eq!(note(Span::Epilogue, &side(&[9.0, 2.0], true), &side(&[10.0], true), 10_000_000), None);
        assert_eq!(note(Span::Prologue, &SpanSide::default(), &SpanSide::default(), 10_000_000), None);
    }

    #[test]
    fn both_sides_are_listed_and_the_longest_wait_names_the_timer() {
        let n = note(Span::Prologue, &side(&[41.0, 44.0, 3.0], true), &side(&[250.0], false), 12_000_000).unwrap();
        assert!(n.starts_with("prologue before the measured rounds (not in the samples or ms/round): "), "{n}");
        assert!(n.contains("2 waits up to 44 ms by the client and 1 wait of 250 ms by the server"), "{n}");
        // 250 ms is within 5/4 of TCP_DELACK_MAX (200 ms).
        assert!(n.ends_with("with Nagle on at client (nagle-delayed-ack)"), "{n}");
    }

    #[test]
    fn probe_timer_and_no_timer_lengths() {
        // At least 0.9 x TCP_RTO_MIN (200 ms) with a cork: the probe timer (`tcp_probe_timer`).
        let c = SpanSide { corks: true, ..side(&[205.0], false) };
        let n = note(Span::Epilogue, &c, &side(&[], false), 10_000_000).unwrap();
        assert!(n.ends_with("with cork or MSG_MORE at client (probe-timer)"), "{n}");
        // 15 ms is no TCP timer: no cause is claimed.
        let n = note(Span::Epilogue, &side(&[15.0], true), &side(&[], true), 10_000_000).unwrap();
        assert!(
            n.ends_with("1 wait of 15 ms by the client, matching no TCP timer (transfer time, scheduling or the link)"),
            "{n}"
        );
        // Nagle off on both sides: the delayed ACK alone.
        let n = note(Span::Epilogue, &side(&[40.0], false), &side(&[], false), 10_000_000).unwrap();
        assert!(n.ends_with("Nagle off (delayed-ack)"), "{n}");
    }

    #[test]
    fn cost_text_goes_before_the_notes() {
        let mut v = "no stalls; epilogue after the measured rounds (not ...): 1 wait".to_string();
        insert_before_notes(&mut v, ", fewest segments");
        assert_eq!(v, "no stalls, fewest segments; epilogue after the measured rounds (not ...): 1 wait");
        let mut v = "no stalls".to_string();
        insert_before_notes(&mut v, ", fewest segments");
        assert_eq!(v, "no stalls, fewest segments");
    }
}
