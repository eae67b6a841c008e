//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

/// True when running as root (CI is); tests that need root or namespaces say why they skip.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Print why a test skips, in a form `cargo test` shows with --nocapture and CI logs keep.
pub fn skip(test: &str, why: &str) {
    eprintln!("SKIP {test}: {why}");
}

pub fn tcpstall() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("tcpstall").expect("tcpstall binary")
}
