//! `tcpstall explain` (not built yet).

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {}

pub fn run(_args: ExplainArgs) -> anyhow::Result<i32> {
    anyhow::bail!("'tcpstall explain' is not built yet")
}
