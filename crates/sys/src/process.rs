//! Starting child processes inside a network namespace (owned by the link work), and the PID
//! namespace that makes everything a session started die with it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// Arrange for `cmd`, when spawned, to enter the network namespace `netns` (an open
/// /proc/PID/ns/net-style file) before exec, and to receive SIGKILL when the thread that
/// spawns it dies (PR_SET_PDEATHSIG; see prctl(2): the signal follows the death of the parent
/// *thread*, so spawn from a thread that lives as long as the link).
///
/// `netns` must stay open until `spawn` returns.
pub fn enter_netns_on_spawn(cmd: &mut Command, netns: BorrowedFd<'_>) {
    enter_on_spawn(cmd, netns, None);
}

/// [`enter_netns_on_spawn`], and also enter the mount namespace `mntns` (a [`PidNs`]'s, with
/// its own /proc) before exec, keeping the current directory (setns(CLONE_NEWNS) moves the
/// caller to the namespace's root, mount_namespaces(7)).
pub fn enter_on_spawn(cmd: &mut Command, netns: BorrowedFd<'_>, mntns: Option<BorrowedFd<'_>>) {
    let fd = netns.as_raw_fd();
    let mnt = mntns.map(|m| m.as_raw_fd());
    let cwd = std::env::current_dir().ok().and_then(|d| CString::new(d.as_os_str().as_bytes()).ok());
    // The parent's pid, to detect the race where the parent died between fork and prctl. In a
    // child PID namespace ([`PidNs`]) getppid() is 0 (the parent is outside it) until the
    // parent dies and the namespace's init (pid 1) adopts the child.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: setns, chdir, prctl, getppid, kill, sigemptyset,
    // sigprocmask and signal neither allocate nor take locks; `empty` is a zeroed sigset_t on
    // the stack, initialised by sigemptyset before use; `cwd` was allocated before fork and
    // is only read. `fd` and `mnt` are plain integers valid in the child because fork copies
    // the descriptor table and the caller keeps them open across spawn.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(m) = mnt {
                if libc::setns(m, libc::CLONE_NEWNS) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(d) = &cwd {
                    libc::chdir(d.as_ptr());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let ppid = libc::getppid();
            if ppid != parent && ppid != 0 {
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

/// A PID namespace (pid_namespaces(7)) for the processes of a session, so that all of them,
/// including background jobs, daemons that called setsid() and double-forked, die with the
/// process that created it, even by SIGKILL:
///
/// - its init (pid 1) is a forked copy of this process that never execs: it only reaps the
///   orphans reparented to it. It has PR_SET_PDEATHSIG = SIGKILL, which the kernel delivers
///   even to an init when it comes from outside its namespace (kernel/signal.c,
///   `sig_task_ignored` / `send_signal_locked`: `force` for a sender outside the namespace),
///   and it also exits when the pipe whose write end this process holds reports a hang-up;
/// - when the init of a PID namespace dies, the kernel SIGKILLs every other process in it
///   (kernel/pid_namespace.c `zap_pid_ns_processes`): no user-space step can be skipped.
///
/// The init is not the command itself because a namespace's init ignores every signal it
/// has no handler for (so `sleep` as pid 1 would ignore Ctrl-C and SIGTERM).
///
/// With `private_proc`, the init also creates a mount namespace (propagation private) with
/// a /proc of the new PID namespace, which the session's commands enter
/// ([`enter_on_spawn`]), so `ps`, `pkill` and `/proc/$pid` agree with the pids the commands
/// see. The init keeps the descriptors `keep` open (and closes all others), so
/// `/proc/1/fd/N` names them inside.
pub struct PidNs {
    init: Child,
    _hangup: OwnedFd,
    mnt: Option<File>,
}

impl PidNs {
    /// Create the namespace and its init. From then on, children forked by the calling
    /// thread start in the new namespace (unshare(CLONE_NEWPID) sets only the thread's
    /// `pid_ns_for_children`), and the thread can no longer start threads (copy_process in
    /// kernel/fork.c refuses CLONE_THREAD while that differs from its own namespace; going
    /// back with setns needs CAP_SYS_ADMIN over the original namespace, which a process in
    /// its own user namespace lacks). So call it from a thread dedicated to forking, which
    /// must live as long as the processes it forks (their PR_SET_PDEATHSIG follows it).
    ///
    /// `hosts` (with `private_proc` only): the contents of /etc/hosts in the mount namespace,
    /// best effort (a missing /etc/hosts or /tmp leaves the host's file visible).
    pub fn start(keep: &[RawFd], private_proc: bool, hosts: Option<Vec<u8>>) -> io::Result<PidNs> {
        // SAFETY: unshare only changes this thread's namespace for future children.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (init, hangup) = Self::spawn_init(keep, private_proc, hosts)?;
        let mnt = if private_proc {
            match File::open(format!("/proc/{}/ns/mnt", init.id())) {
                Ok(f) => Some(f),
                Err(e) => {
                    PidNs { init, _hangup: hangup, mnt: None }.kill();
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok(PidNs { init, _hangup: hangup, mnt })
    }

    fn spawn_init(keep: &[RawFd], private_proc: bool, hosts: Option<Vec<u8>>) -> io::Result<(Child, OwnedFd)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created by pipe2 and are owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let hup = rd.as_raw_fd();
        let mut keep: Vec<RawFd> = keep.iter().copied().chain([hup]).collect();
        keep.sort_unstable();
        keep.dedup();
        let mut cmd = Command::new("/bin/true"); // never executed: the init stays in pre_exec
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        // SAFETY: runs in the child between fork and exec and never returns Ok (so nothing is
        // executed): prctl, unshare, mount, umount2, open, write, close, close_range (syscall),
        // waitpid, poll and _exit are async-signal-safe and allocate nothing; `keep` and
        // `hosts` were built before fork and are only read. Closing every descriptor but `keep` releases the child's
        // copy of std's exec-status pipe, so `spawn` returns once setup is done; an error
        // before that is reported through that pipe as spawn's error.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if private_proc {
                    private_mounts(hosts.as_deref())?;
                }
                close_all_but(&keep);
                reap_until_hangup(hup)
            });
        }
        let child = cmd.spawn()?;
        drop(rd);
        Ok((child, wr))
    }

    /// The mount namespace with the private /proc, if one was made.
    pub fn mount_ns(&self) -> Option<BorrowedFd<'_>> {
        self.mnt.as_ref().map(|f| f.as_fd())
    }

    /// The init's pid (in the creator's namespace).
    pub fn init_pid(&self) -> u32 {
        self.init.id()
    }

    /// Kill the init, so the kernel kills every process in the namespace, and reap it.
    pub fn kill(mut self) {
        let _ = self.init.kill();
        let _ = self.init.wait();
    }
}

