//! What a confidence means (issue 21): the calibration table of docs/explain.md, computed on a
//! labelled set and held here.
//!
//! The labelled set is every run of the oracle's matrix (tests/oracle.rs: every built-in
//! scenario but stream, every strategy of `--matrix all`, every stack profile and Linux era,
//! loopback and a 10 ms path), classified twice by the one classifier: from the packets alone
//! (what `explain` sees) and with the writers' write times (what kernel evidence and the lab
//! give); and, from packets alone, ground-truth experiments written as traces (writers on their
//! own clock, a server's think time at the probe timer's interval, path MTU discovery). The truth is the model's own: it knows which timer or ACK released every byte it
//! held (`Outcome::releases`). A record is right when its cause is the model's cause for the
//! hold that ends where the record ends, or, where the model held nothing, when it names no
//! TCP mechanism (`application`, or an ambiguous/unknown record). Every record counts, in the
//! band of its confidence.
//!
//! The docs' table is regenerated with `TCPSTALL_BLESS=1 cargo test -p tcpstall-model --test
//! calibration`; without it the test fails when the table in docs/explain.md differs.

mod common;

use common::MARGIN_NS;
use tcpstall_model as model;

use analyze::confidence::Band;
use model::{simulate, Profile, SimConfig};
use scenario::{LinkSpec, Scenario, StrategyPair};
use trace::{Cause, EventKind};

/// Per band: (records, right).
#[derive(Default, Clone, Copy)]
struct Cell {
    n: u64,
    right: u64,
}

#[derive(Default)]
struct Table {
    packets: [Cell; 4],
    writes: [Cell; 4],
}

fn band_index(b: Band) -> usize {
    Band::ALL.iter().position(|&x| x == b).unwrap_or(0)
}

/// One record against its truth (the cause that released the hold it ends at; None: nothing
/// was held there), in the band of its confidence.
fn tally(s: &analyze::Stall, truth: Option<Cause>, cells: &mut [Cell; 4]) {
    let right = match truth {
        Some(c) => s.cause == c,
        None => !s.cause.names_a_mechanism() || s.kind == analyze::RecordKind::Ambiguous,
    };
    let c = &mut cells[band_index(Band::of(s.confidence))];
    c.n += 1;
    c.right += u64::from(right);
}

fn score(recs: &[analyze::Stall], releases: &[model::Release], cells: &mut [Cell; 4]) {
    for s in recs {
        let end = (s.start + s.length).0;
        let truth = releases
            .iter()
            .filter(|r| r.t - r.since > MARGIN_NS && r.side == s.held)
            .find(|r| end.abs_diff(r.t) <= 1_000_000)
            .map(|r| r.cause);
        tally(s, truth, cells);
    }
}

fn run(scenario: &Scenario, pair: &StrategyPair, p: &Profile, link: &LinkSpec, t: &mut Table) {
    let mut cfg = SimConfig::new(p, p, link.clone());
    cfg.record_trace = true;
    for (_, w) in scenario.workload.variants() {
        let Ok(out) = simulate(&w, pair, &cfg) else { continue };
        if out.trace.iter().filter(|e| matches!(e.kind, EventKind::Segment(_))).count() >= model::TRACE_LIMIT {
            continue;
        }
        score(&model::classify(&out, p, p), &out.releases, &mut t.packets);
        let hz = u64::from(p.timer_hz.max(1));
        let acfg = analyze::Config { min_gap: trace::Duration(MARGIN_NS), timers: analyze::Timers::linux(hz) };
        let with_writes: Vec<analyze::Stall> = analyze::analyze_events(
            out.trace.iter().filter(|e| matches!(e.kind, EventKind::Segment(_) | EventKind::Write { .. })).cloned(),
            acfg,
        )
        .stalls()
        .cloned()
        .collect();
        score(&with_writes, &out.releases, &mut t.writes);
    }
}

fn render(t: &Table) -> String {
    let mut s = String::from(
        "| band | confidence | packets only: records | right | share | with write times: records | right | share |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (i, b) in Band::ALL.iter().enumerate() {
        let (p, w) = (t.packets[i], t.writes[i]);
        let share =
            |c: Cell| if c.n == 0 { "-".to_string() } else { format!("{:.1}%", 100.0 * c.right as f64 / c.n as f64) };
        s.push_str(&format!(
            "| {:?} | {} | {} | {} | {} | {} | {} | {} |\n",
            b,
            b.range(),
            p.n,
            p.right,
            share(p),
            w.n,
            w.right,
            share(w)
        ));
    }
    s
}

