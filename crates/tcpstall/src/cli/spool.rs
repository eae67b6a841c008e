//! A write-once, read-by-range byte store for per-flow report pieces: flows end in any order,
//! the report lists them in first-seen order, and a million finished flows must not stay in
//! memory. Pieces live in memory up to [`MEM_LIMIT`], then in an unlinked temporary file (kept
//! in memory if no temporary file can be made).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// Bytes kept in memory before moving them to the temporary file.
const MEM_LIMIT: usize = 8 << 20;

#[derive(Default)]
pub(crate) struct Spool {
    /// Bytes [0, file_len) are in the file, [file_len, file_len + mem.len()) in `mem`.
    file: Option<File>,
    file_len: u64,
    mem: Vec<u8>,
    /// A temporary file could not be made: everything stays in memory.
    no_file: bool,
}

impl Spool {
    /// Bytes stored.
    pub(crate) fn len(&self) -> u64 {
        self.file_len + self.mem.len() as u64
    }

    /// The buffer pieces are appended to; call [`Spool::settle`] after each piece.
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.mem
    }

    /// Moves the memory buffer to the file once it is large.
    pub(crate) fn settle(&mut self) -> std::io::Result<()> {
        if self.mem.len() < MEM_LIMIT || self.no_file {
            return Ok(());
        }
        if self.file.is_none() {
            match temp_file() {
                Ok(f) => self.file = Some(f),
                Err(_) => {
                    self.no_file = true;
                    return Ok(());
                }
            }
        }
        let f = self.file.as_ref().expect("just made");
        f.write_all_at(&self.mem, self.file_len)?;
        self.file_len += self.mem.len() as u64;
        self.mem.clear();
        Ok(())
    }

    /// Writes bytes [from, to) to `w`.
    pub(crate) fn copy_range(&self, from: u64, to: u64, w: &mut impl Write) -> std::io::Result<()> {
        let mut at = from;
        if at < self.file_len {
            let f = self.file.as_ref().expect("bytes in the file");
            let mut chunk = vec![0u8; (to.min(self.file_len) - at).min(1 << 20) as usize];
            while at < to.min(self.file_len) {
                let n = ((to.min(self.file_len) - at) as usize).min(chunk.len());
                f.read_exact_at(&mut chunk[..n], at)?;
                w.write_all(&chunk[..n])?;
                at += n as u64;
            }
        }
        if at < to {
            let s = (at - self.file_len) as usize;
            w.write_all(&self.mem[s..(to - self.file_len) as usize])?;
        }
        Ok(())
    }
}

/// A new temporary file, already unlinked (it disappears with the process).
fn temp_file() -> std::io::Result<File> {
    let dir = std::env::temp_dir();
    for n in 0..100u32 {
        let p = dir.join(format!("tcpstall-explain-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&p) {
            Ok(f) => {
                let _ = std::fs::remove_file(&p);
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary file name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_back_across_memory_and_file() {
        let mut s = Spool::default();
        let mut pieces = Vec::new();
        for i in 0..5000u32 {
            let from = s.len();
            let piece = format!("piece {i} {}\n", "x".repeat((i % 7000) as usize));
            s.buf().extend_from_slice(piece.as_bytes());
            s.settle().unwrap();
            pieces.push((from, s.len(), piece));
        }
        assert!(s.file.is_some() && s.file_len > 0 && !s.mem.is_empty());
        for (from, to, piece) in pieces.iter().rev().step_by(7) {
            let mut out = Vec::new();
            s.copy_range(*from, *to, &mut out).unwrap();
            assert_eq!(&out, piece.as_bytes());
        }
    }
}
