//! Seed 003 on the direct path (`lab stream --path veth`): the knobs move the ACK:data ratio the
//! way the seed's table says where this kernel agrees (route quick-ACK, receiver thinning), and
//! a killed run leaves nothing the next run does not sweep. Margins are wide: a factor of two
//! where the measured effect is an order of magnitude.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{exclusive, tcpstall};

fn veth(extra: &[&str]) -> Value {
    let out = tcpstall()
        .args([
            "lab",
            "stream",
            "--path",
            "veth",
            "--set",
            "duration_ms=700",
            "--client",
            "none",
            "--format",
            "json",
            "-q",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (pure ACKs the receiver sent, ACKs the sender's TCP received) per data segment.
fn ratios(j: &Value) -> (f64, f64) {
    let r = &j["results"][0];
    let data = r["wire"]["client"]["data_segs_out"].as_f64().unwrap().max(1.0);
    let sent = r["wire"]["server"]["non_data_segs_out"].as_f64().unwrap();
    let got = r["tcp"]["client"]["segs_in"].as_f64().expect("the sender's tcpi_segs_in");
    (sent / data, got / data)
}

pub(crate) fn route_quickack_and_thinning_move_the_ack_ratio() {
    let _one = exclusive();
    let plain = veth(&["--rx-gro", "off", "--tx-tso", "off"]);
    let quick = veth(&["--rx-gro", "off", "--tx-tso", "off", "--route-quickack"]);
    let link = quick["link"].as_str().unwrap();
    assert!(link.contains("route quickack on") && link.contains("generic-receive-offload: off"), "{link}");
    let ((p, _), (q, _)) = (ratios(&plain), ratios(&quick));
    assert!(q > 2.0 * p, "quickack 1 on the route: ACKs per data {q:.3} against {p:.3} without");
    assert!(q > 0.1, "route quick-ACK drives the ratio toward 1:1: {q:.3}");
    // Half the receiver's pure ACKs dropped at its OUTPUT: the sender gets about half.
    let thin = veth(&["--thin-acks", "2"]);
    let (sent, got) = ratios(&thin);
    let kept = got / sent;
    assert!((0.3..=0.7).contains(&kept), "kept {kept:.2} of the pure ACKs (asked 1/2): sent {sent:.4}, got {got:.4}");
    assert!(thin["link"].as_str().unwrap().contains("iptables rules rx 2 tx 0"), "{}", thin["link"]);
}

fn leftovers() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("tcpstall-veth-")).map(String::from).collect()
}

/// SIGKILL mid-run leaves the namespaces (a killed process cleans nothing); the next run sweeps
/// them, with their veth pair and rules, and leaves nothing of its own.
pub(crate) fn a_killed_veth_run_is_swept_by_the_next() {
    let _one = exclusive();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("tcpstall"))
        .args(["lab", "stream", "--path", "veth", "--thin-acks", "2", "--set", "duration_ms=8000", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mine = format!("tcpstall-veth-{pid}-");
    let t0 = std::time::Instant::now();
    while !leftovers().iter().any(|n| n.starts_with(&mine)) {
        assert!(t0.elapsed() < Duration::from_secs(10), "the run never made its namespaces");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(leftovers().iter().any(|n| n.starts_with(&mine)), "SIGKILL leaves them for the sweep");
    let out = tcpstall().args(["lab", "stream", "--path", "veth", "--set", "duration_ms=200", "-q"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed"), "the sweep says so");
    let left = leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `--matrix seed003`'s flags are checked before any namespace exists: one line, non-zero. (Its
/// `--format json` document is checked field by field in crates/report/tests/json_schema_doc.rs:
/// the matrix takes a minute.)
pub(crate) fn matrix_flags_fail_in_one_line_before_running() {
    for (args, needle) in [
        (&["--reps", "0"][..], "--reps 0: expected 1 to 20"),
        (&["--format", "yaml"][..], "invalid value 'yaml' for '--format"),
    ] {
        let out = tcpstall().args(["lab", "stream", "--matrix", "seed003", "-q"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.stdout.is_empty(), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.lines().filter(|l| l.starts_with("error") || l.starts_with("tcpstall:")).count() == 1, "{err}");
    }
}
