//! One exporter for every command's output. Each command's result is a typed document (a
//! `Serialize` struct in this crate) that implements [`Export`]: JSON comes from serde and is
//! the stable contract (docs/json-schema.md); the table is for people; CSV and Markdown exist
//! where a document is a list of rows. A format a document has no form for is an error the
//! command prints in one line, never a silent fallback.

use serde::Serialize;

use crate::Format;

/// Why a document could not be written in the format asked for.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The document has no form in this format (e.g. CSV of a nested explanation).
    #[error("`{command}` output has no {format} form (use {supported})")]
    Unsupported { command: &'static str, format: &'static str, supported: String },
    /// serde_json failed (a non-finite float in a map key, a failing `Serialize` impl).
    #[error("could not write `{command}` output as JSON: {source}")]
    Json { command: &'static str, source: serde_json::Error },
}

/// A typed document a command prints. Implementors supply the table (and CSV/Markdown where
/// they apply); [`Export::export`] dispatches, and JSON is always serde's pretty form with a
/// trailing newline.
pub trait Export: Serialize {
    /// The command whose output this is: error messages and the docs/json-schema.md prefix.
    const COMMAND: &'static str;

    /// The aligned text for people.
    fn table(&self) -> String;

    /// One row per record, RFC 4180 quoting; `None` when the document is not a list of rows.
    fn csv(&self) -> Option<String> {
        None
    }

    /// A Markdown rendering; `None` when the document has none.
    fn markdown(&self) -> Option<String> {
        None
    }

    /// The formats this document can be written in (JSON and table always).
    fn formats(&self) -> Vec<Format> {
        let mut f = vec![Format::Table, Format::Json];
        if self.csv().is_some() {
            f.push(Format::Csv);
        }
        if self.markdown().is_some() {
            f.push(Format::Markdown);
        }
        f
    }

    /// The bytes of this document in `format`.
    fn export(&self, format: Format) -> Result<Vec<u8>, ExportError> {
        let text = match format {
            Format::Json => {
                let mut v = serde_json::to_vec_pretty(self)
                    .map_err(|source| ExportError::Json { command: Self::COMMAND, source })?;
                v.push(b'\n');
                return Ok(v);
            }
            Format::Table => Some(self.table()),
            Format::Csv => self.csv(),
            Format::Markdown => self.markdown(),
        };
        text.map(String::into_bytes).ok_or_else(|| ExportError::Unsupported {
            command: Self::COMMAND,
            format: format.as_str(),
            supported: self.formats().iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", "),
        })
    }
}

/// The lab/simulate report: its four exporters behind the one trait.
impl Export for crate::Report {
    const COMMAND: &'static str = "lab";

    fn table(&self) -> String {
        crate::lab_text::table(self)
    }

    fn csv(&self) -> Option<String> {
        Some(crate::lab_text::csv(self))
    }

    fn markdown(&self) -> Option<String> {
        Some(crate::lab_text::markdown(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Doc {
        n_bytes: u64,
    }

    impl Export for Doc {
        const COMMAND: &'static str = "test";
        fn table(&self) -> String {
            format!("{} bytes\n", self.n_bytes)
        }
    }

    #[test]
    fn json_and_table_always_other_formats_are_a_clear_error() {
        let d = Doc { n_bytes: 3 };
        assert_eq!(d.export(Format::Table).unwrap(), b"3 bytes\n");
        let v: serde_json::Value = serde_json::from_slice(&d.export(Format::Json).unwrap()).unwrap();
        assert_eq!(v["n_bytes"], 3);
        let e = d.export(Format::Csv).unwrap_err().to_string();
        assert_eq!(e, "`test` output has no csv form (use table, json)");
    }
}
