//! The words of advise: the recommendation paragraph and the code for the side that changes,
//! and the notes that say what a figure means here. Pure text from the ranked rows.

use report::advise::{AdviseRow, StallSource};
use report::cells::interval_ms_words;
use scenario::{Opt, Side};

use crate::Lang;

/// What the text needs of a ranked row (best first): its strategies, typed, and its figures.
pub struct View<'a> {
    pub client: &'a [Opt],
    pub server: &'a [Opt],
    pub row: &'a AdviseRow,
}

/// How a fix removes the wait, by strategy.
fn mechanism(opt: Opt, side: Side) -> String {
    let s = side.as_str();
    let p = side.peer().as_str();
    match opt {
        Opt::Writev | Opt::Buffer => format!(
            "the {s} hands each message to TCP in one call, so no small write is left behind an unacknowledged \
             one for Nagle to hold until the {p}'s delayed ACK"
        ),
        Opt::Cork | Opt::NodelayThenCork | Opt::MsgMore => format!(
            "the {s}'s kernel holds the message's writes until the last one and sends them together, so no \
             partial segment waits for the {p}'s delayed ACK"
        ),
        Opt::Nodelay => format!("Nagle is off on the {s}: each write leaves at once instead of waiting for an ACK"),
        Opt::QuickackEach | Opt::QuickackOnce => {
            format!("the {s} ACKs at once instead of after the delayed-ACK timer, which releases the {p}'s held write")
        }
        Opt::BusyPoll => {
            format!("the {s}'s reads spin instead of sleeping, so it is not woken by the scheduler for each message")
        }
    }
}

fn stalled(r: &AdviseRow) -> String {
    format!("{} stalls in {} rounds", r.stalls, r.rounds)
}

/// Why the workload as written waited: the cause its stall records name most, or its slow samples.
fn why(base: &AdviseRow) -> String {
    let top = base.stalls_by_cause.iter().max_by_key(|(_, n)| **n);
    match (top, base.stall_source) {
        (Some((cause, n)), _) => {
            let explain = cause.parse::<trace::Cause>().map(|c| c.explain()).unwrap_or("");
            format!(" Why: as written, {n} stall records name {cause} ({explain})")
        }
        (None, StallSource::SlowSamples) if base.stalls > 0 => {
            " Why: as written, rounds waited past the stall threshold (slow samples: without a capture the \
                     lab does not classify their cause; `--model` shows the mechanism)"
                .to_string()
        }
        _ => " Why: as written".to_string(),
    }
}

/// The recommendation paragraph and the code block. `writes_per_msg(side)`: the most writes a
/// message of that side has (for the nodelay caveat).
pub fn recommend(rows: &[View], lang: Lang, writes_per_msg: impl Fn(Side) -> usize) -> (String, String) {
    let Some(best) = rows.first() else { return (String::new(), String::new()) };
    let Some(base) = rows.iter().find(|r| r.client.is_empty() && r.server.is_empty()) else {
        return (String::new(), String::new());
    };
    let (b, f) = (base.row, best.row);
    if std::ptr::eq(best, base) {
        let text = format!(
            "Recommendation: keep the code as written. It ranks first ({}, p99 {}, {:.1} segments per message); \
             no candidate fix does better.",
            stalled(b),
            interval_ms_words(&b.p99_us),
            b.segments_per_message
        );
        return (text, String::new());
    }
    let changes: Vec<(Side, &[Opt])> =
        [(Side::Client, best.client), (Side::Server, best.server)].into_iter().filter(|(_, o)| !o.is_empty()).collect();
    let what: Vec<String> = changes
        .iter()
        .map(|(side, opts)| {
            let d: Vec<&str> = opts.iter().map(|o| o.describe()).collect();
            format!("on the {} side, {}", side.as_str(), d.join(" + "))
        })
        .collect();
    let mut text = format!(
        "Recommendation: change the code {}. p99 {} as written -> {} with the fix; {} -> {}; {:.1} -> {:.1} \
         segments per message.",
        what.join(" and "),
        interval_ms_words(&b.p99_us),
        interval_ms_words(&f.p99_us),
        stalled(b),
        stalled(f),
        b.segments_per_message,
        f.segments_per_message
    );
    // Why: the as-written stalls' cause (the classifier's records), then how the fix acts.
    text += &why(b);
    let how: Vec<String> = changes.iter().flat_map(|(side, opts)| opts.iter().map(|o| mechanism(*o, *side))).collect();
    text += &format!("; with the fix {}.", how.join(", and "));
    if let (Some(bc), Some(fc)) = (b.cpu_us_per_round, f.cpu_us_per_round) {
        if fc > 1.5 * bc {
            text += &format!(
                " It costs CPU: {fc:.1} us of both sides' CPU per round against {bc:.1} as written (thread CPU time)."
            );
        }
    }
    let alts: Vec<&str> =
        rows.iter().skip(1).take_while(|r| r.row.stalls == 0).take(3).map(|r| r.row.label.as_str()).collect();
    if !alts.is_empty() {
        text += &format!(" Next in rank: {}.", alts.join(", "));
    }
    let mut code = String::new();
    for (side, opts) in &changes {
        for &o in opts.iter() {
            code += &format!("{} side ({}), {}:\n", side.as_str(), o, lang.as_str());
            code += &crate::snippet(o, lang);
            code += &format!("\ncaveat: {}\n", crate::caveat(o, writes_per_msg(*side)));
        }
    }
    (text, code.trim_end().to_string())
}

