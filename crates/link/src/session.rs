//! `tcpstall shell`: run a command in the client namespace, optionally a peer in the server
//! namespace, with the link in between; tear everything down when the command ends.
//!
//! Signals: SIGINT, SIGQUIT, SIGTERM and SIGHUP are blocked in this process before any thread
//! starts (so the forwarder threads inherit the mask) and read from a signalfd. The command
//! runs in a process group of its own (setpgid(2)), so that a pipeline or a script and all it
//! started are one group: a signal that reaches tcpstall is relayed to the whole group with
//! kill(-pgid) (and to the peer), as sudo(8) relays to its command. When standard input is a
//! terminal whose foreground group is ours, the command's group becomes the foreground group
//! (tcsetpgrp(3), as a job-control shell does), so the terminal's Ctrl-C reaches the whole
//! command directly and an interactive shell may read the terminal; tcpstall takes the terminal
//! back when the command ends. The command decides whether to exit; when it does, the peer gets
//! SIGTERM (then SIGKILL after a second) and the link is torn down.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use crate::netns::{End, CLIENT_IP, SERVER_IP};
use crate::sweep::{owner_tag, OWNER_VAR};
use crate::{Link, LinkError, LinkReport, LinkSpec};

/// What to run.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub spec: LinkSpec,
    pub capture: Option<PathBuf>,
    /// Run with `/bin/sh -c` in the server namespace for the whole session.
    pub server_command: Option<String>,
    /// Run in the client namespace; empty = `$SHELL` (or /bin/sh).
    pub command: Vec<OsString>,
}

/// How it ended.
#[derive(Debug)]
pub struct SessionOutcome {
    /// The command's exit code (128 + signal number if a signal ended it, like a shell).
    pub exit_code: i32,
    pub report: LinkReport,
    /// Stale processes of killed earlier runs removed at the start.
    pub swept: Vec<u32>,
}

/// Exit code of a finished process, shell-style.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn signals() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM, Signal::SIGHUP] {
        s.add(sig);
    }
    s
}

/// Where the commands run: the link, and the PID namespace (with its own /proc) if made.
struct Place<'a> {
    link: &'a Link,
    pid_ns: Option<&'a sys::process::PidNs>,
}

impl Place<'_> {
    /// A path naming `end`'s network namespace for `nsenter --net=` inside the commands: the
    /// init of their PID namespace keeps the descriptors open, and their /proc is its.
    fn netns_path(&self, end: &End) -> PathBuf {
        match self.pid_ns {
            Some(ns) if ns.mount_ns().is_some() => PathBuf::from(format!("/proc/1/fd/{}", end.netns().as_raw_fd())),
            _ => end.netns_path(),
        }
    }

    fn spawn_in(&self, end: &End, mut cmd: Command) -> Result<Child, std::io::Error> {
        let link = self.link;
        cmd.env(OWNER_VAR, owner_tag())
            .env("TCPSTALL_CLIENT", CLIENT_IP.to_string())
            .env("TCPSTALL_SERVER", SERVER_IP.to_string())
            .env("TCPSTALL_SERVER_NETNS", self.netns_path(link.server()))
            .env("TCPSTALL_CLIENT_NETNS", self.netns_path(link.client()))
            .env("TCPSTALL_LINK", link.spec().to_string());
        sys::process::enter_on_spawn(&mut cmd, end.netns(), self.pid_ns.and_then(|n| n.mount_ns()));
        cmd.spawn()
    }
}

/// The commands' /etc/hosts: the host's, then names for the two ends, so that lookups of
/// them (e.g. the reverse lookup of its address `python3 -m http.server` makes) are answered
/// from the file instead of a DNS server, which is not reachable from the namespaces.
fn hosts_file() -> Vec<u8> {
    let mut h = std::fs::read("/etc/hosts").unwrap_or_default();
    if !h.is_empty() && !h.ends_with(b"\n") {
        h.push(b'\n');
    }
    h.extend_from_slice(
        format!("# added by tcpstall shell for its link\n{CLIENT_IP}\ttcpstall-client client\n{SERVER_IP}\ttcpstall-server server\n")
            .as_bytes(),
    );
    h
}

/// The commands, started.
struct Launched {
    pid_ns: Option<sys::process::PidNs>,
    server: Option<Child>,
    client: Child,
    /// The launcher thread lives until this is dropped (the commands' PR_SET_PDEATHSIG
    /// follows the thread that forked them).
    hold: Option<mpsc::Sender<()>>,
}

