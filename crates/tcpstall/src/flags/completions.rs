//! `tcpstall completions` and `tcpstall man`'s flags and their help.

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
