//! `--remote`, `--key-file`, `--insecure-no-auth` (lab, advise).

use std::path::PathBuf;

#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RemoteArgs {
    /// Run the server side on `tcpstall serve` at HOST[:PORT] (default port 7523): request/response
    /// scenarios only; each host measures its own side (docs/remote.md).
    #[arg(long, value_name = "HOST[:PORT]")]
    pub remote: Option<String>,
    /// The key shared with the server (`tcpstall serve --init-key FILE`; mode 0600).
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub key_file: Option<PathBuf>,
    /// Talk to a server started with --insecure-no-auth (loopback only).
    #[arg(long, requires = "remote", conflicts_with = "key_file")]
    pub insecure_no_auth: bool,
}
