//! What a confidence means (issue 21): the calibration table of docs/explain.md, computed on a
//! labelled set and held here.
//!
//! The labelled set is every run of the oracle's matrix (tests/oracle.rs: every built-in
//! scenario but stream, every strategy of `--matrix all`, every stack profile and Linux era,
//! loopback and a 10 ms path), classified twice by the one classifier: from the packets alone
//! (what `explain` sees) and with the writers' write times (what kernel evidence and the lab
//! give). The truth is the model's own: it knows which timer or ACK released every byte it
//! held (`Outcome::releases`). A record is right when its cause is the model's cause for the
//! hold that ends where the record ends, or, where the model held nothing, when it names no
//! TCP mechanism (`application`, or an ambiguous/unknown record). Every record counts, in the
//! band of its confidence.
//!
//! The docs' table is regenerated with `TCPSTALL_BLESS=1 cargo test -p tcpstall-model --test
//! calibration`; without it the test fails when the table in docs/explain.md differs.

use tcpstall_model as model;

use analyze::confidence::Band;
use model::{simulate, Profile, SimConfig};
use scenario::{LinkSpec, Opt, Scenario, SideOpts, StrategyPair};
use trace::{Cause, EventKind};

const MARGIN_NS: u64 = 10_000_000;

fn matrix_all() -> Vec<StrategyPair> {
    let mut m = vec![StrategyPair::new(SideOpts::none(), SideOpts::none())];
    for o in Opt::ALL {
        let side = SideOpts::new(vec![o]).unwrap_or_default();
        m.push(StrategyPair { label: o.as_str().to_string(), client: side.clone(), server: side });
    }
    m
}

fn sets(name: &str) -> &'static [&'static str] {
    match name {
        "chunked" => &["round=4"],
        "multi-write" => &["requests=6"],
        "burst" => &["rounds=5"],
        "bulk-ack" => &["rounds=4"],
        "rr" => &["rounds=50"],
        _ => &[],
    }
}

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

fn score(recs: &[analyze::Stall], releases: &[model::Release], cells: &mut [Cell; 4]) {
    for s in recs {
        let end = (s.start + s.length).0;
        let truth = releases
            .iter()
            .filter(|r| r.t - r.since > MARGIN_NS && r.side == s.held)
            .find(|r| end.abs_diff(r.t) <= 1_000_000)
            .map(|r| r.cause);
        let right = match truth {
            Some(c) => s.cause == c,
            None => !s.cause.names_a_mechanism() || s.kind == analyze::RecordKind::Ambiguous,
        };
        let c = &mut cells[band_index(Band::of(s.confidence))];
        c.n += 1;
        c.right += u64::from(right);
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

#[test]
fn the_confidence_bands_mean_what_they_say() {
    let mut t = Table::default();
    let links: [LinkSpec; 2] = [LinkSpec { mtu: 1500, ..model::loopback_link() }, "rtt=10ms,mtu=1500".parse().unwrap()];
    for scenario in Scenario::catalogue().into_iter().filter(|s| s.name != "stream") {
        let mut s = scenario.clone();
        s.apply_sets(sets(&s.name)).unwrap();
        for p in Profile::all().into_iter().chain(Profile::eras().into_iter().filter(|p| p.name != "linux")) {
            for pair in matrix_all() {
                for link in &links {
                    run(&s, &pair, &p, link, &mut t);
                }
            }
        }
    }
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
    let _ = Cause::Application;
}
