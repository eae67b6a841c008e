//! Kernel evidence opened on a thread of its own (`KernelEvidence::opening`, what `tcpstall lab`
//! does while its probes run): it becomes the one source every recorded row shares, and Ctrl-C
//! while it opens does not wait for the BPF programs to load. Needs root (eBPF): without it the
//! test says why, and under CI (`CI` set) it fails.

use std::time::{Duration, Instant};

use tcpstall_lab::{Cancel, KernelEvidence};

fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "under CI this test must run as root (eBPF)");
    eprintln!("skipped: needs root to load the kernel-evidence programs");
    false
}

#[test]
fn an_opening_source_becomes_the_shared_source() {
    if !root_or_skip() {
        return;
    }
    let k = KernelEvidence::opening(false);
    let none = Cancel::new();
    let a = k.ready(&none);
    assert!(matches!(a, KernelEvidence::On(_)), "{a:?}");
    // Every later row gets the same source, not a second one.
    assert_eq!(k.ready(&none), a);
    assert_eq!(k.clone().ready(&none), a);
}

#[test]
fn ctrl_c_while_it_opens_does_not_wait_for_it() {
    if !root_or_skip() {
        return;
    }
    let cancel = Cancel::new();
    cancel.cancel();
    let k = KernelEvidence::opening(false);
    let t = Instant::now();
    let got = k.ready(&cancel);
    // The waiter looks at the token every 20 ms; a source that opened first is as good.
    assert!(t.elapsed() < Duration::from_secs(1), "waited {:?}", t.elapsed());
    match got {
        KernelEvidence::Unavailable(why) => assert!(why.contains("cancelled"), "{why}"),
        KernelEvidence::On(_) => {}
        other => panic!("{other:?}"),
    }
}
