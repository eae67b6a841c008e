//! `tcpstall shell` (not built yet).

#[derive(Debug, clap::Args)]
pub struct ShellArgs {}

pub fn run(_args: ShellArgs) -> anyhow::Result<i32> {
    anyhow::bail!("'tcpstall shell' is not built yet")
}
