//! Executes one side's step program on a connected socket, exactly as the strategy planned it
//! (`SideOpts::setup_ops`, `plan_message`, `after_recv_ops`): the plan is compiled into a flat
//! list of operations before the first round, so the loop itself only makes socket calls and
//! reads the clock between them.

use std::io::{self, IoSlice, Read};
use std::time::{Duration, Instant};

use scenario::{Call, SideOpts, SockOp, Step};
use socket2::Socket;

use crate::measure::Recorder;
use crate::txstamp::TxLog;
use crate::LabError;

/// Where in the program a side is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Prologue,
    Warmup(u64),
    Round(u64),
    Epilogue,
    Stream,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Prologue => f.write_str("the prologue"),
            Phase::Warmup(r) => write!(f, "warm-up round {}", r + 1),
            Phase::Round(r) => write!(f, "round {}", r + 1),
            Phase::Epilogue => f.write_str("the epilogue"),
            Phase::Stream => f.write_str("the stream"),
        }
    }
}

/// One compiled operation.
#[derive(Debug)]
pub(crate) enum Op<'b> {
    Set(SockOp),
    /// send(2) of `len` bytes with these flags (MSG_NOSIGNAL, maybe MSG_MORE).
    Send {
        len: usize,
        flags: libc::c_int,
    },
    /// One sendmsg(2) of these buffers (`total` bytes).
    Gather {
        bufs: Vec<IoSlice<'b>>,
        total: usize,
    },
    /// Receive exactly `len` bytes; `sample` when this step is a latency sample on its own.
    Recv {
        len: usize,
        sample: bool,
    },
    Sleep(Duration),
}

/// Largest message or read of a program: the size of the buffers to allocate.
pub(crate) fn max_len(steps: &[&[Step]]) -> usize {
    steps
        .iter()
        .flat_map(|s| s.iter())
        .map(|s| match s {
            Step::Send(w) => w.iter().map(|&x| x as usize).sum(),
            Step::Recv(n) => *n as usize,
            Step::Sleep { .. } => 0,
        })
        .max()
        .unwrap_or(0)
        .max(1)
}

/// Compile steps into operations. `buf` holds the bytes every send takes from; `sample_reads`
/// makes each Recv a sample (Sample::ClientRecv).
pub(crate) fn compile<'b>(steps: &[Step], opts: &SideOpts, buf: &'b [u8], sample_reads: bool) -> Vec<Op<'b>> {
    let mut ops = Vec::new();
    for step in steps {
        match step {
            Step::Send(writes) => {
                let plan = opts.plan_message(writes);
                ops.extend(plan.pre.iter().map(|&o| Op::Set(o)));
                for call in &plan.calls {
                    match call {
                        Call::Send { len, more } => {
                            let more = if *more { libc::MSG_MORE } else { 0 };
                            ops.push(Op::Send { len: *len as usize, flags: libc::MSG_NOSIGNAL | more });
                        }
                        Call::Gather(lens) => {
                            let mut off = 0;
                            let bufs = lens
                                .iter()
                                .map(|&l| {
                                    let s = IoSlice::new(&buf[off..off + l as usize]);
                                    off += l as usize;
                                    s
                                })
                                .collect();
                            ops.push(Op::Gather { bufs, total: off });
                        }
                    }
                }
                ops.extend(plan.post.iter().map(|&o| Op::Set(o)));
            }
            Step::Recv(n) => ops.push(Op::Recv { len: *n as usize, sample: sample_reads }),
            Step::Sleep { ns } => ops.push(Op::Sleep(Duration::from_nanos(*ns))),
        }
    }
    ops
}

/// How many calls that hand bytes to TCP `ops` makes (for sizing logs).
pub(crate) fn send_calls(ops: &[Op<'_>]) -> usize {
    ops.iter().filter(|o| matches!(o, Op::Send { .. } | Op::Gather { .. })).count()
}

/// Apply one socket option change (socket2 wraps each setsockopt; tcp(7)).
pub(crate) fn apply(sock: &Socket, op: SockOp) -> io::Result<()> {
    match op {
        SockOp::Nodelay(on) => sock.set_nodelay(on),
        SockOp::Cork(on) => sock.set_cork(on),
        SockOp::Quickack => sock.set_quickack(true),
    }
}

/// A side's socket with its buffers.
pub(crate) struct Runner<'a> {
    pub side: &'static str,
    pub sock: &'a Socket,
    pub after_recv: &'static [SockOp],
    /// Reads spin on non-blocking recv (the busy-poll strategy) instead of blocking.
    pub spin: bool,
    pub sbuf: &'a [u8],
    pub rbuf: Vec<u8>,
    pub io_timeout: Duration,
    /// Per-write log for SO_TIMESTAMPING hold times, when enabled.
    pub tx: Option<TxLog>,
    /// Read the clock after reads, before a sleep and after the last call of `run` only, not
    /// after every send or option change (ignored with a write log): the unrecorded run of a
    /// CPU-bound row sampled per round (`pair::unrecorded`), which keeps only its timing. Its
    /// rounds are then timed as the bare C baseline times them (benches/c/pingpong.c: one
    /// clock read per round trip; a second one cost about 1% of a 4 us round trip on one CPU),
    /// and a wait spans the sends before a read with the read.
    pub round_clock: bool,
}