/// Ground-truth experiments written as packet traces (what a capture at the client shows):
/// writers on their own clock at several periods, with jitter and bursts (truth: nothing held);
/// a TCP_NODELAY server thinking 200 ms before each reply (truth: nothing held, though the
/// pause sits at the probe timer's interval); a segment too big for the path, ICMP
/// fragmentation-needed, the resend (truth: path-mtu).
mod experiments {
    use trace::{Endpoint, Event, EventKind, Evidence, IcmpError, IcmpKind, Instant, Segment, TcpFlags};

    pub(crate) struct Trace {
        pub ev: Vec<Event>,
        seq: [u32; 2],
    }

    const MS: f64 = 1e6;

    impl Trace {
        pub(crate) fn new(rtt_ms: f64) -> Trace {
            let mut t = Trace { ev: Vec::new(), seq: [1000, 5000] };
            t.seg(0.0, Endpoint::A, 999, 0, TcpFlags::SYN, 0, Some(1460));
            t.seg(rtt_ms, Endpoint::B, 4999, 1000, TcpFlags::SYN | TcpFlags::ACK, 0, Some(1460));
            t.seg(rtt_ms + 0.05, Endpoint::A, 1000, 5000, TcpFlags::ACK, 0, None);
            t
        }
        #[allow(clippy::too_many_arguments)]
        fn seg(&mut self, t_ms: f64, from: Endpoint, seq: u32, ack: u32, flags: u8, len: u32, mss: Option<u16>) {
            let n = self.ev.len() as u64 + 1;
            self.ev.push(Event {
                t: Instant((t_ms * MS) as u64),
                from,
                kind: EventKind::Segment(Segment {
                    window: 512,
                    wscale: Some(7),
                    mss,
                    wire_len: 54 + len,
                    ttl: Some(64),
                    ip_id: None,
                    ..trace::testing::segment(seq, ack, flags, len)
                }),
                evidence: Evidence::Frame(n),
            });
        }
        pub(crate) fn data(&mut self, t_ms: f64, from: Endpoint, len: u32) -> &mut Self {
            let (i, p) = (from.index(), from.peer().index());
            let (seq, ack) = (self.seq[i], self.seq[p]);
            self.seg(t_ms, from, seq, ack, TcpFlags::ACK | TcpFlags::PSH, len, None);
            self.seq[i] += len;
            self
        }
        pub(crate) fn ack(&mut self, t_ms: f64, from: Endpoint) -> &mut Self {
            let (i, p) = (from.index(), from.peer().index());
            let (seq, ack) = (self.seq[i], self.seq[p]);
            self.seg(t_ms, from, seq, ack, TcpFlags::ACK, 0, None);
            self
        }
        pub(crate) fn resend(&mut self, t_ms: f64, from: Endpoint, from_seq: u32, len: u32) -> &mut Self {
            let ack = self.seq[from.peer().index()];
            self.seg(t_ms, from, from_seq, ack, TcpFlags::ACK, len, None);
            self
        }
        pub(crate) fn icmp_frag(&mut self, t_ms: f64, about: Endpoint, seq: u32, mtu: u32) -> &mut Self {
            let n = self.ev.len() as u64 + 1;
            self.ev.push(Event {
                t: Instant((t_ms * MS) as u64),
                from: about,
                kind: EventKind::Icmp(IcmpError { kind: IcmpKind::FragNeeded { mtu }, seq }),
                evidence: Evidence::Frame(n),
            });
            self
        }
        pub(crate) fn seq(&self, e: Endpoint) -> u32 {
            self.seq[e.index()]
        }
    }

