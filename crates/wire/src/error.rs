//! Errors of the capture reader. Each names the byte offset in the file where the problem is,
//! so a user can open the file in a hex editor or cut the valid prefix with `editcap`.

/// A capture file that cannot be read further. Everything decoded before `offset` is valid.
#[derive(Debug, thiserror::Error)]
#[error("{what} at byte offset {offset}")]
pub struct WireError {
    /// Byte offset in the file of the record or block that could not be read.
    pub offset: u64,
    /// What is wrong, in words.
    pub what: String,
    /// The OS error behind it, when there is one. Its text is already in `what`, so it is not
    /// chained as the error's `source()`: a `{:#}` chain (anyhow) would print it twice.
    pub io: Option<std::io::Error>,
}

impl WireError {
    pub(crate) fn new(offset: u64, what: impl Into<String>) -> Self {
        WireError { offset, what: what.into(), io: None }
    }
    pub(crate) fn io(offset: u64, what: impl Into<String>, e: std::io::Error) -> Self {
        let what = format!("{}: {e}", what.into());
        WireError { offset, what, io: Some(e) }
    }
}
