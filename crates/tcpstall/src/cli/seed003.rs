//! `tcpstall lab stream --path veth [knobs]` and `--matrix seed003`: seed 003's table measured
//! on this machine (crates/lab veth.rs, seed003.rs), with 95% intervals over repetitions and a
//! finding per conclusion of the seed.

use anyhow::bail;
use lab::seed003::{self, Progress};
use report::Export;
use scenario::Scenario;

use super::output;
use crate::flags::common::OutputFormat;
use crate::flags::veth::VethArgs;

/// `--matrix seed003`: every row `reps` times, interleaved (crates/lab/src/seed003.rs), then
/// the document in `format`.
pub(crate) fn run_matrix(v: &VethArgs, s: &Scenario, format: OutputFormat, quiet: bool) -> anyhow::Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!("--matrix seed003 creates network namespaces and a veth pair: it needs root");
    }
    let req = v.matrix_request(&s.workload)?;
    // What killed runs left was swept at the start (cli::run).
    let bar = output::progress_bar((seed003::matrix().len() * v.reps as usize) as u64, quiet);
    let doc = seed003::run_matrix(&req, &mut |p| match p {
        Progress::Start(name) => bar.set_message(name.to_string()),
        Progress::Done => bar.inc(1),
    });
    bar.finish_and_clear();
    output::write_bytes(&doc.export(format.into())?, None)?;
    Ok(0)
}
