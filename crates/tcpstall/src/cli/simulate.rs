//! `tcpstall simulate` (not built yet).

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {}

pub fn run(_args: SimulateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("'tcpstall simulate' is not built yet")
}
