//! `tcpstall lab stream --path veth [knobs]` and `--matrix seed003`: seed 003's table measured
//! on this machine (crates/lab veth.rs, seed003.rs), with 95% intervals over repetitions and a
//! finding per conclusion of the seed.

use std::time::{Duration, Instant};

use anyhow::bail;
use lab::seed003::Measured;
use lab::veth::Knobs;
use rand::SeedableRng;
use serde::Serialize;

/// The seed's knobs on the veth path (`--path veth`).
#[derive(Debug, Clone, clap::Args)]
pub struct VethArgs {
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
    pub fn veth(&self) -> anyhow::Result<bool> {
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

    pub fn knobs(&self) -> anyhow::Result<Knobs> {
        Ok(Knobs {
            rx_gro_off: onoff("rx-gro", &self.rx_gro)?,
            tx_tso_off: onoff("tx-tso", &self.tx_tso)?,
            route_quickack: self.route_quickack,
            thin_rx_acks: ratio("thin-acks", self.thin_acks)?,
            drop_tx_acks: ratio("drop-acks-at-sender", self.drop_acks_at_sender)?,
        })
    }
}

/// One row of the printed table: the medians over repetitions and the throughput's interval.
#[derive(Debug, Serialize)]
struct RowOut {
    name: String,
    seed_row: Option<u8>,
    runs: usize,
    throughput_gbit_per_s: advise::Interval,
    acks_per_data_at_sender: f64,
    acks_per_data_at_receiver: f64,
    sender_softirq_share: f64,
    receiver_softirq_share: f64,
    sender_cpu_s_per_gb: f64,
    receiver_cpu_s_per_gb: f64,
    readback: String,
    measured: Vec<Measured>,
    /// Runs that failed twice (the run and its retry), with the last reason.
    failed: Vec<String>,
    /// Runs that failed once and succeeded when run again, with the first try's reason.
    retried: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `--matrix seed003`: every row `reps` times, interleaved, then the table and the findings.
pub fn run_matrix(v: &VethArgs, duration: Duration, json: bool, quiet: bool) -> anyhow::Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!("--matrix seed003 creates network namespaces and a veth pair: it needs root");
    }
    if !(1..=20).contains(&v.reps) {
        bail!("--reps {}: expected 1 to 20", v.reps);
    }
    // What killed runs left was swept at the start (cli::run).
    let rows = lab::seed003::matrix();
    let started = Instant::now();
    let mut got: Vec<Vec<Measured>> = rows.iter().map(|_| Vec::new()).collect();
    // A run that fails (the connection stops making progress when too few ACKs get through, or
    // a namespace's connection is not up yet: "Transport endpoint is not connected") is run once
    // more; one that fails twice is counted under the table; the other rows go on.
    let mut failed: Vec<Vec<String>> = rows.iter().map(|_| Vec::new()).collect();
    let mut retried: Vec<Vec<String>> = rows.iter().map(|_| Vec::new()).collect();
    let opts = lab::LabOptions::default();
    let bar = super::output::progress_bar((rows.len() * v.reps as usize) as u64, quiet);
    for _ in 0..v.reps {
        for (k, row) in rows.iter().enumerate() {
            bar.set_message(row.name.clone());
            match lab::seed003::run_one(row, duration, &opts) {
                Ok(m) => got[k].push(m),
                Err(first) => match lab::seed003::run_one(row, duration, &opts) {
                    Ok(m) => {
                        got[k].push(m);
                        retried[k].push(first);
                    }
                    Err(e) => failed[k].push(e),
                },
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let out: Vec<RowOut> = rows
        .iter()
        .zip(got)
        .zip(failed.into_iter().zip(retried))
        .map(|((row, m), (failed, retried))| {
            let runs: Vec<Vec<u64>> = m.iter().map(|x| vec![(x.throughput_bits_per_s / 1e3) as u64]).collect();
            let q = if runs.is_empty() {
                advise::Interval { est: f64::NAN, lo: f64::NAN, hi: f64::NAN }
            } else {
                advise::bootstrap_quantiles(&runs, &[0.5], 1000, &mut rng)[0]
            };
            let g = |x: f64| x / 1e6;
            let med = |f: fn(&Measured) -> f64| median(m.iter().map(f).collect());
            RowOut {
                name: row.name.clone(),
                seed_row: row.seed_row,
                runs: m.len(),
                throughput_gbit_per_s: advise::Interval { est: g(q.est), lo: g(q.lo), hi: g(q.hi) },
                acks_per_data_at_sender: med(|x| x.acks_per_data_at_sender),
                acks_per_data_at_receiver: med(|x| x.acks_per_data_at_receiver),
                sender_softirq_share: med(|x| x.sender_softirq_share),
                receiver_softirq_share: med(|x| x.receiver_softirq_share),
                sender_cpu_s_per_gb: med(|x| x.sender_cpu_s_per_gb),
                receiver_cpu_s_per_gb: med(|x| x.receiver_cpu_s_per_gb),
                readback: m.first().map(|x| x.readback.clone()).unwrap_or_default(),
                measured: m,
                failed,
                retried,
            }
        })
        .collect();
    let findings = findings(&out);
    if json {
        let doc = serde_json::json!({
            "tool": "tcpstall",
            "schema_version": report::SCHEMA_VERSION,
            "mode": "lab",
            "scenario": "stream",
            "matrix": "seed003",
            "kernel": lab::kernel_release(),
            "duration_s_per_run": duration.as_secs_f64(),
            "elapsed_s": started.elapsed().as_secs_f64(),
            "rows": out,
            "findings": findings,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(0);
    }
    println!(
        "tcpstall lab stream --matrix seed003: one-way bulk over a veth pair between two namespaces, sender on CPU {} \
         and receiver on CPU {}; {} runs of {:.1} s per row, interleaved; {:.0} s in all",
        lab::veth::VethPath::cpus_here().0,
        lab::veth::VethPath::cpus_here().1,
        v.reps,
        duration.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:<44} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  {:>24}",
        "row (seed's row first)", "ACK:data", "ACK:data", "tx si", "rx si", "tx cpu", "rx cpu", "throughput Gbit/s"
    );
    println!(
        "{:<44} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  {:>24}",
        "", "at tx", "at rx", "share", "share", "s/GB", "s/GB", "median [95% CI]"
    );
    // Failed and retried runs are footnotes under the table, marked [n] beside their row: the
    // table stays a table.
    let mut notes: Vec<String> = Vec::new();
    for r in &out {
        let t = &r.throughput_gbit_per_s;
        let mut name = r.name.clone();
        if !r.failed.is_empty() || !r.retried.is_empty() {
            let mut n = format!("{}: ", r.name);
            if let Some(e) = r.failed.last() {
                n += &format!(
                    "{} of {} runs failed twice (not in its figures): {e}",
                    r.failed.len(),
                    r.failed.len() + r.runs
                );
            }
            if let Some(e) = r.retried.first() {
                if !r.failed.is_empty() {
                    n += "; ";
                }
                n += &format!("{} run(s) failed once and were run again: {e}", r.retried.len());
            }
            notes.push(n);
            name = format!("{} [{}]", r.name, notes.len());
        }
        println!(
            "{:<44} {:>8} {:>8} {:>8.0}% {:>8.0}% {:>9.2} {:>9.2}  {:>8.2} [{:.2}-{:.2}]",
            name,
            fmt_ratio(r.acks_per_data_at_sender),
            fmt_ratio(r.acks_per_data_at_receiver),
            100.0 * r.sender_softirq_share,
            100.0 * r.receiver_softirq_share,
            r.sender_cpu_s_per_gb,
            r.receiver_cpu_s_per_gb,
            t.est,
            t.lo,
            t.hi
        );
    }
    for (i, n) in notes.iter().enumerate() {
        println!("[{}] {n}", i + 1);
    }
    println!("ACK:data: pure ACKs per data segment, received by the sender's TCP (at tx, tcpi_segs_in) and sent by the receiver's (at rx); si share: softirq share of that side's CPU (/proc/stat); cpu s/GB: the side's thread user+system time plus its CPU's softirq time, per GB moved");
    for f in &findings {
        println!("finding: {f}");
    }
    Ok(0)
}

fn fmt_ratio(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        "-".into()
    } else {
        format!("1:{:.0}", 1.0 / x)
    }
}

/// One line per conclusion of the seed, with this machine's numbers.
fn findings(rows: &[RowOut]) -> Vec<String> {
    let by = |name: &str| rows.iter().find(|r| r.name == name);
    let mut out = Vec::new();
    let t = |r: &RowOut| r.throughput_gbit_per_s.est;
    // 1. Pure ACKs cost throughput in proportion (MSS segments: TSO off, GRO off).
    if let (Some(q), Some(d)) = (by("2 no GRO, quick ACK, no TSO"), by("no GRO, delayed ACK, no TSO")) {
        let mut line = format!(
            "pure ACKs against throughput (GRO off, TSO off): quick ACK by route {} at {:.2} Gbit/s, delayed ACK {} at {:.2}",
            fmt_ratio(q.acks_per_data_at_sender),
            t(q),
            fmt_ratio(d.acks_per_data_at_sender),
            t(d)
        );
        if let Some(sq) = by("no GRO, socket quick ACK, no TSO") {
            line += &format!(", quick ACK by socket {} at {:.2}", fmt_ratio(sq.acks_per_data_at_sender), t(sq));
        }
        for name in ["4 no GRO, quick ACK, rx drops 3/4, no TSO", "no GRO, quick ACK, rx drops 7/8, no TSO"] {
            if let Some(r) = by(name) {
                if r.runs > 0 {
                    line += &format!(
                        "; {} {} at {:.2}",
                        name.trim_start_matches("4 "),
                        fmt_ratio(r.acks_per_data_at_sender),
                        t(r)
                    );
                } else {
                    line +=
                        &format!("; {}: the stream stopped (too few ACKs got through)", name.trim_start_matches("4 "));
                }
            }
        }
        let agrees = t(d) > t(q) && !d.throughput_gbit_per_s.overlaps(&q.throughput_gbit_per_s);
        line += if agrees {
            ": more pure ACKs, less throughput, as the seed says; thinning them does not buy it back here"
        } else {
            ": this machine does not show the seed's cost of pure ACKs (intervals overlap or reversed)"
        };
        out.push(line);
    }
    // 2. GRO/LRO reduces pure ACKs.
    if let (Some(on), Some(off)) = (by("GRO, delayed ACK, no TSO"), by("no GRO, delayed ACK, no TSO")) {
        out.push(format!(
            "GRO: the receiver sent {} pure ACKs per data segment with GRO on and {} with it off ({:.2} against {:.2} Gbit/s){}",
            fmt_ratio(on.acks_per_data_at_receiver),
            fmt_ratio(off.acks_per_data_at_receiver),
            t(on),
            t(off),
            if on.acks_per_data_at_receiver < off.acks_per_data_at_receiver {
                ": GRO reduces them, as the seed says"
            } else {
                ": GRO did not reduce them here"
            }
        ));
    }
    // 3. Dropping ACKs at the sender does not help.
    if let (Some(drop), Some(q)) = (by("5 no GRO, quick ACK, TSO, tx drops 1/2"), by("no GRO, quick ACK, TSO")) {
        let same = drop.throughput_gbit_per_s.overlaps(&q.throughput_gbit_per_s) || t(drop) <= t(q);
        out.push(format!(
            "sender-side drops: {:.2} Gbit/s with half the pure ACKs dropped at the sender's INPUT against {:.2} without \
             (sender softirq {:.0}% against {:.0}%){}",
            t(drop),
            t(q),
            100.0 * drop.sender_softirq_share,
            100.0 * q.sender_softirq_share,
            if same {
                ": no gain, as the seed says (the softirq work is spent before the drop)"
            } else {
                ": this machine gains from them, unlike the seed"
            }
        ));
    }
    // 4. TSO matters little.
    if let (Some(off), Some(on)) = (by("2 no GRO, quick ACK, no TSO"), by("no GRO, quick ACK, TSO")) {
        let r = t(off) / t(on);
        out.push(format!(
            "TSO: {:.2} Gbit/s without against {:.2} with (ratio {r:.2}){}",
            t(off),
            t(on),
            if (0.8..=1.25).contains(&r) {
                ": it matters little, as the seed says"
            } else {
                ": it matters here on veth (software segmentation costs the sender's CPU), unlike the seed's NIC"
            }
        ));
    }
    out
}
