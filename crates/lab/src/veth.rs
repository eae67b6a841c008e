//! Seed 003's direct path: two private network namespaces joined by a veth pair, no forwarder,
//! the sender and the receiver on different CPUs with each side's receive processing (RPS)
//! steered to its own CPU, as on two hosts. The seed's knobs apply inside the namespaces only:
//! receiver GRO/LRO and sender TSO/GSO (`ethtool -K`, read back with `ethtool -k`), receiver
//! quick-ACK by route (`ip route ... quickack 1`: RTAX_QUICKACK through rtnetlink, read back with
//! `ip route show`), and pure ACKs thinned at the receiver's OUTPUT or dropped at the sender's
//! INPUT by iptables `-m statistic --mode nth` (the seed's own commands). The namespaces hold
//! every rule, route and device: deleting them removes all; a run killed before that is swept
//! by the next command of any kind (`link::sweep::sweep_all`: namespaces named after a pid that
//! no longer runs).
//!
//! The tools are the standard ones (iproute2, ethtool, iptables) run with `ip netns exec`: each
//! is what a reader of the seed would type, and each reads its setting back. CPU figures come
//! from /proc/stat (softirq ticks per CPU) and /proc/softirqs (NET_RX/NET_TX per CPU), read
//! before and after the row, never per packet; parsing is pure and tested here.

use std::path::PathBuf;
use std::process::Command;

use crate::Placement;

/// The seed's knobs for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Knobs {
    /// Receiver GRO (and LRO where the device has it) off.
    pub rx_gro_off: bool,
    /// Sender TSO and GSO off.
    pub tx_tso_off: bool,
    /// `quickack 1` on the receiver's route to the sender.
    pub route_quickack: bool,
    /// Keep 1 of every N pure ACKs the receiver sends (N = 2, 4, 8: 1/2, 3/4, 7/8 dropped).
    pub thin_rx_acks: Option<u32>,
    /// Keep 1 of every N pure ACKs arriving at the sender.
    pub drop_tx_acks: Option<u32>,
}

impl Knobs {
    pub fn label(&self) -> String {
        let mut v = vec![
            format!("rx GRO {}", if self.rx_gro_off { "off" } else { "on" }),
            format!("tx TSO {}", if self.tx_tso_off { "off" } else { "on" }),
        ];
        if self.route_quickack {
            v.push("route quickack".into());
        }
        if let Some(n) = self.thin_rx_acks {
            v.push(format!("rx drops {}/{n} pure ACKs", n - 1));
        }
        if let Some(n) = self.drop_tx_acks {
            v.push(format!("tx drops {}/{n} pure ACKs", n - 1));
        }
        v.join(", ")
    }
}

const PREFIX: &str = "tcpstall-veth-";
const TX_IP: &str = "10.203.0.1";
const RX_IP: &str = "10.203.0.2";

/// The two namespaces and the veth pair between them; removed on drop.
pub struct VethPath {
    tx_ns: String,
    rx_ns: String,
    tx_dev: String,
    rx_dev: String,
    /// The knobs as read back after applying them.
    pub readback: String,
    /// The CPUs the sender and the receiver run on (and their RPS masks point to).
    pub cpus: (usize, usize),
}

