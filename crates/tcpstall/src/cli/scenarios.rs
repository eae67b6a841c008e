//! `tcpstall scenarios` (not built yet).

#[derive(Debug, clap::Args)]
pub struct ScenariosArgs {}

pub fn run(_args: ScenariosArgs) -> anyhow::Result<i32> {
    anyhow::bail!("'tcpstall scenarios' is not built yet")
}