/// Restore SIGPIPE's default action, so that `tcpstall ... | head` ends quietly the way Unix
/// filters do, instead of every `print!` panicking on EPIPE (the Rust runtime sets SIGPIPE to
/// SIG_IGN at start-up). Call once, first thing in `main`, before any thread starts.
pub fn default_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler code; it changes only the process's
    // disposition of SIGPIPE, and is called before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Cap glibc's malloc arenas at one per CPU this process may use (at least 2). glibc gives a
/// thread that finds the arenas busy an arena of its own, up to 8 per CPU (mallopt(3),
/// M_ARENA_MAX), and keeps what each held: `tcpstall lab`'s probes, rows side by side and their
/// capture readers start dozens of short threads, and the arenas left behind were 40 MB of its
/// peak RSS (150-162 MB against 117-120 MB with two arenas, the same wall time). Call once,
/// first thing in `main`, before any thread starts. Without glibc (or when refused) nothing
/// changes.
pub fn limit_malloc_arenas() {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
    let n = libc::c_int::try_from(cpus).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt(3) only changes an allocator parameter; it is called before any other
    // thread exists, and its result (0 when refused) is not needed.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = n;
}

/// The init's mount namespace (propagation private) with a /proc of the new PID namespace and,
/// best effort, `hosts` as /etc/hosts.
///
/// # Safety
/// Only in the forked child before exec (the init of [`PidNs::start`]): it calls only
/// async-signal-safe functions (unshare, mount, umount2, open, write, close) and allocates
/// nothing; `hosts` was built before fork.
unsafe fn private_mounts(hosts: Option<&[u8]>) -> io::Result<()> {
    if libc::unshare(libc::CLONE_NEWNS) != 0 {
        return Err(io::Error::last_os_error());
    }
    let root = c"/";
    if libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null())
        != 0
    {
        return Err(io::Error::last_os_error());
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), flags, std::ptr::null()) != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(h) = hosts {
        bind_hosts(h);
    }
    Ok(())
}

/// A tmpfs mounted on /tmp of this namespace only long enough to hold the file and bind it over
/// /etc/hosts; once detached, the bind mount keeps the file: nothing is written to any real file
/// system. Best effort: any failure leaves the host's /etc/hosts visible.
///
/// # Safety
/// As [`private_mounts`]: in the forked child before exec, async-signal-safe calls only.
unsafe fn bind_hosts(h: &[u8]) {
    if libc::mount(c"tmpfs".as_ptr(), c"/tmp".as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) != 0 {
        return;
    }
    let fd = libc::open(c"/tmp/hosts".as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
    if fd >= 0 {
        let n = libc::write(fd, h.as_ptr().cast(), h.len());
        libc::close(fd);
        if n == h.len() as isize {
            libc::mount(
                c"/tmp/hosts".as_ptr(),
                c"/etc/hosts".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            );
        }
    }
    libc::umount2(c"/tmp".as_ptr(), libc::MNT_DETACH);
}

/// Closes every descriptor but `keep` (sorted, without duplicates) with close_range(2).
///
/// # Safety
/// In the forked child before exec: descriptors other code still uses are closed.
unsafe fn close_all_but(keep: &[RawFd]) {
    let mut lo: libc::c_uint = 0;
    for &k in keep {
        if k as libc::c_uint > lo {
            libc::syscall(libc::SYS_close_range, lo, k as libc::c_uint - 1, 0);
        }
        lo = k as libc::c_uint + 1;
    }
    libc::syscall(libc::SYS_close_range, lo, libc::c_uint::MAX, 0);
}

/// The init's life: reap the orphans reparented to it until `hup` (the read end of a pipe
/// whose write end only the creator holds) reports a hang-up, then exit.
///
/// # Safety
/// In the forked child before exec, after [`close_all_but`] closed the child's copy of the
/// write end: waitpid, poll and _exit are async-signal-safe.
unsafe fn reap_until_hangup(hup: RawFd) -> ! {
    loop {
        while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
        let mut p = libc::pollfd { fd: hup, events: libc::POLLIN, revents: 0 };
        // The write end is held only by the creator (its copy here was closed above): a
        // hang-up means it is gone, PR_SET_PDEATHSIG or not (this also covers the creator
        // dying before prctl above).
        if libc::poll(&mut p, 1, 200) > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            libc::_exit(0);
        }
    }
}
