//! Builds the two fixes that need a compiler, into OUT_DIR:
//! - bpf/sockops.bpf.c to a BPF object with clang (`-target bpf -O2 -g`, libbpf-dev's headers),
//!   as crates/kevidence does; `TCPSTALL_CLANG` names another clang;
//! - shim/nodelay_shim.c to a shared object with the C compiler (`cc -shared -fPIC -O2`;
//!   `CC` names another).
//!
//! Either failing leaves an empty file and a cfg (`outside_no_bpf`, `outside_no_shim`): tcpstall
//! still builds, and the fix says at run time that it was not built.
use std::path::{Path, PathBuf};
use std::process::Command;

fn compile(cmd: &str, args: &[&str], out: &Path, cfg: &str, what: &str) {
    let res = Command::new(cmd).args(args).arg("-o").arg(out).output();
    let why = match res {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!("{cmd} failed: {}", String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")),
        Err(e) => format!("no {cmd} ({e})"),
    };
    println!("cargo:warning=tcpstall-outside: {what} not built: {why}");
    println!("cargo:rustc-cfg={cfg}");
    std::fs::write(out, b"").expect("write an empty file");
}

fn main() {
    println!("cargo:rustc-check-cfg=cfg(outside_no_bpf)");
    println!("cargo:rustc-check-cfg=cfg(outside_no_shim)");
    println!("cargo:rerun-if-changed=bpf/sockops.bpf.c");
    println!("cargo:rerun-if-changed=shim/nodelay_shim.c");
    println!("cargo:rerun-if-env-changed=TCPSTALL_CLANG");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let clang = std::env::var("TCPSTALL_CLANG").unwrap_or_else(|_| "clang".into());
    let bpf_args = ["-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c", "bpf/sockops.bpf.c"];
    compile(
        &clang,
        &bpf_args,
        &out.join("sockops.o"),
        "outside_no_bpf",
        "the sock_ops program (install clang and libbpf-dev)",
    );
    let mut deploy = bpf_args.to_vec();
    deploy.push("-DTCPSTALL_NODELAY=1");
    compile(
        &clang,
        &deploy,
        &out.join("sockops-nodelay.o"),
        "outside_no_bpf",
        "the sock_ops program (install clang and libbpf-dev)",
    );
    let mut delack = bpf_args.to_vec();
    delack.push("-DTCPSTALL_DELACK_MAX_US=2000");
    compile(
        &clang,
        &delack,
        &out.join("sockops-delack.o"),
        "outside_no_bpf",
        "the sock_ops program (install clang and libbpf-dev)",
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let shim_args = ["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "shim/nodelay_shim.c", "-ldl"];
    compile(
        &cc,
        &shim_args,
        &out.join("nodelay_shim.so"),
        "outside_no_shim",
        "the LD_PRELOAD shim (install a C compiler)",
    );
}
