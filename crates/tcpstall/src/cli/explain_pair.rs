//! `tcpstall explain A B`: two captures of the same connections, one from each end, merged
//! (crates/remote/src/two_ends.rs; docs/remote.md).

use std::path::Path;

use anyhow::{bail, Context};
use report::Export;

use super::output;
use crate::flags::explain::ExplainArgs;

pub(crate) fn run(args: &ExplainArgs, peer: &Path) -> anyhow::Result<i32> {
    for (flag, set) in [
        ("--flow", args.flow.is_some()),
        ("--port", args.port.is_some()),
        ("--report", args.report.is_some()),
        ("--app-gaps", args.app_gaps),
    ] {
        if set {
            bail!("{flag} is for one capture; with two (one from each end) it is not available");
        }
    }
    let files = [args.file.as_path(), peer];
    let mut packets = Vec::new();
    for f in files {
        if f.as_os_str() == "-" {
            bail!("two captures are read from files, not standard input");
        }
        let r = std::fs::File::open(f).with_context(|| format!("cannot open {}", f.display()))?;
        packets.push(remote::two_ends::read(r).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?);
    }
    let cfg = analyze::Config { min_gap: args.min_gap()?, ..analyze::Config::default() };
    let merged = remote::two_ends::merge([&packets[0], &packets[1]], cfg);
    if merged.is_empty() {
        bail!(
            "{} and {} have no connection in common (the same 4-tuple with packets seen at both ends)",
            files[0].display(),
            files[1].display()
        );
    }
    let doc = remote::two_ends::document(&merged, files.map(|f| f.display().to_string()));
    let format = report::Format::from(args.format);
    output::write_bytes(&doc.export(format)?, None)?;
    Ok(0)
}
