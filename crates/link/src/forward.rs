//! The OS loop: one thread per direction reads packets from one TUN device, asks the pure
//! model what to do with them, holds them until their delivery time, and writes them into the
//! other TUN device.
//!
//! Timing: all times are CLOCK_MONOTONIC nanoseconds. A thread sleeps in ppoll(2) (nanosecond
//! timeout, timer slack set to 1 ns with PR_SET_TIMERSLACK so hrtimers are not coalesced by
//! the default 50 us slack) until `SPIN_NS` before the earliest deadline, then polls the
//! device without sleeping until the deadline passes: the wake-up latency of a sleeping thread
//! on a busy machine is tens of microseconds, the spin keeps the p99 of the added delay low.
//! Reads are batched: each wake-up drains up to `BATCH` packets before delivering.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::eventfd::EventFd;
use nix::sys::time::TimeSpec;
use rand::rngs::SmallRng;

use crate::capture::{CaptureTx, Record};
use crate::model::{DirectionModel, DropReason, Verdict};
use crate::probe::{Calibration, ProbeSeen};
use crate::report::{histogram, DirReport};
use crate::stamp::{RunDelay, WakeUp};
use sys::clock::mono_ns;

mod overload;
mod spin;
use overload::{apply_priority, Overload};
pub use overload::{Priority, DEFAULT_PRIORITY, FIFO_AWAKE_NS, OVERLOAD_BATCHES};
use spin::Spin;
pub use spin::DEFAULT_MAX_SPIN_NS;

/// Packets read per wake-up before delivering what is due.
pub const BATCH: usize = 64;
/// How long before a deadline the thread stops sleeping and spins.
pub const DEFAULT_SPIN_NS: u64 = 100_000;
/// How long a thread keeps polling its input after it ran dry, before sleeping.
pub const DEFAULT_BUSY_POLL_NS: u64 = 0;
/// Everything one direction's thread needs.
pub struct DirectionIo {
    pub model: DirectionModel,
    pub rng: SmallRng,
    pub input: Arc<OwnedFd>,
    pub output: Arc<OwnedFd>,
    /// Written when the forwarder must stop (wakes a sleeping thread)...
    pub stop: Arc<EventFd>,
    /// ...and set before that, checked on every turn of a busy loop.
    pub stopping: Arc<AtomicBool>,
    pub mtu: u32,
    pub spin_ns: u64,
    /// The longest the spin grows to when the timer wakes the thread later than `spin_ns`
    /// (forward::spin); at most `spin_ns`: a fixed spin.
    pub spin_max_ns: u64,
    pub priority: Priority,
    pub busy_poll_ns: u64,
    /// Pin the thread to this CPU.
    pub cpu: Option<usize>,
    /// The devices carry a virtio_net_hdr before each packet (GSO super-packets).
    pub vnet: bool,
    /// Capture interfaces (where packets enter, where they leave) and the capture channel.
    pub capture: Option<(CaptureTx, u32, u32)>,
    /// Calibration probes seen and the calibrated overhead.
    pub calib: Arc<Calibration>,
}

/// The forwarder's one call into the model: the verdict on a datagram read from the input
/// device, `buf` = its virtio_net_hdr (`hdr` bytes, 0 without IFF_VNET_HDR) then the IP
/// packet, stamped `now` (the `model` crate's `one_link` test calls it as the forwarder does).
pub fn judge(model: &mut DirectionModel, rng: &mut SmallRng, now: u64, buf: &[u8], hdr: usize) -> Verdict {
    model.on_datagram(now, &buf[..hdr], &buf[hdr..], rng)
}

struct Pending {
    /// When it is written out: its deadline (later only if it was held back as early).
    at: u64,
    /// Its deadline: its stamp plus its delay, the earliest it may leave.
    due: u64,
    seq: u64,
    arrival: u64,
    /// The calibrated wake-up it paid unseen (it woke the forwarder).
    unseen: u64,
    len: usize,
    buf: Vec<u8>,
    /// A calibration probe's sequence number (such packets bypass the model).
    probe: Option<(u32, u64)>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    /// Reversed, so the BinaryHeap (a max-heap) pops the earliest deadline; ties in arrival order.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Why a forwarder thread stopped before it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("TUN device closed")]
    Closed,
    #[error("reading the TUN device: {}", .0.desc())]
    Read(Errno),
    #[error("ppoll: {}", .0.desc())]
    Poll(Errno),
    #[error("TUN device reported an error")]
    Device,
    #[error("a forwarder thread panicked")]
    Panicked,
}

