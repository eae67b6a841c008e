//! The result schema shared by `tcpstall lab` and `tcpstall simulate`, and its exporters.
//!
//! JSON is the stable contract (documented in docs/json-schema.md). Every exporter turns a
//! [`Report`] into bytes; the caller decides where they go.

use serde::{Deserialize, Serialize};
use trace::VerdictKey;

mod document;
pub mod explain;
mod export;
pub mod html;
mod latency;
mod merge;
mod replay;
mod schema;
pub mod simulate;
pub use document::{Export, ExportError};
pub use export::{export, exporter, label, stall_records_text, Csv, Json, Markdown, Table};
pub use latency::{histogram_ns, LatencyDist};
pub use merge::merge_connections;
pub use replay::ReplayDoc;
pub use schema::*;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Table,
    Json,
    Csv,
    Markdown,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Table, Format::Json, Format::Csv, Format::Markdown];
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Markdown => "markdown",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s || (s == "md" && *f == Format::Markdown))
            .ok_or_else(|| format!("unknown format '{s}' (expected table, json, csv or markdown)"))
    }
}

/// One exporter per format: returns the bytes to write.
pub trait Exporter {
    fn export(&self, report: &Report) -> Vec<u8>;
}

/// Placeholder so the workspace builds before the exporters land; VerdictKey is re-exported
/// because every result carries one.
pub type Key = VerdictKey;