/// Start the commands in a PID namespace (see `sys::process::PidNs`): with a private /proc
/// and /etc/hosts if the kernel allows it, without them otherwise, or in none (then only the
/// owner-tag sweep of the next run removes background jobs of a SIGKILLed run).
///
/// The namespace is entered by a launcher thread, not this one: unshare(CLONE_NEWPID) keeps
/// a thread from starting threads until it returns to its own PID namespace, and without
/// root that return is refused (setns needs CAP_SYS_ADMIN over the original namespace). The
/// launcher forks the init and the commands, hands them over, and waits for the session to
/// end; it never starts a thread.
fn launch<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    cfg: &'env SessionConfig,
    link: &'env Link,
    notify: &mut impl FnMut(&str),
) -> Result<Launched, LinkError> {
    let keep = [link.client().netns().as_raw_fd(), link.server().netns().as_raw_fd()];
    let mut why = String::new();
    for private in [true, false] {
        let (tx, rx) = mpsc::channel();
        let (hold, wait) = mpsc::channel::<()>();
        scope.spawn(move || match sys::process::PidNs::start(&keep, private, private.then(hosts_file)) {
            Err(e) => {
                let _ = tx.send(Err(e));
            }
            Ok(ns) => {
                let started = start_commands(cfg, &Place { link, pid_ns: Some(&ns) });
                let _ = tx.send(Ok((ns, started)));
                let _ = wait.recv(); // until `hold` is dropped
            }
        });
        match rx.recv() {
            Ok(Ok((ns, Ok((server, client))))) => {
                return Ok(Launched { pid_ns: Some(ns), server, client, hold: Some(hold) });
            }
            Ok(Ok((ns, Err(e)))) => {
                ns.kill();
                return Err(e);
            }
            Ok(Err(e)) => why = e.to_string(),
            Err(_) => why = "the launcher thread failed".into(),
        }
    }
    notify(&format!(
        "no PID namespace for the commands ({why}): if tcpstall is killed, their background jobs survive until the \
         next run removes them"
    ));
    let (server, client) = start_commands(cfg, &Place { link, pid_ns: None })?;
    Ok(Launched { pid_ns: None, server, client, hold: None })
}

/// The terminal on standard input, handed to the command's process group while it runs.
struct Terminal {
    ours: Pid,
}

impl Terminal {
    /// Make `pgid` the terminal's foreground group if standard input is a terminal whose
    /// foreground group is ours; None otherwise (no terminal, or we run in the background).
    fn hand_over(pgid: u32) -> Option<Terminal> {
        use std::io::IsTerminal;
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let ours = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(stdin.as_fd()).ok()? != ours {
            return None;
        }
        nix::unistd::tcsetpgrp(stdin.as_fd(), Pid::from_raw(pgid as i32)).ok()?;
        Some(Terminal { ours })
    }
}

impl Drop for Terminal {
    /// Take the terminal back. We are a background group now: tcsetpgrp(3) from one raises
    /// SIGTTOU unless the caller blocks it, so it is blocked around the call.
    fn drop(&mut self) {
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let Ok(old) = ttou.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK) else { return };
        let _ = nix::unistd::tcsetpgrp(std::io::stdin().as_fd(), self.ours);
        let _ = old.thread_set_mask();
    }
}

fn kill(child: &Child, sig: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(child.id() as i32), sig);
}

/// Wait for any children left (orphans reparented to us as subreaper) for up to `limit`.
fn reap_orphans(limit: Duration) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let t = Instant::now();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if t.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            Ok(WaitStatus::StillAlive) | Err(_) => return, // ECHILD: none left
            Ok(_) => {}
        }
    }
}

