//! The code of a fix, per language: the socket option call or the gathered write, with its
//! caveat, for each strategy of crates/scenario ([`Opt`]).

use scenario::Opt;
use serde::Serialize;

/// `--lang` named no language advise has code for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--lang {0}: expected one of c, go, rust, python, java, node")]
pub struct UnknownLang(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    C,
    Go,
    Rust,
    Python,
    Java,
    Node,
}

impl Lang {
    pub const ALL: [Lang; 6] = [Lang::C, Lang::Go, Lang::Rust, Lang::Python, Lang::Java, Lang::Node];
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Go => "go",
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Java => "java",
            Lang::Node => "node",
        }
    }
    pub fn parse(s: &str) -> Result<Lang, UnknownLang> {
        Lang::ALL.into_iter().find(|l| l.as_str() == s).ok_or_else(|| UnknownLang(s.to_string()))
    }
}

/// How big a change a strategy is to make in an application: 1 for one call after connect,
/// 2 for code around every message or every read (a gathered write replaces a message's writes
/// with one call), plus 1 for a Linux-only option (TCP_CORK, MSG_MORE, TCP_QUICKACK: tcp(7),
/// send(2)), which portable code has to put behind a platform check.
/// Seed 001's NODELAY-then-CORK toggle around every message is 4.
pub fn change_size(strategy: Opt) -> u32 {
    match strategy {
        Opt::Nodelay => 1,
        Opt::QuickackOnce | Opt::Writev | Opt::Buffer => 2,
        Opt::Cork | Opt::MsgMore | Opt::QuickackEach | Opt::BusyPoll => 3,
        Opt::NodelayThenCork => 4,
    }
}

/// The caveat of a strategy, for the recommendation (sources in the comments of
/// crates/scenario/src/strategy.rs).
pub fn caveat(strategy: Opt, writes_per_message: usize) -> String {
    match strategy {
        Opt::Nodelay => format!(
            "TCP_NODELAY sends each write at once: a message of {writes_per_message} writes costs up to \
             {writes_per_message} segments, and the peer's delayed ACK can still stall a write that the \
             congestion window holds (seed 001)"
        ),
        Opt::QuickackOnce => "TCP_QUICKACK is not sticky: the kernel leaves quick-ACK mode again on its own \
            (tcp(7); __tcp_sock_set_quickack), so set once it usually stops helping after the first exchanges"
            .into(),
        Opt::QuickackEach => "TCP_QUICKACK must be set again after every recv, and every segment is ACKed at once: \
            more pure ACKs on the wire and more work for the peer"
            .into(),
        Opt::Cork => "TCP_CORK holds partial segments until it is cleared (or 200 ms pass): always clear it after \
            the message's last write, on every path including errors; it is Linux-only (FreeBSD/macOS: TCP_NOPUSH)"
            .into(),
        Opt::MsgMore => "MSG_MORE must be on every write of a message but the last; a missing last write leaves \
            the data corked until the 200 ms cork timer; Linux-only"
            .into(),
        Opt::Writev | Opt::Buffer => "a gathered write can be short like any write: loop until every byte is sent \
            (writev/sendmsg return the bytes written)"
            .into(),
        Opt::NodelayThenCork => "toggling TCP_NODELAY off and TCP_CORK on around each message works on current \
            kernels; seed 001's kernel lost the cork once NODELAY had been set"
            .into(),
        Opt::BusyPoll => "a spinning reader keeps its CPU busy while it waits (see the CPU column: up to one CPU \
            per spinning thread), so it pays only with a core to spare per connection or a poller shared by many; \
            SO_BUSY_POLL needs CAP_NET_ADMIN and a device that supports it (socket(7)); it saves the wake-up, \
            never a TCP stall"
            .into(),
    }
}

