//! Each outside fix on real programs (python3, mosquitto), as root. Without root or a program
//! each test is ignored with the reason; with CI set it fails instead (as crates/kevidence's
//! tests do): a test that cannot run is not a pass.
//!
//! - sock_ops and the shim: a python3 program that never sets TCP_NODELAY reads it back as 1 on
//!   its connected and accepted sockets only with the fix applied;
//! - route quickack: the route carries the metric while applied and is put back after;
//! - advise-run's loop on Python's http.server with http.client POSTing a file body: as written
//!   the classifier names Nagle x delayed ACK stalls; client route quickack, server sock_ops
//!   NODELAY and the server shim each remove them, with their cost measured; the client's
//!   delayed ACK capped (sock_ops TCP_BPF_DELACK_MAX) shortens them;
//! - on mosquitto with its default `set_tcp_nodelay false`, the first choice is its own setting,
//!   measured on mosquitto itself, and the config file is restored.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use libtest_mimic::{Arguments, Trial};
use tcpstall_outside::ab::{self, Budget};
use tcpstall_outside::cgroup::Cgroup;
use tcpstall_outside::rank::winner;
use tcpstall_outside::run::{Candidate, Lab, Side, Spec};
use tcpstall_outside::shim::Shim;
use tcpstall_outside::sockops::{Options, SockOps};

/// The lab's namespaces are named after the pid: one at a time in this process.
static LAB: Mutex<()> = Mutex::new(());

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn needs_root(name: &str, tools: &[&str], f: fn()) -> Trial {
    let mut missing: Vec<String> = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (cgroups, BPF, namespaces)".into());
    }
    missing.extend(tools.iter().filter(|t| !have(t)).map(|t| format!("{t} on the PATH (.ci/run installs it)")));
    if missing.is_empty() {
        return Trial::test(name, move || {
            f();
            Ok(())
        });
    }
    let why = format!("needs {}", missing.join(" and "));
    if in_ci() {
        let msg = format!("{name} cannot run: it {why} (CI is set, so a test that cannot run fails)");
        return Trial::test(name, move || Err(msg.into()));
    }
    println!("SKIPPED {name}: {why}");
    let msg = format!("not run: {why}");
    Trial::test(name, move || Err(msg.into())).with_ignored_flag(true).with_kind(format!("skipped, {why}"))
}

fn program(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("programs").join(name).display().to_string()
}

