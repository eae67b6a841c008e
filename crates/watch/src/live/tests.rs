//! The live watch's outputs on a packet script (crates/watch/src/tests.rs), written to buffers.

use std::cell::RefCell;
use std::rc::Rc;

use super::*;
use crate::tests::{cfg, nagle_rounds, ns, MS};

/// A writer the test reads back; `broken`: every write fails (a closed pipe).
#[derive(Clone, Default)]
struct Buf(Rc<RefCell<Vec<u8>>>, bool);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.1 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8(self.0.borrow().clone()).unwrap()
    }
}

struct Run {
    live: Live,
    stdout: Buf,
    stderr: Buf,
    pcap: Buf,
}

fn run(mode: Mode, stdout: Buf, metrics: Option<Arc<Metrics>>) -> Run {
    let (stderr, pcap) = (Buf::default(), Buf::default());
    let iface = wire::write::Interface { name: "lo".into(), description: String::new(), linktype: 101, snaplen: 128 };
    let pcap_w: Box<dyn Write> = Box::new(pcap.clone());
    let out = Outputs {
        stdout: Box::new(stdout.clone()),
        stderr: Box::new(stderr.clone()),
        mode,
        pcap: Some(PcapNgWriter::new(pcap_w, &[iface]).unwrap()),
        metrics,
        ifname: |i| format!("if{i}"),
    };
    Run { live: Live::new(Watcher::new(cfg()), out, 1_000), stdout, stderr, pcap }
}

fn push_all(live: &mut Live, port: u16, rounds: u32) {
    for p in nagle_rounds(port, 0, rounds, false) {
        let data = p.ip().unwrap();
        live.push(&Frame { ts_ns: ns(p.t_us), orig_len: data.len() as u32, data: &data, interface: 1 });
    }
}

fn clock(up_s: u64) -> Clock {
    Clock {
        now_unix_ns: ns(up_s * 1000 * MS),
        up_ns: up_s * 1_000_000_000,
        cpu_ns: 1_000 + up_s * 250_000_000,
        ring_drops: 0,
        ring_freezes: 0,
    }
}

#[test]
fn jsonl_writes_a_line_per_record_counts_it_in_the_metrics_and_keeps_its_packets() {
    let m = Arc::new(Metrics::new());
    let mut r = run(Mode::Jsonl, Buf::default(), Some(m.clone()));
    push_all(&mut r.live, 5000, 3);
    assert!(r.live.step(None).unwrap().is_continue());
    let lines: Vec<serde_json::Value> = r.stdout.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(lines[0]["kind"], "stall");
    assert_eq!(lines[0]["interface"], "if1");
    assert_eq!(lines[0]["flow"], "10.0.0.1:5000-10.0.0.2:80");
    assert_eq!(lines[0]["stall"]["cause"], "nagle-delayed-ack");
    assert!(m
        .render()
        .unwrap()
        .contains("tcpstall_watch_stalls_total{cause=\"nagle-delayed-ack\",port=\"80\",comm=\"\",cgroup=\"\"} 3\n"));
    let mut capture = wire::CaptureReader::new(std::io::Cursor::new(r.pcap.0.borrow().clone())).unwrap();
    let mut written = 0;
    while capture.next_packet().unwrap().is_some() {
        written += 1;
    }
    assert_eq!(written, 15, "the packets around the stalls, each once");
    r.live.finish(true).unwrap();
    r.live.summary(&clock(4), "lo", Some("w.pcapng".into()));
    let err = r.stderr.text();
    assert!(err.starts_with("tcpstall watch: 4.0 s on lo: 15 packets, 0 dropped by the ring, 1 flows (0 evicted), 3 stall records: nagle-delayed-ack 3"), "{err}");
    assert!(err.contains("; 25.0% of one CPU; 15 packets written to w.pcapng\n"), "{err}");
    assert!(r.stdout.text().lines().count() == 3, "the summary is not on standard output");
}

#[test]
fn a_closed_standard_output_ends_the_watch_quietly() {
    let mut r = run(Mode::Jsonl, Buf(Rc::default(), true), None);
    push_all(&mut r.live, 5000, 2);
    assert!(r.live.step(None).unwrap().is_break());
}

#[test]
fn the_tick_warns_of_ring_drops_once_and_the_table_mode_prints_its_summary_at_the_end() {
    let mut r = run(Mode::Table, Buf::default(), None);
    push_all(&mut r.live, 5000, 2);
    let dropped = Clock { ring_drops: 7, ..clock(1) };
    assert!(r.live.step(Some(&dropped)).unwrap().is_continue());
    assert!(r.live.step(Some(&dropped)).unwrap().is_continue());
    let err = r.stderr.text();
    assert_eq!(err.matches("dropped 7 packets so far").count(), 1, "{err}");
    assert!(r.stdout.text().is_empty(), "no live table off a terminal");
    r.live.summary(&clock(2), "lo", None);
    let out = r.stdout.text();
    assert!(
        out.starts_with("tcpstall watch: 2.0 s on lo:") && out.contains("\n  10.0.0.1:5000-10.0.0.2:80  2 stalls, "),
        "{out}"
    );
}

#[test]
fn on_a_terminal_the_tick_redraws_the_live_table() {
    let mut r = run(Mode::LiveTable, Buf::default(), None);
    push_all(&mut r.live, 5000, 1);
    assert!(r.live.step(Some(&clock(1))).unwrap().is_continue());
    let out = r.stdout.text();
    assert!(out.starts_with("\x1b[H\x1b[2Jtcpstall watch  1 s  packets 7") && out.contains("cpu 25.0%"), "{out}");
}

#[test]
fn the_cpu_share_is_cpu_time_over_wall_time() {
    assert_eq!(cpu_share(500, 1_000), 0.5);
    assert_eq!(cpu_share(500, 0), 0.0);
}
