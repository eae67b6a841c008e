//! Compiles bpf/tcpev.bpf.c to a BPF object with clang (`-target bpf -O2 -g`, libbpf-dev's
//! headers), into OUT_DIR/tcpev.o. No clang (or a failed compile): an empty object and the
//! cfg `kevidence_no_bpf`, so tcpstall still builds and the source says at run time that the
//! kernel evidence was not built. `TCPSTALL_CLANG` names another clang.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(kevidence_no_bpf)");
    println!("cargo:rerun-if-changed=bpf/tcpev.bpf.c");
    println!("cargo:rerun-if-env-changed=TCPSTALL_CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let obj = out.join("tcpev.o");
    let clang = std::env::var("TCPSTALL_CLANG").unwrap_or_else(|_| "clang".into());
    let res = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c", "bpf/tcpev.bpf.c", "-o"])
        .arg(&obj)
        .output();
    let why = match res {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!("{clang} failed: {}", String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")),
        Err(e) => format!("no {clang} ({e})"),
    };
    println!("cargo:warning=tcpstall-kevidence: kernel evidence not built: {why} (install clang, llvm and libbpf-dev)");
    println!("cargo:rustc-cfg=kevidence_no_bpf");
    std::fs::write(&obj, b"").expect("write an empty object");
}