/// Run one direction until `stop` is signalled or a device fails.
pub fn run_direction(io: DirectionIo) -> Result<DirReport, ForwardError> {
    setup_thread(&io);
    let mut f = Forwarder::new(io);
    while !f.io.stopping.load(AtomicOrdering::Relaxed) {
        // 1. Read a batch.
        let got = f.read_batch()?;
        f.wake = None;
        f.woken = 0;
        // 2. Deliver everything due.
        let now = f.deliver_due();
        if got == BATCH {
            f.overload.full_batch();
            continue; // more may be waiting
        }
        f.overload.ran_dry();
        f.overload.awake(now);
        if got > 0 {
            f.last_rx = now;
        }
        // 3. Wait for a packet, the next deadline, or stop.
        match f.next_wait(now) {
            Wait::Spin => {
                f.spinning = true;
                std::hint::spin_loop()
            }
            Wait::Sleep(timeout) => {
                f.spinning = false;
                if f.sleep(timeout)? {
                    break;
                }
            }
        }
    }
    Ok(f.into_report())
}

/// Timer slack, priority and CPU of the calling forwarder thread (all best effort).
fn setup_thread(io: &DirectionIo) {
    // Without it the kernel may round sleeps up by 50 us.
    let _ = nix::sys::prctl::set_timerslack(1);
    apply_priority(io.priority);
    if let Some(cpu) = io.cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}

/// What a thread does when nothing is due and its input ran dry.
enum Wait {
    /// Poll the device and the clock again at once.
    Spin,
    /// Sleep until the input is readable, this long passes (ns; None: no deadline) or stop.
    Sleep(Option<u64>),
}

/// One direction's state between turns of its loop.
struct Forwarder {
    io: DirectionIo,
    /// Bytes of virtio_net_hdr before each packet (0 without GSO).
    hdr: usize,
    bufsize: usize,
    pool: Vec<Vec<u8>>,
    heap: BinaryHeap<Pending>,
    seq: u64,
    /// The smallest delay the model applies (for the delay histogram).
    base: u64,
    run_delay: RunDelay,
    /// The readings after the last sleep, which the next one may start from (crate::stamp).
    settled: Option<crate::stamp::Settled>,
    /// How long before a deadline the thread spins (follows the timer's oversleep).
    spin: Spin,
    /// After a sleep the input ended: how much earlier than its read the first packet read
    /// may be stamped (crate::stamp; taken by that packet).
    wake: Option<WakeUp>,
    /// After a sleep ended by the input on a CPU found idle: the calibrated wake-up the first
    /// packet read paid (median), at most how long the thread slept.
    woken: u64,
    last_stamp: u64,
    last_rx: u64,
    /// The last turn spun (no sleep since): packets read now were read while spinning.
    spinning: bool,
    early: u64,
    backdated: u64,
    read_while_spinning: u64,
    overload: Overload,
    overhead: Histogram<u64>,
    link_delay: Histogram<u64>,
    wake_late: Histogram<u64>,
    timer_late: Histogram<u64>,
    write_time: Histogram<u64>,
}

impl Forwarder {
    fn new(io: DirectionIo) -> Forwarder {
        // A GSO super-packet is up to 64 KB plus its virtio_net_hdr.
        let hdr = if io.vnet { sys::tun::VNET_HDR_LEN } else { 0 };
        let bufsize = if io.vnet { 65_536 + hdr + 256 } else { io.mtu as usize + 256 };
        let base = io.model.delay_ns().saturating_sub(io.model.jitter_ns());
        let overload = Overload::new(io.priority);
        let spin = Spin::new(io.spin_ns, io.spin_max_ns);
        Forwarder {
            io,
            hdr,
            bufsize,
            pool: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            base,
            run_delay: RunDelay::open(),
            settled: None,
            spin,
            wake: None,
            woken: 0,
            last_stamp: 0,
            last_rx: 0,
            spinning: false,
            early: 0,
            backdated: 0,
            read_while_spinning: 0,
            overload,
            overhead: histogram(),
            link_delay: histogram(),
            wake_late: histogram(),
            timer_late: histogram(),
            write_time: histogram(),
        }
    }

