//! `tcpstall lab --remote HOST[:PORT]`: the scenario's rows with the server side played by
//! `tcpstall serve` on another host (crates/remote; docs/remote.md).

use std::net::SocketAddr;

use anyhow::{bail, Context};
use scenario::Scenario;

use crate::cli::output;
use crate::flags::lab::LabArgs;
use crate::flags::remote::RemoteArgs;

/// HOST[:PORT] to one address (the first the resolver gives; the default port without one).
fn resolve(s: &str) -> anyhow::Result<SocketAddr> {
    remote::client::resolve(s).map_err(|e| anyhow::anyhow!("--remote {s}: {e}"))
}

/// The key shared with the server: --key-file, or none with --insecure-no-auth.
fn key(r: &RemoteArgs) -> anyhow::Result<remote::Key> {
    Ok(match (&r.key_file, r.insecure_no_auth) {
        (Some(p), _) => remote::auth::read_key_file(p)?,
        (None, true) => remote::Key::insecure(),
        (None, false) => bail!("--remote needs --key-file FILE (the server's key), or --insecure-no-auth"),
    })
}

/// `advise --remote`: one authenticated session for all its runs (None without --remote).
/// `local_only`: --model or --link was given, which do not go with --remote.
pub(crate) fn session(r: &RemoteArgs, local_only: bool) -> anyhow::Result<Option<remote::client::Session>> {
    let Some(target) = r.remote.as_deref() else { return Ok(None) };
    if local_only {
        bail!("--remote runs the server side on another host: --model, --peer-profile and --link are not available with it");
    }
    let key = key(r)?;
    let addr = resolve(target)?;
    let s = remote::client::Session::open(addr, &key, lab::LabOptions::default().io_timeout)
        .map_err(|e| anyhow::anyhow!("--remote {target}: {e}"))?;
    Ok(Some(s))
}

pub(crate) fn run(args: &LabArgs, s: &Scenario) -> anyhow::Result<i32> {
    let r = &args.remote;
    let target = r.remote.as_deref().unwrap_or_default();
    for (flag, set) in [
        ("--link", args.link.is_some()),
        ("--capture", args.capture.is_some()),
        ("--port", args.port.is_some()),
        ("--report", args.report.is_some()),
        ("--tx-timestamps", args.tx_timestamps),
    ] {
        if set {
            bail!("--remote runs the server side on another host: {flag} is not available with it");
        }
    }
    let key = key(r)?;
    let addr = resolve(target)?;
    let opts = crate::flags::lab::lab_options(args)?;
    let sink = output::Sink::open(args.common.output.as_deref())?;
    // As `lab`: the first signal cancels the row in progress, a second ends the process.
    let interrupts = lab::Interrupts::start(opts.cancel.clone()).context("cannot install the Ctrl-C handler")?;
    let report = super::rows(args, s, |p| remote::client::run_scenario(s, addr, &key, &opts, p));
    let signal = interrupts.stop();
    let report = report.map_err(|e| anyhow::anyhow!("--remote {target}: {e}"))?;
    super::write(&report, sink, args.common.format)?;
    output::stall_records(&report, &args.common)?;
    if let Some(e) = report.errors.first() {
        eprintln!("tcpstall: {e}");
    }
    Ok(super::exit_code(signal, &report))
}
