//! `lab --capture FILE`: every row's frames in one pcapng file.

use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wire::write::{Interface, PcapNgWriter};

use super::{Frames, LINKTYPE, SNAPLEN};

/// `--capture FILE`: the first write or flush error (the file's path in its text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CaptureFileError(pub String);

/// `lab --capture FILE` without `--link`: every row's frames, one pcapng interface per row (each
/// row has a loopback of its own). Shared by the rows; written as each row ends.
#[derive(Clone)]
pub struct CaptureFile {
    inner: Arc<Mutex<FileInner>>,
}

struct FileInner {
    path: PathBuf,
    w: Option<PcapNgWriter<BufWriter<std::fs::File>>>,
    interfaces: u32,
    error: Option<String>,
}

impl std::fmt::Debug for CaptureFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        write!(f, "CaptureFile({})", g.path.display())
    }
}

impl PartialEq for CaptureFile {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for CaptureFile {}

impl CaptureFile {
    /// Create (truncate) `path` and write the section header: fails at once, before any row
    /// runs, when the file cannot be written.
    pub fn create(path: &Path) -> io::Result<CaptureFile> {
        let f = std::fs::File::create(path)?;
        let w = PcapNgWriter::new(BufWriter::with_capacity(1 << 16, f), &[])?;
        Ok(CaptureFile {
            inner: Arc::new(Mutex::new(FileInner { path: path.to_path_buf(), w: Some(w), interfaces: 0, error: None })),
        })
    }

    /// Append one row's frames on an interface of their own; returns the number of frames
    /// before them in the file.
    pub(crate) fn write_row(&self, label: &str, frames: &Frames) -> u64 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        let Some(w) = g.w.as_mut() else { return 0 };
        let base = w.packets();
        if g.error.is_some() {
            return base;
        }
        let iface = Interface {
            name: "lo".into(),
            description: format!("tcpstall lab row '{label}': loopback of its network namespace, arriving copies"),
            linktype: LINKTYPE,
            snaplen: SNAPLEN,
        };
        let r = w.add_interface(&iface).and_then(|id| {
            for f in frames.iter() {
                w.packet(id, f.ts_ns, f.data, f.orig_len)?;
            }
            w.flush()
        });
        g.interfaces += 1;
        if let Err(e) = r {
            g.error = Some(format!("writing {}: {e}", g.path.display()));
        }
        base
    }

    /// Flush and close; the number of packets written, or the first write error.
    pub fn finish(&self) -> Result<u64, CaptureFileError> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let n = g.w.as_ref().map_or(0, |w| w.packets());
        if let Some(mut w) = g.w.take() {
            if let Err(e) = w.flush() {
                let msg = format!("writing {}: {e}", g.path.display());
                g.error.get_or_insert(msg);
            }
        }
        match g.error.clone() {
            Some(e) => Err(CaptureFileError(e)),
            None => Ok(n),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).path.clone()
    }
}
