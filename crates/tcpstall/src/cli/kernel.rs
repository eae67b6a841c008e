//! `tcpstall kernel`: fingerprint the running kernel's TCP rules and name the Linux era profile
//! that matches them best.

use report::{Export, KernelDoc};

use super::output;
use crate::flags::kernel::KernelArgs;

pub(crate) fn run(args: KernelArgs) -> anyhow::Result<i32> {
    let format = args.format.into();
    // A format the document has no form in fails now, not after 7 s of experiments.
    if let Err(e @ report::ExportError::Unsupported { .. }) = KernelDoc::<()>::default().export(format) {
        return Err(e.into());
    }
    if let Some(p) = &args.output {
        output::check_writable("--output", p)?;
    }
    let doc = fingerprint::document(fingerprint::fingerprint())?;
    output::write_bytes(&doc.export(format)?, args.output.as_deref())?;
    Ok(0)
}

/// The profile `simulate --profile linux:here` uses: this kernel's measured rules (its notes
/// on stderr).
pub(crate) fn here_profile() -> Result<model::Profile, model::ModelError> {
    let (p, notes) = fingerprint::here_profile()?;
    for n in &notes {
        eprintln!("tcpstall: linux:here: {n}");
    }
    Ok(p)
}
