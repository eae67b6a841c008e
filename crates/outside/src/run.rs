//! One run of the user's real programs in the lab's namespaces (`lab::veth::VethPath`: a client
//! namespace and a server namespace joined by a veth pair), with one candidate fix applied from
//! outside: the server command starts in its namespace and a cgroup of its own, the packets are
//! captured in the server's namespace (the lab's `HostCapture`, AF_PACKET on every interface of
//! that namespace, filtered in the kernel to the server's port), the client command runs to its
//! end in the other namespace and cgroup, and each request's latency, the wire's cost and the
//! classifier's stalls come from the packets ([`crate::requests`]). Everything the run creates
//! (cgroups, the fix) is undone before it returns, whatever happened.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::side::HostCapture;

use crate::cgroup::{Cgroup, PREFIX};
use crate::requests::{measure, Measure, Packet};
use crate::setting::Setting;
use crate::shim::Shim;
use crate::sockops::{Options, SockOps};
use crate::FixError;

/// The user's programs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spec {
    /// Shell commands; `{host}` and `{port}` are replaced by the server's address and port.
    pub server: String,
    pub client: String,
    pub port: u16,
    /// The program's own setting, when the user names one, per side.
    pub server_setting: Option<Setting>,
    pub client_setting: Option<Setting>,
    /// The program a side runs, when the user names it (a wrapper or a container hides it):
    /// for the proxy line of the deployable form ([`crate::proxy`]).
    pub server_program: Option<String>,
    pub client_program: Option<String>,
    /// An existing server (not ours): no server command; the client reaches it out of its
    /// namespace through the host ([`crate::uplink`]); `port` is its port.
    pub server_addr: Option<std::net::SocketAddrV4>,
    /// How long the client may run, and the server take to listen.
    pub timeout: Duration,
}

/// A side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// A fix applied from outside, or none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Candidate {
    AsWritten,
    RouteQuickack(Side),
    SockOpsNodelay(Side),
    /// The delayed ACK's maximum at the kernel's minimum ([`crate::sockops::DELACK_MAX_ASK_US`]),
    /// on the side that delays its ACKs: the peer of the side whose writes were held.
    SockOpsDelackMax(Side),
    Shim(Side),
    Setting(Side),
}

impl Candidate {
    pub fn label(&self) -> String {
        match self {
            Candidate::AsWritten => "as written".into(),
            Candidate::RouteQuickack(s) => format!("{} route quickack 1", s.name()),
            Candidate::SockOpsNodelay(s) => format!("{} sock_ops TCP_NODELAY", s.name()),
            Candidate::SockOpsDelackMax(s) => format!("{} sock_ops TCP_BPF_DELACK_MAX", s.name()),
            Candidate::Shim(s) => format!("{} LD_PRELOAD shim (TCP_NODELAY)", s.name()),
            Candidate::Setting(s) => format!("{} own setting", s.name()),
        }
    }

    /// How small a change it is (smaller first among ties): the program's own setting, then a
    /// route metric or a cgroup program (no change to the program), then a shim loaded into it.
    pub fn change_size(&self) -> u8 {
        match self {
            Candidate::AsWritten => 0,
            Candidate::Setting(_) => 1,
            Candidate::RouteQuickack(_) | Candidate::SockOpsNodelay(_) | Candidate::SockOpsDelackMax(_) => 2,
            Candidate::Shim(_) => 3,
        }
    }
}

/// What joins the two namespaces: the lab's veth pair, or its emulated link (`--link`).
enum Path {
    Veth(lab::veth::VethPath),
    Link(Box<link::Link>),
}

/// The lab's two namespaces, with the addresses in them.
pub struct Lab {
    /// With an existing server: the client namespace's way out through the host.
    pub uplink: Option<crate::uplink::Uplink>,
    path: Path,
    /// Each side's namespace: a name of iproute2's (the veth path) or a namespace file's path
    /// (the emulated link's: [`crate::in_netns`]).
    pub client_ns: String,
    pub server_ns: String,
    pub client_ip: Ipv4Addr,
    pub server_ip: Ipv4Addr,
    /// The kernel evidence every run records while it runs ([`crate::kernel`]); none until set.
    pub kernel: crate::kernel::Kernel,
}

/// The address of `ip -o -4 addr show` text (the first `inet`). Pure.
pub fn first_inet(text: &str) -> Option<Ipv4Addr> {
    let mut w = text.split_whitespace();
    w.by_ref().find(|x| *x == "inet")?;
    w.next()?.split('/').next()?.parse().ok()
}