/// Run the probe in `cg` (with `env`), its output line.
fn probe(cg: &Cgroup, env: Option<(String, String)>) -> String {
    let mut words = cg.wrapper();
    words.extend(["python3".to_string(), program("nodelay_probe.py")]);
    let mut c = Command::new(&words[0]);
    c.args(&words[1..]);
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = c.output().expect("run python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sockops_sets_nodelay_on_a_real_program() {
    let cg = Cgroup::create().expect("cgroup");
    assert_eq!(probe(&cg, None), "connected=0 accepted=0");
    let prog = SockOps::attach(cg.path(), Options { nodelay: true, delack_max_us: None }).expect("attach");
    assert_eq!(probe(&cg, None), "connected=1 accepted=1");
    assert_eq!(prog.applied().0, 2, "one connected and one accepted socket");
    drop(prog);
    assert_eq!(probe(&cg, None), "connected=0 accepted=0", "detached on drop");
    // The delayed-ACK maximum alone: accepted by the kernel (counted), NODELAY left alone.
    let prog = SockOps::attach(cg.path(), Options { nodelay: false, delack_max_us: Some(5_000) }).expect("attach");
    assert_eq!(probe(&cg, None), "connected=0 accepted=0");
    assert_eq!(prog.applied(), (0, 2));
    drop(prog);
    // Asked at 2 ms: net/core/filter.c bpf_sol_tcp_setsockopt (TCP_BPF_DELACK_MAX) refuses
    // less than TCP_TIMEOUT_MIN, 2 jiffies (include/net/tcp.h), so the program doubles the ask
    // until the kernel takes it: the first of 2, 4, 8, 16 ms that is at least 2 jiffies.
    let ask = tcpstall_outside::sockops::DELACK_MAX_ASK_US;
    let prog = SockOps::attach(cg.path(), Options { nodelay: false, delack_max_us: Some(ask) }).expect("attach");
    assert_eq!(probe(&cg, None), "connected=0 accepted=0");
    assert_eq!(prog.applied(), (0, 2));
    let taken = prog.delack_max_taken_us().expect("the kernel took a value");
    // The kernel's minimum, 2 jiffies (TCP_TIMEOUT_MIN), is what it holds: the first doubled
    // ask over 1 jiffy, rounded up to whole jiffies (usecs_to_jiffies).
    let hz = u64::from(sys::host::kernel_hz().expect("HZ"));
    let jiffy_us = 1_000_000 / hz;
    assert!(
        (2 * jiffy_us - 1..=2 * jiffy_us + 1).contains(&taken),
        "HZ={hz}: held {taken} us, 2 jiffies = {} us",
        2 * jiffy_us
    );
    assert!(taken >= u64::from(ask), "{taken} < the ask {ask}");
}

fn shim_sets_nodelay_on_a_real_program() {
    let cg = Cgroup::create().expect("cgroup");
    let shim = Shim::install().expect("shim");
    assert_eq!(probe(&cg, None), "connected=0 accepted=0");
    assert_eq!(probe(&cg, Some(shim.env())), "connected=1 accepted=1");
    let path = shim.path().to_path_buf();
    drop(shim);
    assert!(!path.exists(), "the shim's file is removed on drop");
}

fn route_quickack_is_set_and_put_back() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::open().expect("lab");
    let before = tcpstall_outside::route::lookup(Some(&lab.client_ns), lab.server_ip).expect("route");
    assert!(!before.has_quickack());
    let q = tcpstall_outside::route::Quickack::apply(Some(&lab.client_ns), lab.server_ip).expect("apply");
    assert!(tcpstall_outside::route::lookup(Some(&lab.client_ns), lab.server_ip).unwrap().has_quickack());
    drop(q);
    assert_eq!(tcpstall_outside::route::lookup(Some(&lab.client_ns), lab.server_ip).unwrap(), before);
}

fn spec(server: String, client: String, port: u16) -> Spec {
    Spec { server, client, port, timeout: Duration::from_secs(20), ..Spec::default() }
}

fn http_server_and_client_as_written_and_with_each_fix() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::open().expect("lab");
    let s = spec(
        format!("python3 {} {{host}} {{port}}", program("http_server.py")),
        format!("python3 {} {{host}} {{port}} 10", program("http_client.py")),
        8080,
    );
    let cands = vec![
        Candidate::AsWritten,
        Candidate::RouteQuickack(Side::Client),
        Candidate::SockOpsNodelay(Side::Server),
        Candidate::Shim(Side::Server),
    ];
    let out = ab::run(&lab, &s, cands, Budget::default(), &AtomicBool::new(false), &mut |_, _, _| {});
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    let row = |c: Candidate| out.ranked.iter().find(|r| r.candidate == c).unwrap_or_else(|| panic!("{c:?} measured"));
    let base = row(Candidate::AsWritten);
    eprintln!("{}", tcpstall_outside::text::render(&out, &s, &|_| None));
    assert!(base.p50_ns > 30_000_000, "as written waits on the delayed ACK: p50 {} ns", base.p50_ns);
    assert!(base.causes.iter().any(|(c, _)| c == "nagle-delayed-ack"), "{:?}", base.causes);
    for c in
        [Candidate::RouteQuickack(Side::Client), Candidate::SockOpsNodelay(Side::Server), Candidate::Shim(Side::Server)]
    {
        let r = row(c.clone());
        assert!(r.p50_ns < 10_000_000, "{c:?} removes the wait: p50 {} ns", r.p50_ns);
        assert!(r.stalls_per_request < base.stalls_per_request / 4.0, "{c:?}: {} stalls/request", r.stalls_per_request);
        assert!(r.packets_per_request > 0.0 && r.data_segments_per_request > 0.0 && r.cpu_us_per_request.is_some());
    }
    // The client's delayed ACK capped at 2 jiffies (TCP_BPF_DELACK_MAX; tcp_send_delayed_ack
    // takes min(ato, icsk_delack_max)): the server's held body waits that, not TCP_ATO_MIN's
    // 40 ms. Added by the loop from the first run as written (the server's writes were held).
    let d = row(Candidate::SockOpsDelackMax(Side::Client));
    assert!(d.p50_ns < base.p50_ns / 2, "DELACK_MAX shortens the wait: p50 {} ns against {}", d.p50_ns, base.p50_ns);
    assert!(out.delack_max_us.is_some_and(|us| us >= 2_000), "{:?}", out.delack_max_us);
    // NODELAY on the server sends the body at once: the client's ACK of the header rides on
    // its next request instead of going alone, so fewer pure ACKs than as written.
    assert!(row(Candidate::SockOpsNodelay(Side::Server)).pure_acks_per_request < base.pure_acks_per_request);
    assert!(winner(&out.ranked).is_some());
}

