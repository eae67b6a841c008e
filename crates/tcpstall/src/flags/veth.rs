//! `--path veth` and its knobs (seed 003), and `--matrix seed003`'s repetitions: the flags,
//! and the veth path's knobs they name.

use anyhow::bail;
use lab::seed003::{self, MatrixRequest, RequestError};
use lab::veth::Knobs;

/// The seed's knobs on the veth path (`--path veth`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct VethArgs {
    /// Where the stream runs: loopback (default) or veth (two namespaces joined by a veth
    /// pair, no forwarder; sender and receiver on different CPUs; seed 003)
    #[arg(long, value_name = "loopback|veth", default_value = "loopback")]
    pub path: String,
    /// --path veth: the receiver's GRO (and LRO)
    #[arg(long, value_name = "on|off", default_value = "on")]
    pub rx_gro: String,
    /// --path veth: the sender's TSO and GSO
    #[arg(long, value_name = "on|off", default_value = "on")]
    pub tx_tso: String,
    /// --path veth: `quickack 1` on the receiver's route to the sender
    #[arg(long)]
    pub route_quickack: bool,
    /// --path veth: the receiver keeps 1 of every N pure ACKs it sends (2, 4, 8: drops 1/2,
    /// 3/4, 7/8), iptables OUTPUT -m statistic --mode nth
    #[arg(long, value_name = "N")]
    pub thin_acks: Option<u32>,
    /// --path veth: the sender keeps 1 of every N pure ACKs it receives (iptables INPUT)
    #[arg(long, value_name = "N")]
    pub drop_acks_at_sender: Option<u32>,
    /// --matrix seed003: repetitions of each row (interleaved), for the 95% intervals
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub reps: u32,
}

/// `--FLAG VALUE: why` (lab::seed003's error says `VALUE: why`).
fn flag(name: &'static str) -> impl Fn(RequestError) -> anyhow::Error {
    move |e| anyhow::anyhow!("--{name} {e}")
}

impl VethArgs {
    pub(crate) fn veth(&self) -> anyhow::Result<bool> {
        let veth = seed003::veth_path(&self.path).map_err(flag("path"))?;
        let knobs = self.rx_gro != "on"
            || self.tx_tso != "on"
            || self.route_quickack
            || self.thin_acks.is_some()
            || self.drop_acks_at_sender.is_some();
        if !veth && knobs {
            bail!("--rx-gro, --tx-tso, --route-quickack, --thin-acks and --drop-acks-at-sender need --path veth");
        }
        Ok(veth)
    }

    pub(crate) fn knobs(&self) -> anyhow::Result<Knobs> {
        Ok(Knobs {
            rx_gro_off: !seed003::on(&self.rx_gro).map_err(flag("rx-gro"))?,
            tx_tso_off: !seed003::on(&self.tx_tso).map_err(flag("tx-tso"))?,
            route_quickack: self.route_quickack,
            thin_rx_acks: seed003::keep_one_of(self.thin_acks).map_err(flag("thin-acks"))?,
            drop_tx_acks: seed003::keep_one_of(self.drop_acks_at_sender).map_err(flag("drop-acks-at-sender"))?,
        })
    }

    /// `--matrix seed003`'s request: seed 003's stream `workload`, `--reps` times.
    pub(crate) fn matrix_request(&self, workload: &scenario::Workload) -> anyhow::Result<MatrixRequest> {
        MatrixRequest::stream(workload, self.reps, lab::LabOptions::default()).map_err(flag("reps"))
    }
}