/// Run a session. `notify` receives human-readable lines (where the namespaces are).
pub fn run_session(cfg: &SessionConfig, mut notify: impl FnMut(&str)) -> Result<SessionOutcome, LinkError> {
    let mask = signals();
    mask.thread_block().map_err(|e| LinkError::Setup(format!("blocking signals: {}", e.desc())))?;
    let sfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| LinkError::Setup(format!("signalfd: {}", e.desc())))?;
    // Orphans of the command (a background job whose shell exited) are reparented to us rather
    // than to init, so they can be reaped at the end instead of lingering as zombies.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let swept = crate::sweep::sweep_all();
    if let Some(line) = swept.line() {
        notify(&line);
    }
    let swept = swept.processes;
    let link = Link::open(&cfg.spec, cfg.capture.as_deref())?;
    let status = std::thread::scope(|scope| {
        let Launched { pid_ns, server, client, hold } = launch(scope, cfg, &link, &mut notify)?;
        let status = supervise(cfg, &link, &sfd, server, client, pid_ns, &mut notify);
        drop(hold);
        status
    })?;
    // Whatever the command or the server left running (background jobs) would keep the
    // namespaces alive: everything carrying this run's tag goes.
    let leftovers = crate::sweep::kill_own_leftovers();
    if !leftovers.is_empty() {
        notify(&format!("killed {} process(es) left running behind the link: {:?}", leftovers.len(), leftovers));
    }
    reap_orphans(Duration::from_millis(500));
    let report = link.finish()?;
    Ok(SessionOutcome { exit_code: exit_code(status), report, swept })
}

/// Start the server command (if any), then the command; if the command cannot start, the
/// server command is stopped again.
fn start_commands(cfg: &SessionConfig, place: &Place<'_>) -> Result<(Option<Child>, Child), LinkError> {
    let link = place.link;
    let mut server = match &cfg.server_command {
        None => None,
        Some(c) => {
            let mut cmd = Command::new("/bin/sh");
            // Its own process group: the terminal's Ctrl-C goes to the command only, and the
            // whole group (sh and what it started) is signalled at the end.
            cmd.arg("-c").arg(c).process_group(0);
            let child = place
                .spawn_in(link.server(), cmd)
                .map_err(|err| LinkError::NotStarted { command: format!("--server-command '{c}'"), err })?;
            Some(child)
        }
    };
    let argv: Vec<OsString> = if cfg.command.is_empty() {
        vec![std::env::var_os("SHELL").filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into())]
    } else {
        cfg.command.clone()
    };
    let mut cmd = Command::new(&argv[0]);
    // Its own process group: signals are relayed to all of it (a pipeline, a script's children).
    cmd.args(&argv[1..]).process_group(0);
    match place.spawn_in(link.client(), cmd) {
        Ok(c) => Ok((server, c)),
        Err(err) => {
            if let Some(s) = server.as_mut() {
                kill(s, Signal::SIGKILL);
                let _ = s.wait();
            }
            Err(LinkError::NotStarted { command: format!("'{}'", argv[0].to_string_lossy()), err })
        }
    }
}

/// Wait for the command, relaying signals; then stop the server command and everything else
/// started behind the link.
fn supervise(
    cfg: &SessionConfig,
    link: &Link,
    sfd: &SignalFd,
    mut server: Option<Child>,
    mut client: Child,
    pid_ns: Option<sys::process::PidNs>,
    notify: &mut impl FnMut(&str),
) -> Result<ExitStatus, LinkError> {
    notify(&format!(
        "client namespace {CLIENT_IP} (the command runs here); server namespace at {SERVER_IP}, behind link {}",
        cfg.spec
    ));
    notify(&format!(
        "enter the server namespace from another terminal: nsenter --net={}",
        link.server().netns_path().display()
    ));
    let terminal = Terminal::hand_over(client.id());
    let status = loop {
        if let Some(st) =
            client.try_wait().map_err(|e| LinkError::Io { what: "waiting for the command".into(), err: e })?
        {
            break st;
        }
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(50u16));
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else { continue };
            // To the command's whole process group: every process of a pipeline.
            let _ = nix::sys::signal::kill(Pid::from_raw(-(client.id() as i32)), sig);
            if let Some(s) = &server {
                kill(s, sig);
            }
        }
    };
    drop(terminal);
    if let Some(mut s) = server.take() {
        let group = Pid::from_raw(-(s.id() as i32));
        if s.try_wait().ok().flatten().is_none() {
            let _ = nix::sys::signal::kill(group, Signal::SIGTERM);
            let t = Instant::now();
            while s.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = nix::sys::signal::kill(group, Signal::SIGKILL);
        let _ = s.wait();
    }
    // Everything else started behind the link (background jobs of the command, also ones that
    // left their process group) dies with the init of the PID namespace.
    if let Some(ns) = pid_ns {
        ns.kill();
    }
    Ok(status)
}
