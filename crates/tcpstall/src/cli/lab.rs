//! `tcpstall lab` (not built yet).

#[derive(Debug, clap::Args)]
pub struct LabArgs {}

pub fn run(_args: LabArgs) -> anyhow::Result<i32> {
    anyhow::bail!("'tcpstall lab' is not built yet")
}
