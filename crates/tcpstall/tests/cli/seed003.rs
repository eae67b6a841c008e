//! Seed 003 on the direct path (`lab stream --path veth`): the knobs move the ACK:data ratio the
//! way the seed's table says where this kernel agrees (route quick-ACK, receiver thinning), and
//! a killed run leaves nothing the next run does not sweep. Margins are wide: a factor of two
//! where the measured effect is an order of magnitude.

use std::time::Duration;

use serde_json::Value;

use crate::support::{exclusive, tcpstall, twice};

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

/// SIGKILL mid-run leaves the namespaces (a killed process cleans nothing); the next run sweeps
/// them, with their veth pair and rules, says so, and leaves nothing of its own. Only this
/// test's runs' namespaces count (other runs on the machine make theirs), and the killed run
/// stays unreaped until the next starts, so that no other run's sweep takes its namespaces
/// first; when one wins the moment between, the test tries again (leftovers.rs says how).
pub(crate) fn a_killed_veth_run_is_swept_by_the_next() {
    use crate::leftovers::{kill_when, left_by, netns_of, reap_then_run, spawn};
    let _one = exclusive();
    twice("a killed veth run swept by the next", || {
        let args = ["lab", "stream", "--path", "veth", "--thin-acks", "2", "--set", "duration_ms=8000", "-q"];
        let mut child = spawn(&args, false);
        let killed = child.id();
        // Killed 500 ms after its namespaces appeared: its rules are in place by then.
        let seen = std::cell::Cell::new(None);
        kill_when(&mut child, "lab --path veth", |pid| {
            let made = netns_of(&[pid]).len() >= 2;
            let since = seen.get().or(made.then(std::time::Instant::now));
            seen.set(since);
            since.is_some_and(|t| t.elapsed() >= Duration::from_millis(500))
        });
        let left = netns_of(&[killed]);
        assert_eq!(left.len(), 2, "SIGKILL leaves them for the sweep: {left:?}");
        let next = ["lab", "stream", "--path", "veth", "--set", "duration_ms=200", "-q"];
        let (pid, err) = reap_then_run(child, "the next veth run", &next);
        let after = left_by(&[killed, pid]);
        assert!(after.is_empty(), "left behind: {after:?}");
        if !(err.contains("removed") && left.iter().all(|n| err.contains(n.as_str()))) {
            return Err(format!("the sweep did not name {left:?} (another run's sweep took them first): {err}"));
        }
        Ok(())
    });
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
