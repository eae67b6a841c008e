//! The code of a fix, per language: the socket option call or the gathered write, with its
//! caveat. Strategies are named as in crates/scenario (`nodelay`, `cork`, `writev`, ...).

use serde::Serialize;

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
    pub fn parse(s: &str) -> Result<Lang, String> {
        Lang::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| format!("--lang {s}: expected one of c, go, rust, python, java, node"))
    }
}

/// How big a change a strategy is to make in an application: 1 for one call after connect,
/// 2 for code around every message or every read (a gathered write replaces a message's writes
/// with one call), plus 1 for a Linux-only option (TCP_CORK, MSG_MORE, TCP_QUICKACK: tcp(7),
/// send(2)), which portable code has to put behind a platform check.
pub fn change_size(strategy: &str) -> u32 {
    match strategy {
        "nodelay" => 1,
        "quickack-once" | "writev" | "buffer" => 2,
        "cork" | "msg-more" | "quickack-each" | "busy-poll" => 3,
        _ => 4,
    }
}

/// The caveat of a strategy, for the recommendation (sources in the comments of
/// crates/scenario/src/strategy.rs).
pub fn caveat(strategy: &str, writes_per_message: usize) -> String {
    match strategy {
        "nodelay" => format!(
            "TCP_NODELAY sends each write at once: a message of {writes_per_message} writes costs up to \
             {writes_per_message} segments, and the peer's delayed ACK can still stall a write that the \
             congestion window holds (seed 001)"
        ),
        "quickack-once" => "TCP_QUICKACK is not sticky: the kernel leaves quick-ACK mode again on its own \
            (tcp(7); __tcp_sock_set_quickack), so set once it usually stops helping after the first exchanges"
            .into(),
        "quickack-each" => "TCP_QUICKACK must be set again after every recv, and every segment is ACKed at once: \
            more pure ACKs on the wire and more work for the peer"
            .into(),
        "cork" => "TCP_CORK holds partial segments until it is cleared (or 200 ms pass): always clear it after \
            the message's last write, on every path including errors; it is Linux-only (FreeBSD/macOS: TCP_NOPUSH)"
            .into(),
        "msg-more" => "MSG_MORE must be on every write of a message but the last; a missing last write leaves \
            the data corked until the 200 ms cork timer; Linux-only"
            .into(),
        "writev" | "buffer" => "a gathered write can be short like any write: loop until every byte is sent \
            (writev/sendmsg return the bytes written)"
            .into(),
        "nodelay-then-cork" => "toggling TCP_NODELAY off and TCP_CORK on around each message works on current \
            kernels; seed 001's kernel lost the cork once NODELAY had been set"
            .into(),
        "busy-poll" => "a spinning reader keeps its CPU busy while it waits (see the CPU column: up to one CPU \
            per spinning thread), so it pays only with a core to spare per connection or a poller shared by many; \
            SO_BUSY_POLL needs CAP_NET_ADMIN and a device that supports it (socket(7)); it saves the wake-up, \
            never a TCP stall"
            .into(),
        _ => String::new(),
    }
}

