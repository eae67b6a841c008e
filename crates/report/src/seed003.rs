//! `tcpstall lab stream --matrix seed003`: seed 003's table measured on this machine, with 95%
//! intervals over repetitions and a finding per conclusion of the seed (docs/json-schema.md,
//! "Seed 003 matrix"; the runs are crates/lab/src/seed003.rs).

use std::fmt::Write as _;

use serde::Serialize;

use crate::cells::{csv_field, md_cell};
use crate::Export;

/// The matrix: one row per knob setting, then the findings.
#[derive(Debug, Clone, Serialize)]
pub struct Seed003Doc {
    pub tool: &'static str,
    pub version: &'static str,
    pub schema_version: u32,
    /// Always "lab", "stream" and "seed003".
    pub mode: &'static str,
    pub scenario: &'static str,
    pub matrix: &'static str,
    /// `uname -r`.
    pub kernel: String,
    pub duration_s_per_run: f64,
    pub elapsed_s: f64,
    pub rows: Vec<Seed003Row>,
    /// One line per conclusion of the seed, with this machine's numbers.
    pub findings: Vec<String>,
    /// Runs of each row (`--reps`), and the sender's and receiver's CPUs: the table's heading.
    #[serde(skip)]
    pub reps: u32,
    #[serde(skip)]
    pub cpus: (usize, usize),
}

/// One row: the medians over its runs and the throughput's interval.
#[derive(Debug, Clone, Serialize)]
pub struct Seed003Row {
    pub name: String,
    /// The row of the seed's table it reproduces (1-5), if any.
    pub seed_row: Option<u8>,
    /// Runs measured (failed ones excluded).
    pub runs: u64,
    pub throughput_gbit_per_s: Interval,
    pub acks_per_data_at_sender: f64,
    pub acks_per_data_at_receiver: f64,
    pub sender_softirq_share: f64,
    pub receiver_softirq_share: f64,
    pub sender_cpu_s_per_gb: f64,
    pub receiver_cpu_s_per_gb: f64,
    pub readback: String,
    pub measured: Vec<Measured>,
    /// Runs that failed twice (the run and its retry), with the last reason.
    pub failed: Vec<String>,
    /// Runs that failed once and succeeded when run again, with the first try's reason.
    pub retried: Vec<String>,
}

/// An estimate and its 95% interval: advise's (one type for both documents).
pub use crate::stats::Interval;

/// What one run of a row measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
    /// NET_RX / NET_TX softirqs on each side's CPU during the run (/proc/softirqs).
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

/// A pure-ACK per data-segment ratio as `1:N`; `-` when unknown or none.
pub fn fmt_ratio(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        "-".into()
    } else {
        format!("1:{:.0}", 1.0 / x)
    }
}

impl Seed003Row {
    /// The footnote of a row with failed or retried runs.
    fn note(&self) -> Option<String> {
        if self.failed.is_empty() && self.retried.is_empty() {
            return None;
        }
        let mut n = format!("{}: ", self.name);
        if let Some(e) = self.failed.last() {
            let all = self.failed.len() as u64 + self.runs;
            n += &format!("{} of {all} runs failed twice (not in its figures): {e}", self.failed.len());
        }
        if let Some(e) = self.retried.first() {
            if !self.failed.is_empty() {
                n += "; ";
            }
            n += &format!("{} run(s) failed once and were run again: {e}", self.retried.len());
        }
        Some(n)
    }
}

const LEGEND: &str = "ACK:data: pure ACKs per data segment, received by the sender's TCP (at tx, tcpi_segs_in) and \
    sent by the receiver's (at rx); si share: softirq share of that side's CPU (/proc/stat); cpu s/GB: the side's \
    thread user+system time plus its CPU's softirq time, per GB moved";

impl Export for Seed003Doc {
    const COMMAND: &'static str = "lab --matrix seed003";

    fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tcpstall lab stream --matrix seed003: one-way bulk over a veth pair between two namespaces, sender on CPU {} \
             and receiver on CPU {}; {} runs of {:.1} s per row, interleaved; {:.0} s in all",
            self.cpus.0, self.cpus.1, self.reps, self.duration_s_per_run, self.elapsed_s
        );
        let head = |s: &mut String, c: [&str; 8]| {
            let _ = writeln!(
                s,
                "{:<44} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  {:>24}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            );
        };
        let h1 = [
            "row (seed's row first)",
            "ACK:data",
            "ACK:data",
            "tx si",
            "rx si",
            "tx cpu",
            "rx cpu",
            "throughput Gbit/s",
        ];
        head(&mut s, h1);
        head(&mut s, ["", "at tx", "at rx", "share", "share", "s/GB", "s/GB", "median [95% CI]"]);
        // Failed and retried runs are footnotes under the table, marked [n] beside their row:
        // the table stays a table.
        let mut notes: Vec<String> = Vec::new();
        for r in &self.rows {
            let t = &r.throughput_gbit_per_s;
            let mut name = r.name.clone();
            if let Some(n) = r.note() {
                notes.push(n);
                name = format!("{} [{}]", r.name, notes.len());
            }
            let _ = writeln!(
                s,
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
            let _ = writeln!(s, "[{}] {n}", i + 1);
        }
        let _ = writeln!(s, "{LEGEND}");
        for f in &self.findings {
            let _ = writeln!(s, "finding: {f}");
        }
        s
    }

    /// One line per row: the medians and the throughput interval (the runs are in the JSON).
    fn csv(&self) -> Option<String> {
        let mut out = String::from(
            "name,seed_row,runs,throughput_gbit_per_s,throughput_gbit_per_s_lo,throughput_gbit_per_s_hi,\
             acks_per_data_at_sender,acks_per_data_at_receiver,sender_softirq_share,receiver_softirq_share,\
             sender_cpu_s_per_gb,receiver_cpu_s_per_gb,failed,retried\n",
        );
        for r in &self.rows {
            let t = &r.throughput_gbit_per_s;
            let num = |x: f64| if x.is_finite() { format!("{x}") } else { String::new() };
            let f = [
                csv_field(&r.name),
                r.seed_row.map(|n| n.to_string()).unwrap_or_default(),
                r.runs.to_string(),
                num(t.est),
                num(t.lo),
                num(t.hi),
                num(r.acks_per_data_at_sender),
                num(r.acks_per_data_at_receiver),
                num(r.sender_softirq_share),
                num(r.receiver_softirq_share),
                num(r.sender_cpu_s_per_gb),
                num(r.receiver_cpu_s_per_gb),
                r.failed.len().to_string(),
                r.retried.len().to_string(),
            ];
            out.push_str(&f.join(","));
            out.push('\n');
        }
        Some(out)
    }

    /// The table's columns as a Markdown table, then the findings as a list.
    fn markdown(&self) -> Option<String> {
        let mut s = format!(
            "**tcpstall lab stream --matrix seed003** on {}: {} runs of {:.1} s per row\n\n\
             | row | ACK:data at tx | ACK:data at rx | tx si share | rx si share | tx cpu s/GB | rx cpu s/GB | throughput Gbit/s, median [95% CI] | failed | retried |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
            self.kernel, self.reps, self.duration_s_per_run
        );
        for r in &self.rows {
            let t = &r.throughput_gbit_per_s;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0}% | {:.0}% | {:.2} | {:.2} | {:.2} [{:.2}-{:.2}] | {} | {} |",
                md_cell(&r.name),
                fmt_ratio(r.acks_per_data_at_sender),
                fmt_ratio(r.acks_per_data_at_receiver),
                100.0 * r.sender_softirq_share,
                100.0 * r.receiver_softirq_share,
                r.sender_cpu_s_per_gb,
                r.receiver_cpu_s_per_gb,
                t.est,
                t.lo,
                t.hi,
                r.failed.len(),
                r.retried.len()
            );
        }
        if !self.findings.is_empty() {
            s.push('\n');
        }
        for f in &self.findings {
            let _ = writeln!(s, "- {f}");
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn row(name: &str, failed: usize, retried: usize) -> Seed003Row {
        Seed003Row {
            name: name.into(),
            seed_row: Some(1),
            runs: 2,
            throughput_gbit_per_s: Interval { est: 9.5, lo: 9.0, hi: 10.0 },
            acks_per_data_at_sender: 0.5,
            acks_per_data_at_receiver: f64::NAN,
            sender_softirq_share: 0.25,
            receiver_softirq_share: 0.5,
            sender_cpu_s_per_gb: 1.0,
            receiver_cpu_s_per_gb: 2.0,
            readback: "gro off".into(),
            measured: vec![Measured::default()],
            failed: vec!["stopped".into(); failed],
            retried: vec!["not connected".into(); retried],
        }
    }

    #[test]
    fn failed_runs_are_footnotes_and_json_has_no_table_facts() {
        let doc = Seed003Doc {
            tool: "tcpstall",
            version: "0",
            schema_version: 2,
            mode: "lab",
            scenario: "stream",
            matrix: "seed003",
            kernel: "6.18".into(),
            duration_s_per_run: 0.5,
            elapsed_s: 12.0,
            rows: vec![row("1 GRO, delayed ACK, TSO", 0, 0), row("2 no GRO", 1, 1)],
            findings: vec!["TSO: it matters little".into()],
            reps: 3,
            cpus: (0, 1),
        };
        let t = doc.table();
        assert!(t.contains("sender on CPU 0 and receiver on CPU 1; 3 runs of 0.5 s per row, interleaved; 12 s in all"));
        assert!(t.contains("\n1 GRO, delayed ACK, TSO    "), "{t}");
        assert!(
            t.contains("     1:2        -       25%       50%      1.00      2.00      9.50 [9.00-10.00]\n"),
            "{t}"
        );
        assert!(t.contains("\n2 no GRO [1] "), "{t}");
        assert!(
            t.contains("[1] 2 no GRO: 1 of 3 runs failed twice (not in its figures): stopped; 1 run(s) failed once"),
            "{t}"
        );
        assert!(t.ends_with("finding: TSO: it matters little\n"), "{t}");
        let csv = doc.csv().unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(csv.contains("\"1 GRO, delayed ACK, TSO\",1,2,9.5,9,10,0.5,,0.25,"), "{csv}");
        let v: serde_json::Value = serde_json::from_slice(&doc.export(Format::Json).unwrap()).unwrap();
        assert!(v.get("reps").is_none() && v.get("cpus").is_none(), "{v}");
        assert_eq!(v["rows"][0]["acks_per_data_at_receiver"], serde_json::Value::Null, "NaN is null");
        let md = doc.markdown().unwrap();
        assert!(
            md.contains("\n| 2 no GRO | 1:2 | - | 25% | 50% | 1.00 | 2.00 | 9.50 [9.00-10.00] | 1 | 1 |\n"),
            "{md}"
        );
        assert!(md.ends_with("\n\n- TSO: it matters little\n"), "{md}");
    }
}
