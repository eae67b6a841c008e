//! `--report FILE.html` (lab, simulate, replay, advise, explain): what the page's header needs
//! from this host, and writing the page. The page itself is built by `report::html` (pure).

use std::path::Path;

use anyhow::Context;
use report::html::{Header, Page};

pub(crate) use report::html::rows_page;

/// The header: the command line as run, this host, now.
pub(crate) fn header(mode: &str, scenario: &str, link: &str, kernel: String) -> Header {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Header {
        mode: mode.into(),
        command: report::html::command_line(std::env::args()),
        version: env!("CARGO_PKG_VERSION").into(),
        kernel,
        host: fingerprint::proc_kernel("hostname").unwrap_or_else(|| "unknown".into()),
        date: report::html::utc_date(secs),
        scenario: scenario.into(),
        link: link.into(),
    }
}

/// This host's kernel release (`uname -r`).
pub(crate) fn this_kernel() -> String {
    fingerprint::proc_kernel("osrelease").unwrap_or_else(|| "unknown".into())
}

/// Writes the page and says where, on stderr (stdout may be JSON).
pub(crate) fn write(path: &Path, page: &Page) -> anyhow::Result<()> {
    let html = report::html::render(page);
    std::fs::write(path, &html).with_context(|| format!("--report: cannot write {}", path.display()))?;
    eprintln!("tcpstall: wrote the report to {} ({} KB)", path.display(), html.len().div_ceil(1024));
    Ok(())
}
