//! Where a lab run's two ends live: loopback, or two namespaces behind the emulated link.
//! (Owned by the link work: this first version knows loopback only.)

use std::path::Path;

use lab::Placement;

/// The run's environment; dropping it tears the link down.
pub struct LinkEnv {
    pub placement: Placement,
}

impl LinkEnv {
    /// Tear down; returns lines describing what the link did (drops, added delay), if any.
    pub fn finish(self) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
}

/// Open the environment for `--link SPEC` (None = loopback) and `--capture FILE`.
pub fn open(spec: Option<&str>, capture: Option<&Path>) -> anyhow::Result<LinkEnv> {
    if spec.is_some() || capture.is_some() {
        anyhow::bail!("--link and --capture are not built yet");
    }
    Ok(LinkEnv { placement: Placement::loopback() })
}
