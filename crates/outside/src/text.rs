//! The report for people: the ranked table, what was left out, the winner's deployable form and
//! its measured cost. Pure: everything is handed in.

use report::cells::ms_of_ns;

use crate::ab::Outcome;
use crate::rank::{winner, Row};
use crate::route::{networkd_stanza, Route};
use crate::run::{Candidate, Side, Spec};

/// Whether a row's runs were classified with kernel evidence: "yes" (all), "no", or "k/n".
fn kernel_cell(r: &Row) -> String {
    match &r.kernel {
        None => "no".into(),
        Some(k) if k.runs >= r.runs => "yes".into(),
        Some(k) => format!("{}/{}", k.runs, r.runs),
    }
}

fn row_line(r: &Row) -> String {
    let cpu = r.cpu_us_per_request.map_or("-".into(), |c| format!("{c:.0}"));
    format!(
        "  {:<40} {:>8} {:>8} {:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>6} {:>4}x{}",
        r.candidate.label(),
        format!("{:.1}", ms_of_ns(r.p50_ns)),
        format!("{:.1}", ms_of_ns(r.p99_ns)),
        r.stalls_per_request,
        r.data_segments_per_request,
        r.packets_per_request,
        r.pure_acks_per_request,
        cpu,
        kernel_cell(r),
        r.runs,
        r.requests / r.runs.max(1),
    )
}

/// How to deploy `c`, given the route the lab changed for it (route candidates). A
/// TCP_NODELAY fix on a side that runs a proxy also gets the proxy's own line
/// ([`crate::proxy`]), or the sentence saying why there is none: the program is the one the
/// user names, else the server's listening process (`listener`, ss), else the command's
/// executable.
pub fn deploy(c: &Candidate, spec: &Spec, route: Option<&Route>, listener: Option<&str>) -> String {
    let form = deploy_form(c, spec, route);
    match c {
        Candidate::SockOpsNodelay(side) | Candidate::Shim(side) => {
            let (cmd, named) = match side {
                Side::Client => (&spec.client, spec.client_program.as_deref()),
                Side::Server => (&spec.server, spec.server_program.as_deref()),
            };
            let program = match (named, side) {
                (Some(n), _) => Some((n, "named")),
                (None, Side::Server) => listener.map(|l| (l, "the process listening on the port")),
                (None, Side::Client) => None,
            };
            form + &crate::proxy::note(side.name(), cmd, program)
        }
        _ => form,
    }
}

fn deploy_form(c: &Candidate, spec: &Spec, route: Option<&Route>) -> String {
    match c {
        Candidate::AsWritten => String::new(),
        Candidate::RouteQuickack(side) => {
            let mut s = format!(
                "On the {} host, `quickack 1` on its route to the {} (here: `{}`):\n  ip route change <that route as `ip route show` prints it> quickack 1\n",
                side.name(),
                if *side == Side::Client { "server" } else { "client" },
                route.map_or("?".into(), |r| r.words.join(" "))
            );
            if let Some(r) = route {
                s += &format!("  e.g. {}\n", r.change_command(None));
                s += "Kept across reboots with systemd-networkd (the .network file of that interface):\n";
                s += &indented(&networkd_stanza(r));
            }
            s + "Remove: the same `ip route change` without `quickack 1`.\n"
        }
        Candidate::SockOpsNodelay(side) => format!(
            "A cgroup sock_ops program setting TCP_NODELAY on the {} program's sockets (object: `tcpstall advise-run --write-sockops tcpstall-nodelay.o`; its service's cgroup, e.g. /sys/fs/cgroup/system.slice/<unit>.service):\n{}",
            side.name(),
            indented(&crate::sockops::deploy_commands("tcpstall-nodelay.o", "<cgroup>"))
        ),
        Candidate::SockOpsDelackMax(side) => format!(
            "A cgroup sock_ops program capping the {} program's delayed ACK (TCP_BPF_DELACK_MAX at the kernel's minimum, 2 jiffies; net/core/filter.c bpf_sol_tcp_setsockopt) on its sockets (object: `tcpstall advise-run --write-sockops-delack tcpstall-delack.o`; its service's cgroup, e.g. /sys/fs/cgroup/system.slice/<unit>.service):\n{}",
            side.name(),
            indented(&crate::sockops::deploy_commands("tcpstall-delack.o", "<cgroup>"))
        ),
        Candidate::Shim(side) => format!(
            "Start the {} program with the shim (source: crates/outside/shim/nodelay_shim.c):\n  cc -shared -fPIC -O2 -o /usr/local/lib/tcpstall-nodelay.so nodelay_shim.c -ldl\n  LD_PRELOAD=/usr/local/lib/tcpstall-nodelay.so {}\nRemove: start it without LD_PRELOAD.\n",
            side.name(),
            if *side == Side::Client { &spec.client } else { &spec.server }
        ),
        Candidate::Setting(side) => {
            let s = if *side == Side::Client { &spec.client_setting } else { &spec.server_setting };
            format!("The {} program's own setting: {}\n", side.name(), s.as_ref().map_or("?".into(), |s| s.label()))
        }
    }
}