    /// Read up to `BATCH` packets (until the device runs dry) and admit each; returns how many.
    fn read_batch(&mut self) -> Result<usize, ForwardError> {
        let fd = self.io.input.as_raw_fd();
        let mut got = 0;
        while got < BATCH {
            let mut buf = self.pool.pop().unwrap_or_else(|| vec![0u8; self.bufsize]);
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) => return Err(ForwardError::Closed),
                Ok(n) if n < self.hdr => self.pool.push(buf),
                Ok(n) => {
                    got += 1;
                    self.admit(buf, n);
                }
                Err(Errno::EAGAIN) => {
                    self.pool.push(buf);
                    break;
                }
                Err(Errno::EINTR) => self.pool.push(buf),
                Err(e) => return Err(ForwardError::Read(e)),
            }
        }
        Ok(got)
    }

    /// The stamp of a packet read at `read_at`, never earlier than its arrival (crate::stamp:
    /// only the first packet after a sleep the input ended is stamped before its read), and the
    /// calibrated wake-up it paid unseen.
    fn stamp(&mut self, read_at: u64) -> (u64, u64) {
        let now = crate::stamp::stamp(read_at, self.wake.take(), self.last_stamp);
        self.last_stamp = now;
        self.backdated += u64::from(now < read_at);
        self.read_while_spinning += u64::from(self.spinning);
        (now, std::mem::take(&mut self.woken))
    }

    /// One packet read (`buf[..n]`): a calibration probe, or the model's verdict.
    fn admit(&mut self, buf: Vec<u8>, n: usize) {
        let read_at = mono_ns();
        let (now, unseen) = self.stamp(read_at);
        let hdr = self.hdr;
        if self.io.calib.active.load(AtomicOrdering::Relaxed) {
            if let Some(ps) = crate::probe::probe_seq(&buf[hdr..n]) {
                // A calibration probe: past the model, held for the probe delay.
                let at = now + self.io.model.delay_ns().min(crate::probe::PROBE_DELAY_NS);
                let probe = Some((ps, read_at - now));
                self.push(Pending { at, due: at, seq: 0, arrival: read_at, unseen, len: n, buf, probe });
                return;
            }
        }
        let v = judge(&mut self.io.model, &mut self.io.rng, now, &buf[..n], hdr);
        if let Some((tx, iface_in, _)) = &self.io.capture {
            let _ = tx.send(Record { iface: *iface_in, mono_ns: now, data: buf[hdr..n].to_vec() });
        }
        match v {
            Verdict::Deliver { at_ns } => {
                // Written out at its deadline, the stamp plus the model's delay: never before
                // its arrival plus its delay (crate::stamp).
                self.push(Pending { at: at_ns, due: at_ns, seq: 0, arrival: now, unseen, len: n, buf, probe: None });
            }
            Verdict::Drop(_) => self.pool.push(buf),
        }
    }

    /// Hold a packet, numbered in arrival order (ties of deadlines leave in that order).
    fn push(&mut self, mut p: Pending) {
        p.seq = self.seq;
        self.seq += 1;
        self.heap.push(p);
    }

    /// Write out every packet that is due; returns the clock after the last write.
    fn deliver_due(&mut self) -> u64 {
        let mut now = mono_ns();
        while self.heap.peek().is_some_and(|p| p.at <= now) {
            let mut p = self.heap.pop().expect("peeked");
            // The packet leaves the link when it is handed to the kernel; what the kernel's
            // receive path does inside write(2) is the peer stack's time, as on a veth pair.
            let sent = mono_ns();
            if sent < p.due {
                // Would leave before its arrival plus its delay (the stamp rule or the clock
                // broke): counted, held to its deadline, never emitted early.
                self.early += 1;
                p.at = p.due;
                self.heap.push(p);
                continue;
            }
            let r = nix::unistd::write(self.io.output.as_fd(), &p.buf[..p.len]);
            now = mono_ns();
            match p.probe {
                Some((ps, backdate)) if r.is_ok() => {
                    let seen =
                        ProbeSeen { seq: ps, read: p.arrival, backdate, due: p.at, write_start: sent, write_end: now };
                    self.io.calib.seen.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
                }
                Some(_) => {}
                None if r.is_ok() => self.written(&p, sent, now),
                None => {
                    let c = &mut self.io.model.counters;
                    c.drops[DropReason::WriteError.index()] += 1;
                    c.delivered -= 1;
                    c.delivered_bytes -= (p.len - self.hdr) as u64;
                }
            }
            self.pool.push(p.buf);
        }
        now
    }

    /// Account for a packet written out: write(2) called at `sent`, returned at `now`.
    fn written(&mut self, p: &Pending, sent: u64, now: u64) {
        // What the packet feels end to end beyond its deadline: the lateness of the write, the
        // write itself, the path's ends beyond a direct path's, and the wake-up it paid unseen
        // less what its stamp made up for. Without a calibration, only the lateness.
        let late = sent.saturating_sub(p.at) as i64 - (p.due - p.at) as i64;
        let err = if self.io.calib.measured.load(AtomicOrdering::Relaxed) {
            let ends = self.io.calib.ends_ns.load(AtomicOrdering::Relaxed);
            late + (now - sent) as i64 + ends + p.unseen as i64
        } else {
            late
        };
        let _ = self.overhead.record(err.max(0) as u64);
        let _ = self.link_delay.record((p.due - p.arrival).saturating_sub(self.base));
        let _ = self.write_time.record(now - sent);
        if let Some((tx, _, iface_out)) = &self.io.capture {
            // Where the packet leaves the link: written out, plus what it was written out
            // earlier by for the receiving stack (as the stamp at the input is its estimated
            // arrival).
            let left = sent + (p.due - p.at);
            let _ = tx.send(Record { iface: *iface_out, mono_ns: left, data: p.buf[self.hdr..p.len].to_vec() });
        }
    }

    /// Spin (busy-poll after recent input, or a deadline within the spin) or sleep.
    fn next_wait(&self, now: u64) -> Wait {
        if now.saturating_sub(self.last_rx) < self.io.busy_poll_ns {
            return Wait::Spin; // busy-poll: a packet is likely to follow soon
        }
        match self.heap.peek() {
            None => Wait::Sleep(None),
            // Spin: poll the device and the clock until the deadline.
            Some(p) if p.at.saturating_sub(now) <= self.spin.ns() => Wait::Spin,
            Some(p) => Wait::Sleep(Some(p.at.saturating_sub(now) - self.spin.ns())),
        }
    }

    /// Sleep in ppoll; returns whether the forwarder was told to stop. Notes how late the
    /// scheduler ran the thread after the wake-up, and the calibrated wake-up a packet that
    /// woke it paid.
    fn sleep(&mut self, timeout: Option<u64>) -> Result<bool, ForwardError> {
        self.overload.before_sleep();
        let before = crate::stamp::before_sleep(&self.run_delay, mono_ns(), self.settled.take());
        let (stopped, readable) = wait_readable(self.io.input.as_fd(), self.io.stop.as_fd(), timeout)?;
        if stopped {
            return Ok(true);
        }
        let woke = mono_ns();
        let slept = crate::stamp::after_sleep(&self.run_delay, &before, woke, readable, timeout);
        if let (false, Some(t)) = (readable, timeout) {
            // The timer ended it: how late the kernel woke the thread, without the time it then
            // waited for a CPU other work held (the spin covers the first: a halted vCPU's
            // wake-up; spinning longer against the second would only take the CPU from that
            // work, the workload's included).
            // Without schedstat the CPU wait cannot be taken out: the spin is left as it is.
            if let Some(waited) = slept.run_delay {
                let over = woke.saturating_sub(before.from + t).saturating_sub(waited);
                self.spin.timer_woke(over);
                let _ = self.timer_late.record(over.max(1));
            }
        }
        self.overload.after_sleep(woke);
        self.wake = slept.wake;
        self.settled = slept.settled;
        let run_delay = slept.run_delay.unwrap_or(0);
        if slept.run_delay.is_some() {
            let _ = self.wake_late.record(run_delay.max(1));
        }
        // A wake-up by the input, with the CPU found idle as the probes found it (not queued
        // behind another thread for longer than they were).
        let calib = &self.io.calib;
        let idle_like = run_delay <= calib.run_delay_ns.load(AtomicOrdering::Relaxed) + 5_000;
        if readable && idle_like {
            let slept = woke.saturating_sub(before.from).saturating_sub(run_delay);
            self.woken = calib.wake_ns.load(AtomicOrdering::Relaxed).min(slept);
        }
        Ok(false)
    }

    fn into_report(self) -> DirReport {
        let calib = &self.io.calib;
        let load = |a: &AtomicU64| a.load(AtomicOrdering::Relaxed);
        DirReport {
            counters: self.io.model.counters.clone(),
            overhead: self.overhead,
            link_delay_excess: self.link_delay,
            delay_base_ns: self.base,
            configured_delay_ns: self.io.model.delay_ns(),
            wake_late: self.wake_late,
            timer_late: self.timer_late,
            spin_ns: self.spin.ns(),
            write_time: self.write_time,
            ends_ns: calib.measured.load(AtomicOrdering::Relaxed).then(|| calib.ends_ns.load(AtomicOrdering::Relaxed)),
            wake_ns: load(&calib.wake_ns),
            early: self.early,
            backdated: self.backdated,
            read_while_spinning: self.read_while_spinning,
        }
    }
}

/// Sleep until `fd` is readable, `stop` fires or `timeout_ns` passes; returns (stopped,
/// readable).
fn wait_readable(
    fd: BorrowedFd<'_>,
    stop: BorrowedFd<'_>,
    timeout_ns: Option<u64>,
) -> Result<(bool, bool), ForwardError> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN), PollFd::new(stop, PollFlags::POLLIN)];
    let ts = timeout_ns.map(|ns| TimeSpec::new((ns / 1_000_000_000) as _, (ns % 1_000_000_000) as _));
    // Every signal blocked during the wait: only the input, the stop event or the timer end
    // it (crate::stamp relies on it to know what ended the sleep).
    match ppoll(&mut fds, ts, Some(nix::sys::signal::SigSet::all())) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(ForwardError::Poll(e)),
    }
    let stopped = fds[1].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
    let bad = fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL));
    if bad {
        return Err(ForwardError::Device);
    }
    let readable = fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
    Ok((stopped, readable))
}
