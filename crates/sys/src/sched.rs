//! Scheduling of the calling thread (owned by the link work).

use std::io;

/// Put the calling thread (not the whole process: on Linux the policy is per task) into
/// SCHED_FIFO at `priority` (1-99). Needs CAP_SYS_NICE (root); the kernel's RT throttling
/// (sched_rt_runtime_us) still leaves other tasks at least 5% of each CPU.
pub fn set_thread_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: sched_setscheduler reads one `struct sched_param` from the pointer, which is a
    // live local; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set the nice value of the calling thread (setpriority(PRIO_PROCESS, tid) acts on one
/// thread on Linux). Negative values need CAP_SYS_NICE.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Put the calling thread back into SCHED_OTHER (the default time-sharing policy) at nice 0,
/// e.g. after [`set_thread_fifo`].
pub fn set_thread_other() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in set_thread_fifo: one live local `struct sched_param`, pid 0 = this thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    set_thread_nice(0)
}

/// Whether the calling thread runs under SCHED_FIFO.
pub fn thread_is_fifo() -> io::Result<bool> {
    // SAFETY: sched_getscheduler takes a pid (0 = the calling thread) and touches no memory.
    let rc = unsafe { libc::sched_getscheduler(0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc == libc::SCHED_FIFO)
}