/// Time bookkeeping of one sample.
pub(crate) struct Clock {
    pub prev: Instant,
    pub slept: Duration,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Clock { prev: Instant::now(), slept: Duration::ZERO }
    }
    /// Read the clock after a call: record how long the call took as a wait. Without a
    /// recorder or a write log (the server's rounds) nothing reads the time: no clock read.
    #[inline]
    fn tick(&mut self, rec: &mut Option<&mut Recorder>, logged: bool) {
        if rec.is_none() && !logged {
            return;
        }
        let t = Instant::now();
        if let Some(r) = rec.as_deref_mut() {
            r.wait(t.duration_since(self.prev).as_nanos() as u64);
        }
        self.prev = t;
    }
}

impl Runner<'_> {
    fn io_err(&self, phase: Phase, what: &str, e: io::Error) -> LabError {
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            return LabError::Timeout { side: self.side, phase: phase.to_string(), secs: self.io_timeout.as_secs() };
        }
        if matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) {
            return LabError::PeerClosed { side: self.side, phase: phase.to_string(), detail: e.to_string() };
        }
        LabError::Io { side: self.side, what: format!("{what} in {phase}"), source: e }
    }

    /// One read of at most `want` bytes: blocking, or (busy-poll) spinning on MSG_DONTWAIT
    /// reads until data or EOF arrives, within the I/O timeout. The timeout counts from the
    /// 4096th empty read (a millisecond or two late), so that a read answered within those
    /// reads the clock not at all: the C baseline reads none per read.
    fn read_some(&mut self, want: usize) -> io::Result<usize> {
        if !self.spin {
            return (&*self.sock).read(&mut self.rbuf[..want]);
        }
        let mut deadline = None;
        let mut spins = 0u32;
        loop {
            // recv(2) with MSG_DONTWAIT: EAGAIN when nothing has arrived yet.
            let fd = std::os::fd::AsRawFd::as_raw_fd(self.sock);
            match nix::sys::socket::recv(fd, &mut self.rbuf[..want], nix::sys::socket::MsgFlags::MSG_DONTWAIT) {
                Ok(n) => return Ok(n),
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            // No spin-loop hint (PAUSE): the bare C baseline (benches/c/pingpong.c `spin`, `pp
            // -b 1` style) retries at once, and in a VM a PAUSE loop can make the hypervisor
            // take the vCPU away (pause-loop exiting).
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) {
                let now = Instant::now();
                match deadline {
                    None => deadline = Some(now + self.io_timeout),
                    Some(d) if now >= d => return Err(io::Error::from(io::ErrorKind::TimedOut)),
                    Some(_) => {}
                }
            }
        }
    }

    /// `timed`: read the clock after each call (see `round_clock`).
    fn send_all(
        &mut self,
        phase: Phase,
        (mut off, end): (usize, usize),
        flags: libc::c_int,
        clk: &mut Clock,
        rec: &mut Option<&mut Recorder>,
        timed: bool,
    ) -> Result<(), LabError> {
        while off < end {
            let before = clk.prev;
            let n =
                self.sock.send_with_flags(&self.sbuf[off..end], flags).map_err(|e| self.io_err(phase, "send", e))?;
            if timed {
                clk.tick(rec, self.tx.is_some());
            }
            if let Some(tx) = self.tx.as_mut() {
                tx.write(n, before);
            }
            off += n;
        }
        Ok(())
    }

    /// Run `ops` once. Samples of Recv steps go to `rec` when it is given.
    pub(crate) fn run(
        &mut self,
        ops: &[Op<'_>],
        phase: Phase,
        clk: &mut Clock,
        mut rec: Option<&mut Recorder>,
    ) -> Result<(), LabError> {
        let last = ops.len().saturating_sub(1);
        for (i, op) in ops.iter().enumerate() {
            // Whether to read the clock after this op's calls (reads always do): also before a
            // sleep, which is measured from the clock read before it and left out of the sample.
            let timed =
                !self.round_clock || self.tx.is_some() || i == last || matches!(ops.get(i + 1), Some(Op::Sleep(_)));
            match op {
                Op::Set(o) => {
                    apply(self.sock, *o).map_err(|e| self.io_err(phase, "setsockopt", e))?;
                    if timed {
                        clk.tick(&mut rec, self.tx.is_some());
                    }
                }
                Op::Send { len, flags } => self.send_all(phase, (0, *len), *flags, clk, &mut rec, timed)?,
                Op::Gather { bufs, total } => {
                    let before = clk.prev;
                    let n = self
                        .sock
                        .send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
                        .map_err(|e| self.io_err(phase, "sendmsg", e))?;
                    if timed {
                        clk.tick(&mut rec, self.tx.is_some());
                    }
                    if let Some(tx) = self.tx.as_mut() {
                        tx.write(n, before);
                    }
                    // A short write (only under memory pressure or a timeout) sends the rest plainly.
                    self.send_all(phase, (n, *total), libc::MSG_NOSIGNAL, clk, &mut rec, timed)?;
                }
                Op::Recv { len, sample } => {
                    let start = clk.prev;
                    let mut got = 0;
                    while got < *len {
                        let want = (*len - got).min(self.rbuf.len());
                        let n = self.read_some(want).map_err(|e| self.io_err(phase, "recv", e))?;
                        clk.tick(&mut rec, self.tx.is_some());
                        if n == 0 {
                            return Err(LabError::PeerClosed {
                                side: self.side,
                                phase: phase.to_string(),
                                detail: format!("received {got} of {len} bytes"),
                            });
                        }
                        got += n;
                        for &o in self.after_recv {
                            apply(self.sock, o).map_err(|e| self.io_err(phase, "setsockopt", e))?;
                            clk.tick(&mut rec, self.tx.is_some());
                        }
                    }
                    if *sample {
                        if let Some(r) = rec.as_deref_mut() {
                            r.sample(clk.prev.duration_since(start).as_nanos() as u64);
                        }
                    }
                }
                Op::Sleep(d) => {
                    std::thread::sleep(*d);
                    let t = Instant::now();
                    clk.slept += t.duration_since(clk.prev);
                    clk.prev = t;
                }
            }
        }
        Ok(())
    }

    /// Stream sender: `write_size` writes until `duration` has passed; each write's time is a
    /// sample. Returns the number of whole writes.
    ///
    /// The socket's send timeout is [`STREAM_POLL`] (`stream_client` sets it): a write blocked
    /// past the stream's end (a full send buffer behind a retransmission timer backing off,
    /// RFC 6298 5.5) returns there, and the stream ends on time; the partial write is not a
    /// sample. Before the end, a write blocked for the I/O timeout is still "no progress".
    pub(crate) fn stream_send(
        &mut self,
        write_size: usize,
        duration: Duration,
        h: &mut hdrhistogram::Histogram<u64>,
    ) -> Result<u64, LabError> {
        let end = Instant::now() + duration;
        let mut writes = 0u64;
        let mut prev = Instant::now();
        let mut blocked_since: Option<Instant> = None;
        'stream: while prev < end {
            let mut off = 0;
            while off < write_size {
                match self.sock.send_with_flags(&self.sbuf[off..write_size], libc::MSG_NOSIGNAL) {
                    Ok(n) => {
                        off += n;
                        blocked_since = None;
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        let now = Instant::now();
                        if now >= end {
                            break 'stream;
                        }
                        if now.duration_since(*blocked_since.get_or_insert(now)) + STREAM_POLL >= self.io_timeout {
                            return Err(self.io_err(Phase::Stream, "send", e));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.io_err(Phase::Stream, "send", e)),
                }
            }
            let t = Instant::now();
            h.saturating_record((t.duration_since(prev).as_nanos() as u64).max(1));
            prev = t;
            writes += 1;
        }
        Ok(writes)
    }

    /// Stream receiver: read until the peer shuts down its side. Returns the bytes read, and
    /// whether the reads stopped [`STREAM_DRAIN`] after the sender said it had finished
    /// (`sender_done`) with no end of stream yet: its last data or its FIN still waiting on a
    /// retransmission timer that backs off (RFC 6298 5.5), as on a link that drops the ACKs.
    ///
    /// The socket's receive timeout is [`STREAM_POLL`] (`stream_server` sets it), so the reads
    /// look at `sender_done` while nothing arrives; data never waits on it. Without word from
    /// the sender, silence for the I/O timeout is still "no progress".
    pub(crate) fn stream_recv(&mut self, sender_done: &std::sync::mpsc::Receiver<()>) -> Result<(u64, bool), LabError> {
        let mut total = 0u64;
        let mut silent_since: Option<Instant> = None;
        let mut done_at: Option<Instant> = None;
        loop {
            let n = match (&*self.sock).read(&mut self.rbuf) {
                Ok(n) => n,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    let now = Instant::now();
                    if done_at.is_none() && sender_done.try_recv().is_ok() {
                        done_at = Some(now);
                    }
                    match done_at {
                        Some(d) if now.duration_since(d) >= STREAM_DRAIN => return Ok((total, true)),
                        Some(_) => {}
                        None if now.duration_since(*silent_since.get_or_insert(now)) + STREAM_POLL
                            >= self.io_timeout =>
                        {
                            return Err(self.io_err(Phase::Stream, "recv", e));
                        }
                        None => {}
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(Phase::Stream, "recv", e)),
            };
            if n == 0 {
                return Ok((total, false));
            }
            silent_since = None;
            total += n as u64;
            for &o in self.after_recv {
                apply(self.sock, o).map_err(|e| self.io_err(Phase::Stream, "setsockopt", e))?;
            }
        }
    }
}

