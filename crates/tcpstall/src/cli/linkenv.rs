//! Where a lab run's two ends live: loopback, or two namespaces behind the emulated link.

use std::path::Path;

use anyhow::Context;
use lab::Placement;
use link::{Link, LinkSpec};

/// The run's environment; dropping it stops the forwarder and the namespaces disappear.
pub struct LinkEnv {
    pub placement: Placement,
    link: Option<Link>,
}

impl LinkEnv {
    /// Tear down; returns lines describing what the link did: per direction the packets
    /// carried and dropped (by reason), the delay applied (p50/p99) and the emulator's own
    /// added delay (p50/p99), and the capture file if any. Empty on loopback.
    pub fn finish(self) -> anyhow::Result<Vec<String>> {
        match self.link {
            None => Ok(Vec::new()),
            Some(l) => Ok(l.finish().context("link")?.summary_lines()),
        }
    }
}

/// Open the environment for `--link SPEC` (None = loopback) and `--capture FILE`.
///
/// Call before starting any thread: without root the link enters a user namespace, which
/// only a single-threaded process may do.
pub fn open(spec: Option<&str>, capture: Option<&Path>) -> anyhow::Result<LinkEnv> {
    let Some(spec) = spec else {
        if capture.is_some() {
            anyhow::bail!(
                "--capture records what the emulated link carries and needs --link (e.g. --link mtu=1500); \
                 for loopback use tcpdump -i lo"
            );
        }
        return Ok(LinkEnv { placement: Placement::loopback(), link: None });
    };
    let spec: LinkSpec = spec.parse().map_err(|e: String| anyhow::anyhow!("--link: {e}"))?;
    let swept = link::sweep::sweep();
    if !swept.is_empty() {
        eprintln!("tcpstall: removed {} stale process(es) left by killed runs", swept.len());
    }
    let l = Link::open(&spec, capture).context("--link")?;
    let placement = Placement {
        client_netns: Some(l.client().netns_path()),
        server_netns: Some(l.server().netns_path()),
        server_ip: l.server().ip.into(),
        link: spec.to_string(),
    };
    Ok(LinkEnv { placement, link: Some(l) })
}