    /// B writes on its own clock; A's delayed ACK lands when it lands. Truth: nothing held.
    pub(crate) fn paced(period_ms: f64, jitter: f64, burst: bool) -> Trace {
        let mut s = Trace::new(0.5);
        let mut next_ack = 0.0;
        for k in 0..80u32 {
            let j = (((k * 7919) % 200) as f64 / 100.0 - 1.0) * jitter * period_ms;
            let t = 5.0 + k as f64 * period_ms + j;
            if next_ack > 0.0 && next_ack < t {
                s.ack(next_ack, Endpoint::A);
                next_ack = 0.0;
            }
            s.data(t, Endpoint::B, 54);
            if burst {
                s.data(t + 0.02, Endpoint::B, 1460).data(t + 0.04, Endpoint::B, 200);
            }
            if next_ack == 0.0 {
                next_ack = t + 0.3 + 39.0;
            }
        }
        s
    }

    /// A TCP_NODELAY server thinks `think_ms` before each reply. Truth: nothing held.
    pub(crate) fn think(think_ms: f64) -> Trace {
        let mut s = Trace::new(0.2);
        let mut t = 1.0;
        for _ in 0..20 {
            s.data(t, Endpoint::A, 40).ack(t + 0.1, Endpoint::B);
            t += think_ms;
            s.data(t, Endpoint::B, 60).ack(t + 0.1, Endpoint::A);
            t += 1.0;
        }
        s
    }

    /// A full segment too big for the path: ICMP fragmentation-needed, then the resend smaller.
    /// Truth: path-mtu.
    pub(crate) fn path_mtu(rtt_ms: f64) -> Trace {
        let mut s = Trace::new(rtt_ms);
        let head = s.seq(Endpoint::A);
        s.data(rtt_ms + 1.0, Endpoint::A, 1460);
        s.icmp_frag(rtt_ms + 1.0 + rtt_ms / 3.0, Endpoint::A, head, 1400);
        s.resend(rtt_ms + 1.05 + rtt_ms / 3.0, Endpoint::A, head, 1348);
        s
    }
}

/// The ground-truth experiments' records, scored: every gap of the paced and think-time traces
/// is truly no hold; the path-MTU trace's one stall is truly path-mtu.
fn score_experiments(cells: &mut [Cell; 4]) {
    let cfg = analyze::Config::default();
    let mut traces = Vec::new();
    for period in [15.0, 20.0, 110.0, 200.0, 1000.0] {
        for (jitter, burst) in [(0.0, false), (0.03, false), (0.0, true)] {
            traces.push((experiments::paced(period, jitter, burst), None));
        }
    }
    for think in [150.0, 201.0, 265.0, 500.0] {
        traces.push((experiments::think(think), None));
    }
    for rtt in [1.0, 20.0, 80.0] {
        traces.push((experiments::path_mtu(rtt), Some(Cause::PathMtu)));
    }
    for (t, truth) in traces {
        for s in analyze::analyze_events(t.ev, cfg).stalls() {
            tally(s, truth, cells);
        }
    }
}

#[test]
fn the_confidence_bands_mean_what_they_say() {
    let mut t = Table::default();
    common::each_run(|s, pair, p, link| run(s, pair, p, link, &mut t));
    score_experiments(&mut t.packets);
    let table = render(&t);
    eprintln!("{table}");
    // The top band: right at least 95% of the time, whichever evidence reached it.
    for cells in [&t.packets, &t.writes] {
        let top = cells[band_index(Band::Top)];
        assert!(top.n == 0 || top.right * 100 >= top.n * 95, "top band {} of {}\n{table}", top.right, top.n);
        let high = cells[band_index(Band::High)];
        assert!(high.n == 0 || high.right * 100 >= high.n * 90, "high band {} of {}\n{table}", high.right, high.n);
    }
    // Packets alone never reach the top band (issue 22: only write times do).
    assert_eq!(t.packets[band_index(Band::Top)].n, 0, "{table}");
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/explain.md");
    let text = std::fs::read_to_string(&docs).expect("docs/explain.md");
    let (begin, end) = ("<!-- calibration:begin -->\n", "<!-- calibration:end -->");
    let (Some(i), Some(j)) = (text.find(begin), text.find(end)) else {
        panic!("docs/explain.md has no calibration table between {begin:?} and {end:?}");
    };
    let current = &text[i + begin.len()..j];
    if std::env::var_os("TCPSTALL_BLESS").is_some() {
        let new = format!("{}{table}{}", &text[..i + begin.len()], &text[j..]);
        std::fs::write(&docs, new).expect("write docs/explain.md");
    } else {
        assert_eq!(current, table, "docs/explain.md's calibration table is stale: rerun with TCPSTALL_BLESS=1");
    }
}
