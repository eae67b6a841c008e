//! `tcpstall shell`: a command in a network namespace behind an emulated link.

use anyhow::Context;
use link::session::{run_session, SessionConfig};
use link::LinkSpec;

use crate::flags::shell::ShellArgs;

pub(crate) fn run(args: ShellArgs) -> anyhow::Result<i32> {
    let spec: LinkSpec = args.link.parse::<LinkSpec>().map_err(|e| anyhow::anyhow!("--link: {e}"))?;
    // Before the link is built: a capture that cannot be written fails in one line.
    if let Some(p) = &args.capture {
        super::output::check_writable("--capture", p)?;
    }
    let cfg = SessionConfig { spec, capture: args.capture, server_command: args.server_command, command: args.command };
    let quiet = args.quiet;
    let out = match run_session(&cfg, |line| {
        if !quiet {
            eprintln!("tcpstall shell: {line}");
        }
    }) {
        Ok(out) => out,
        // Like a shell: one line, 127 when the command is not found, 126 when it cannot be
        // executed (the link was up and is torn down already; nothing was measured).
        Err(e) if e.shell_exit_code().is_some() => {
            eprintln!("tcpstall shell: {e}");
            return Ok(e.shell_exit_code().unwrap_or(126));
        }
        Err(e) => return Err(e).context("shell"),
    };
    if !quiet {
        for l in out.report.summary_lines() {
            eprintln!("tcpstall shell: {l}");
        }
    }
    Ok(out.exit_code)
}
