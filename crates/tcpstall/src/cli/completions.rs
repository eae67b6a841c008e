//! `tcpstall completions SHELL` and `tcpstall man`: generated from the clap definitions
//! (clap_complete, clap_mangen), printed to standard output.

use clap::CommandFactory;

const COMPLETION_EXAMPLES: &str = "\
Examples:
  tcpstall completions bash > ~/.local/share/bash-completion/completions/tcpstall
  tcpstall completions zsh > \"${fpath[1]}/_tcpstall\"
  tcpstall completions fish > ~/.config/fish/completions/tcpstall.fish";

const MAN_EXAMPLES: &str = "\
Examples:
  tcpstall man | man -l -                          read it now
  tcpstall man > /usr/local/share/man/man1/tcpstall.1   install it (then `man tcpstall`)
  tcpstall man advise > tcpstall-advise.1          one subcommand's page";

#[derive(Debug, clap::Args)]
#[command(after_help = COMPLETION_EXAMPLES)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
#[command(after_help = MAN_EXAMPLES)]
pub(crate) struct ManArgs {
    /// A subcommand's own page (tcpstall-SUBCOMMAND(1)) instead of tcpstall(1)
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

pub(crate) fn completions(a: CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "tcpstall", &mut out);
    super::output::write_bytes(&out, None)?;
    Ok(0)
}

pub(crate) fn man(a: ManArgs) -> anyhow::Result<i32> {
    let mut cmd = super::Cli::command();
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
