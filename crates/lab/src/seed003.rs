//! Seed 003's experiment: one-way bulk over the direct veth path ([`crate::veth`]) with the
//! seed's knobs, and the columns that explain it: throughput, data segments and pure ACKs
//! (the receiver's sent, the sender's received, from tcp_info), and CPU on each side (its
//! thread's user+system time, its CPU's softirq time from /proc/stat, NET_RX/NET_TX from
//! /proc/softirqs), read before and after the row only.

use std::time::Duration;

use scenario::{SideOpts, StrategyPair, Workload};

use crate::veth::{CpuSnapshot, Knobs, VethPath};
use crate::{LabOptions, RunResult};

/// One row: the knobs, and the receiver's TCP_QUICKACK after every recv (the socket way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// The row of the seed's table it reproduces (1-5), if any.
    pub seed_row: Option<u8>,
    pub knobs: Knobs,
    pub socket_quickack: bool,
}

/// The seed's five rows and the neighbours that isolate one knob each.
pub fn matrix() -> Vec<Row> {
    let k = |gro_off, tso_off, rq, thin, drop| Knobs {
        rx_gro_off: gro_off,
        tx_tso_off: tso_off,
        route_quickack: rq,
        thin_rx_acks: thin,
        drop_tx_acks: drop,
    };
    let row =
        |name: &str, seed_row, knobs, socket_quickack| Row { name: name.into(), seed_row, knobs, socket_quickack };
    vec![
        row("1 GRO, delayed ACK, TSO", Some(1), k(false, false, false, None, None), false),
        row("2 no GRO, quick ACK, no TSO", Some(2), k(true, true, true, None, None), false),
        row("3 no GRO, quick ACK, rx drops 1/2, TSO", Some(3), k(true, false, true, Some(2), None), false),
        row("4 no GRO, quick ACK, rx drops 3/4, no TSO", Some(4), k(true, true, true, Some(4), None), false),
        row("5 no GRO, quick ACK, TSO, tx drops 1/2", Some(5), k(true, false, true, None, Some(2)), false),
        // Neighbours, each differing from a seed row in one knob. With TSO on, veth hands the
        // receiver whole 64 KB GSO packets (no segmentation on the way), so the ACK-rate rows
        // use TSO off: MSS segments, as on the seed's wire.
        row("no GRO, delayed ACK, no TSO", None, k(true, true, false, None, None), false),
        row("GRO, delayed ACK, no TSO", None, k(false, true, false, None, None), false),
        row("no GRO, socket quick ACK, no TSO", None, k(true, true, false, None, None), true),
        row("no GRO, quick ACK, TSO", None, k(true, false, true, None, None), false),
        row("no GRO, quick ACK, rx drops 7/8, no TSO", None, k(true, true, true, Some(8), None), false),
    ]
}

/// What one run of a row measured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Measured {
    pub throughput_bits_per_s: f64,
    pub bytes: u64,
    /// Data segments the sender sent, pure ACKs the receiver sent (before any filter), and the
    /// segments the sender's TCP received (the ACKs that got through).
    pub data_segments: u64,
    pub receiver_pure_acks: u64,
    pub sender_acks_received: Option<u64>,
    /// Pure ACKs per data segment at the sender (received) and at the receiver (sent).
    pub acks_per_data_at_sender: f64,
    pub acks_per_data_at_receiver: f64,
    /// Share of the sender's / receiver's CPU time spent in softirq during the row.
    pub sender_softirq_share: f64,
    pub receiver_softirq_share: f64,
    pub sender_net_rx: u64,
    pub sender_net_tx: u64,
    pub receiver_net_rx: u64,
    pub receiver_net_tx: u64,
    /// CPU seconds per GB moved: the side's thread (user+system) plus its CPU's softirq time.
    pub sender_cpu_s_per_gb: f64,
    pub receiver_cpu_s_per_gb: f64,
    /// The knobs as read back (ethtool -k, ip route, iptables -S).
    pub readback: String,
}

fn clk_tck() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100.0, |v| v as f64)
}

/// Runs one row for `duration` on a fresh veth pair. Needs root.
pub fn run_one(row: &Row, duration: Duration, opts: &LabOptions) -> Result<Measured, String> {
    let path = VethPath::open(&row.knobs).map_err(|e| e.to_string())?;
    // 128 KiB writes, as iperf3's: the bench compares the two on the same pair.
    let w = Workload::Stream(scenario::Stream { duration_ms: duration.as_millis() as u32, write_size: 131_072 });
    let server = if row.socket_quickack {
        SideOpts::parse_list("quickack-each").map_err(|e| e.to_string())?
    } else {
        SideOpts::none()
    };
    let pair = StrategyPair::new(SideOpts::none(), server);
    let o = LabOptions {
        own_netns: false,
        capture: false,
        lo_mtu: None,
        pin: Some(path.cpus),
        keep_packets: false,
        capture_file: None,
        tap: None,
        ..opts.clone()
    };
    let before = CpuSnapshot::read();
    let r: RunResult =
        crate::run_pair(&w, &pair, &path.placement(&row.knobs.label()), &o).map_err(|e| e.to_string())?;
    let after = CpuSnapshot::read();
    let (tx_cpu, rx_cpu) = path.cpus;
    let (tx_share, tx_rx, tx_tx, tx_si) = delta(&before, &after, tx_cpu);
    let (rx_share, rx_rx, rx_tx, rx_si) = delta(&before, &after, rx_cpu);
    let bytes = r.wire.client.bytes_sent;
    let gb = bytes as f64 / 1e9;
    let data = r.wire.client.data_segs_out;
    let pure = r.wire.server.non_data_segs_out;
    let got = r.tcp.as_ref().and_then(|t| t.client.segs_in);
    let tck = clk_tck();
    let thread = |us: f64| us / 1e6;
    let (c_cpu, s_cpu) = r.cpu.map_or((0.0, 0.0), |c| (thread(c.client_cpu_us), thread(c.server_cpu_us)));
    let per_gb = |s: f64| if gb > 0.0 { s / gb } else { 0.0 };
    Ok(Measured {
        throughput_bits_per_s: r.throughput_bytes_per_s * 8.0,
        bytes,
        data_segments: data,
        receiver_pure_acks: pure,
        sender_acks_received: got,
        acks_per_data_at_sender: got.map_or(f64::NAN, |g| g as f64 / data.max(1) as f64),
        acks_per_data_at_receiver: pure as f64 / data.max(1) as f64,
        sender_softirq_share: tx_share,
        receiver_softirq_share: rx_share,
        sender_net_rx: tx_rx,
        sender_net_tx: tx_tx,
        receiver_net_rx: rx_rx,
        receiver_net_tx: rx_tx,
        sender_cpu_s_per_gb: per_gb(c_cpu + tx_si as f64 / tck),
        receiver_cpu_s_per_gb: per_gb(s_cpu + rx_si as f64 / tck),
        readback: path.readback.clone(),
    })
}

/// (softirq share, NET_RX, NET_TX, softirq ticks) of one CPU between two snapshots.
fn delta(a: &CpuSnapshot, b: &CpuSnapshot, cpu: usize) -> (f64, u64, u64, u64) {
    let (share, rx, tx) = a.delta(b, cpu);
    (share, rx, tx, a.softirq_ticks(b, cpu))
}