fn mosquitto_first_choice_is_its_own_setting() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("tcpstall-outside-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("mosquitto.conf");
    let original = "listener 1883 0.0.0.0\nallow_anonymous true\n";
    std::fs::write(&conf, original).unwrap();
    let lab = Lab::open().expect("lab");
    let mut s = spec(
        format!("mosquitto -c {}", conf.display()),
        format!("python3 {} {{host}} {{port}} 10", program("mqtt_rr.py")),
        1883,
    );
    s.server_setting = Some(format!("line:{}:set_tcp_nodelay true", conf.display()).parse().unwrap());
    let (cands, _) = ab::candidates(&s);
    let out = ab::run(&lab, &s, cands, Budget::default(), &AtomicBool::new(false), &mut |_, _, _| {});
    eprintln!("{}", tcpstall_outside::text::render(&out, &s, &|_| None));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), original, "the config file is restored");
    let _ = std::fs::remove_dir_all(&dir);
    let base = out.ranked.iter().find(|r| r.candidate == Candidate::AsWritten).expect("as written measured");
    assert!(base.stalls_per_request > 0.5, "mosquitto as written stalls: {}", base.stalls_per_request);
    let w = winner(&out.ranked).expect("a fix wins");
    assert_eq!(w.candidate, Candidate::Setting(Side::Server), "{:?}", out.ranked);
    assert!(w.stalls_per_request < 0.1);
}

/// nginx proxying to a backend that streams its reply (programs/stream_server.py), unbuffered (`proxy_buffering off`: each piece of the
/// backend's reply forwarded as it comes) with `tcp_nodelay off`: nginx writes the reply's
/// header and body in two writes, Nagle on. The server's TCP_NODELAY fix, found by the listening
/// process (nginx, not the command's first word), prints nginx's own line (`tcp_nodelay on;`,
/// ngx_http_core_module); the shell command's first word would have said python3. The line
/// itself, measured on nginx as its own setting (in the server block, over the http block's
/// `off`), removes the stall: nginx sets TCP_NODELAY for unbuffered proxying when it is on.
fn nginx_nodelay_fix_prints_the_nginx_line() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("tcpstall-outside-test-{}-nginx", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("nginx.conf");
    let d = dir.display();
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{}}\n\
             http {{ access_log off; tcp_nodelay off; client_body_temp_path {d}/b; proxy_temp_path {d}/p;\n\
             fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;\n\
             server {{ listen 8080; include {d}/extra.conf; location / {{ proxy_pass http://127.0.0.1:9000; proxy_buffering off;\n\
             proxy_http_version 1.1; }} }} }}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("extra.conf"), "").unwrap();
    let lab = Lab::open().expect("lab");
    let mut s = spec(
        format!(
            "python3 {} 127.0.0.1 9000 & until ss -Hltn 'sport = :9000' | grep -q .; do sleep 0.05; done; exec nginx -c {}",
            program("stream_server.py"),
            conf.display()
        ),
        format!("python3 {} {{host}} {{port}} 10", program("http_client.py")),
        8080,
    );
    s.server_setting = Some(format!("line:{d}/extra.conf:tcp_nodelay on;").parse().unwrap());
    let cands = vec![Candidate::AsWritten, Candidate::SockOpsNodelay(Side::Server), Candidate::Setting(Side::Server)];
    let out = ab::run(&lab, &s, cands, Budget::default(), &AtomicBool::new(false), &mut |_, _, _| {});
    let text = tcpstall_outside::text::render(&out, &s, &|_| None);
    eprintln!("{text}");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.server_listener.as_deref(), Some("nginx"), "ss names the listening nginx");
    let row = |c: Candidate| out.ranked.iter().find(|r| r.candidate == c).unwrap_or_else(|| panic!("{c:?} measured"));
    let base = row(Candidate::AsWritten);
    assert!(base.p50_ns > 30_000_000, "nginx unbuffered with tcp_nodelay off waits: p50 {} ns", base.p50_ns);
    for c in [Candidate::SockOpsNodelay(Side::Server), Candidate::Setting(Side::Server)] {
        assert!(row(c.clone()).p50_ns < 10_000_000, "{c:?}: p50 {} ns", row(c.clone()).p50_ns);
    }
    let deploy = tcpstall_outside::text::deploy(&Candidate::SockOpsNodelay(Side::Server), &s, None, Some("nginx"));
    assert!(deploy.contains("  tcp_nodelay on;\n"), "{deploy}");
    assert!(!deploy.contains("No proxy line"), "{deploy}");
    let by_command = tcpstall_outside::text::deploy(&Candidate::SockOpsNodelay(Side::Server), &s, None, None);
    assert!(by_command.contains("No proxy line: the server runs `python3`"), "{by_command}");
}