/// A stream's socket timeouts: how often a blocked write looks at the stream's end, and a
/// blocked read at the sender's word that it has finished.
pub(crate) const STREAM_POLL: Duration = Duration::from_millis(100);

/// How long a stream's receiver waits for the end of the stream after the sender has
/// finished (written for the duration, waited for its queue, shut down its side). On a clean
/// path the FIN comes one trip later; behind a retransmission timer it can take as long as the
/// timer's backoff (RFC 6298 5.5: doubled per timeout, up to 120 s in Linux, TCP_RTO_MAX).
pub(crate) const STREAM_DRAIN: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use scenario::SideOpts;

    /// A client's runner on `sock` with a 64-byte read buffer and a 5 s timeout.
    fn client_runner<'a>(sock: &'a Socket, sbuf: &'a [u8], round_clock: bool) -> Runner<'a> {
        Runner {
            side: "client",
            sock,
            after_recv: &[],
            spin: false,
            sbuf,
            rbuf: vec![0; 64],
            io_timeout: Duration::from_secs(5),
            tx: None,
            round_clock,
        }
    }

    #[test]
    fn a_peer_closing_early_is_an_error_naming_the_round() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        peer.write_all(&[7u8; 10]).unwrap();
        drop(peer);
        let sock = Socket::from(c);
        let sbuf = [0u8; 1];
        let mut r = client_runner(&sock, &sbuf, false);
        let ops = compile(&[Step::Recv(1000)], &SideOpts::none(), &sbuf, false);
        let e = r.run(&ops, Phase::Round(2), &mut Clock::start(), None).unwrap_err().to_string();
        assert_eq!(e, "client: the peer closed the connection early in round 3 (received 10 of 1000 bytes)");
    }

    /// With `round_clock` (the unrecorded run) the send is not timed on its own, but the round
    /// still ends at the clock read after its read: a reply 30 ms late is one wait of the round
    /// (send and read together) and the round's end is after it.
    #[test]
    fn a_round_clock_still_times_the_round_and_its_waits() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let echo = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            peer.read_exact(&mut b).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            peer.write_all(&b).unwrap();
            peer
        });
        let sock = Socket::from(c);
        let sbuf = [1u8; 1];
        let mut r = client_runner(&sock, &sbuf, true);
        let ops = compile(&[Step::Send(vec![1]), Step::Recv(1)], &SideOpts::none(), &sbuf, false);
        let mut clk = Clock::start();
        let start = clk.prev;
        let mut rec = Recorder::with_capacity(4, 4);
        r.run(&ops, Phase::Round(0), &mut clk, Some(&mut rec)).unwrap();
        drop(echo.join().unwrap());
        assert!(clk.prev.duration_since(start) >= Duration::from_millis(30));
        assert_eq!(rec.waits.len(), 1, "{:?}", rec.waits);
        assert!(rec.waits[0].ns >= 30_000_000, "{:?}", rec.waits);
    }

    /// A busy-polling read with nothing to read still gives up after its I/O timeout (counted
    /// from its 4096th empty read): 50 ms here, well within 5 s.
    #[test]
    fn a_spinning_read_times_out() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap();
        let sock = Socket::from(c);
        let sbuf = [0u8; 1];
        let mut r = Runner { spin: true, io_timeout: Duration::from_millis(50), ..client_runner(&sock, &sbuf, false) };
        let t0 = Instant::now();
        let e = r.read_some(1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(
            t0.elapsed() >= Duration::from_millis(50) && t0.elapsed() < Duration::from_secs(5),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn msg_more_compiles_to_send_flags() {
        let buf = vec![0u8; 600];
        let o = SideOpts::parse_list("msg-more").unwrap();
        let ops = compile(&[Step::Send(vec![275, 24, 292]), Step::Recv(100)], &o, &buf, false);
        let flags: Vec<_> = ops
            .iter()
            .filter_map(|o| match o {
                Op::Send { flags, .. } => Some(*flags & libc::MSG_MORE != 0),
                _ => None,
            })
            .collect();
        assert_eq!(flags, [true, true, false]);
        assert!(matches!(ops[3], Op::Recv { len: 100, sample: false }));
    }

    #[test]
    fn writev_compiles_to_one_gather_and_cork_wraps_the_message() {
        let buf = vec![0u8; 600];
        let o = SideOpts::parse_list("writev,cork").unwrap();
        let ops = compile(&[Step::Send(vec![10, 20])], &o, &buf, false);
        assert!(matches!(ops[0], Op::Set(SockOp::Cork(true))));
        assert!(matches!(&ops[1], Op::Gather { bufs, total: 30 } if bufs.len() == 2 && bufs[1].len() == 20));
        assert!(matches!(ops[2], Op::Set(SockOp::Cork(false))));
        assert_eq!(max_len(&[&[Step::Send(vec![10, 20]), Step::Recv(5)]]), 30);
    }

    /// A stream's writes end at the stream's end even when the peer reads nothing (a send
    /// buffer that stays full, as behind a retransmission timer backing off): the blocked write
    /// returns at the send timeout (STREAM_POLL), well before the 5 s "no progress" timeout.
    #[test]
    fn a_stream_blocked_in_a_write_ends_at_its_duration() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap();
        let sock = Socket::from(c);
        sock.set_write_timeout(Some(STREAM_POLL)).unwrap();
        let sbuf = vec![0u8; 65_536];
        let mut r = client_runner(&sock, &sbuf, false);
        let mut h = crate::measure::histogram();
        let t0 = Instant::now();
        let writes = r.stream_send(sbuf.len(), Duration::from_millis(300), &mut h).unwrap();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(3), "the stream ran {took:?}, past its 300 ms and the 100 ms poll");
        assert!(writes >= 1, "loopback takes at least one 64 KiB write: {writes}");
    }

    /// A stream's receiver whose sender has said it finished, with no end of stream after it
    /// (its FIN held behind a retransmission timer), stops STREAM_DRAIN later and says so;
    /// without that word, silence for the I/O timeout is still "no progress".
    #[test]
    fn a_stream_receiver_stops_waiting_a_drain_after_the_sender_finished() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        peer.write_all(&[5u8; 1000]).unwrap();
        let sock = Socket::from(c);
        sock.set_read_timeout(Some(STREAM_POLL)).unwrap();
        let sbuf = [0u8; 1];
        let (tx, rx) = std::sync::mpsc::channel();
        let mut r = Runner { rbuf: vec![0; 4096], ..client_runner(&sock, &sbuf, false) };
        tx.send(()).unwrap();
        let t0 = Instant::now();
        assert_eq!(r.stream_recv(&rx).unwrap(), (1000, true));
        assert!(t0.elapsed() >= STREAM_DRAIN, "{:?}", t0.elapsed());

        // No word from the sender: "no progress" after the I/O timeout (300 ms here).
        let (_tx2, rx2) = std::sync::mpsc::channel::<()>();
        let mut r = Runner { io_timeout: Duration::from_millis(300), ..client_runner(&sock, &sbuf, false) };
        let e = r.stream_recv(&rx2).unwrap_err().to_string();
        assert!(e.contains("no progress"), "{e}");
        // The end of the stream ends it at once, whatever the word.
        drop(peer);
        let (_tx3, rx3) = std::sync::mpsc::channel::<()>();
        assert_eq!(r.stream_recv(&rx3).unwrap(), (0, false));
    }
}
