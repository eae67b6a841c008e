//! The classifier against ground truth from real programs on the real kernel (issue 32):
//! generates the `small` corpus (needs root: network namespaces, iptables, tcpdump, eBPF),
//! scores the classifier on it and fails when any cause's precision or recall, at any capture
//! point, from packets alone or with kernel evidence, falls more than 2 points (and more than
//! one labelled wait) below the committed table (crates/truth/scorecard.json, `score --write-baseline`), for causes with at
//! least 5 labels (recall) or named records (precision) in both. Not root: skipped with the
//! reason, except under CI=true, where a test that cannot run fails.

use std::path::PathBuf;
use std::process::Command;

use tcpstall_truth::baseline::Baseline;
use tcpstall_truth::score;

fn can_run() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (network namespaces, iptables, tcpdump, eBPF)".into());
    }
    for tool in ["ip", "iptables", "tcpdump", "ethtool"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

#[test]
fn small_corpus_scorecard_holds_the_committed_baseline() {
    if let Err(why) = can_run() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("cannot run under CI: {why}");
        }
        eprintln!("skipped: {why}");
        return;
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(tcpstall_truth::BASELINE);
    let base: Baseline =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("baseline")).expect("baseline json");
    // The corpus is real traffic: on a host loaded far past its CPUs (a load of 10 on 2 CPUs:
    // starved tcpdumps, late timers) one generation can move a rate by a few waits. A corpus
    // that falls below the table is generated once more and must hold then: a classifier that
    // regressed fails both.
    let mut bad = Vec::new();
    for attempt in 1..=2 {
        let dir = std::env::temp_dir().join(format!("tcpstall-truth-test-{}-{attempt}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let st = Command::new(env!("CARGO_BIN_EXE_tcpstall-truth"))
            .args(["corpus", "--seed", "1", "--size", "small", "--out"])
            .arg(&dir)
            .status()
            .expect("run tcpstall-truth corpus");
        assert!(st.success(), "corpus: {st}");
        let sc = score::score(&dir).expect("score");
        println!("{}", score::render(&sc, false));
        let _ = std::fs::remove_dir_all(&dir);
        // The corpus holds what it should: waits of several causes, and negatives.
        let c = &sc.composition;
        assert!(c.cases >= 10, "{} cases", c.cases);
        assert!(c.waits.values().sum::<u64>() >= 50, "{:?}", c.waits);
        assert!(c.waits.len() >= 3, "{:?}", c.waits);
        assert!(c.negatives >= 100, "{} negatives", c.negatives);
        bad = base.regressions(&sc, 0.02, 5);
        if bad.is_empty() {
            break;
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        eprintln!("corpus {attempt} (load {}) below the table:\n{}", load.trim(), bad.join("\n"));
    }
    assert!(bad.is_empty(), "below the committed scorecard by more than 2 points and one wait:\n{}", bad.join("\n"));
}
