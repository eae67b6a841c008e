//! What `tcpstall simulate` says about a run besides the report: the story of each row's first
//! stalled sample (`--trace`), the profiles' rules and sources (`--list-profiles`), and which
//! profiles carry unverified values. Pure text from the model's own data.

use std::fmt::Write as _;

use trace::{Endpoint, Event, EventKind};

use crate::{Outcome, Profile, TRACE_LIMIT};

/// `--list-profiles`: every built-in profile and era, its sources and unverified values.
pub fn profile_list() -> String {
    let mut s = String::new();
    for p in Profile::all().into_iter().chain(Profile::eras().into_iter().filter(|p| p.name != "linux")) {
        let _ = writeln!(s, "{}: {}", p.name, p.summary);
        for (k, v) in &p.sources {
            let _ = writeln!(s, "  {k}: {v}");
        }
        if p.unverified.is_empty() {
            let _ = writeln!(s, "  unverified: none");
        }
        for u in &p.unverified {
            let _ = writeln!(s, "  unverified: {u}");
        }
    }
    s
}

/// What the numbers rest on: one line per profile (each named once) that carries unchecked
/// values.
pub fn unverified_notes(pairs: &[(Profile, Profile)]) -> Vec<String> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for p in pairs.iter().flat_map(|(c, s)| [c, s]) {
        if !p.unverified.is_empty() && !seen.contains(&p.name.as_str()) {
            seen.push(&p.name);
            out.push(format!(
                "model: profile {} has {} unverified value(s) (tcpstall simulate --list-profiles; docs/model.md)",
                p.name,
                p.unverified.len()
            ));
        }
    }
    out
}

/// `--trace`: for every row with a stall, the events of its first stalled sample, relative to
/// its start, then the timer releases inside it (the model's ground truth).
pub fn stall_stories(report: &report::Report, outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for (row, out) in report.results.iter().zip(outcomes) {
        story(&mut s, row, out);
    }
    if s.is_empty() {
        s.push_str("\nno stalled round to trace\n");
    }
    s
}

/// One row's story; nothing when no sample is over the row's slow-sample threshold.
fn story(s: &mut String, row: &report::RunResult, out: &Outcome) {
    let threshold = (row.slow_sample_threshold_us * 1e3) as u64;
    let Some((k, first)) = out.samples.iter().enumerate().find(|(_, x)| x.latency > threshold) else {
        return;
    };
    let _ = writeln!(
        s,
        "\n== {}: first stalled sample #{} ({:.3} ms; threshold {:.3} ms) ==",
        report::simulate::row_label(row),
        k + 1,
        first.latency as f64 / 1e6,
        threshold as f64 / 1e6
    );
    let _ = writeln!(s, "{:>12}  {:<6} event", "t (ms)", "side");
    let events = out.trace.get(first.trace.0..first.trace.1).unwrap_or(&[]);
    // Repeated identical lines are printed once with their count.
    let mut i = 0;
    while i < events.len() {
        let text = line(&events[i], first.start);
        let mut j = i + 1;
        while j < events.len() && line(&events[j], first.start) == text {
            j += 1;
        }
        if j - i > 1 {
            let _ = writeln!(s, "{text} (x{})", j - i);
        } else {
            let _ = writeln!(s, "{text}");
        }
        i = j;
    }
    if events.is_empty() {
        let _ = writeln!(s, "  (no events recorded: the trace keeps the first {TRACE_LIMIT} events)");
    }
    for r in out.releases.iter().filter(|r| r.t >= first.start && r.t <= first.end) {
        let _ = writeln!(
            s,
            "  => {} data held {:.3} ms, released at +{:.3} ms: {}",
            r.side.role(),
            (r.t - r.since) as f64 / 1e6,
            (r.t - first.start) as f64 / 1e6,
            r.cause.explain()
        );
    }
}

/// One event: time since `origin` (ms), side, what happened.
fn line(e: &Event, origin: u64) -> String {
    let t = (e.t.0 as f64 - origin as f64) / 1e6;
    let what = match &e.kind {
        EventKind::Write { bytes, more } => format!("write {bytes} B{}", if *more { " (MSG_MORE)" } else { "" }),
        EventKind::Read { bytes } => format!("read {bytes} B"),
        EventKind::Timer(k) => format!("timer fires: {k:?}"),
        EventKind::Kernel(k) => k.describe(),
        EventKind::Icmp(i) => i.describe(),
        EventKind::Segment(seg) => {
            let dir = if e.from == Endpoint::A { "->" } else { "<-" };
            if seg.len == 0 {
                format!("{dir} ACK {}", seg.ack)
            } else {
                format!("{dir} seq {}:{} ({} B) ack {} [{:?}]", seg.seq, seg.seq + seg.len, seg.len, seg.ack, seg.flags)
            }
        }
    };
    format!("{t:>12.3}  {:<6} {what}", e.from.role())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_with_unverified_values_are_named_once() {
        let (linux, mac) = (Profile::builtin("linux").unwrap(), Profile::builtin("macos").unwrap());
        let notes = unverified_notes(&[(mac.clone(), linux.clone()), (mac.clone(), mac.clone())]);
        let named: Vec<&str> =
            [&mac, &linux].iter().filter(|p| !p.unverified.is_empty()).map(|p| p.name.as_str()).collect();
        assert_eq!(notes.len(), named.len(), "{notes:?}");
        assert!(!named.contains(&"macos") || notes[0].starts_with("model: profile macos has "), "{notes:?}");
    }

    #[test]
    fn the_list_names_every_profile_and_era() {
        let l = profile_list();
        for n in Profile::names().into_iter().chain(Profile::era_names()) {
            assert!(l.contains(&format!("\n{n}: ")) || l.starts_with(&format!("{n}: ")), "{n}");
        }
    }
}
