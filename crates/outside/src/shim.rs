//! The LD_PRELOAD shim (shim/nodelay_shim.c): TCP_NODELAY on every TCP socket a program
//! connects or accepts, for a dynamically linked program (the dynamic loader, ld.so(8), loads
//! the shim first and its connect/accept/accept4 take the place of libc's). It cannot apply to
//! a static binary (no PT_INTERP: no dynamic loader runs, LD_PRELOAD is never read) nor to a Go
//! program (its runtime makes the socket system calls itself, even when linked with cgo):
//! [`fit`] reads the ELF and says which. The .so is written to a file of ours while in use,
//! removed on drop, swept after a crash.

use std::path::{Path, PathBuf};

use crate::cgroup::PREFIX;
use crate::FixError;

static SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/nodelay_shim.so"));

/// Whether the shim can apply to a program, from its executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// Dynamically linked (a PT_INTERP program header), not Go.
    Applies,
    /// No PT_INTERP: statically linked, LD_PRELOAD is never read.
    Static,
    /// A Go build ID note: Go's runtime calls the kernel directly.
    Go,
    /// Not an ELF file this check reads (and not a script).
    NotElf,
}

/// ELF's PT_INTERP (elf(5)).
const PT_INTERP: u32 = 3;

/// What the ELF image `bytes` says about the shim. Pure: the ELF header's program header table
/// (32- or 64-bit, either byte order) for PT_INTERP; Go's build ID note ("\xff Go build ID: \"",
/// cmd/internal/buildid) anywhere in the file.
pub fn fit(bytes: &[u8]) -> Fit {
    if bytes.len() < 52 || &bytes[..4] != b"\x7fELF" {
        return Fit::NotElf;
    }
    if memfind(bytes, b"\xff Go build ID: \"").is_some() {
        return Fit::Go;
    }
    let wide = bytes[4] == 2;
    let le = bytes[5] == 1;
    let rd = |at: usize, n: usize| -> Option<u64> {
        let b = bytes.get(at..at + n)?;
        let mut v = 0u64;
        for i in 0..n {
            let byte = if le { b[n - 1 - i] } else { b[i] };
            v = v << 8 | u64::from(byte);
        }
        Some(v)
    };
    let (phoff, phentsize, phnum) =
        if wide { (rd(0x20, 8), rd(0x36, 2), rd(0x38, 2)) } else { (rd(0x1c, 4), rd(0x2a, 2), rd(0x2c, 2)) };
    let (Some(phoff), Some(size), Some(num)) = (phoff, phentsize, phnum) else { return Fit::NotElf };
    let interp = (0..num).any(|i| rd((phoff + i * size) as usize, 4) == Some(u64::from(PT_INTERP)));
    if interp {
        Fit::Applies
    } else {
        Fit::Static
    }
}

fn memfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The executable a shell command starts: its first word after `VAR=value` assignments (and
/// after `exec`/`env`), found on `path` (PATH's directories). Pure but for `exists`.
pub fn command_program(command: &str, path: &str, exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let word =
        command.split_whitespace().find(|w| (w.starts_with('/') || !w.contains('=')) && *w != "env" && *w != "exec")?;
    if word.contains('/') {
        return Some(PathBuf::from(word));
    }
    path.split(':').map(|d| Path::new(d).join(word)).find(|p| exists(p))
}

/// The interpreter of a script (`#!` line; `/usr/bin/env NAME` resolved on `path`). Pure but
/// for `exists`.
pub fn script_interpreter(head: &[u8], path: &str, exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let line = head.strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line.split(|b| *b == b'\n').next()?).to_string();
    let mut words = line.split_whitespace();
    let interp = words.next()?;
    if interp.ends_with("/env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return command_program(name, path, exists);
    }
    Some(PathBuf::from(interp))
}

