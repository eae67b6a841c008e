//! The words of `tcpstall advise`: the recommendation paragraph and the code for the side that
//! changes. Pure text from the ranked rows.

use std::collections::BTreeMap;

use advise::{Interval, Lang};
use scenario::{Opt, Side};

/// What the text needs of a ranked row (best first).
pub struct View<'a> {
    pub label: &'a str,
    pub client: &'a [String],
    pub server: &'a [String],
    pub stalls: u64,
    pub rounds: u64,
    pub stall_source: &'static str,
    pub causes: &'a BTreeMap<String, u64>,
    pub p99_us: Interval,
    pub segs_per_message: f64,
    /// Both sides' CPU per round (µs), when measured (lab).
    pub cpu_us_per_round: Option<f64>,
}

fn ms(i: &Interval) -> String {
    format!("{:.2} ms [95% CI {:.2}-{:.2}]", i.est / 1e3, i.lo / 1e3, i.hi / 1e3)
}

fn describe(opt: &str) -> String {
    opt.parse::<Opt>().map(|o| o.describe().to_string()).unwrap_or_else(|_| opt.to_string())
}

/// How a fix removes the wait, by strategy.
fn mechanism(opt: &str, side: Side) -> String {
    let s = side.as_str();
    let p = side.peer().as_str();
    match opt {
        "writev" | "buffer" => format!(
            "the {s} hands each message to TCP in one call, so no small write is left behind an unacknowledged \
             one for Nagle to hold until the {p}'s delayed ACK"
        ),
        "cork" | "nodelay-then-cork" | "msg-more" => format!(
            "the {s}'s kernel holds the message's writes until the last one and sends them together, so no \
             partial segment waits for the {p}'s delayed ACK"
        ),
        "nodelay" => format!("Nagle is off on the {s}: each write leaves at once instead of waiting for an ACK"),
        "quickack-each" | "quickack-once" => {
            format!("the {s} ACKs at once instead of after the delayed-ACK timer, which releases the {p}'s held write")
        }
        "busy-poll" => {
            format!("the {s}'s reads spin instead of sleeping, so it is not woken by the scheduler for each message")
        }
        _ => String::new(),
    }
}

/// The recommendation paragraph and the code block. `writes_per_msg(side)`: the most writes a
/// message of that side has (for the nodelay caveat).
pub fn recommend(rows: &[View], lang: Lang, writes_per_msg: impl Fn(Side) -> usize) -> (String, String) {
    let Some(best) = rows.first() else { return (String::new(), String::new()) };
    let Some(base) = rows.iter().find(|r| r.client.is_empty() && r.server.is_empty()) else {
        return (String::new(), String::new());
    };
    let stalled = |r: &View| format!("{} stalls in {} rounds", r.stalls, r.rounds);
    if std::ptr::eq(best, base) {
        let text = format!(
            "Recommendation: keep the code as written. It ranks first ({}, p99 {}, {:.1} segments per message); \
             no candidate fix does better.",
            stalled(base),
            ms(&base.p99_us),
            base.segs_per_message
        );
        return (text, String::new());
    }
    let changes: Vec<(Side, &[String])> =
        [(Side::Client, best.client), (Side::Server, best.server)].into_iter().filter(|(_, o)| !o.is_empty()).collect();
    let what: Vec<String> = changes
        .iter()
        .map(|(side, opts)| {
            format!(
                "on the {} side, {}",
                side.as_str(),
                opts.iter().map(|o| describe(o)).collect::<Vec<_>>().join(" + ")
            )
        })
        .collect();
    let mut text = format!(
        "Recommendation: change the code {}. p99 {} as written -> {} with the fix; {} -> {}; {:.1} -> {:.1} \
         segments per message.",
        what.join(" and "),
        ms(&base.p99_us),
        ms(&best.p99_us),
        stalled(base),
        stalled(best),
        base.segs_per_message,
        best.segs_per_message
    );
    // Why: the as-written stalls' cause (the classifier's records), then how the fix acts.
    let top = base.causes.iter().max_by_key(|(_, n)| **n);
    match (top, base.stall_source) {
        (Some((cause, n)), _) => {
            let explain = cause.parse::<trace::Cause>().map(|c| c.explain()).unwrap_or("");
            text += &format!(" Why: as written, {n} stall records name {cause} ({explain})");
        }
        (None, "slow samples") if base.stalls > 0 => {
            text += " Why: as written, rounds waited past the stall threshold (slow samples: without a capture the \
                     lab does not classify their cause; `--model` shows the mechanism)";
        }
        _ => text += " Why: as written",
    }
    let how: Vec<String> = changes.iter().flat_map(|(side, opts)| opts.iter().map(|o| mechanism(o, *side))).collect();
    text += &format!("; with the fix {}.", how.join(", and "));
    if let (Some(b), Some(f)) = (base.cpu_us_per_round, best.cpu_us_per_round) {
        if f > 1.5 * b {
            text += &format!(
                " It costs CPU: {f:.1} us of both sides' CPU per round against {b:.1} as written (thread CPU time)."
            );
        }
    }
    let alts: Vec<&str> = rows.iter().skip(1).take_while(|r| r.stalls == 0).take(3).map(|r| r.label).collect();
    if !alts.is_empty() {
        text += &format!(" Next in rank: {}.", alts.join(", "));
    }
    let mut code = String::new();
    for (side, opts) in &changes {
        for o in opts.iter() {
            code += &format!("{} side ({}), {}:\n", side.as_str(), o, lang.as_str());
            code += &advise::snippet(o, lang);
            code += &format!("\ncaveat: {}\n", advise::caveat(o, writes_per_msg(*side)));
        }
    }
    (text, code.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(ms: f64) -> Interval {
        Interval { est: ms * 1e3, lo: ms * 0.9e3, hi: ms * 1.1e3 }
    }

    #[test]
    fn the_paragraph_names_side_numbers_cause_and_code() {
        let causes: BTreeMap<String, u64> = [("nagle-delayed-ack".to_string(), 100)].into();
        let none = BTreeMap::new();
        let writev = vec!["writev".to_string()];
        let rows = [
            View {
                label: "client:writev",
                client: &writev,
                server: &[],
                stalls: 0,
                rounds: 100,
                stall_source: "stall records",
                causes: &none,
                p99_us: iv(0.05),
                segs_per_message: 1.0,
                cpu_us_per_round: None,
            },
            View {
                label: "default",
                client: &[],
                server: &[],
                stalls: 100,
                rounds: 100,
                stall_source: "stall records",
                causes: &causes,
                p99_us: iv(40.0),
                segs_per_message: 1.5,
                cpu_us_per_round: None,
            },
        ];
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
}