/// What the table does not show: the classifier's causes as written, the programs, what was
/// left out, what the sock_ops program did.
fn notes(o: &Outcome, spec: &Spec) -> String {
    let mut s = String::new();
    if let Some(base) = o.ranked.iter().find(|r| r.candidate == Candidate::AsWritten) {
        if !base.causes.is_empty() {
            let c: Vec<String> = base.causes.iter().map(|(c, n)| format!("{c} x{n}")).collect();
            s += &format!("\nAs written, the classifier names: {}\n", c.join(", "));
        }
        if let Some(k) = base.kernel.as_ref().filter(|k| !k.examples.is_empty()) {
            s += &format!(
                "As written, {} of its stall records carry the kernel's evidence, e.g.:\n",
                k.stalls_with_kernel
            );
            s += &k.examples.iter().map(|e| format!("  {e}\n")).collect::<String>();
        }
    }
    if let Some(base) = o.ranked.iter().find(|r| r.candidate == Candidate::AsWritten) {
        let who = |o: &Option<report::owner::Owner>| {
            o.as_ref().map(|o| format!("`{}` (pid {}, cgroup {})", o.comm, o.pid, o.cgroup.as_deref().unwrap_or("?")))
        };
        let (a, b) = (who(&base.owners.a), who(&base.owners.b));
        if a.is_some() || b.is_some() {
            s += &format!(
                "The programs (as written): client {}, server {}\n",
                a.unwrap_or_else(|| "not found".into()),
                b.unwrap_or_else(|| if spec.server_addr.is_some() { "not ours".into() } else { "not found".into() })
            );
        }
    }
    for (c, why) in &o.skipped {
        s += &format!("left out: {}: {why}\n", c.label());
    }
    for why in &o.kernel_notes {
        s += &format!("note: some runs without kernel evidence: {why}\n");
    }
    if let Some(us) = o.delack_max_us {
        s += &format!(
            "note: TCP_BPF_DELACK_MAX: the kernel took {:.1} ms (asked {:.1} ms, doubled until at least 2 jiffies, TCP_TIMEOUT_MIN)\n",
            us as f64 / 1e3,
            f64::from(crate::sockops::DELACK_MAX_ASK_US) / 1e3
        );
    }
    for (c, n) in &o.sockops_applied {
        if *n == 0 {
            s += &format!("note: {}: the program changed no socket\n", c.label());
        }
    }
    s
}