impl Lab {
    /// The lab's veth path between two fresh namespaces (removed on drop). Needs root.
    pub fn open() -> Result<Lab, FixError> {
        let path = lab::veth::VethPath::open(&lab::veth::Knobs::default())
            .map_err(|e| FixError::Unavailable(format!("the lab's namespaces: {e}")))?;
        let (c, s) = path.namespaces();
        let (client_ns, server_ns) = (c.to_string(), s.to_string());
        let ip = |ns: &str| -> Result<Ipv4Addr, FixError> {
            let out = crate::tool(&["ip", "-n", ns, "-o", "-4", "addr", "show", "scope", "global"])?;
            first_inet(&out).ok_or_else(|| FixError::Unavailable(format!("no address in {ns}")))
        };
        let (client_ip, server_ip) = (ip(&client_ns)?, ip(&server_ns)?);
        let kernel = crate::kernel::Kernel::default();
        Ok(Lab { uplink: None, path: Path::Veth(path), client_ns, server_ns, client_ip, server_ip, kernel })
    }

    /// The two namespaces behind the lab's emulated link (`lab --link SPEC`: TUN devices and a
    /// forwarder applying the spec; crates/link), instead of the veth pair. The namespaces are
    /// unnamed and live as long as this process. Needs root here (cgroups, BPF).
    pub fn open_link(spec: &link::LinkSpec) -> Result<Lab, FixError> {
        let l = link::Link::open_with(spec, None, &link::LinkOptions::default())
            .map_err(|e| FixError::Unavailable(format!("the emulated link: {e}")))?;
        let (client_ns, server_ns) =
            (l.client().netns_path().display().to_string(), l.server().netns_path().display().to_string());
        let (client_ip, server_ip) = (l.client().ip, l.server().ip);
        let kernel = crate::kernel::Kernel::default();
        Ok(Lab { uplink: None, path: Path::Link(Box::new(l)), client_ns, server_ns, client_ip, server_ip, kernel })
    }

    /// The lab's namespaces with the client's routed out through the host to an existing
    /// server at `server` ([`crate::uplink`]; the server's namespace stays unused). Needs root.
    pub fn open_to(server: Ipv4Addr) -> Result<Lab, FixError> {
        let mut lab = Lab::open()?;
        let up = crate::uplink::Uplink::open(&lab.client_ns, server)?;
        lab.client_ip = up.ns_ip;
        lab.server_ip = server;
        lab.uplink = Some(up);
        Ok(lab)
    }

    /// Where the packets are captured: the server's namespace, or the client's with an
    /// existing server.
    pub fn capture_ns(&self) -> &str {
        if self.uplink.is_some() {
            &self.client_ns
        } else {
            &self.server_ns
        }
    }

    /// Whose namespace the packets are captured in ([`Lab::capture_ns`]).
    pub fn capture_side(&self) -> Side {
        if self.uplink.is_some() {
            Side::Client
        } else {
            Side::Server
        }
    }

    /// What the path's knobs read back as, or the link's spec.
    pub fn readback(&self) -> String {
        match &self.path {
            Path::Veth(v) => v.readback.clone(),
            Path::Link(l) => format!("emulated link {}", l.spec()),
        }
    }

    /// The emulated link's spec, when the namespaces are behind one.
    pub fn link(&self) -> Option<String> {
        match &self.path {
            Path::Veth(_) => None,
            Path::Link(l) => Some(l.spec().to_string()),
        }
    }

    fn ns(&self, side: Side) -> &str {
        match side {
            Side::Client => &self.client_ns,
            Side::Server => &self.server_ns,
        }
    }

