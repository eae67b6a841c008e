//! One self-contained HTML report (`--report FILE.html`) for lab, simulate and explain (pure:
//! [`render`] returns the bytes).
//!
//! The page is static HTML (header, strategy table, stall table: readable without scripts) plus
//! one inline JSON document ([`ReportData`]) that a small hand-written inline script draws as
//! SVG: the latency CDFs, the chosen strategy's histogram, the wire-cost bars, the ladder of a
//! selected stall and the zoomable time-sequence graphs. Nothing is loaded from the network.
//!
//! The builder is generic: a [`Page`] is a header, optional strategy rows (lab, simulate; the
//! ranking of `advise` will be rows too) and flows (a row's connection, or a capture's flow),
//! each with its stall records and, when they were recorded, its packets as `trace::Event`s.
//! A flow without packets still gets its stall table; the page says its graphs need packets.

mod build;
mod page;

pub use build::{data, Ladder, LadderArrow, ReportData, Series, StallRow, StrategyRow, TimeSeq, LIMITS};

use analyze::Stall;
use serde::Serialize;
use trace::Event;

use crate::RunResult;

/// The page's header.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Header {
    /// "lab", "simulate" or "explain".
    pub mode: String,
    /// The command line as run.
    pub command: String,
    pub version: String,
    /// The kernel the run measured (lab), or the model's profiles (simulate).
    pub kernel: String,
    /// The host that made the report.
    pub host: String,
    /// When the report was made (UTC, ISO 8601).
    pub date: String,
    /// Scenario name, or the capture file for explain.
    pub scenario: String,
    pub link: String,
}

/// One connection: a strategy row's (lab, simulate) or a capture's flow (explain).
#[derive(Debug, Clone)]
pub struct FlowIn<'a> {
    pub label: String,
    /// The strategy row it belongs to, if any.
    pub row: Option<usize>,
    pub stalls: &'a [Stall],
    /// The connection's packets (segments; other events are drawn as marks), `None` when the
    /// producer did not record them.
    pub events: Option<&'a [Event]>,
    /// Why there are no packets, or what is missing from them (shown on the page).
    pub events_note: Option<String>,
    /// Path round-trip time, for the ladder's one-way delay.
    pub rtt_ns: Option<u64>,
    /// Where the packets were seen ("at A", "same host", "model").
    pub capture_point: String,
    /// The endpoint the packets were captured at (its sends stamped as they left, the peer's
    /// as they arrived); None: stamped at the sender (the model) or not known.
    pub capture_at: Option<trace::Endpoint>,
}

/// `tcpstall advise`'s ranking: one row per candidate fix, best first, with the 95% intervals
/// of its latency quantiles (the page draws them as error bars), and the recommendation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ranking {
    pub rows: Vec<RankRow>,
    /// The recommendation paragraph, as printed.
    pub recommendation: String,
    /// The language of `code` (c, go, rust, python, java, node).
    pub lang: String,
    pub code: String,
}

/// One candidate of the ranking: the numbers of advise's JSON `ranking` row.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RankRow {
    pub rank: usize,
    pub label: String,
    pub stalls: u64,
    pub rounds: u64,
    pub stalls_by_cause: Vec<(String, u64)>,
    /// `[estimate, low, high]` of the 95% interval, microseconds.
    pub p50_us: [f64; 3],
    pub p99_us: [f64; 3],
    pub p999_us: [f64; 3],
    pub segments_per_message: f64,
    pub wire_bytes_per_message: f64,
    pub change_size: u32,
}

/// Everything the page shows.
#[derive(Debug, Clone)]
pub struct Page<'a> {
    pub header: Header,
    /// Strategy rows: the same values as the JSON's `results`.
    pub rows: &'a [RunResult],
    pub flows: Vec<FlowIn<'a>>,
    /// Errors of the run (rows measured before them are still valid).
    pub errors: &'a [String],
    /// Extra notes for the page's top (e.g. "the capture was damaged after frame N").
    pub notes: Vec<String>,
    /// advise's ranking and recommendation (None for the other commands).
    pub ranking: Option<Ranking>,
}

/// The HTML document.
pub fn render(p: &Page) -> Vec<u8> {
    page::html(p, &data(p)).into_bytes()
}

/// The page of a lab, simulate, replay or advise report: one flow per row, with the row's
/// packets when the producer recorded them (`events[k]` for row k; empty when it recorded none).
/// `rtt_ns` is the path's round trip without delays (the link's), for the ladder's slant;
/// `capture_at` the endpoint the packets were stamped at (None: at each sender, the model).
pub fn rows_page<'a>(
    r: &'a crate::Report,
    header: Header,
    events: &[&'a [Event]],
    rtt_ns: Option<u64>,
    no_events: &str,
    capture_at: Option<trace::Endpoint>,
) -> Page<'a> {
    let flows = r
        .results
        .iter()
        .enumerate()
        .map(|(k, row)| {
            let ev = events.get(k).copied().filter(|e| !e.is_empty());
            FlowIn {
                label: if row.variant.is_empty() {
                    format!("row {}: {}", k + 1, row.strategy)
                } else {
                    format!("row {}: {} {}", k + 1, row.strategy, row.variant)
                },
                row: Some(k),
                stalls: &row.stall_records,
                events: ev,
                events_note: None,
                rtt_ns,
                capture_point: r.mode.clone(),
                capture_at,
            }
        })
        .collect::<Vec<_>>();
    let mut notes = Vec::new();
    if flows.iter().all(|f| f.events.is_none()) && !flows.is_empty() {
        notes.push(no_events.to_string());
    }
    Page { header, rows: &r.results, flows, errors: &r.errors, notes, ranking: None }
}

/// A command line as the header shows it: each argument quoted for a POSIX shell when needed.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    args.into_iter().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" ")
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_=.,:/@%+".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// `seconds` since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC` (civil calendar, proleptic
/// Gregorian; Howard Hinnant's days-from-civil inverse).
pub fn utc_date(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rem = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests;
