//! Where a lab run's two ends live: loopback, or two namespaces behind the emulated link.

use std::path::Path;

use anyhow::Context;
use lab::Placement;
use link::{Link, LinkOptions, LinkSpec};

/// The run's environment; dropping it stops the forwarder and the namespaces disappear.
pub(crate) struct LinkEnv {
    pub placement: Placement,
    link: Option<Link>,
}

/// The link's tap as the lab sees it: the server side of the link (what tcpdump on the
/// server's TUN device would see).
struct ServerTap(link::capture::Tap);

impl lab::PacketTap for ServerTap {
    fn arm(&self) {
        self.0.arm()
    }
    fn take(&self) -> Vec<(u64, u32, Vec<u8>)> {
        self.0.take()
    }
    fn drain(&self) -> Vec<(u64, u32, Vec<u8>)> {
        self.0.drain()
    }
    fn point(&self) -> String {
        "the emulated link's server end (the forwarder's tap: server packets as sent, client packets as delivered)"
            .into()
    }
}

impl LinkEnv {
    /// The forwarder's tap for the lab's row traces (None on loopback).
    pub(crate) fn tap(&self) -> Option<lab::TapHandle> {
        let t = self.link.as_ref()?.tap()?;
        Some(lab::TapHandle(std::sync::Arc::new(ServerTap(t))))
    }

    /// Tear down; returns lines describing what the link did: per direction the packets
    /// carried and dropped (by reason), the delay applied (p50/p99) and the emulator's own
    /// added delay (p50/p99), and the capture file if any. Empty on loopback.
    pub(crate) fn finish(self) -> anyhow::Result<Vec<String>> {
        Ok(self.finish_report()?.map(|r| r.summary_lines()).unwrap_or_default())
    }

    /// Tear down; what the link did (None on loopback).
    pub(crate) fn finish_report(self) -> anyhow::Result<Option<link::LinkReport>> {
        self.link.map(|l| l.finish().context("link")).transpose()
    }
}

/// Open the environment for `--link SPEC` (None = loopback) and `--capture FILE`.
///
/// Call before starting any thread: without root the link enters a user namespace, which
/// only a single-threaded process may do.
/// `tap` keeps the server side's packets for the lab's row traces (off with `--no-capture`:
/// the forwarder then copies no packet unless `capture` asks for a file).
pub(crate) fn open(spec: Option<&str>, capture: Option<&Path>, tap: bool) -> anyhow::Result<LinkEnv> {
    let Some(spec) = spec else {
        if capture.is_some() {
            anyhow::bail!(
                "--capture records what the emulated link carries and needs --link (e.g. --link mtu=1500); \
                 for loopback use tcpdump -i lo"
            );
        }
        return Ok(LinkEnv { placement: Placement::loopback(), link: None });
    };
    let spec: LinkSpec = spec.parse::<LinkSpec>().map_err(|e| anyhow::anyhow!("--link: {e}"))?;
    // What killed runs left was swept at the start (cli::run, link::sweep::sweep_all).
    // The tap feeds each row's trace (the lab's stall records behind a link).
    let l = Link::open_with(&spec, capture, &LinkOptions { tap, ..LinkOptions::default() }).context("--link")?;
    let placement = Placement {
        client_netns: Some(l.client().netns_path()),
        server_netns: Some(l.server().netns_path()),
        server_ip: l.server().ip.into(),
        link: spec.to_string(),
    };
    Ok(LinkEnv { placement, link: Some(l) })
}
