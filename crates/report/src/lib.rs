//! Every command's output: the versioned result schema ([`Report`], [`RunResult`], the row
//! the lab and the model fill), each command's document behind the one [`Export`] trait (JSON
//! from serde, the table, CSV and Markdown where a document is rows), the HTML pages, and the
//! one owner of each printed number: `stats` (quantiles, the median, bootstrap intervals) and
//! `cells` (CSV fields, Markdown cells, aligned tables, duration formats).
//!
//! JSON is the stable contract (documented in docs/json-schema.md). Documents render to
//! strings; the caller decides where they go.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
use serde::{Deserialize, Serialize};

pub mod advise;
pub mod advise_run;
pub mod cells;
mod connections;
mod document;
pub mod explain;
pub mod explain_pair;
pub mod html;
pub mod kernel;
mod lab_text;
mod latency;
pub mod owner;
mod replay;
pub mod scenarios;
mod schema;
pub mod seed003;
pub mod simulate;
pub mod sockets;
pub mod stats;
pub mod watch;
pub use connections::merge_connections;
pub use document::{Export, ExportError};
pub use explain_pair::ExplainPairDoc;
pub use kernel::KernelDoc;
pub use lab_text::{label, stall_records_text};
pub use latency::{histogram_ns, LatencyDist};
pub use replay::html_flows as replay_html_flows;
pub use replay::{causes_text, ReplayDoc, ReplayOutput, ThinkMs};
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