/// HAProxy in HTTP mode in front of a backend that streams its reply (programs/stream_server.py,
/// Python's http.server: Nagle on). HAProxy reuses its backend connection (`http-reuse safe`),
/// so the backend's body, written 5 ms after its header, waits on the loopback hop for
/// HAProxy's delayed ACK of the header (Nagle x delayed ACK, RFC 896 / RFC 1122 4.2.3.2): the
/// captured hop shows the wait (p50 ~44 ms) but no stall of its own. The server's sock_ops
/// TCP_NODELAY reaches the backend (same cgroup) and removes it; HAProxy's own `option
/// http-no-delay` (its MSG_MORE aggregation off), measured on haproxy as its own setting, does
/// not: the hold is not HAProxy's. The TCP_NODELAY fix's deployable form names HAProxy's line
/// (found by the listening process) and says it was not measured.
fn haproxy_as_written_and_with_its_own_line() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("tcpstall-outside-test-{}-haproxy", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend f\n  bind :8080\n  default_backend b\n\
         backend b\n  server s1 127.0.0.1:9000\n",
    )
    .unwrap();
    let lab = Lab::open().expect("lab");
    let mut s = spec(
        format!(
            "python3 {} 127.0.0.1 9000 & until ss -Hltn 'sport = :9000' | grep -q .; do sleep 0.05; done; exec haproxy -db -f {}",
            program("stream_server.py"),
            conf.display()
        ),
        format!("python3 {} {{host}} {{port}} 10", program("http_client.py")),
        8080,
    );
    s.server_setting = Some(format!("line:{}:  option http-no-delay", conf.display()).parse().unwrap());
    let cands = vec![Candidate::AsWritten, Candidate::SockOpsNodelay(Side::Server), Candidate::Setting(Side::Server)];
    let out = ab::run(&lab, &s, cands, Budget::default(), &AtomicBool::new(false), &mut |_, _, _| {});
    eprintln!("{}", tcpstall_outside::text::render(&out, &s, &|_| None));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.server_listener.as_deref(), Some("haproxy"), "ss names the listening haproxy");
    let row = |c: Candidate| out.ranked.iter().find(|r| r.candidate == c).unwrap_or_else(|| panic!("{c:?} measured"));
    let base = row(Candidate::AsWritten).p50_ns;
    assert!(base > 30_000_000, "the backend's body waits for HAProxy's delayed ACK: p50 {base} ns");
    assert!(row(Candidate::SockOpsNodelay(Side::Server)).p50_ns < 15_000_000, "NODELAY reaches the backend");
    assert!(row(Candidate::Setting(Side::Server)).p50_ns > 30_000_000, "http-no-delay is not that hold's fix");
    let deploy = tcpstall_outside::text::deploy(&Candidate::SockOpsNodelay(Side::Server), &s, None, Some("haproxy"));
    assert!(deploy.contains("  option http-no-delay\n") && deploy.contains("Not measured here"), "{deploy}");
}

