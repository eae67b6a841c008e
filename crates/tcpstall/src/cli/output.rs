//! Output helpers shared by the commands: writing a report where the user asked (opened before
//! any work), `--stalls`' records, and the progress bar.

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::flags::common::{OutputFormat, ScenarioArgs};

/// `--stalls`: every row's stall records for people, after the table on stdout, or on stderr
/// when stdout carries JSON/CSV or the table went to a file.
pub(crate) fn stall_records(report: &report::Report, args: &ScenarioArgs) -> anyhow::Result<()> {
    if !args.stalls {
        return Ok(());
    }
    let text = report::stall_records_text(report);
    if args.format == OutputFormat::Table && args.output.is_none() {
        write_bytes(text.as_bytes(), None)
    } else {
        eprint!("{text}");
        Ok(())
    }
}

/// Write bytes to a file or stdout. A closed stdout (`| head`) is not an error worth a message.
pub(crate) fn write_bytes(bytes: &[u8], output: Option<&Path>) -> anyhow::Result<()> {
    Sink::open(output)?.write(bytes)
}

/// Where the output goes, opened before any measuring so that a path that cannot be written (a
/// missing directory, a directory) is an error before the run rather than after it.
#[derive(Debug)]
pub(crate) struct Sink {
    file: Option<OutFile>,
}

#[derive(Debug)]
struct OutFile {
    file: File,
    path: PathBuf,
    /// The file did not exist before: `discard` removes it again.
    created: bool,
}

impl Sink {
    /// Stdout, or `path` created (or opened, left as it is until `write`).
    pub(crate) fn open(path: Option<&Path>) -> anyhow::Result<Sink> {
        let Some(p) = path else { return Ok(Sink { file: None }) };
        let created = !p.exists();
        // No truncation yet: a run that ends with nothing to write leaves an existing file alone.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
            .with_context(|| format!("cannot write {}", p.display()))?;
        Ok(Sink { file: Some(OutFile { file, path: p.to_path_buf(), created }) })
    }

    /// Replace the file's content with `bytes`, or write them to stdout.
    pub(crate) fn write(self, bytes: &[u8]) -> anyhow::Result<()> {
        match self.file {
            Some(mut f) => {
                f.file
                    .set_len(0)
                    .and_then(|()| f.file.write_all(bytes))
                    .and_then(|()| f.file.flush())
                    .with_context(|| format!("cannot write {}", f.path.display()))?;
                // Every file a command writes says where it is (stderr: stdout may be data).
                eprintln!("tcpstall: wrote {} ({} bytes)", f.path.display(), bytes.len());
                Ok(())
            }
            None => {
                let mut out = std::io::stdout().lock();
                match out.write_all(bytes).and_then(|()| out.flush()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    r => r.context("cannot write to stdout"),
                }
            }
        }
    }

    /// Nothing to write after all: remove the file if this run created it.
    pub(crate) fn discard(self) {
        if let Some(f) = self.file.filter(|f| f.created) {
            drop(f.file);
            let _ = std::fs::remove_file(&f.path);
        }
    }
}

/// Fail now, in one line, if `path` cannot be written: called before any work starts for the
/// files written at the end (--report, --pcap) or by another layer (--capture). A file this
/// check creates is removed again.
pub(crate) fn check_writable(flag: &str, path: &Path) -> anyhow::Result<()> {
    Sink::open(Some(path)).context(flag.to_string())?.discard();
    Ok(())
}

/// A progress bar over `total` steps on stderr; hidden when `quiet` or stderr is not a
/// terminal, so pipes and CI logs stay clean.
pub(crate) fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    // Redraw a few times a second so a long row still shows time passing; the drawing thread
    // sleeps between ticks and does not touch the sockets.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// The lab's row progress on `bar`: the row's label while it runs, the count when it ends.
pub(crate) fn row_progress(bar: &ProgressBar) -> impl FnMut(lab::Progress) + '_ {
    move |p| match p {
        lab::Progress::Start { index, label, .. } => {
            bar.set_position(index as u64);
            bar.set_message(label);
        }
        lab::Progress::Done { index, .. } => bar.set_position(index as u64 + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwritable_output_fails_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let e = Sink::open(Some(&dir.path().join("missing/out.json"))).unwrap_err();
        assert!(format!("{e:#}").starts_with("cannot write "), "{e:#}");
        assert!(Sink::open(Some(dir.path())).is_err(), "a directory is not a file");
    }

    #[test]
    fn write_replaces_the_content_and_discard_removes_only_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        std::fs::write(&p, "old content, longer").unwrap();
        Sink::open(Some(&p)).unwrap().write(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        Sink::open(Some(&p)).unwrap().discard();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new", "an existing file is left alone");
        let q = dir.path().join("fresh.txt");
        Sink::open(Some(&q)).unwrap().discard();
        assert!(!q.exists());
    }
}