/// Why the veth path could not be set up: a tool that would not start or that failed.
#[derive(Debug, thiserror::Error)]
pub enum VethError {
    #[error("{tool}: {source} (is it installed? .ci/run installs iproute2, ethtool, iptables)")]
    Spawn {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    /// The command ran and exited non-zero; its standard error, trimmed.
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
}

fn run(args: &[&str]) -> Result<String, VethError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|source| VethError::Spawn { tool: args[0].to_string(), source })?;
    if !out.status.success() {
        return Err(VethError::Failed {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_ns(ns: &str, args: &[&str]) -> Result<String, VethError> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    run(&v)
}

impl VethPath {
    /// Creates the pair with `knobs` applied. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
    pub fn open(knobs: &Knobs) -> Result<VethPath, VethError> {
        let pid = std::process::id();
        let mut p = VethPath {
            tx_ns: format!("{PREFIX}{pid}-tx"),
            rx_ns: format!("{PREFIX}{pid}-rx"),
            tx_dev: format!("tsv{pid}t"),
            rx_dev: format!("tsv{pid}r"),
            readback: String::new(),
            cpus: cpus(),
        };
        // On an error `p` drops: whatever was made is removed.
        p.readback = p.setup(knobs)?;
        Ok(p)
    }

    fn setup(&self, k: &Knobs) -> Result<String, VethError> {
        let (tx, rx) = (self.tx_ns.as_str(), self.rx_ns.as_str());
        run(&["ip", "netns", "add", tx])?;
        run(&["ip", "netns", "add", rx])?;
        run(&[
            "ip",
            "link",
            "add",
            &self.tx_dev,
            "netns",
            tx,
            "type",
            "veth",
            "peer",
            "name",
            &self.rx_dev,
            "netns",
            rx,
        ])?;
        for (ns, dev, ip) in [(tx, &self.tx_dev, TX_IP), (rx, &self.rx_dev, RX_IP)] {
            run(&["ip", "-n", ns, "addr", "add", &format!("{ip}/24"), "dev", dev])?;
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        }
        // Each side's receive processing on its own CPU (RPS on the veth's one rx queue,
        // Documentation/networking/scaling.rst): the receiver's softirq work on the receiver's
        // CPU, the sender's ACK processing on the sender's.
        let mask = |cpu: usize| format!("{:x}", 1u64 << cpu);
        for (ns, dev, cpu) in [(tx, &self.tx_dev, self.cpus.0), (rx, &self.rx_dev, self.cpus.1)] {
            in_ns(ns, &["sh", "-c", &format!("echo {} > /sys/class/net/{dev}/queues/rx-0/rps_cpus", mask(cpu))])?;
        }
        self.apply(k)?;
        Ok(self.readback())
    }

    /// The seed's knobs inside the namespaces: GRO/LRO, TSO/GSO, route quickack, ACK thinning.
    fn apply(&self, k: &Knobs) -> Result<(), VethError> {
        let (tx, rx) = (self.tx_ns.as_str(), self.rx_ns.as_str());
        let onoff = |off: bool| if off { "off" } else { "on" };
        in_ns(rx, &["ethtool", "-K", &self.rx_dev, "gro", onoff(k.rx_gro_off)])?;
        // veth has no LRO; ask, and ignore "not supported" (read back below says what holds).
        let _ = in_ns(rx, &["ethtool", "-K", &self.rx_dev, "lro", "off"]);
        in_ns(tx, &["ethtool", "-K", &self.tx_dev, "tso", onoff(k.tx_tso_off), "gso", onoff(k.tx_tso_off)])?;
        if k.route_quickack {
            // RTAX_QUICKACK on the route to the sender: tcp_in_quickack_mode() honours
            // dst_metric(dst, RTAX_QUICKACK) (net/ipv4/tcp_input.c), every segment ACKed at once.
            run(&["ip", "-n", rx, "route", "replace", &format!("{TX_IP}/32"), "dev", &self.rx_dev, "quickack", "1"])?;
        }
        // Pure ACKs (ACK alone, no SYN/FIN/RST, 40-80 bytes: IPv4 + TCP + timestamps and a
        // few SACK blocks) kept 1 in N, the last of each N as the emulated link's ack-every=N
        // (docs/link.md "ACK thinning, decided once": seed 003's --every 2 --packet 0 -j DROP
        // drops the first of each two): the first rule passes the Nth, the second drops the
        // rest. xt_statistic.c nth mode: the counter starts at (N-1) - packet and matches on
        // wrapping to 0, so `--packet N-1` matches the Nth (checked: N = 2 passed the 2nd,
        // 4th, 6th and 8th of 8; N = 4 the 4th and 8th).
        let thin = |ns: &str, chain: &str, n: u32| -> Result<(), VethError> {
            let base = ["-p", "tcp", "--tcp-flags", "SYN,FIN,RST,ACK", "ACK", "-m", "length", "--length", "40:80"];
            let every = n.to_string();
            let last = n.saturating_sub(1).to_string();
            let mut keep = vec!["iptables", "-w", "-A", chain];
            keep.extend_from_slice(&base);
            keep.extend_from_slice(&[
                "-m",
                "statistic",
                "--mode",
                "nth",
                "--every",
                &every,
                "--packet",
                &last,
                "-j",
                "ACCEPT",
            ]);
            in_ns(ns, &keep)?;
            let mut drop = vec!["iptables", "-w", "-A", chain];
            drop.extend_from_slice(&base);
            drop.extend_from_slice(&["-j", "DROP"]);
            in_ns(ns, &drop)?;
            Ok(())
        };
        if let Some(n) = k.thin_rx_acks {
            thin(rx, "OUTPUT", n)?;
        }
        if let Some(n) = k.drop_tx_acks {
            thin(tx, "INPUT", n)?;
        }
        Ok(())
    }

    /// What holds after `apply`, read back with ethtool -k, ip route and iptables -S.
    fn readback(&self) -> String {
        let (tx, rx) = (self.tx_ns.as_str(), self.rx_ns.as_str());
        let feature = |ns: &str, dev: &str, name: &str| -> String {
            in_ns(ns, &["ethtool", "-k", dev])
                .ok()
                .and_then(|t| t.lines().find(|l| l.trim_start().starts_with(name)).map(|l| l.trim().to_string()))
                .unwrap_or_else(|| format!("{name}: ?"))
        };
        let route = run(&["ip", "-n", rx, "route", "show", &format!("{TX_IP}/32")]).unwrap_or_default();
        let rules = |ns: &str| {
            in_ns(ns, &["iptables", "-w", "-S"]).unwrap_or_default().lines().filter(|l| l.starts_with("-A")).count()
        };
        format!(
            "receiver {}; {}; sender {}; {}; route quickack {}; iptables rules rx {} tx {}; cpus tx {} rx {}",
            feature(rx, &self.rx_dev, "generic-receive-offload"),
            feature(rx, &self.rx_dev, "large-receive-offload"),
            feature(tx, &self.tx_dev, "tcp-segmentation-offload"),
            feature(tx, &self.tx_dev, "generic-segmentation-offload"),
            if route.contains("quickack 1") { "on" } else { "off" },
            rules(rx),
            rules(tx),
            self.cpus.0,
            self.cpus.1
        )
    }

    /// The namespaces' names (sender, receiver), for `ip netns exec`.
    pub fn namespaces(&self) -> (&str, &str) {
        (&self.tx_ns, &self.rx_ns)
    }

    /// The CPUs a path opened now would use (sender, receiver).
    pub fn cpus_here() -> (usize, usize) {
        cpus()
    }

    /// Where the lab puts the two ends: the sender (client) in tx, the receiver in rx.
    pub fn placement(&self, label: &str) -> Placement {
        Placement {
            client_netns: Some(PathBuf::from(format!("/run/netns/{}", self.tx_ns))),
            server_netns: Some(PathBuf::from(format!("/run/netns/{}", self.rx_ns))),
            server_ip: RX_IP.parse().expect("static address"),
            link: format!("veth ({label})"),
        }
    }
}

impl Drop for VethPath {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end (and so the pair), its routes and its
        // iptables rules.
        let _ = run(&["ip", "netns", "del", &self.tx_ns]);
        let _ = run(&["ip", "netns", "del", &self.rx_ns]);
    }
}

/// The sender's and the receiver's CPUs: two different ones when there are two, else both 0.
fn cpus() -> (usize, usize) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n >= 2 {
        (0, 1)
    } else {
        (0, 0)
    }
}