/// Whether the shim applies to `command` (a shell command line), with the file checked: a
/// script is followed to its interpreter (up to 4 levels).
pub fn fit_command(command: &str) -> (Fit, Option<PathBuf>) {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let exists = |p: &Path| p.is_file();
    let Some(mut prog) = command_program(command, &path, exists) else { return (Fit::NotElf, None) };
    for _ in 0..4 {
        let Ok(bytes) = std::fs::read(&prog) else { return (Fit::NotElf, Some(prog)) };
        match script_interpreter(&bytes[..bytes.len().min(256)], &path, exists) {
            Some(next) => prog = next,
            None => return (fit(&bytes), Some(prog)),
        }
    }
    (Fit::NotElf, Some(prog))
}

/// The shim's file, in place while the guard lives.
#[derive(Debug)]
pub struct Shim {
    path: PathBuf,
}

impl Shim {
    /// Write the shim to a file of ours (`$TMPDIR/tcpstall-outside-<pid>-shim.so`).
    pub fn install() -> Result<Shim, FixError> {
        if cfg!(outside_no_shim) || SHIM.is_empty() {
            return Err(FixError::Unavailable("the LD_PRELOAD shim: not built (no C compiler at build time)".into()));
        }
        let path = std::env::temp_dir().join(format!("{PREFIX}{}-shim.so", std::process::id()));
        std::fs::write(&path, SHIM).map_err(|e| FixError::Io(path.display().to_string(), e))?;
        Ok(Shim { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The environment variable that loads it (appended to an LD_PRELOAD already set).
    pub fn env(&self) -> (String, String) {
        let v = match std::env::var("LD_PRELOAD") {
            Ok(old) if !old.is_empty() => format!("{}:{old}", self.path.display()),
            _ => self.path.display().to_string(),
        };
        ("LD_PRELOAD".into(), v)
    }

    /// The shim's C source, for a user who deploys it (compile: cc -shared -fPIC -O2 -o
    /// tcpstall-nodelay.so nodelay_shim.c -ldl).
    pub fn source() -> &'static str {
        include_str!("../shim/nodelay_shim.c")
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF header with program headers of the given types.
    fn elf64(types: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 * types.len()];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
        for (i, t) in types.iter().enumerate() {
            b[64 + 56 * i..68 + 56 * i].copy_from_slice(&t.to_le_bytes());
        }
        b
    }

    #[test]
    fn interp_means_dynamic_none_means_static() {
        assert_eq!(fit(&elf64(&[6, 3, 1, 1])), Fit::Applies);
        assert_eq!(fit(&elf64(&[1, 1, 4])), Fit::Static);
    }

    #[test]
    fn a_go_build_id_wins_over_interp() {
        let mut b = elf64(&[6, 3, 1]);
        b.extend_from_slice(b"\x04\x00\x00\x00\xff Go build ID: \"abc/def\"");
        assert_eq!(fit(&b), Fit::Go);
    }

    #[test]
    fn not_elf() {
        assert_eq!(fit(b"#!/bin/sh\necho hi\n"), Fit::NotElf);
        assert_eq!(fit(b"\x7fELF"), Fit::NotElf);
    }

    #[test]
    fn finds_the_program_and_a_scripts_interpreter() {
        let have = |p: &Path| p == Path::new("/usr/bin/python3") || p == Path::new("/usr/bin/bash");
        let path = "/usr/local/bin:/usr/bin";
        assert_eq!(command_program("FOO=1 exec python3 -m http.server", path, have), Some("/usr/bin/python3".into()));
        assert_eq!(command_program("./srv --x", path, have), Some("./srv".into()));
        assert_eq!(command_program("nosuch", path, have), None);
        assert_eq!(script_interpreter(b"#!/usr/bin/env bash\nexec x", path, have), Some("/usr/bin/bash".into()));
        assert_eq!(script_interpreter(b"#!/bin/sh -e\n", path, have), Some("/bin/sh".into()));
        assert_eq!(script_interpreter(b"\x7fELF", path, have), None);
    }

    #[test]
    fn this_systems_sh_is_dynamic() {
        // A real ELF file: /bin/sh on every Linux this runs on is dynamically linked.
        let (f, p) = fit_command("sh -c true");
        assert_eq!(f, Fit::Applies, "{p:?}");
    }
}
