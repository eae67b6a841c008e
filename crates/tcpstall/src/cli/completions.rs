//! `tcpstall completions SHELL` and `tcpstall man`: generated from the clap definitions
//! (clap_complete, clap_mangen), printed to standard output.

use clap::CommandFactory;

use crate::flags::completions::{CompletionsArgs, ManArgs};
use crate::flags::Cli;

pub(crate) fn completions(a: CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "tcpstall", &mut out);
    super::output::write_bytes(&out, None)?;
    Ok(0)
}

pub(crate) fn man(a: ManArgs) -> anyhow::Result<i32> {
    let mut cmd = Cli::command();
    cmd.build();
    let page = match a.subcommand.as_deref() {
        None => cmd,
        Some(name) => {
            let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
            let sub = cmd
                .find_subcommand(name)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("man {name}: no such subcommand (one of: {})", names.join(", ")))?;
            sub
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    super::output::write_bytes(&out, None)?;
    Ok(0)
}