/// Per-CPU softirq time (ticks of USER_HZ) from /proc/stat: the 7th value of each `cpuN` line
/// (proc(5): user nice system idle iowait irq softirq ...). Pure.
pub fn parse_stat_softirq(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0))
        .collect()
}

/// Per-CPU total time (ticks) from /proc/stat: the sum of each `cpuN` line's values. Pure.
pub fn parse_stat_total(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse::<u64>().ok()).sum())
        .collect()
}

/// A row of /proc/softirqs ("NET_RX:", "NET_TX:") per CPU. Pure.
pub fn parse_softirqs(text: &str, name: &str) -> Vec<u64> {
    text.lines()
        .find(|l| l.trim_start().starts_with(name))
        .map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_default()
}

/// The counters read before and after a row.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot {
    softirq: Vec<u64>,
    total: Vec<u64>,
    net_rx: Vec<u64>,
    net_tx: Vec<u64>,
}

impl CpuSnapshot {
    pub fn read() -> CpuSnapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let si = std::fs::read_to_string("/proc/softirqs").unwrap_or_default();
        CpuSnapshot {
            softirq: parse_stat_softirq(&stat),
            total: parse_stat_total(&stat),
            net_rx: parse_softirqs(&si, "NET_RX:"),
            net_tx: parse_softirqs(&si, "NET_TX:"),
        }
    }

    /// Softirq ticks (USER_HZ) of one CPU between two snapshots.
    pub fn softirq_ticks(&self, after: &CpuSnapshot, cpu: usize) -> u64 {
        after.softirq.get(cpu).copied().unwrap_or(0).saturating_sub(self.softirq.get(cpu).copied().unwrap_or(0))
    }

    /// For one CPU between two snapshots: softirq share of its time, NET_RX and NET_TX raised.
    pub fn delta(&self, after: &CpuSnapshot, cpu: usize) -> (f64, u64, u64) {
        let d =
            |a: &[u64], b: &[u64]| b.get(cpu).copied().unwrap_or(0).saturating_sub(a.get(cpu).copied().unwrap_or(0));
        let total = d(&self.total, &after.total);
        let share = if total > 0 { d(&self.softirq, &after.softirq) as f64 / total as f64 } else { 0.0 };
        (share, d(&self.net_rx, &after.net_rx), d(&self.net_tx, &after.net_tx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// proc(5): /proc/stat cpuN lines are user nice system idle iowait irq softirq steal ...
    #[test]
    fn proc_stat_and_softirqs_parse_per_cpu() {
        let stat = "cpu  10 0 10 100 0 0 8 0 0 0\ncpu0 5 0 5 50 0 0 6 0 0 0\ncpu1 5 0 5 50 0 0 2 0 0 0\nintr 1\n";
        assert_eq!(parse_stat_softirq(stat), vec![6, 2]);
        assert_eq!(parse_stat_total(stat), vec![66, 62]);
        let si = "                    CPU0       CPU1\n          HI:          0          0\n      NET_TX:         12          3\n      NET_RX:       1000        200\n";
        assert_eq!(parse_softirqs(si, "NET_RX:"), vec![1000, 200]);
        assert_eq!(parse_softirqs(si, "NET_TX:"), vec![12, 3]);
        let a = CpuSnapshot { softirq: vec![6], total: vec![66], net_rx: vec![1000], net_tx: vec![12] };
        let b = CpuSnapshot { softirq: vec![16], total: vec![106], net_rx: vec![1500], net_tx: vec![20] };
        assert_eq!(a.delta(&b, 0), (0.25, 500, 8));
    }

    #[test]
    fn knobs_say_what_they_do() {
        let k = Knobs { rx_gro_off: true, route_quickack: true, thin_rx_acks: Some(4), ..Knobs::default() };
        assert_eq!(k.label(), "rx GRO off, tx TSO on, route quickack, rx drops 3/4 pure ACKs");
    }
}
