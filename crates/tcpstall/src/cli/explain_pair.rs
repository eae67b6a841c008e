//! `tcpstall explain A B`: two captures of the same connections, one from each end, merged
//! (crates/remote/src/pair.rs; docs/remote.md).

use std::path::Path;

use anyhow::{bail, Context};
use report::explain_pair::{MergedConnection, PairStall, TimeByHost};
use report::{ExplainPairDoc, Export};

use super::explain::ExplainArgs;
use super::output;

pub(crate) fn run(args: &ExplainArgs, peer: &Path) -> anyhow::Result<i32> {
    // --min-gap was checked by explain::run.
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
        packets.push(remote::pair::read(r).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?);
    }
    let cfg = analyze::Config { min_gap: trace::Duration((args.min_gap * 1e6) as u64), ..analyze::Config::default() };
    let merged = remote::pair::merge([&packets[0], &packets[1]], cfg);
    if merged.is_empty() {
        bail!(
            "{} and {} have no connection in common (the same 4-tuple with packets seen at both ends)",
            files[0].display(),
            files[1].display()
        );
    }
    let doc = document(&merged, files);
    let format = report::Format::from(args.format);
    output::write_bytes(&doc.export(format)?, None)?;
    Ok(0)
}

/// The merged connections as the report's document.
fn document(merged: &[remote::pair::Merged], files: [&Path; 2]) -> ExplainPairDoc {
    let name = |i: usize| files[i].display().to_string();
    ExplainPairDoc {
        merged: merged
            .iter()
            .map(|m| MergedConnection {
                client: m.client.to_string(),
                server: m.server.to_string(),
                client_file: name(m.client_file),
                ends_decided: m.how.to_string(),
                offset_ns: m.offset_ns,
                offset_error_ns: m.error_ns,
                packets_matched: m.matched as u64,
                stalls: m
                    .stalls
                    .iter()
                    .map(|(st, x)| PairStall {
                        stall: st.clone(),
                        time_by_host_ns: x.map(|x| TimeByHost {
                            client_host: x.client_host,
                            network: x.network,
                            server_host: x.server_host,
                        }),
                    })
                    .collect(),
            })
            .collect(),
        files: [name(0), name(1)],
    }
}