/// A host elsewhere, for the existing-server test: a namespace of its own joined to this host
/// by a veth pair (10.206.x.0/30), removed on drop (the lab's sweep removes it after a crash:
/// `tcpstall-outside-<pid>-remote`).
struct Remote {
    ns: String,
    host_dev: String,
    ip: std::net::Ipv4Addr,
}

impl Remote {
    fn open() -> Remote {
        let pid = std::process::id();
        let n = pid % 16_384;
        let (c, d) = ((n / 64) as u8, (n % 64 * 4) as u8);
        let r = Remote {
            ns: format!("tcpstall-outside-{pid}-remote"),
            host_dev: format!("tsr{pid}h"),
            ip: std::net::Ipv4Addr::new(10, 206, c, d + 2),
        };
        let host_ip = std::net::Ipv4Addr::new(10, 206, c, d + 1);
        let sh = |cmd: String| {
            let out = Command::new("sh").args(["-c", &cmd]).output().unwrap();
            assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        };
        sh(format!("ip netns add {}", r.ns));
        sh(format!("ip link add {} type veth peer name eth0 netns {}", r.host_dev, r.ns));
        sh(format!("ip addr add {host_ip}/30 dev {} && ip link set {} up", r.host_dev, r.host_dev));
        sh(format!(
            "ip -n {} addr add {}/30 dev eth0 && ip -n {} link set eth0 up && ip -n {} link set lo up",
            r.ns, r.ip, r.ns, r.ns
        ));
        r
    }

