//! The result schema shared by `tcpstall lab` and `tcpstall simulate`, and its exporters.
//!
//! JSON is the stable contract (documented in docs/json-schema.md). Every exporter turns a
//! [`Report`] into bytes; the caller decides where they go.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
use serde::{Deserialize, Serialize};
use trace::VerdictKey;

pub mod advise;
pub mod cells;
mod document;
pub mod explain;
pub mod explain_pair;
mod export;
pub mod html;
pub mod kernel;
mod latency;
mod merge;
mod replay;
pub mod scenarios;
mod schema;
pub mod seed003;
pub mod simulate;
pub mod stats;
pub mod watch;
pub use document::{Export, ExportError};
pub use explain_pair::ExplainPairDoc;
pub use export::{label, stall_records_text};
pub use kernel::KernelDoc;
pub use latency::{histogram_ns, LatencyDist};
pub use merge::merge_connections;
pub use replay::html_flows as replay_html_flows;
pub use replay::{causes_text, ReplayDoc, ReplayOutput};
pub use scenarios::ScenariosDoc;
pub use schema::*;
pub use seed003::Seed003Doc;

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
pub(crate) trait Exporter {
    fn export(&self, report: &Report) -> Vec<u8>;
}

/// Placeholder so the workspace builds before the exporters land; VerdictKey is re-exported
/// because every result carries one.
pub type Key = VerdictKey;