/// The notes of a model run: the peer's stack (with `--peer-profile`) and why the intervals
/// are narrow.
pub fn model_notes(own: Side, peer_profile: Option<&str>) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(p) = peer_profile {
        notes.push(format!(
            "the {} runs the {p} model and the {} the linux model (crates/model): these numbers are the model's, \
             not this machine's; only fixes on the {} are tried",
            own.peer().as_str(),
            own.as_str(),
            own.as_str()
        ));
    }
    notes.push(
        "the model is deterministic: repetitions differ only through a link's loss or jitter (seeded per run), \
         so on a plain link each interval has zero width"
            .into(),
    );
    notes
}

/// The note of rows whose stalls are slow samples.
pub const SLOW_SAMPLES_NOTE: &str = "stalls are slow samples (rounds that waited over the stall threshold): these \
     lab rows carry no stall records (no capture), so their causes are not classified; `tcpstall advise --model` \
     classifies them";

/// The exchange inline, with a turn of more than 8 writes shortened to its count and bytes.
pub fn short_inline(e: &scenario::Exchange) -> String {
    let long = e.turns.iter().any(|t| t.writes.len() > 8);
    if !long {
        return e.inline();
    }
    e.turns
        .iter()
        .map(|t| format!("{} {} writes, {} B", t.side.as_str(), t.writes.len(), t.total()))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use report::advise::Interval;

    fn iv(ms: f64) -> Interval {
        Interval { est: ms * 1e3, lo: ms * 0.9e3, hi: ms * 1.1e3 }
    }

    #[test]
    fn the_paragraph_names_side_numbers_cause_and_code() {
        let causes: BTreeMap<String, u64> = [("nagle-delayed-ack".to_string(), 100)].into();
        let fix = AdviseRow {
            label: "client:writev".into(),
            rounds: 100,
            p99_us: iv(0.05),
            segments_per_message: 1.0,
            ..AdviseRow::default()
        };
        let base = AdviseRow {
            label: "default".into(),
            stalls: 100,
            rounds: 100,
            stalls_by_cause: causes,
            p99_us: iv(40.0),
            segments_per_message: 1.5,
            ..AdviseRow::default()
        };
        let rows =
            [View { client: &[Opt::Writev], server: &[], row: &fix }, View { client: &[], server: &[], row: &base }];
        let (text, code) = recommend(&rows, Lang::Go, |_| 3);
        assert!(text.contains("on the client side, one writev/sendmsg per message"), "{text}");
        assert!(text.contains("p99 40.00 ms [95% CI 36.00-44.00] as written -> 0.05 ms"), "{text}");
        assert!(text.contains("100 stall records name nagle-delayed-ack"), "{text}");
        assert!(code.starts_with("client side (writev), go:\n"), "{code}");
        assert!(code.contains("net.Buffers") && code.contains("caveat: "), "{code}");
        let (keep, none_code) = recommend(&rows[1..], Lang::C, |_| 3);
        assert!(keep.starts_with("Recommendation: keep the code as written"), "{keep}");
        assert!(none_code.is_empty());
    }

    #[test]
    fn a_long_turn_is_shortened_to_its_count() {
        let e = scenario::Exchange::parse_inline("client 1,1,1,1,1,1,1,1,1; server 100").unwrap();
        assert_eq!(short_inline(&e), "client 9 writes, 9 B; server 1 writes, 100 B");
    }
}