    fn peer_ip(&self, side: Side) -> Ipv4Addr {
        match side {
            Side::Client => self.server_ip,
            Side::Server => self.client_ip,
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trial {
    pub measure: Measure,
    /// CPU time of each side's processes (µs; None when cpu.stat was unreadable).
    pub server_cpu_us: Option<u64>,
    pub client_cpu_us: Option<u64>,
    /// Sockets the sock_ops program changed (its own count), when it ran.
    pub sockops_applied: Option<u64>,
    /// The delayed-ACK maximum the kernel took (µs), when the program set one.
    pub delack_max_us: Option<u64>,
    /// The process listening on the server's port (pid, command), when ss named it.
    pub listener: Option<(u32, String)>,
    /// The spawned programs: the client's (the process whose socket connected to the server's
    /// port) as `a`, the server's (the listening process) as `b`; comm and cgroup from ss and
    /// /proc (source `proc`).
    pub owners: report::owner::FlowOwners,
    pub capture_drops: u64,
    /// Why the run recorded no kernel evidence, when the advise-run has a source and this run
    /// could not use it (the filter refused).
    pub kernel_why: Option<String>,
}

/// The fix held for one run; undone when dropped.
#[derive(Default)]
struct Held {
    _route: Option<crate::route::Quickack>,
    sockops: Option<SockOps>,
    _setting: Option<crate::setting::Applied>,
}

fn apply(lab: &Lab, spec: &Spec, cand: &Candidate, cgroups: (&Cgroup, &Cgroup)) -> Result<Held, FixError> {
    let mut h = Held::default();
    match cand {
        Candidate::RouteQuickack(side) => {
            h._route = Some(crate::route::Quickack::apply(Some(lab.ns(*side)), lab.peer_ip(*side))?);
        }
        Candidate::SockOpsNodelay(side) => {
            let cg = if *side == Side::Client { cgroups.0 } else { cgroups.1 };
            h.sockops = Some(SockOps::attach(cg.path(), Options { nodelay: true, delack_max_us: None })?);
        }
        Candidate::SockOpsDelackMax(side) => {
            let cg = if *side == Side::Client { cgroups.0 } else { cgroups.1 };
            let o = Options { nodelay: false, delack_max_us: Some(crate::sockops::DELACK_MAX_ASK_US) };
            h.sockops = Some(SockOps::attach(cg.path(), o)?);
        }
        Candidate::Setting(side) => {
            let s =
                setting_of(spec, *side).ok_or_else(|| FixError::Input(format!("no {} setting named", side.name())))?;
            h._setting = Some(s.apply()?);
        }
        Candidate::AsWritten | Candidate::Shim(_) => {}
    }
    Ok(h)
}

fn setting_of(spec: &Spec, side: Side) -> Option<&Setting> {
    match side {
        Side::Client => spec.client_setting.as_ref(),
        Side::Server => spec.server_setting.as_ref(),
    }
}

/// The user's command with `{host}` and `{port}` filled in. Pure.
pub fn fill(command: &str, host: Ipv4Addr, port: u16) -> String {
    command.replace("{host}", &host.to_string()).replace("{port}", &port.to_string())
}

/// A log file of ours for a side's standard error.
fn log_path(side: Side) -> PathBuf {
    std::env::temp_dir().join(format!("{PREFIX}{}-{}.log", std::process::id(), side.name()))
}

fn last_lines(side: Side) -> String {
    let t = std::fs::read_to_string(log_path(side)).unwrap_or_default();
    let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

fn spawn(
    lab: &Lab,
    spec: &Spec,
    cand: &Candidate,
    side: Side,
    cg: &Cgroup,
    shim: Option<&Shim>,
) -> Result<Child, FixError> {
    let user = match side {
        Side::Client => &spec.client,
        Side::Server => &spec.server,
    };
    let mut words = cg.wrapper();
    words.extend(crate::in_netns(lab.ns(side)));
    words.extend(["sh", "-c"].map(String::from));
    words.push(fill(user, lab.server_ip, spec.port));
    let log = log_path(side);
    let err = File::create(&log).map_err(|e| FixError::Io(log.display().to_string(), e))?;
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    if *cand == Candidate::Shim(side) {
        let (k, v) = shim.ok_or_else(|| FixError::Unavailable("the shim is not installed".into()))?.env();
        cmd.env(k, v);
    }
    if *cand == Candidate::Setting(side) {
        if let Some((k, v)) = setting_of(spec, side).and_then(Setting::env) {
            cmd.env(k, v);
        }
    }
    cmd.spawn().map_err(|e| FixError::Io(format!("starting the {} command", side.name()), e))
}

/// The first process `ss -p` names on a socket line (`users:(("nginx",pid=12,fd=6),...)`):
/// its pid and command (the kernel's comm: the executable's name, 15 bytes at most). Pure.
pub fn ss_user(line: &str) -> Option<(u32, String)> {
    let rest = &line[line.find("users:((\"")? + 9..];
    let (comm, rest) = rest.split_once('"')?;
    let pid = rest.strip_prefix(",pid=")?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    Some((pid, comm.to_string()))
}

/// `ss -Hltnp FILTER` in the server's namespace.
fn ss(lab: &Lab, filter: &str) -> Result<String, FixError> {
    let mut a = crate::in_netns(&lab.server_ns);
    a.extend(["ss", "-Hltnp", filter].map(String::from));
    crate::tool(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Wait until something listens on the server's port in its namespace (`ss -Hltnp`): the
/// listening process (pid, command), when ss names it.
fn wait_listening(lab: &Lab, spec: &Spec, server: &mut Child) -> Result<Option<(u32, String)>, FixError> {
    let start = Instant::now();
    let filter = format!("sport = :{}", spec.port);
    loop {
        let out = ss(lab, &filter)?;
        if !out.trim().is_empty() {
            // ss names the process from /proc/<pid>/fd: a socket listed before its process is
            // scanned has no name yet; ask a few more times.
            let mut user = out.lines().find_map(ss_user);
            for _ in 0..10 {
                if user.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
                let again = ss(lab, &filter)?;
                user = again.lines().find_map(ss_user);
            }
            return Ok(user);
        }
        if let Ok(Some(st)) = server.try_wait() {
            return Err(FixError::Input(format!(
                "the server command exited ({st}) before listening on port {}: {}",
                spec.port,
                last_lines(Side::Server)
            )));
        }
        if start.elapsed() > spec.timeout {
            return Err(FixError::Input(format!(
                "nothing listened on port {} within {:?} of the server command's start",
                spec.port, spec.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start the capture in the server's namespace: a thread enters it (setns(2) applies to the
/// calling thread) and opens the socket there; the socket stays in that namespace.
fn start_capture(lab: &Lab, port: u16) -> Result<HostCapture, FixError> {
    let ns = crate::netns_file(lab.capture_ns());
    std::thread::spawn(move || -> Result<HostCapture, FixError> {
        let f = File::open(&ns).map_err(|e| FixError::Io(ns.display().to_string(), e))?;
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| FixError::Io(format!("entering {}", ns.display()), e.into()))?;
        HostCapture::start(port, false).map_err(|e| FixError::Unavailable(format!("capture: {e}")))
    })
    .join()
    .map_err(|_| FixError::Unavailable("the capture thread panicked".into()))?
}

/// Frames captured in the server's namespace as packets of the run. Pure.
pub fn packets(frames: &[sys::packet::Frame], port: u16, origin_ns: u64) -> Vec<Packet> {
    frames
        .iter()
        .filter_map(|f| {
            let p = wire::decode(wire::linktype::RAW, &f.data, f.orig_len).ok()?;
            let from_client = p.dst.port() == port;
            if !from_client && p.src.port() != port {
                return None;
            }
            let client_port = if from_client { p.src.port() } else { p.dst.port() };
            Some(Packet { t_ns: f.ts_ns.saturating_sub(origin_ns), client_port, from_client, segment: p.segment })
        })
        .collect()
}

/// The process whose socket in the client's namespace is connected to the server's port
/// (`ss -Htnp`), when ss names one.
fn client_process(lab: &Lab, port: u16) -> Option<(u32, String)> {
    let mut a = crate::in_netns(&lab.client_ns);
    a.extend(["ss", "-Htnp", &format!("dport = :{port}")].map(String::from));
    crate::tool(&a.iter().map(String::as_str).collect::<Vec<_>>()).ok()?.lines().find_map(ss_user)
}

/// A spawned program's owner record (comm from ss, cgroup from /proc).
fn owner_of((pid, comm): (u32, String)) -> report::owner::Owner {
    report::owner::Owner::of_process(pid, comm, sys::host::cgroup_of(pid), Vec::new(), report::owner::OwnerSource::Proc)
}

/// Wait for the client to end, or kill it after the timeout; the client's process is looked
/// up (ss, every 50 ms until found) while it runs.
fn wait_client(
    lab: &Lab,
    spec: &Spec,
    client: &mut Child,
    cg: &Cgroup,
    cancel: &std::sync::atomic::AtomicBool,
    owner: &mut Option<report::owner::Owner>,
) -> Result<(), FixError> {
    let start = Instant::now();
    let mut looked = start;
    loop {
        if owner.is_none() && (looked == start || looked.elapsed() >= Duration::from_millis(50)) {
            looked = Instant::now();
            *owner = client_process(lab, spec.port).map(owner_of);
        }
        match client.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => {
                return Err(FixError::Input(format!("the client command failed ({st}): {}", last_lines(Side::Client))))
            }
            _ => {}
        }
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            cg.kill_all();
            return Err(FixError::Input("interrupted".into()));
        }
        if start.elapsed() > spec.timeout {
            cg.kill_all();
            return Err(FixError::Input(format!("the client command ran past {:?}; killed", spec.timeout)));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Run the programs once with `cand` applied, and measure. Every fix and cgroup is undone and
/// every process killed before it returns.
pub fn trial(
    lab: &Lab,
    spec: &Spec,
    cand: &Candidate,
    shim: Option<&Shim>,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Trial, FixError> {
    let (ccg, scg) = (Cgroup::create()?, Cgroup::create()?);
    let held = apply(lab, spec, cand, (&ccg, &scg))?;
    let capture = start_capture(lab, spec.port)?;
    let mut server = match spec.server_addr {
        None => Some(spawn(lab, spec, cand, Side::Server, &scg, shim)?),
        Some(_) => None,
    };
    let mut listener = None;
    let mut owners = report::owner::FlowOwners::default();
    let ready = match server.as_mut() {
        Some(s) => wait_listening(lab, spec, s).map(|l| listener = l),
        None => Ok(()),
    };
    owners.b = listener.clone().map(owner_of);
    let mut recording = None;
    let outcome = ready.and_then(|()| {
        // The kernel's filter is set before the client connects; the programs stay attached
        // until the client ends.
        recording = Some(lab.kernel.start(lab.capture_ns(), spec.port, cancel));
        let mut client = spawn(lab, spec, cand, Side::Client, &ccg, shim)?;
        let r = wait_client(lab, spec, &mut client, &ccg, cancel, &mut owners.a);
        let _ = client.wait();
        r
    });
    let kernel = recording.map(crate::kernel::Recording::finish);
    let origin = capture.origin_ns;
    let captured = capture.finish();
    let t = Trial {
        server_cpu_us: server.as_ref().and_then(|_| scg.cpu_usec()),
        client_cpu_us: ccg.cpu_usec(),
        sockops_applied: held.sockops.as_ref().map(|s| {
            let (nodelay, delack) = s.applied();
            if s.options.nodelay {
                nodelay
            } else {
                delack
            }
        }),
        delack_max_us: held.sockops.as_ref().and_then(SockOps::delack_max_taken_us),
        listener,
        owners,
        ..Trial::default()
    };
    scg.kill_all();
    if let Some(s) = server.as_mut() {
        let _ = s.wait();
    }
    drop(held);
    for s in [Side::Client, Side::Server] {
        let _ = std::fs::remove_file(log_path(s));
    }
    outcome?;
    let (frames, drops) = captured.map_err(|e| FixError::Unavailable(format!("capture: {e}")))?;
    let (kev, kernel_why) = match kernel {
        Some(Ok(k)) => (kernel_flows(&k, spec.port, origin), None),
        Some(Err(why)) if lab.kernel.on(cancel) => (None, Some(why)),
        _ => (None, None),
    };
    let mut m = measure(&packets(&frames, spec.port, origin), kev.as_ref().map(|k| &k.0), analyze::Config::default());
    if let (Some(c), Some((_, lost))) = (m.kernel.as_mut(), kev) {
        c.lost = lost;
    }
    Ok(Trial { measure: m, capture_drops: drops, kernel_why, ..t })
}

/// A run's kernel records as events per connection (lab::capture::kernel_events_by_client,
/// times on the packets' clock less `origin`), with the count of records lost.
fn kernel_flows(
    k: &lab::capture::KernelRecords,
    port: u16,
    origin: u64,
) -> Option<(crate::requests::KernelFlows, u64)> {
    let clock = k.clock.as_ref()?;
    Some((lab::capture::kernel_events_by_client(&k.records, clock, port, origin), k.counts.lost()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_host_and_port() {
        assert_eq!(fill("c --to {host}:{port} -p {port}", "10.0.0.2".parse().unwrap(), 80), "c --to 10.0.0.2:80 -p 80");
    }

    #[test]
    fn reads_the_listening_process_from_ss() {
        let l = "LISTEN 0 511 0.0.0.0:8080 0.0.0.0:* users:((\"nginx\",pid=4242,fd=6),(\"nginx\",pid=4241,fd=6))";
        assert_eq!(ss_user(l), Some((4242, "nginx".to_string())));
        assert_eq!(ss_user("LISTEN 0 5 0.0.0.0:8080 0.0.0.0:*"), None);
    }

    #[test]
    fn reads_the_first_inet() {
        let t = "2: tsv1t    inet 10.203.0.1/24 scope global tsv1t\\       valid_lft forever";
        assert_eq!(first_inet(t), Some("10.203.0.1".parse().unwrap()));
        assert_eq!(first_inet("1: lo inet6 ::1/128"), None);
    }

    #[test]
    fn the_own_setting_is_the_smallest_change() {
        let mut v =
            [Candidate::Shim(Side::Server), Candidate::RouteQuickack(Side::Client), Candidate::Setting(Side::Server)];
        v.sort_by_key(Candidate::change_size);
        assert_eq!(v[0], Candidate::Setting(Side::Server));
        assert_eq!(v[2], Candidate::Shim(Side::Server));
    }
}
