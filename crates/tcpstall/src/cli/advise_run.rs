//! `tcpstall advise-run`: the user's own client and server measured in the lab's namespaces as
//! written and with each fix applied from outside (crate `outside`), ranked, with the winner's
//! deployable form and its cost.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use outside::ab::{self, Budget};
use outside::run::{Candidate, Lab, Side, Spec};
use outside::setting::Setting;

use crate::flags::advise_run::AdviseRunArgs;

/// `--server-addr HOST:PORT` as an IPv4 address (a name resolved here, its first IPv4 address).
fn server_address(s: &str) -> anyhow::Result<std::net::SocketAddrV4> {
    use std::net::ToSocketAddrs as _;
    let bad = |why: String| anyhow::anyhow!("--server-addr {s}: {why} (an IPv4 HOST:PORT, e.g. 192.0.2.10:8080)");
    let addrs = s.to_socket_addrs().map_err(|e| bad(e.to_string()))?;
    addrs
        .filter_map(|a| match a {
            std::net::SocketAddr::V4(v4) => Some(v4),
            std::net::SocketAddr::V6(_) => None,
        })
        .next()
        .ok_or_else(|| bad("no IPv4 address".into()))
}

/// The user's programs as the flags name them.
fn spec_of(args: &AdviseRunArgs) -> anyhow::Result<Spec> {
    let parse = |s: &Option<String>| s.as_deref().map(str::parse::<Setting>).transpose();
    let server_addr = args.server_addr.as_deref().map(server_address).transpose()?;
    Ok(Spec {
        server: args.server.clone().unwrap_or_default(),
        client: args.client.clone().unwrap_or_default(),
        port: server_addr.map_or(args.port, |a| a.port()),
        server_setting: parse(&args.server_setting)?,
        client_setting: parse(&args.client_setting)?,
        server_program: args.server_program.clone(),
        client_program: args.client_program.clone(),
        server_addr,
        timeout: Duration::from_secs(args.timeout.max(1)),
    })
}

pub(crate) fn run(args: AdviseRunArgs) -> anyhow::Result<i32> {
    if let Some(p) = &args.write_sockops {
        outside::sockops::write_object(p, false)?;
        eprintln!("tcpstall: wrote {} (sock_ops, TCP_NODELAY on)", p.display());
        return Ok(0);
    }
    if let Some(p) = &args.write_sockops_delack {
        outside::sockops::write_object(p, true)?;
        eprintln!("tcpstall: wrote {} (sock_ops, TCP_BPF_DELACK_MAX at the kernel's minimum)", p.display());
        return Ok(0);
    }
    let link = args
        .link
        .as_deref()
        .map(str::parse::<link::LinkSpec>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--link: {e}"))?;
    let spec = spec_of(&args)?;
    if !matches!(args.format, crate::flags::common::OutputFormat::Table | crate::flags::common::OutputFormat::Json) {
        anyhow::bail!("--format: advise-run prints table or json");
    }
    if spec.port == 0 {
        let flag = if args.server_addr.is_some() { "--server-addr" } else { "--port" };
        anyhow::bail!("{flag}: the server's port cannot be 0");
    }
    if !nix::unistd::geteuid().is_root() {
        anyhow::bail!("advise-run needs root (namespaces, cgroups, BPF)");
    }
    let cancel = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, cancel.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, cancel.clone())?;
    // One kernel-evidence source for the whole advise-run, loaded while the namespaces are made.
    let kernel =
        if args.no_kernel { outside::kernel::Kernel::off("--no-kernel") } else { outside::kernel::Kernel::opening() };
    let mut lab = match (spec.server_addr, &link) {
        (Some(a), _) => Lab::open_to(*a.ip())?,
        (None, Some(l)) => Lab::open_link(l)?,
        (None, None) => Lab::open()?,
    };
    lab.kernel = kernel;
    let (cands, skipped) = ab::candidates(&spec);
    let budget = Budget { total: Duration::from_secs(args.budget.max(1)), ..Budget::default() };
    let mut progress = |done: usize, total: usize, eta: Duration| {
        eprint!("\rtcpstall: run {done} of about {total}, round ends in ~{:.0} s   ", eta.as_secs_f64());
        let _ = std::io::stderr().flush();
    };
    let mut out = ab::run(&lab, &spec, cands, budget, &cancel, &mut progress);
    eprintln!();
    out.skipped.splice(0..0, skipped);
    let route_of = |c: &Candidate| match c {
        Candidate::RouteQuickack(Side::Client) => outside::route::lookup(Some(&lab.client_ns), lab.server_ip).ok(),
        Candidate::RouteQuickack(Side::Server) => outside::route::lookup(Some(&lab.server_ns), lab.client_ip).ok(),
        _ => None,
    };
    let doc = outside::text::doc(&out, &spec, &route_of, env!("CARGO_PKG_VERSION"));
    {
        use report::Export as _;
        std::io::stdout().lock().write_all(&doc.export(args.format.into())?)?;
    }
    // Ctrl-C or SIGTERM: what finished was ranked and printed; the exit says it stopped early
    // (README: 128 + N; which of the two is not kept by the flag, so Ctrl-C's), also when it
    // came before the first run finished.
    if cancel.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("tcpstall: interrupted: the runs above are complete");
        return Ok(130);
    }
    if out.ranked.iter().all(|r| r.candidate != Candidate::AsWritten) {
        anyhow::bail!("the programs as written answered no request: nothing to compare with");
    }
    Ok(0)
}
