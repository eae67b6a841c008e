//! `tcpstall advise-run` (issue 34): the user's own programs measured with fixes from outside.

use std::path::PathBuf;

use crate::support::tcpstall;

fn program(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../outside/programs").join(name).display().to_string()
}

/// Our leftovers: cgroups and files named tcpstall-outside-<pid>-*.
fn leftovers() -> Vec<String> {
    let mut v = Vec::new();
    for dir in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/tmp"] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with("tcpstall-outside-") && !n.starts_with("tcpstall-outside-test") {
                v.push(format!("{dir}/{n}"));
            }
        }
    }
    v
}

/// A setting that is neither form is one line on stderr and exit 2, before anything runs.
pub(crate) fn bad_setting_is_one_line() {
    let out = tcpstall()
        .args(["advise-run", "--server", "true", "--client", "true", "--server-setting", "nodelay"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad input: exit 2 (README)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("env:NAME=VALUE or line:FILE:LINE"), "{err}");
}

/// On http.server with http.client POSTing a file body: the stall as written, its removal by
/// a fix from outside with its cost, the deployable form; nothing left behind; the sock_ops
/// object for bpftool is a BPF ELF object.
pub(crate) fn http_server_stall_removed_from_outside() {
    let out = tcpstall()
        .args(["advise-run", "--port", "8080", "--budget", "40"])
        .args(["--server", &format!("python3 {} {{host}} {{port}}", program("http_server.py"))])
        .args(["--client", &format!("python3 {} {{host}} {{port}} 10", program("http_client.py"))])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("the classifier names: nagle-delayed-ack"), "{text}");
    assert!(text.contains("First choice: "), "{text}");
    assert!(text.contains("Its cost, per request: data segments"), "{text}");
    for c in ["client route quickack 1", "server sock_ops TCP_NODELAY", "server LD_PRELOAD shim"] {
        assert!(text.contains(c), "{c}: {text}");
    }
    assert!(leftovers().is_empty(), "{:?}", leftovers());
    let dir = tempfile::tempdir().unwrap();
    let obj = dir.path().join("nodelay.o");
    let st = tcpstall().args(["advise-run", "--write-sockops"]).arg(&obj).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let b = std::fs::read(&obj).unwrap();
    assert!(b.starts_with(b"\x7fELF") && b[18] == 247, "an eBPF ELF object (EM_BPF 247)");
}
