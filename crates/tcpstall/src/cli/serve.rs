//! `tcpstall serve`: the far end of `lab --remote` (crates/remote; docs/remote.md).

use std::time::Duration;

use anyhow::bail;
use remote::server::{ServeConfig, Server};

use crate::flags::serve::ServeArgs;

pub(crate) fn run(a: ServeArgs) -> anyhow::Result<i32> {
    if let Some(path) = &a.init_key {
        remote::auth::init_key_file(path)?;
        eprintln!("tcpstall serve: wrote a new key to {} (mode 0600)", path.display());
        return Ok(0);
    }
    let Some(listen) = a.listen else {
        bail!("--listen ADDR:PORT is required (e.g. --listen 0.0.0.0:{})", remote::DEFAULT_PORT);
    };
    let key = match (&a.key_file, a.insecure_no_auth) {
        (Some(p), _) => Some(remote::auth::read_key_file(p)?),
        (None, true) => None,
        (None, false) => {
            bail!("no key: give --key-file FILE (`tcpstall serve --init-key FILE` writes one), or --insecure-no-auth on a loopback address")
        }
    };
    let limits = a.limits();
    let quiet = a.quiet;
    let server = Server::bind(ServeConfig {
        listen,
        key,
        limits,
        io_timeout: Duration::from_secs(10),
        log: Box::new(move |l| {
            if !quiet {
                eprintln!("tcpstall serve: {l}");
            }
        }),
    })?;
    let sig = server.run_until_signalled()?;
    Ok(sig.map_or(0, |s| 128 + s))
}