/// The whole report.
pub fn render(o: &Outcome, spec: &Spec, route_of: &dyn Fn(&Candidate) -> Option<Route>) -> String {
    let mut s = format!(
        "advise-run: {} run(s) of each candidate on the real programs, interleaved ({}; {:.1} s)\n\n",
        o.rounds,
        o.stopped,
        o.elapsed.as_secs_f64()
    );
    if let Some(first) = o.kernel.chars().next() {
        s += &format!("{}{}.\n\n", first.to_uppercase(), &o.kernel[first.len_utf8()..]);
    }
    if let Some(l) = &o.link {
        s += &format!("Behind the emulated link {l} (between the client's and the server's namespaces).\n\n");
    }
    if let Some(a) = spec.server_addr {
        s += &format!(
            "Existing server {a} (not ours): only the client's side is changed; packets captured in the client's namespace, CPU is the client's.\n\n"
        );
    }
    s += &format!(
        "  {:<40} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}\n",
        "candidate (best first)",
        "p50 ms",
        "p99 ms",
        "stalls",
        "segs",
        "packets",
        "pureACKs",
        "CPU us",
        "kernel",
        "runs"
    );
    s += &format!(
        "  {:<40} {:>8} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6}\n",
        "", "", "", "/req", "/req", "/req", "/req", "/req", "ev."
    );
    for r in &o.ranked {
        s += &row_line(r);
        s += "\n";
    }
    s += &notes(o, spec);
    match winner(&o.ranked) {
        Some(w) => {
            let base = o.ranked.iter().find(|r| r.candidate == Candidate::AsWritten);
            s += &format!("\nFirst choice: {} (p50 {:.1} ms", w.candidate.label(), ms_of_ns(w.p50_ns));
            if let Some(b) = base {
                s += &format!(
                    " against {:.1} ms as written; stalls per request {:.2} -> {:.2}",
                    ms_of_ns(b.p50_ns),
                    b.stalls_per_request,
                    w.stalls_per_request
                );
            }
            s += ")\n";
            if let Some(b) = base {
                s += &format!(
                    "Its cost, per request: data segments {:.2} (as written {:.2}), packets {:.2} ({:.2}), pure ACKs {:.2} ({:.2}), CPU {} us ({} us)\n",
                    w.data_segments_per_request,
                    b.data_segments_per_request,
                    w.packets_per_request,
                    b.packets_per_request,
                    w.pure_acks_per_request,
                    b.pure_acks_per_request,
                    w.cpu_us_per_request.map_or("-".into(), |c| format!("{c:.0}")),
                    b.cpu_us_per_request.map_or("-".into(), |c| format!("{c:.0}")),
                );
            }
            s += "\n";
            s += &deploy(&w.candidate, spec, route_of(&w.candidate).as_ref(), o.server_listener.as_deref());
        }
        None => s += "\nNo fix measured apart from the programs as written.\n",
    }
    s
}

/// The outcome as advise-run's versioned document (`--format json`, docs/json-schema.md):
/// the same figures as [`render`] (which it carries as its table), times in ms. `version` is
/// the tool's.
pub fn doc(
    o: &Outcome,
    spec: &Spec,
    route_of: &dyn Fn(&Candidate) -> Option<Route>,
    version: &'static str,
) -> report::advise_run::AdviseRunDoc {
    use report::advise_run::{AdviseRunDoc, AdviseRunRow, AdviseRunWinner, CauseN, LeftOut};
    let ranking = o
        .ranked
        .iter()
        .enumerate()
        .map(|(i, r)| AdviseRunRow {
            rank: i as u64 + 1,
            label: r.candidate.label(),
            change_size: u64::from(r.candidate.change_size()),
            tier: r.tier as u64,
            runs: r.runs as u64,
            requests: r.requests as u64,
            p50_ms: ms_of_ns(r.p50_ns),
            p99_ms: ms_of_ns(r.p99_ns),
            stalls_per_request: r.stalls_per_request,
            causes: r.causes.iter().map(|(c, n)| CauseN { cause: c.clone(), count: *n as u64 }).collect(),
            data_segments_per_request: r.data_segments_per_request,
            packets_per_request: r.packets_per_request,
            pure_acks_per_request: r.pure_acks_per_request,
            cpu_ms_per_request: r.cpu_us_per_request.map(|c| c / 1e3),
            owners: r.owners.clone(),
            kernel: r.kernel.as_ref().map(|k| report::advise_run::AdviseRunKernel {
                runs: k.runs as u64,
                events: k.events,
                writes: k.writes,
                resends: k.resends,
                lost: k.lost,
                stalls_with_kernel: k.stalls_with_kernel as u64,
                examples: k.examples.clone(),
            }),
        })
        .collect();
    let winner = winner(&o.ranked).map(|w| AdviseRunWinner {
        label: w.candidate.label(),
        deploy: deploy(&w.candidate, spec, route_of(&w.candidate).as_ref(), o.server_listener.as_deref()),
    });
    AdviseRunDoc {
        tool: "tcpstall",
        version,
        schema_version: report::SCHEMA_VERSION,
        mode: "advise-run",
        server_command: spec.server.clone(),
        client_command: spec.client.clone(),
        port: spec.port,
        server_addr: spec.server_addr.map(|a| a.to_string()),
        link: o.link.clone(),
        kernel_evidence: o.kernel.clone(),
        delack_max_us: o.delack_max_us,
        passes: o.rounds as u64,
        stopped: o.stopped.clone(),
        elapsed_s: o.elapsed.as_secs_f64(),
        ranking,
        left_out: o.skipped.iter().map(|(c, why)| LeftOut { label: c.label(), reason: why.clone() }).collect(),
        winner,
        text: render(o, spec, route_of),
    }
}

/// Each line of `text` indented by two spaces (a deployable form's commands).
fn indented(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}
