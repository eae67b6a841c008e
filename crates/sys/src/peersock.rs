//! Another process's TCP socket, read without a kernel module: pidfd_open(2) and
//! pidfd_getfd(2) (Linux 5.6+; PTRACE_MODE_ATTACH_REALCREDS over the target, i.e. root or the
//! same user with ptrace allowed) duplicate its descriptor into this process, where the plain
//! getsockopt(2) calls answer what ss cannot show: TCP_NODELAY and TCP_CORK (tp->nonagle),
//! TCP_QUICKACK (net/ipv4/tcp.c `do_tcp_getsockopt`: `!inet_csk_in_pingpong_mode(sk)`),
//! TCP_NOTSENT_LOWAT, TCP_CONGESTION, and TCP_INFO. The duplicate is closed at once; the socket
//! itself is untouched (getsockopt changes nothing).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::tcpinfo::{tcp_info, TcpInfo};

/// What getsockopt says of one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSocket {
    /// TCP_NODELAY: Nagle's algorithm off (TCP_NAGLE_OFF in tp->nonagle).
    pub nodelay: bool,
    /// TCP_CORK held (TCP_NAGLE_CORK).
    pub cork: bool,
    /// The delayed-ACK engine's interactive (ping-pong) mode: ACKs wait for data to ride on
    /// (TCP_QUICKACK reads 0).
    pub pingpong: bool,
    /// TCP_NOTSENT_LOWAT (bytes; 0: unset, the sysctl's default UINT_MAX applies).
    pub notsent_lowat: u32,
    /// TCP_CONGESTION.
    pub congestion: String,
    pub info: TcpInfo,
}

/// Duplicate descriptor `fd` of process `pid` into this one.
pub fn dup_from(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or -1;
    // no memory is passed.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `pidfd` is a descriptor the kernel just returned to us and nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: pidfd_getfd takes the live pidfd, the target's fd number and flags by value and
    // returns a new descriptor of ours or -1; no memory is passed.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel installed in our table for us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(got as i32) })
}

fn int_opt(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is valid for the borrow; `v` and `len` are live locals and the kernel
    // writes at most `len` (= sizeof c_int) bytes into `v`.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, opt, (&mut v as *mut libc::c_int).cast(), &mut len)
    };
    if rc == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut buf = [0u8; 16]; // TCP_CA_NAME_MAX
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a live writable buffer of `len` bytes; the kernel writes at most `len`.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let b = &buf[..(len as usize).min(buf.len())];
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    Ok(String::from_utf8_lossy(&b[..end]).into_owned())
}

/// The options and tcp_info of a TCP socket of ours.
pub fn read(fd: BorrowedFd<'_>) -> io::Result<PeerSocket> {
    Ok(PeerSocket {
        nodelay: int_opt(fd, libc::TCP_NODELAY)? != 0,
        cork: int_opt(fd, libc::TCP_CORK)? != 0,
        pingpong: int_opt(fd, libc::TCP_QUICKACK)? == 0,
        notsent_lowat: int_opt(fd, libc::TCP_NOTSENT_LOWAT)? as u32,
        congestion: congestion(fd)?,
        info: tcp_info(fd)?,
    })
}

/// The options and tcp_info of descriptor `fd` of process `pid`.
pub fn read_peer(pid: u32, fd: i32) -> io::Result<PeerSocket> {
    let dup = dup_from(pid, fd)?;
    read(dup.as_fd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The options set on a socket read back through a duplicate of its descriptor.
    #[test]
    fn options_read_back_through_the_descriptor() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let p = read(c.as_fd()).unwrap();
        assert!(!p.nodelay && !p.cork && !p.congestion.is_empty(), "{p:?}");
        c.set_nodelay(true).unwrap();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert!(read(c.as_fd()).unwrap().nodelay);
        match read_peer(std::process::id(), c.as_raw_fd()) {
            Ok(p) => assert!(p.nodelay && p.info.snd_mss > 0, "{p:?}"),
            // Without ptrace rights over ourselves (a locked-down sandbox) or before 5.6.
            Err(e) => assert!(matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)), "{e}"),
        }
    }
}
