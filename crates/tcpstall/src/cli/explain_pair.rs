//! `tcpstall explain A B`: two captures of the same connections, one from each end, merged
//! (crates/remote/src/pair.rs; docs/remote.md).

use std::path::Path;

use anyhow::{bail, Context};

use super::explain::{ExplainArgs, ExplainFormat};

pub fn run(args: &ExplainArgs, peer: &Path) -> anyhow::Result<i32> {
    if !(args.min_gap.is_finite() && args.min_gap >= 0.0 && args.min_gap <= 60_000.0) {
        bail!("--min-gap {}: expected milliseconds between 0 and 60000", args.min_gap);
    }
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
    let ms = |ns: u64| ns as f64 / 1e6;
    if args.format == ExplainFormat::Json {
        let v: Vec<_> = merged
            .iter()
            .map(|m| {
                serde_json::json!({
                    "client": m.client.to_string(),
                    "server": m.server.to_string(),
                    "client_file": files[m.client_file].display().to_string(),
                    "ends_decided": m.how,
                    "offset_ns": m.offset_ns,
                    "offset_error_ns": m.error_ns,
                    "packets_matched": m.matched,
                    "stalls": m.stalls.iter().map(|(st, x)| serde_json::json!({
                        "stall": st,
                        "time_by_host_ns": x.map(|x| serde_json::json!({
                            "client_host": x.client_host, "network": x.network, "server_host": x.server_host,
                        })),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "merged": v }))?);
        return Ok(0);
    }
    println!("{} + {}: {} connection(s) seen at both ends", files[0].display(), files[1].display(), merged.len());
    for m in &merged {
        println!();
        println!(
            "connection {} <-> {}: client's end {} ({}); {} packets matched",
            m.client,
            m.server,
            files[m.client_file].display(),
            m.how,
            m.matched
        );
        println!(
            "  clock offset (server's file - client's file) {:+.3} ms +- {:.3} ms (from packets seen at both ends)",
            m.offset_ns as f64 / 1e6,
            ms(m.error_ns)
        );
        if m.stalls.is_empty() {
            println!("  no stalls (the classifier, on the client end's packets)");
            continue;
        }
        println!("  {} stalls (the classifier, on the client end's packets); time by host:", m.stalls.len());
        println!("     #    start s     length  cause                  held  client host    network  server host");
        for (i, (st, x)) in m.stalls.iter().enumerate() {
            let held = if st.held == trace::Endpoint::A { "client" } else { "server" };
            let split = x.map_or_else(
                || "   (its packets are not in both files)".to_string(),
                |x| format!("{:>8.2} ms {:>7.2} ms {:>9.2} ms", ms(x.client_host), ms(x.network), ms(x.server_host)),
            );
            println!(
                "  {:>4} {:>10.6} {:>8.2} ms  {:<22} {:<6}{split}",
                i + 1,
                st.start.0 as f64 / 1e9,
                ms(st.length.0),
                st.cause.as_str(),
                held
            );
        }
    }
    Ok(0)
}
