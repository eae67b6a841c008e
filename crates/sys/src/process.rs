//! Starting child processes inside a network namespace (owned by the link work).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Arrange for `cmd`, when spawned, to enter the network namespace `netns` (an open
/// /proc/PID/ns/net-style file) before exec, and to receive SIGKILL when the thread that
/// spawns it dies (PR_SET_PDEATHSIG; see prctl(2): the signal follows the death of the parent
/// *thread*, so spawn from a thread that lives as long as the link).
///
/// `netns` must stay open until `spawn` returns.
pub fn enter_netns_on_spawn(cmd: &mut Command, netns: BorrowedFd<'_>) {
    let fd = netns.as_raw_fd();
    // The parent's pid, to detect the race where the parent died between fork and prctl.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: setns, prctl, getppid, kill, sigemptyset,
    // sigprocmask and signal neither allocate nor take locks; `empty` is a zeroed sigset_t on
    // the stack, initialised by sigemptyset before use. `fd` is a plain integer valid in the child because
    // fork copies the descriptor table and the caller keeps `netns` open across spawn.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            // The parent may block or ignore SIGINT, SIGQUIT, SIGTERM and SIGHUP while it waits
            // (it reads them from a signalfd); the command starts with an empty signal mask
            // and default dispositions, as if started by a shell.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}
