//! `--report FILE.html` (lab, simulate, explain): what the page's header needs from this host,
//! and the page of a lab/simulate report. The page itself is built by `report::html` (pure).

use std::path::Path;

use anyhow::Context;
use report::html::{FlowIn, Header, Page};
use trace::Event;

/// The header: the command line as run, this host, now.
pub(crate) fn header(mode: &str, scenario: &str, link: &str, kernel: String) -> Header {
    let command = std::env::args().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" ");
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Header {
        mode: mode.into(),
        command,
        version: env!("CARGO_PKG_VERSION").into(),
        kernel,
        host: proc_line("/proc/sys/kernel/hostname"),
        date: report::html::utc_date(secs),
        scenario: scenario.into(),
        link: link.into(),
    }
}

/// This host's kernel release (`uname -r`).
pub(crate) fn this_kernel() -> String {
    proc_line("/proc/sys/kernel/osrelease")
}

fn proc_line(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_=.,:/@%+".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// The page of a lab or simulate report: one flow per row, with the row's packets when the
/// producer recorded them (`events[k]` for row k; empty when it recorded none).
/// `rtt_ns` is the path's round trip without delays (the link's), for the ladder's slant;
/// `capture_at` the endpoint the packets were stamped at (None: at each sender, the model).
pub(crate) fn rows_page<'a>(
    r: &'a report::Report,
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

/// Write the page.
/// Writes the page and says where, on stderr (stdout may be JSON).
pub(crate) fn write(path: &Path, page: &Page) -> anyhow::Result<()> {
    let html = report::html::render(page);
    std::fs::write(path, &html).with_context(|| format!("--report: cannot write {}", path.display()))?;
    eprintln!("tcpstall: wrote the report to {} ({} KB)", path.display(), html.len().div_ceil(1024));
    Ok(())
}