/// The code for one strategy on one side in one language: what to add where.
pub fn snippet(strategy: &str, lang: Lang) -> String {
    use Lang::*;
    let s = match (strategy, lang) {
        ("writev", C) => "/* one gathered write per message instead of one write per piece */\n\
#include <sys/uio.h>\n\
struct iovec iov[3] = {\n    { .iov_base = part1, .iov_len = len1 },\n    { .iov_base = part2, .iov_len = len2 },\n    { .iov_base = part3, .iov_len = len3 },\n};\n\
ssize_t n = writev(fd, iov, 3);   /* loop on a short write: advance iov by n */",
        ("buffer", C) => "/* copy the message's pieces into one buffer, one send */\n\
memcpy(buf, part1, len1); memcpy(buf + len1, part2, len2); memcpy(buf + len1 + len2, part3, len3);\n\
ssize_t n = send(fd, buf, len1 + len2 + len3, 0);   /* loop on a short write */",
        ("cork", C) => "#include <netinet/tcp.h>\n\
int on = 1, off = 0;\n\
setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);\n\
write(fd, part1, len1); write(fd, part2, len2); write(fd, part3, len3);\n\
setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);   /* sends the message now */",
        ("msg-more", C) => "send(fd, part1, len1, MSG_MORE);\nsend(fd, part2, len2, MSG_MORE);\nsend(fd, part3, len3, 0);   /* the last write without MSG_MORE */",
        ("nodelay", C) => "#include <netinet/tcp.h>\nint one = 1;\nsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* once, after connect/accept */",
        ("quickack-each" | "quickack-once", C) => "#include <netinet/tcp.h>\nint one = 1;\nn = recv(fd, buf, sizeof buf, 0);\nsetsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);   /* again after every recv */",

        ("writev" | "buffer", Go) => "// net.Buffers is written with one writev on a *net.TCPConn\nbufs := net.Buffers{part1, part2, part3}\nif _, err := bufs.WriteTo(conn); err != nil { /* handle */ }",
        ("nodelay", Go) => "// Go sets TCP_NODELAY on every TCPConn by default (net: setNoDelay in newTCPConn);\n// only code that called SetNoDelay(false) needs this\nconn.(*net.TCPConn).SetNoDelay(true)",
        ("cork" | "msg-more", Go) => "// Go has no TCP_CORK helper; net.Buffers gathers the message into one writev instead:\nbufs := net.Buffers{part1, part2, part3}\n_, err := bufs.WriteTo(conn)",
        ("quickack-each" | "quickack-once", Go) => "// after every Read: TCP_QUICKACK through the raw socket (golang.org/x/sys/unix)\nraw, _ := conn.(*net.TCPConn).SyscallConn()\nraw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })",

        ("writev" | "buffer", Rust) => "use std::io::{IoSlice, Write};\n// one gathered write per message (std: write_vectored; loop on a short write)\nlet bufs = [IoSlice::new(part1), IoSlice::new(part2), IoSlice::new(part3)];\nlet n = stream.write_vectored(&bufs)?;",
        ("nodelay", Rust) => "stream.set_nodelay(true)?;   // once, after connect/accept",
        ("cork", Rust) => "// socket2 (features = [\"all\"]), Linux\nlet sock = socket2::SockRef::from(&stream);\nsock.set_cork(true)?;\nstream.write_all(part1)?; stream.write_all(part2)?; stream.write_all(part3)?;\nsock.set_cork(false)?;   // sends the message now",
        ("msg-more", Rust) => "// libc::MSG_MORE on all but the last piece (socket2::SockRef::send_with_flags)\nlet sock = socket2::SockRef::from(&stream);\nsock.send_with_flags(part1, libc::MSG_MORE)?;\nsock.send_with_flags(part2, libc::MSG_MORE)?;\nsock.send_with_flags(part3, 0)?;",
        ("quickack-each" | "quickack-once", Rust) => "// socket2 (features = [\"all\"]), Linux: after every read\nlet n = stream.read(&mut buf)?;\nsocket2::SockRef::from(&stream).set_quickack(true)?;",

        ("writev" | "buffer", Python) => "# one gathered write per message (Linux sendmsg with one buffer per piece)\nsock.sendmsg([part1, part2, part3])   # returns bytes sent: loop on a short write",
        ("nodelay", Python) => "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # once, after connect/accept",
        ("cork", Python) => "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)\nsock.sendall(part1); sock.sendall(part2); sock.sendall(part3)\nsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)   # sends the message now",
        ("msg-more", Python) => "sock.send(part1, socket.MSG_MORE)\nsock.send(part2, socket.MSG_MORE)\nsock.send(part3)   # the last piece without MSG_MORE",
        ("quickack-each" | "quickack-once", Python) => "data = sock.recv(65536)\nsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)   # again after every recv",

        ("writev" | "buffer", Java) => "// SocketChannel is a GatheringByteChannel: one writev per message\nByteBuffer[] parts = { part1, part2, part3 };\nwhile (part3.hasRemaining()) channel.write(parts);",
        ("nodelay", Java) => "socket.setTcpNoDelay(true);   // or channel.setOption(StandardSocketOptions.TCP_NODELAY, true)",
        ("cork" | "msg-more", Java) => "// the JDK has no TCP_CORK or MSG_MORE; gather the message into one write instead\nByteBuffer[] parts = { part1, part2, part3 };\nwhile (part3.hasRemaining()) channel.write(parts);   // SocketChannel: GatheringByteChannel",
        ("quickack-each" | "quickack-once", Java) => "// JDK 10+, Linux: jdk.net.ExtendedSocketOptions.TCP_QUICKACK, after every read\nint n = channel.read(buf);\nchannel.setOption(jdk.net.ExtendedSocketOptions.TCP_QUICKACK, true);",

        ("writev" | "buffer" | "cork" | "msg-more", Node) => "// socket.cork() buffers writes in Node until uncork(), which hands them to libuv as one writev\nsocket.cork();\nsocket.write(part1); socket.write(part2); socket.write(part3);\nprocess.nextTick(() => socket.uncork());",
        ("nodelay", Node) => "socket.setNoDelay(true);   // Node >= 18 sets it by default on net.Socket (noDelay option)",
        ("quickack-each" | "quickack-once", Node) => "// Node exposes no TCP_QUICKACK; fix the sender instead (socket.cork()/uncork() around the message)",

        ("busy-poll", C) => "/* spin on non-blocking reads instead of sleeping in recv (one core per spinning thread) */\n\
int us = 50;   /* and poll the device from the read where permitted (CAP_NET_ADMIN) */\n\
setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us);\n\
ssize_t n;\n\
while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))\n\
    ;   /* n > 0: data, 0: EOF, < 0: error */",
        ("busy-poll", Go) => "// Go's runtime parks a goroutine on EAGAIN (netpoller): spin with a raw non-blocking read\nraw, _ := conn.(*net.TCPConn).SyscallConn()\nvar n int\nfor {\n    var err error\n    raw.Read(func(fd uintptr) bool { n, err = unix.Read(int(fd), buf); return true })\n    if err != unix.EAGAIN { break }\n}",
        ("busy-poll", Rust) => "// non-blocking socket, spin on WouldBlock (one core per spinning thread)\nstream.set_nonblocking(true)?;\nlet n = loop {\n    match stream.read(&mut buf) {\n        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),\n        r => break r?,\n    }\n};",
        ("busy-poll", Python) => "sock.setblocking(False)\nwhile True:   # spin: one core per spinning reader\n    try:\n        data = sock.recv(65536); break\n    except BlockingIOError:\n        pass",
        ("busy-poll", Java) => "// a non-blocking SocketChannel read returns 0 when nothing has arrived: spin on it\nchannel.configureBlocking(false);\nint n;\nwhile ((n = channel.read(buf)) == 0) Thread.onSpinWait();",
        ("busy-poll", Node) => "// Node's event loop sleeps in epoll; it cannot spin a read. Keep the reader on a dedicated core\n// (taskset) or use a native addon; the wake-up cost stays otherwise",
        ("nodelay-then-cork", _) => return snippet("cork", lang),
        _ => "",
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
            ("writev", Lang::C, "writev("),
            ("writev", Lang::Go, "net.Buffers"),
            ("writev", Lang::Rust, "write_vectored"),
            ("writev", Lang::Python, "sendmsg("),
            ("writev", Lang::Java, "GatheringByteChannel"),
            ("writev", Lang::Node, "socket.cork()"),
            ("cork", Lang::C, "TCP_CORK"),
            ("cork", Lang::Python, "TCP_CORK"),
            ("cork", Lang::Rust, "set_cork"),
            ("nodelay", Lang::C, "TCP_NODELAY"),
            ("nodelay", Lang::Go, "SetNoDelay"),
            ("quickack-each", Lang::C, "TCP_QUICKACK"),
            ("msg-more", Lang::C, "MSG_MORE"),
            ("busy-poll", Lang::C, "MSG_DONTWAIT"),
            ("busy-poll", Lang::Rust, "WouldBlock"),
        ];
        for (s, l, needle) in want {
            assert!(snippet(s, l).contains(needle), "{s} {l:?}: {}", snippet(s, l));
        }
        for s in [
            "writev",
            "buffer",
            "cork",
            "msg-more",
            "nodelay",
            "quickack-each",
            "quickack-once",
            "nodelay-then-cork",
            "busy-poll",
        ] {
            for l in Lang::ALL {
                assert!(!snippet(s, l).is_empty(), "{s} {l:?}");
            }
            assert!(!caveat(s, 3).is_empty(), "{s}");
        }
        assert!(caveat("nodelay", 3).contains("up to 3 segments"));
        assert_eq!(Lang::parse("go"), Ok(Lang::Go));
        assert!(Lang::parse("cobol").is_err());
    }
}
