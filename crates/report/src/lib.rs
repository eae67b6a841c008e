//! The result schema shared by `tcpstall lab` and `tcpstall simulate`, and its exporters.
//!
//! JSON is the stable contract (documented in docs/json-schema.md). Every exporter turns a
//! [`Report`] into bytes; the caller decides where they go.

use serde::{Deserialize, Serialize};
use trace::VerdictKey;

mod schema;
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

/// One exporter per format: returns the bytes to write.
pub trait Exporter {
    fn export(&self, report: &Report) -> Vec<u8>;
}

/// Placeholder so the workspace builds before the exporters land; VerdictKey is re-exported
/// because every result carries one.
pub type Key = VerdictKey;
