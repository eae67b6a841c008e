//! `tcpstall scenarios`'s flags and their help.

use super::common::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  tcpstall scenarios                      every built-in scenario: seed, finding, parameters, matrix
  tcpstall scenarios burst                one of them
  tcpstall scenarios --format json        the catalogue as JSON (also csv, markdown)
  tcpstall lab burst --set n=2            run one, overriding a parameter";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ScenariosArgs {
    /// Show only this scenario
    pub name: Option<String>,
    /// Print this built-in as a scenario file to start from (conversations as an exchange);
    /// save it, edit it, and run it with `tcpstall lab FILE.toml`
    #[arg(long, value_name = "NAME", conflicts_with = "name")]
    pub show: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}
