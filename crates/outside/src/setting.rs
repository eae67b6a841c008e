//! The program's own setting, when the user names it: an environment variable given to the
//! program (`env:NAME=VALUE`), or a line added to its configuration file (`line:FILE:LINE`,
//! e.g. `line:/etc/mosquitto/mosquitto.conf:set_tcp_nodelay true`). The file is restored on
//! drop; its original is kept beside it in `$TMPDIR/tcpstall-outside-<pid>-setting` (its path on
//! the first line) until then, so [`crate::sweep()`] restores it after a crash.

use std::path::{Path, PathBuf};

use crate::cgroup::PREFIX;
use crate::FixError;

/// A setting the user named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    Env { name: String, value: String },
    Line { file: PathBuf, line: String },
}

impl std::str::FromStr for Setting {
    type Err = FixError;
    /// `env:NAME=VALUE` or `line:FILE:LINE`.
    fn from_str(s: &str) -> Result<Setting, FixError> {
        let bad = || {
            FixError::Input(format!(
                "setting `{s}`: expected env:NAME=VALUE or line:FILE:LINE (e.g. line:/etc/mosquitto/mosquitto.conf:set_tcp_nodelay true)"
            ))
        };
        if let Some(rest) = s.strip_prefix("env:") {
            let (n, v) = rest.split_once('=').ok_or_else(bad)?;
            if n.is_empty() || n.contains(char::is_whitespace) {
                return Err(bad());
            }
            return Ok(Setting::Env { name: n.into(), value: v.into() });
        }
        if let Some(rest) = s.strip_prefix("line:") {
            let (f, l) = rest.split_once(':').ok_or_else(bad)?;
            if f.is_empty() || l.trim().is_empty() {
                return Err(bad());
            }
            return Ok(Setting::Line { file: f.into(), line: l.into() });
        }
        Err(bad())
    }
}

impl Setting {
    pub fn label(&self) -> String {
        match self {
            Setting::Env { name, value } => format!("{name}={value}"),
            Setting::Line { file, line } => format!("`{line}` in {}", file.display()),
        }
    }

    /// The environment variable to give the program, for `Env`.
    pub fn env(&self) -> Option<(String, String)> {
        match self {
            Setting::Env { name, value } => Some((name.clone(), value.clone())),
            Setting::Line { .. } => None,
        }
    }

    /// Apply it (a `Line` is appended to its file); undone when the guard drops.
    pub fn apply(&self) -> Result<Applied, FixError> {
        match self {
            Setting::Env { .. } => Ok(Applied { restore: None }),
            Setting::Line { file, line } => {
                let io = |e| FixError::Io(file.display().to_string(), e);
                let before = std::fs::read(file).map_err(io)?;
                let backup = std::env::temp_dir().join(format!("{PREFIX}{}-setting", std::process::id()));
                let mut saved = format!("{}\n", file.display()).into_bytes();
                saved.extend_from_slice(&before);
                std::fs::write(&backup, saved).map_err(|e| FixError::Io(backup.display().to_string(), e))?;
                let mut after = before.clone();
                if !after.is_empty() && !after.ends_with(b"\n") {
                    after.push(b'\n');
                }
                after.extend_from_slice(format!("{line}\n").as_bytes());
                std::fs::write(file, after).map_err(io)?;
                Ok(Applied { restore: Some((file.clone(), before, backup)) })
            }
        }
    }
}

/// An applied setting; the file put back on drop.
#[derive(Debug)]
pub struct Applied {
    restore: Option<(PathBuf, Vec<u8>, PathBuf)>,
}

impl Drop for Applied {
    fn drop(&mut self) {
        if let Some((file, before, backup)) = self.restore.take() {
            if std::fs::write(&file, before).is_ok() {
                let _ = std::fs::remove_file(backup);
            }
        }
    }
}

/// Restore a file from a backup written by [`Setting::apply`] (the sweep's half).
pub(crate) fn restore_backup(backup: &Path) {
    let Ok(b) = std::fs::read(backup) else { return };
    let Some(nl) = b.iter().position(|c| *c == b'\n') else { return };
    let file = PathBuf::from(String::from_utf8_lossy(&b[..nl]).to_string());
    if std::fs::write(file, &b[nl + 1..]).is_ok() {
        let _ = std::fs::remove_file(backup);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_and_refuses_others() {
        assert_eq!(
            "env:NODELAY=1".parse::<Setting>().unwrap(),
            Setting::Env { name: "NODELAY".into(), value: "1".into() }
        );
        assert_eq!(
            "line:/etc/m.conf:set_tcp_nodelay true".parse::<Setting>().unwrap(),
            Setting::Line { file: "/etc/m.conf".into(), line: "set_tcp_nodelay true".into() }
        );
        for bad in ["NODELAY=1", "env:=1", "env:X", "line:/f", "line:/f: ", "line::x"] {
            assert!(bad.parse::<Setting>().is_err(), "{bad}");
        }
    }
}
