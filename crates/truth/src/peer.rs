//! `tcpstall-truth peer`: the workload program. Real sockets (socket2), a [`Shape`](crate::shape::Shape) to follow,
//! and its own log of every write and option (JSON lines, [`LogLine`]), kept in memory during
//! the run and written at the end so that logging never delays a write.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::log::{realtime_ns, write_jsonl, LogLine, Side};
use crate::shape::{Case, Mode, SideOpts};

/// One end of the workload's connection, with its log.
struct Peer {
    sock: Socket,
    side: Side,
    opts: SideOpts,
    local: String,
    remote: String,
    offset: u64,
    nodelay: bool,
    cork: bool,
    log: Vec<LogLine>,
    buf: Vec<u8>,
}

impl Peer {
    fn new(sock: Socket, side: Side, opts: &SideOpts) -> io::Result<Peer> {
        let show =
            |a: io::Result<SockAddr>| a.ok().and_then(|a| a.as_socket()).map(|a| a.to_string()).unwrap_or_default();
        let local = show(sock.local_addr());
        let remote = show(sock.peer_addr());
        let mut p = Peer {
            sock,
            side,
            opts: opts.clone(),
            local,
            remote,
            offset: 0,
            nodelay: false,
            cork: false,
            log: Vec::new(),
            buf: vec![0u8; 1 << 20],
        };
        if opts.nodelay {
            p.set_nodelay()?;
        }
        if opts.cork {
            p.sock.set_cork(true)?;
            p.cork = true;
            p.opt("CORK", 1);
        }
        Ok(p)
    }

    fn opt(&mut self, opt: &str, value: i64) {
        self.log.push(LogLine::Opt { t_ns: realtime_ns(), side: self.side, opt: opt.into(), value });
    }

    fn set_nodelay(&mut self) -> io::Result<()> {
        self.sock.set_nodelay(true)?;
        self.nodelay = true;
        self.opt("NODELAY", 1);
        Ok(())
    }

    /// One write call of `len` bytes (MSG_MORE when the side asks for it), logged with the time
    /// it was called.
    fn write(&mut self, len: u32) -> io::Result<()> {
        let t_ns = realtime_ns();
        let more = self.opts.msg_more;
        let flags = if more { libc::MSG_MORE } else { 0 };
        let len_us = len as usize;
        if self.buf.len() < len_us {
            self.buf.resize(len_us, 0);
        }
        let mut sent = 0;
        while sent < len_us {
            sent += self.sock.send_with_flags(&self.buf[sent..len_us], flags)?;
        }
        self.log.push(LogLine::Write {
            t_ns,
            side: self.side,
            local: self.local.clone(),
            remote: self.remote.clone(),
            offset: self.offset,
            len,
            more,
            nodelay: self.nodelay,
            cork: self.cork,
        });
        self.offset += u64::from(len);
        Ok(())
    }

    /// Reads exactly `n` bytes (a slow reader in chunks with pauses); QUICKACK after each read
    /// when asked (`__tcp_sock_set_quickack` is not sticky, so it is set every time).
    fn read_exact(&mut self, n: u64) -> io::Result<()> {
        let mut left = n;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let chunk = if self.opts.read_chunk > 0 { self.opts.read_chunk as usize } else { buf.len() };
            let want = chunk.min(buf.len()).min(left as usize);
            let got = (&self.sock).read(&mut buf[..want])?;
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed early"));
            }
            left -= got as u64;
            if self.opts.quickack {
                self.sock.set_quickack(true)?;
            }
            if self.opts.read_pause_ms > 0 {
                std::thread::sleep(Duration::from_millis(u64::from(self.opts.read_pause_ms)));
            }
        }
        Ok(())
    }

    /// Closes the write side and reads to the peer's end.
    fn finish(&mut self) -> io::Result<()> {
        self.sock.shutdown(Shutdown::Write)?;
        let mut buf = [0u8; 4096];
        while (&self.sock).read(&mut buf)? > 0 {}
        Ok(())
    }
}

fn tcp_socket(rcvbuf: Option<u32>) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    if let Some(b) = rcvbuf {
        s.set_recv_buffer_size(b as usize)?;
    }
    Ok(s)
}

/// The server: listens on `addr`, prints `ready` on stdout, serves one connection.
pub fn serve(case: &Case, addr: SocketAddr, log: &Path) -> anyhow::Result<()> {
    let shape = &case.shape;
    let l = tcp_socket(shape.server.rcvbuf)?;
    l.set_reuse_address(true)?;
    l.bind(&addr.into())?;
    l.listen(1)?;
    println!("ready");
    let (sock, _) = l.accept()?;
    let mut p = Peer::new(sock, Side::Server, &shape.server)?;
    let res = server_loop(&mut p, case).and_then(|_| p.finish());
    write_jsonl(log, &p.log)?;
    Ok(res?)
}

fn server_loop(p: &mut Peer, case: &Case) -> io::Result<()> {
    let shape = &case.shape;
    for i in 0..shape.requests {
        nodelay_midway(p, i)?;
        match shape.mode {
            Mode::RequestResponse => {
                p.read_exact(shape.request_bytes())?;
                for &w in &shape.server_writes {
                    p.write(w)?;
                }
            }
            Mode::Echo { n } => {
                for _ in 0..n {
                    p.read_exact(u64::from(shape.echo_size()))?;
                    p.write(shape.echo_size())?;
                }
            }
            Mode::Bulk { bytes } => {
                p.read_exact(u64::from(bytes))?;
                p.write(1)?;
            }
            Mode::Periodic { .. } => p.read_exact(shape.request_bytes())?,
        }
    }
    Ok(())
}

fn nodelay_midway(p: &mut Peer, i: u32) -> io::Result<()> {
    if p.opts.nodelay_after == Some(i) && !p.nodelay {
        p.set_nodelay()?;
    }
    Ok(())
}

/// The client: connects to `addr` and runs the shape's requests.
pub fn client(case: &Case, addr: SocketAddr, log: &Path) -> anyhow::Result<()> {
    let shape = &case.shape;
    let s = tcp_socket(shape.client.rcvbuf)?;
    s.connect(&addr.into())?;
    let mut p = Peer::new(s, Side::Client, &shape.client)?;
    let res = client_loop(&mut p, case).and_then(|_| p.finish());
    write_jsonl(log, &p.log)?;
    Ok(res?)
}

fn client_loop(p: &mut Peer, case: &Case) -> io::Result<()> {
    let shape = &case.shape;
    let mut rng = SmallRng::seed_from_u64(case.seed);
    let start = Instant::now();
    for i in 0..shape.requests {
        let (lo, hi) = shape.think_ms;
        let think = if hi > lo { rng.gen_range(lo..=hi) } else { lo };
        match shape.mode {
            Mode::Periodic { period_ms } => {
                let due = start + Duration::from_millis(u64::from(period_ms) * u64::from(i + 1));
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            _ => std::thread::sleep(Duration::from_millis(u64::from(think))),
        }
        nodelay_midway(p, i)?;
        match shape.mode {
            Mode::RequestResponse | Mode::Periodic { .. } => {
                for &w in &shape.client_writes {
                    p.write(w)?;
                }
            }
            Mode::Echo { n } => {
                for _ in 0..n {
                    p.write(shape.echo_size())?;
                }
            }
            Mode::Bulk { bytes } => p.write(bytes)?,
        }
        p.read_exact(shape.response_bytes())?;
    }
    Ok(())
}
