//! Socket options no safe crate offers (socket2 0.5 and nix 0.29 lack SO_BUSY_POLL).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// setsockopt(SO_BUSY_POLL, us): the socket's reads poll the device for up to `us` microseconds
/// before sleeping (socket(7); net/core/sock.c `sk_setsockopt`: raising it above
/// net.core.busy_read needs CAP_NET_ADMIN on kernels since 5.15, else EPERM).
pub fn set_busy_poll(fd: BorrowedFd<'_>, us: u32) -> io::Result<()> {
    let v: libc::c_int = us.try_into().map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is a valid open descriptor for the borrow's lifetime; the option value is a
    // live c_int on this stack frame and its exact size is passed as optlen.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// getsockopt(SO_BUSY_POLL): the socket's busy-poll time in microseconds (0: off).
pub fn busy_poll(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is valid for the borrow; `v` and `len` are live locals the kernel writes at
    // most `len` (= sizeof c_int) bytes into.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(v.max(0) as u32)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// socket(7): SO_BUSY_POLL reads back what was set (or EPERM without CAP_NET_ADMIN).
    #[test]
    fn busy_poll_reads_back() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(busy_poll(s.as_fd()).unwrap(), 0);
        match set_busy_poll(s.as_fd(), 50) {
            Ok(()) => assert_eq!(busy_poll(s.as_fd()).unwrap(), 50),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
    }
}