/// The code for one strategy on one side in one language: what to add where.
pub fn snippet(strategy: Opt, lang: Lang) -> String {
    use Lang::*;
    let s = match (strategy, lang) {
        (Opt::Writev, C) => "/* one gathered write per message instead of one write per piece */\n\
#include <sys/uio.h>\n\
struct iovec iov[3] = {\n    { .iov_base = part1, .iov_len = len1 },\n    { .iov_base = part2, .iov_len = len2 },\n    { .iov_base = part3, .iov_len = len3 },\n};\n\
ssize_t n = writev(fd, iov, 3);   /* loop on a short write: advance iov by n */",
        (Opt::Buffer, C) => "/* copy the message's pieces into one buffer, one send */\n\
memcpy(buf, part1, len1); memcpy(buf + len1, part2, len2); memcpy(buf + len1 + len2, part3, len3);\n\
ssize_t n = send(fd, buf, len1 + len2 + len3, 0);   /* loop on a short write */",
        (Opt::Cork, C) => "#include <netinet/tcp.h>\n\
int on = 1, off = 0;\n\
setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);\n\
write(fd, part1, len1); write(fd, part2, len2); write(fd, part3, len3);\n\
setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);   /* sends the message now */",
        (Opt::MsgMore, C) => "send(fd, part1, len1, MSG_MORE);\nsend(fd, part2, len2, MSG_MORE);\nsend(fd, part3, len3, 0);   /* the last write without MSG_MORE */",
        (Opt::Nodelay, C) => "#include <netinet/tcp.h>\nint one = 1;\nsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* once, after connect/accept */",
        (Opt::QuickackEach | Opt::QuickackOnce, C) => "#include <netinet/tcp.h>\nint one = 1;\nn = recv(fd, buf, sizeof buf, 0);\nsetsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);   /* again after every recv */",

        (Opt::Writev | Opt::Buffer, Go) => "// net.Buffers is written with one writev on a *net.TCPConn\nbufs := net.Buffers{part1, part2, part3}\nif _, err := bufs.WriteTo(conn); err != nil { /* handle */ }",
        (Opt::Nodelay, Go) => "// Go sets TCP_NODELAY on every TCPConn by default (net: setNoDelay in newTCPConn);\n// only code that called SetNoDelay(false) needs this\nconn.(*net.TCPConn).SetNoDelay(true)",
        (Opt::Cork | Opt::MsgMore, Go) => "// Go has no TCP_CORK helper; net.Buffers gathers the message into one writev instead:\nbufs := net.Buffers{part1, part2, part3}\n_, err := bufs.WriteTo(conn)",
        (Opt::QuickackEach | Opt::QuickackOnce, Go) => "// after every Read: TCP_QUICKACK through the raw socket (golang.org/x/sys/unix)\nraw, _ := conn.(*net.TCPConn).SyscallConn()\nraw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })",

        (Opt::Writev | Opt::Buffer, Rust) => "use std::io::{IoSlice, Write};\n// one gathered write per message (std: write_vectored; loop on a short write)\nlet bufs = [IoSlice::new(part1), IoSlice::new(part2), IoSlice::new(part3)];\nlet n = stream.write_vectored(&bufs)?;",
        (Opt::Nodelay, Rust) => "stream.set_nodelay(true)?;   // once, after connect/accept",
        (Opt::Cork, Rust) => "// socket2 (features = [\"all\"]), Linux\nlet sock = socket2::SockRef::from(&stream);\nsock.set_cork(true)?;\nstream.write_all(part1)?; stream.write_all(part2)?; stream.write_all(part3)?;\nsock.set_cork(false)?;   // sends the message now",
        (Opt::MsgMore, Rust) => "// libc::MSG_MORE on all but the last piece (socket2::SockRef::send_with_flags)\nlet sock = socket2::SockRef::from(&stream);\nsock.send_with_flags(part1, libc::MSG_MORE)?;\nsock.send_with_flags(part2, libc::MSG_MORE)?;\nsock.send_with_flags(part3, 0)?;",
        (Opt::QuickackEach | Opt::QuickackOnce, Rust) => "// socket2 (features = [\"all\"]), Linux: after every read\nlet n = stream.read(&mut buf)?;\nsocket2::SockRef::from(&stream).set_quickack(true)?;",

        (Opt::Writev | Opt::Buffer, Python) => "# one gathered write per message (Linux sendmsg with one buffer per piece)\nsock.sendmsg([part1, part2, part3])   # returns bytes sent: loop on a short write",
        (Opt::Nodelay, Python) => "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # once, after connect/accept",
        (Opt::Cork, Python) => "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)\nsock.sendall(part1); sock.sendall(part2); sock.sendall(part3)\nsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)   # sends the message now",
        (Opt::MsgMore, Python) => "sock.send(part1, socket.MSG_MORE)\nsock.send(part2, socket.MSG_MORE)\nsock.send(part3)   # the last piece without MSG_MORE",
        (Opt::QuickackEach | Opt::QuickackOnce, Python) => "data = sock.recv(65536)\nsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)   # again after every recv",

        (Opt::Writev | Opt::Buffer, Java) => "// SocketChannel is a GatheringByteChannel: one writev per message\nByteBuffer[] parts = { part1, part2, part3 };\nwhile (part3.hasRemaining()) channel.write(parts);",
        (Opt::Nodelay, Java) => "socket.setTcpNoDelay(true);   // or channel.setOption(StandardSocketOptions.TCP_NODELAY, true)",
        (Opt::Cork | Opt::MsgMore, Java) => "// the JDK has no TCP_CORK or MSG_MORE; gather the message into one write instead\nByteBuffer[] parts = { part1, part2, part3 };\nwhile (part3.hasRemaining()) channel.write(parts);   // SocketChannel: GatheringByteChannel",
        (Opt::QuickackEach | Opt::QuickackOnce, Java) => "// JDK 10+, Linux: jdk.net.ExtendedSocketOptions.TCP_QUICKACK, after every read\nint n = channel.read(buf);\nchannel.setOption(jdk.net.ExtendedSocketOptions.TCP_QUICKACK, true);",

        (Opt::Writev | Opt::Buffer | Opt::Cork | Opt::MsgMore, Node) => "// socket.cork() buffers writes in Node until uncork(), which hands them to libuv as one writev\nsocket.cork();\nsocket.write(part1); socket.write(part2); socket.write(part3);\nprocess.nextTick(() => socket.uncork());",
        (Opt::Nodelay, Node) => "socket.setNoDelay(true);   // Node >= 18 sets it by default on net.Socket (noDelay option)",
        (Opt::QuickackEach | Opt::QuickackOnce, Node) => "// Node exposes no TCP_QUICKACK; fix the sender instead (socket.cork()/uncork() around the message)",

        (Opt::BusyPoll, C) => "/* spin on non-blocking reads instead of sleeping in recv (one core per spinning thread) */\n\
int us = 50;   /* and poll the device from the read where permitted (CAP_NET_ADMIN) */\n\
setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us);\n\
ssize_t n;\n\
while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))\n\
    ;   /* n > 0: data, 0: EOF, < 0: error */",
        (Opt::BusyPoll, Go) => "// Go's runtime parks a goroutine on EAGAIN (netpoller): spin with a raw non-blocking read\nraw, _ := conn.(*net.TCPConn).SyscallConn()\nvar n int\nfor {\n    var err error\n    raw.Read(func(fd uintptr) bool { n, err = unix.Read(int(fd), buf); return true })\n    if err != unix.EAGAIN { break }\n}",
        (Opt::BusyPoll, Rust) => "// non-blocking socket, spin on WouldBlock (one core per spinning thread)\nstream.set_nonblocking(true)?;\nlet n = loop {\n    match stream.read(&mut buf) {\n        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),\n        r => break r?,\n    }\n};",
        (Opt::BusyPoll, Python) => "sock.setblocking(False)\nwhile True:   # spin: one core per spinning reader\n    try:\n        data = sock.recv(65536); break\n    except BlockingIOError:\n        pass",
        (Opt::BusyPoll, Java) => "// a non-blocking SocketChannel read returns 0 when nothing has arrived: spin on it\nchannel.configureBlocking(false);\nint n;\nwhile ((n = channel.read(buf)) == 0) Thread.onSpinWait();",
        (Opt::BusyPoll, Node) => "// Node's event loop sleeps in epoll; it cannot spin a read. Keep the reader on a dedicated core\n// (taskset) or use a native addon; the wake-up cost stays otherwise",
        (Opt::NodelayThenCork, _) => return snippet(Opt::Cork, lang),
    };
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every fix advise can recommend has code in every language, naming the call it rests on.
    #[test]
    fn every_strategy_has_code_in_every_language() {
        let want = [
            (Opt::Writev, Lang::C, "writev("),
            (Opt::Writev, Lang::Go, "net.Buffers"),
            (Opt::Writev, Lang::Rust, "write_vectored"),
            (Opt::Writev, Lang::Python, "sendmsg("),
            (Opt::Writev, Lang::Java, "GatheringByteChannel"),
            (Opt::Writev, Lang::Node, "socket.cork()"),
            (Opt::Cork, Lang::C, "TCP_CORK"),
            (Opt::Cork, Lang::Python, "TCP_CORK"),
            (Opt::Cork, Lang::Rust, "set_cork"),
            (Opt::Nodelay, Lang::C, "TCP_NODELAY"),
            (Opt::Nodelay, Lang::Go, "SetNoDelay"),
            (Opt::QuickackEach, Lang::C, "TCP_QUICKACK"),
            (Opt::MsgMore, Lang::C, "MSG_MORE"),
            (Opt::BusyPoll, Lang::C, "MSG_DONTWAIT"),
            (Opt::BusyPoll, Lang::Rust, "WouldBlock"),
        ];
        for (s, l, needle) in want {
            assert!(snippet(s, l).contains(needle), "{s} {l:?}: {}", snippet(s, l));
        }
        for s in Opt::ALL {
            for l in Lang::ALL {
                assert!(!snippet(s, l).is_empty(), "{s} {l:?}");
            }
            assert!(!caveat(s, 3).is_empty(), "{s}");
        }
        assert!(caveat(Opt::Nodelay, 3).contains("up to 3 segments"));
        assert_eq!(Lang::parse("go"), Ok(Lang::Go));
        let e = Lang::parse("cobol").unwrap_err().to_string();
        assert_eq!(e, "--lang cobol: expected one of c, go, rust, python, java, node");
    }
}
