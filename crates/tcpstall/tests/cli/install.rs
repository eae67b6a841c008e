//! Issue 26 item 4: shell completions and the man page, generated from the clap definitions.

use crate::support::tcpstall;

fn stdout(args: &[&str]) -> String {
    let out = tcpstall().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Each shell's script names every subcommand and a flag of one; bash's parses (`bash -n`).
/// `tcpstall man` is a roff page naming every subcommand; `tcpstall man advise` is advise's own
/// page with its flags; an unknown shell or subcommand is an error.
pub(crate) fn completions_and_man_page_are_generated_from_clap() {
    for shell in ["bash", "zsh", "fish"] {
        let s = stdout(&["completions", shell]);
        for word in ["lab", "explain", "advise", "replay", "watch", "completions", "fail-on-stall"] {
            assert!(s.contains(word), "{shell}: no {word}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("tcpstall.bash");
    std::fs::write(&f, stdout(&["completions", "bash"])).unwrap();
    let ok = std::process::Command::new("bash").arg("-n").arg(&f).status().unwrap();
    assert!(ok.success(), "bash -n rejects the completion script");
    let page = stdout(&["man"]);
    assert!(page.contains(".TH tcpstall 1"), "{}", &page[..page.len().min(400)]);
    for sub in ["lab", "explain", "simulate", "advise", "replay", "kernel", "watch", "shell"] {
        assert!(page.contains(&format!("tcpstall\\-{sub}")) || page.contains(sub), "man: no {sub}");
    }
    let advise = stdout(&["man", "advise"]);
    assert!(advise.contains(".TH tcpstall\\-advise 1") || advise.contains(".TH tcpstall-advise 1"), "{advise}");
    assert!(advise.contains("fail\\-on\\-stall"), "{advise}");
    for bad in [&["completions", "tcsh"][..], &["man", "nope"][..]] {
        let out = tcpstall().args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
    }
}

/// README "Requirements": a command that lacks a tool names it in one line and exits 2. Here
/// `lab --path veth` with a PATH that has ip, iptables and sh but no ethtool (root: it builds
/// the namespaces before it needs ethtool, and removes them again).
pub(crate) fn a_missing_tool_is_named_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for tool in ["ip", "iptables", "sh"] {
        let out = std::process::Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap();
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!path.is_empty(), "{tool} on the PATH");
        std::os::unix::fs::symlink(&path, dir.path().join(tool)).unwrap();
    }
    let out = tcpstall()
        .env("PATH", dir.path())
        .args(["lab", "stream", "--path", "veth", "--rx-gro", "off", "--client", "none", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("\"ethtool\"") && err.contains("No such file"), "{err}");
    assert!(out.stdout.is_empty());
}
