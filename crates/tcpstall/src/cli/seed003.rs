//! `tcpstall lab stream --path veth [knobs]` and `--matrix seed003`: seed 003's table measured
//! on this machine (crates/lab veth.rs, seed003.rs), with 95% intervals over repetitions and a
//! finding per conclusion of the seed.

use std::time::Duration;

use anyhow::bail;
use lab::seed003::{MatrixRequest, Progress};
use lab::veth::Knobs;
use report::Export;

use super::output::{self, OutputFormat};

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

fn onoff(flag: &str, v: &str) -> anyhow::Result<bool> {
    match v {
        "on" => Ok(false),
        "off" => Ok(true),
        o => bail!("--{flag} {o}: expected on or off"),
    }
}

fn ratio(flag: &str, v: Option<u32>) -> anyhow::Result<Option<u32>> {
    match v {
        Some(n) if !(2..=64).contains(&n) => bail!("--{flag} {n}: expected 2 to 64 (keep 1 of every N)"),
        v => Ok(v),
    }
}

impl VethArgs {
    pub(crate) fn veth(&self) -> anyhow::Result<bool> {
        match self.path.as_str() {
            "loopback" => {
                let knobs = self.rx_gro != "on"
                    || self.tx_tso != "on"
                    || self.route_quickack
                    || self.thin_acks.is_some()
                    || self.drop_acks_at_sender.is_some();
                if knobs {
                    bail!(
                        "--rx-gro, --tx-tso, --route-quickack, --thin-acks and --drop-acks-at-sender need --path veth"
                    );
                }
                Ok(false)
            }
            "veth" => Ok(true),
            o => bail!("--path {o}: expected loopback or veth"),
        }
    }

    pub(crate) fn knobs(&self) -> anyhow::Result<Knobs> {
        Ok(Knobs {
            rx_gro_off: onoff("rx-gro", &self.rx_gro)?,
            tx_tso_off: onoff("tx-tso", &self.tx_tso)?,
            route_quickack: self.route_quickack,
            thin_rx_acks: ratio("thin-acks", self.thin_acks)?,
            drop_tx_acks: ratio("drop-acks-at-sender", self.drop_acks_at_sender)?,
        })
    }
}

/// `--matrix seed003`: every row `reps` times, interleaved (crates/lab/src/seed003.rs), then
/// the document in `format`.
pub(crate) fn run_matrix(v: &VethArgs, duration: Duration, format: OutputFormat, quiet: bool) -> anyhow::Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!("--matrix seed003 creates network namespaces and a veth pair: it needs root");
    }
    if !(1..=20).contains(&v.reps) {
        bail!("--reps {}: expected 1 to 20", v.reps);
    }
    // What killed runs left was swept at the start (cli::run).
    let req = MatrixRequest { reps: v.reps, duration, opts: lab::LabOptions::default() };
    let bar = output::progress_bar((lab::seed003::matrix().len() * v.reps as usize) as u64, quiet);
    let doc = lab::seed003::run_matrix(&req, &mut |p| match p {
        Progress::Start(name) => bar.set_message(name.to_string()),
        Progress::Done => bar.inc(1),
    });
    bar.finish_and_clear();
    output::write_bytes(&doc.export(format.into())?, None)?;
    Ok(0)
}
