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
    // async-signal-safe calls are allowed: setns, prctl, getppid and kill are raw syscalls
    // that neither allocate nor take locks. `fd` is a plain integer valid in the child because
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
            // SIGINT/SIGQUIT may be ignored by the parent while it waits (like system(3));
            // the command gets the default dispositions back.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}
