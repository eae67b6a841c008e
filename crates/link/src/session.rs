//! `tcpstall shell`: run a command in the client namespace, optionally a peer in the server
//! namespace, with the link in between; tear everything down when the command ends.
//!
//! Signals: SIGINT, SIGQUIT, SIGTERM and SIGHUP are blocked in this process before any thread
//! starts (so the forwarder threads inherit the mask) and read from a signalfd. A signal the
//! terminal generated (si_code SI_KERNEL) already reached the command, which shares our
//! process group, so it is not relayed again; a signal sent with kill(2) is relayed to the
//! command and the peer, as sudo(8) does. The command decides whether to exit; when it does,
//! the peer gets SIGTERM (then SIGKILL after a second) and the link is torn down.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
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

fn spawn_in(end: &End, mut cmd: Command, link: &Link, what: &str) -> Result<Child, LinkError> {
    cmd.env(OWNER_VAR, owner_tag())
        .env("TCPSTALL_CLIENT", CLIENT_IP.to_string())
        .env("TCPSTALL_SERVER", SERVER_IP.to_string())
        .env("TCPSTALL_SERVER_NETNS", link.server().netns_path())
        .env("TCPSTALL_CLIENT_NETNS", link.client().netns_path())
        .env("TCPSTALL_LINK", link.spec().to_string());
    sys::process::enter_netns_on_spawn(&mut cmd, end.netns());
    cmd.spawn().map_err(|e| LinkError::Io { what: format!("cannot run {what}"), err: e })
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
    let swept = crate::sweep::sweep();
    if !swept.is_empty() {
        notify(&format!("removed {} stale process(es) left by killed runs: {:?}", swept.len(), swept));
    }
    let link = Link::open(&cfg.spec, cfg.capture.as_deref())?;
    notify(&format!(
        "client namespace {CLIENT_IP} (the command runs here); server namespace at {SERVER_IP}, behind link {}",
        cfg.spec
    ));
    notify(&format!(
        "enter the server namespace from another terminal: nsenter --net={}",
        link.server().netns_path().display()
    ));
    let mut server = match &cfg.server_command {
        None => None,
        Some(c) => {
            let mut cmd = Command::new("/bin/sh");
            // Its own process group: the terminal's Ctrl-C goes to the command only, and the
            // whole group (sh and what it started) is signalled at the end.
            cmd.arg("-c").arg(c).process_group(0);
            Some(spawn_in(link.server(), cmd, &link, &format!("--server-command '{c}'"))?)
        }
    };
    let argv: Vec<OsString> = if cfg.command.is_empty() {
        vec![std::env::var_os("SHELL").filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into())]
    } else {
        cfg.command.clone()
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let mut client = match spawn_in(link.client(), cmd, &link, &format!("'{}'", argv[0].to_string_lossy())) {
        Ok(c) => c,
        Err(e) => {
            if let Some(s) = server.as_mut() {
                kill(s, Signal::SIGKILL);
                let _ = s.wait();
            }
            return Err(e);
        }
    };
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
            // SI_KERNEL: generated by the terminal for the whole foreground process group.
            let from_terminal = info.ssi_code == libc::SI_KERNEL;
            if !from_terminal {
                kill(&client, sig);
                if let Some(s) = &server {
                    kill(s, sig);
                }
            }
        }
    };
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