    fn forwarding(&self) -> String {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{}/forwarding", self.host_dev)).unwrap().trim().into()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // The pair first, at once: a namespace's devices go with it only when the kernel's
        // cleanup work runs (net/core/net_namespace.c cleanup_net), after `ip netns del`
        // returns, and the next test makes a device of the same name.
        let _ = Command::new("ip").args(["link", "del", &self.host_dev]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Our iptables rules (tagged with this process's comment), in any table.
fn our_rules() -> Vec<String> {
    let tag = format!("tcpstall-outside-{}-uplink", std::process::id());
    ["nat", "filter"]
        .iter()
        .flat_map(|t| {
            let out = Command::new("iptables").args(["-w", "-t", t, "-S"]).output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains(&tag))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// An existing server on another host (`--server-addr`): http.server in a namespace this host
/// routes to. The client, in the lab's namespace, reaches it through this host, forwarded
/// (net/ipv4/route.c ip_route_input_slow checks the input device's forwarding: ours, and the
/// device the replies come in on) and masqueraded. As written the server's body waits for the
/// client's delayed ACK; the client's route quickack removes the wait, the client's DELACK_MAX
/// shortens it; the server's candidates are left out (not ours). Everything is undone after:
/// the rules, the forwarding the run turned on.
fn existing_server_is_reached_through_the_host() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let remote = Remote::open();
    assert_eq!(remote.forwarding(), "0");
    let port = 8081;
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &remote.ns,
            "python3",
            &program("http_server.py"),
            &remote.ip.to_string(),
            &port.to_string(),
        ])
        .spawn()
        .unwrap();
    let listening = || {
        let o =
            Command::new("ip").args(["netns", "exec", &remote.ns, "ss", "-Hltn", &format!("sport = :{port}")]).output();
        o.is_ok_and(|o| !o.stdout.is_empty())
    };
    for _ in 0..200 {
        if listening() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut s = spec(String::new(), format!("python3 {} {{host}} {{port}} 10", program("http_client.py")), port);
    s.server_addr = Some(std::net::SocketAddrV4::new(remote.ip, port));
    let lab = Lab::open_to(remote.ip).expect("lab with an uplink");
    assert!(!lab.uplink.as_ref().unwrap().local, "the server is on another host");
    assert_eq!(remote.forwarding(), "1", "forwarding on where the replies come in");
    assert_eq!(our_rules().len(), 3, "MASQUERADE and two FORWARD ACCEPTs: {:?}", our_rules());
    let (cands, skipped) = ab::candidates(&s);
    let mut out = ab::run(&lab, &s, cands, Budget::default(), &AtomicBool::new(false), &mut |_, _, _| {});
    out.skipped.splice(0..0, skipped);
    eprintln!("{}", tcpstall_outside::text::render(&out, &s, &|_| None));
    drop(lab);
    let _ = server.kill();
    let _ = server.wait();
    assert!(our_rules().is_empty(), "rules removed: {:?}", our_rules());
    assert_eq!(remote.forwarding(), "0", "forwarding put back");
    let row = |c: Candidate| out.ranked.iter().find(|r| r.candidate == c).unwrap_or_else(|| panic!("{c:?} measured"));
    let base = row(Candidate::AsWritten);
    assert!(base.p50_ns > 30_000_000, "as written waits on the delayed ACK: p50 {} ns", base.p50_ns);
    assert!(row(Candidate::RouteQuickack(Side::Client)).p50_ns < 10_000_000);
    assert!(row(Candidate::SockOpsDelackMax(Side::Client)).p50_ns < base.p50_ns / 2);
    for c in
        [Candidate::RouteQuickack(Side::Server), Candidate::SockOpsNodelay(Side::Server), Candidate::Shim(Side::Server)]
    {
        assert!(out.ranked.iter().all(|r| r.candidate != c), "{c:?} not run");
        assert!(out.skipped.iter().any(|(s, why)| *s == c && why.contains("not ours")), "{c:?}: {:?}", out.skipped);
    }
}

/// What a crashed `--server-addr` run left on the host (its tagged iptables rule, the
/// forwarding it turned on, with the state file holding the value before) is undone by the
/// next run's sweep; a live run's is not touched.
fn a_dead_runs_uplink_is_swept() {
    let _g = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let remote = Remote::open();
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let comment = format!("tcpstall-outside-{dead}-uplink");
    let rule = ["-t", "nat", "-A", "POSTROUTING", "-s", "10.205.255.254/32", "-m", "comment", "--comment", &comment];
    assert!(Command::new("iptables").arg("-w").args(rule).status().unwrap().success());
    let state = std::env::temp_dir().join(format!("tcpstall-outside-{dead}-forwarding-{}", remote.host_dev));
    std::fs::write(&state, "0").unwrap();
    std::fs::write(format!("/proc/sys/net/ipv4/conf/{}/forwarding", remote.host_dev), "1").unwrap();
    let gone = tcpstall_outside::sweep();
    let listed = |pat: &str| gone.iter().any(|g| g.contains(pat));
    assert!(listed(&comment) && listed(&format!("forwarding on {}", remote.host_dev)), "{gone:?}");
    let nat = Command::new("iptables").args(["-w", "-t", "nat", "-S"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&nat.stdout).contains(&comment), "the rule is removed");
    assert_eq!(remote.forwarding(), "0", "forwarding put back");
    assert!(!state.exists());
}

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        needs_root("sockops_sets_nodelay_on_a_real_program", &["python3"], sockops_sets_nodelay_on_a_real_program),
        needs_root("shim_sets_nodelay_on_a_real_program", &["python3"], shim_sets_nodelay_on_a_real_program),
        needs_root("route_quickack_is_set_and_put_back", &["ip", "ethtool"], route_quickack_is_set_and_put_back),
        needs_root(
            "http_server_and_client_as_written_and_with_each_fix",
            &["python3", "ip", "ss", "ethtool"],
            http_server_and_client_as_written_and_with_each_fix,
        ),
        needs_root(
            "mosquitto_first_choice_is_its_own_setting",
            &["mosquitto", "python3", "ip", "ss", "ethtool"],
            mosquitto_first_choice_is_its_own_setting,
        ),
        needs_root(
            "nginx_nodelay_fix_prints_the_nginx_line",
            &["nginx", "python3", "ip", "ss", "ethtool"],
            nginx_nodelay_fix_prints_the_nginx_line,
        ),
        needs_root(
            "existing_server_is_reached_through_the_host",
            &["python3", "ip", "ss", "ethtool", "iptables"],
            existing_server_is_reached_through_the_host,
        ),
        needs_root("a_dead_runs_uplink_is_swept", &["iptables", "ip"], a_dead_runs_uplink_is_swept),
        needs_root(
            "haproxy_as_written_and_with_its_own_line",
            &["haproxy", "python3", "ip", "ss", "ethtool"],
            haproxy_as_written_and_with_its_own_line,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
