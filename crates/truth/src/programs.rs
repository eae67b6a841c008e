//! Third-party programs (python http.client/http.server, mosquitto, nginx + curl, redis, nc,
//! OpenSSH) as cases, their writes from strace.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::net::Net;
use crate::shape::{Case, Size};

/// The third-party cases of `size`.
pub fn cases(_size: Size, _seed: u64) -> Vec<Case> {
    Vec::new()
}

/// Runs a third-party case.
pub fn run(case: &Case, _net: &Net, _addr: SocketAddr, _dir: &Path, _logs: &[PathBuf; 2]) -> anyhow::Result<()> {
    anyhow::bail!("{}: no such program", case.shape.name)
}
