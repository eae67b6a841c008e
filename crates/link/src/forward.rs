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
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::eventfd::EventFd;
use nix::sys::time::TimeSpec;
use rand::rngs::SmallRng;

use crate::capture::{CaptureTx, Record};
use crate::model::{DirCounters, DirectionModel, DropReason, Verdict};

/// Packets read per wake-up before delivering what is due.
pub const BATCH: usize = 64;
/// How long before a deadline the thread stops sleeping and spins.
pub const DEFAULT_SPIN_NS: u64 = 100_000;
/// How long a thread keeps polling its input after it ran dry, before sleeping.
pub const DEFAULT_BUSY_POLL_NS: u64 = 0;
/// Full batches in a row after which a forwarder thread with a raised priority drops to the
/// workload's (nice 0) until its input runs dry: see `run_direction`.
pub const OVERLOAD_BATCHES: u32 = 8;
/// Default scheduling of the forwarder threads.
pub const DEFAULT_PRIORITY: Priority = Priority::Nice(-10);

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The calling thread's `run_delay` (ns): time spent runnable but waiting for a CPU, from
/// /proc/thread-self/schedstat (Documentation/scheduler/sched-stats.rst: "time spent waiting
/// on a runqueue"), with its voluntary and involuntary context switches (getrusage(2),
/// RUSAGE_THREAD: ru_nvcsw, ru_nivcsw). Read before and after a sleep it gives how late the
/// thread ran after the kernel woke it, the part of a packet's wait the forwarder cannot see by
/// its own clock, when the switches say that all of that wait followed the wake-up ([`Slept`]).
struct RunDelay(Option<std::fs::File>);

/// The scheduler's counts of the calling thread at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SchedSample {
    /// Time spent runnable, waiting for a CPU (ns).
    run_delay: u64,
    /// Context switches: giving the CPU up (a sleep)...
    voluntary: u64,
    /// ...and having it taken (preempted). kernel/sched/core.c `__schedule`: a task that
    /// blocks counts in nvcsw, one switched out while runnable in nivcsw.
    involuntary: u64,
}

impl RunDelay {
    fn open() -> RunDelay {
        RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }
    fn now(&self) -> Option<SchedSample> {
        use std::os::unix::fs::FileExt;
        let f = self.0.as_ref()?;
        let mut b = [0u8; 96];
        let n = f.read_at(&mut b, 0).ok()?;
        let run_delay = std::str::from_utf8(&b[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()?;
        let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).ok()?;
        let count = |n: libc::c_long| u64::try_from(n).unwrap_or(0);
        Some(SchedSample {
            run_delay,
            voluntary: count(u.voluntary_context_switches()),
            involuntary: count(u.involuntary_context_switches()),
        })
    }
}

/// One sleep in ppoll as the thread saw it (CLOCK_MONOTONIC ns): what the first packet read
/// after it may be stamped earlier by.
#[derive(Debug, Clone, Copy)]
struct Slept {
    /// Just before ppoll was called (the device had been found empty before that).
    began: u64,
    /// ppoll's timeout, if it had one.
    timeout: Option<u64>,
    /// When ppoll returned.
    woke: u64,
    /// Whether the input was readable when it returned.
    readable: bool,
    /// The scheduler's counts before and after.
    sched: Option<(SchedSample, SchedSample)>,
}

impl Slept {
    /// The scheduler's run_delay across the sleep (ns), whatever part of it came when.
    fn run_delay(&self) -> Option<u64> {
        self.sched.map(|(a, b)| b.run_delay.saturating_sub(a.run_delay))
    }

    /// How much earlier than its read the packet that ended the sleep may be stamped: the
    /// scheduler's run delay, when that is known to be the wait of the wake-up this packet
    /// caused, so that the packet was there all along. Zero otherwise, as a packet read after a
    /// wait it did not cause may have arrived at any moment of it, and stamped back by the
    /// whole wait it would leave before its arrival plus its delay. So, all of:
    /// - the input was readable;
    /// - the thread slept (a voluntary switch) and was never preempted (no involuntary one),
    ///   so all of the delay followed a wake-up. Preempted before it fell asleep (inside ppoll,
    ///   or reading these counts) the thread waited before the sleep, and a packet arriving
    ///   meanwhile was read as soon as it ran: stamped back by that wait, a UDP round trip on a
    ///   loaded host took 10.5 ms on an rtt=20ms link, one direction's delay gone;
    /// - the wake-up (its return less the delay) came after the sleep began and before the
    ///   timeout: a thread woken by its timer (to spin to a deadline) that then waited for a
    ///   CPU reads packets that arrived at any moment of that wait.
    fn backdate(&self) -> u64 {
        if self.by_input() {
            self.run_delay().unwrap_or(0)
        } else {
            0
        }
    }

    /// Whether the packet read first after the sleep woke the thread (see `backdate`).
    fn by_input(&self) -> bool {
        let (Some((a, b)), Some(delay)) = (self.sched, self.run_delay()) else { return false };
        let slept = b.voluntary > a.voluntary && b.involuntary == a.involuntary;
        let wake = self.woke.saturating_sub(delay);
        let before_timer = self.timeout.is_none_or(|t| wake < self.began.saturating_add(t));
        self.readable && slept && wake >= self.began && before_timer
    }
}

/// Where a packet read at `read_at` is placed on the model's clock: earlier by `back` (the
/// wake-up it paid: [`Slept::backdate`] and the calibrated compensation), never before a packet
/// read earlier (`last`: the model's clock does not go back) and never before `empty_at`, the
/// moment before the last read(2) that found the device empty: the packet was not there then,
/// so it arrived after it, and its delay cannot count from earlier. Returns the stamp and
/// whether `back` had to be cut at `empty_at` (an error of the wake-up accounting, counted;
/// never a packet early).
fn place(read_at: u64, back: u64, empty_at: u64, last: u64) -> (u64, bool) {
    let wanted = read_at.saturating_sub(back);
    let floor = empty_at.min(read_at);
    (wanted.max(floor).max(last).min(read_at), wanted < floor)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in nanoseconds.
pub fn realtime_offset_ns() -> i128 {
    let r = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME");
    let real = i128::from(r.tv_sec()) * 1_000_000_000 + i128::from(r.tv_nsec());
    real - i128::from(mono_ns())
}

/// What one direction measured.
#[derive(Debug, Clone)]
pub struct DirReport {
    pub counters: DirCounters,
    /// The emulator's error as a user's packet feels it end to end (ns): how late the packet
    /// was written out against its deadline, plus the parts of the path the forwarder cannot
    /// see by its own clock, measured at link start by probes ([`crate::calibrate`]): the rest
    /// of the path beyond a direct one (`rest_ns`, every packet) and, for a packet that woke
    /// the forwarder, its wake-up (`wake_ns`) less what the packet was stamped earlier for it.
    pub overhead: Histogram<u64>,
    /// The model's delay for each delivered packet beyond `delay_base_ns`: delivery time
    /// minus arrival minus the base (ns), i.e. jitter, serialisation and queueing. Recording
    /// the excess keeps nanosecond resolution for small values (the histogram keeps 3
    /// significant digits).
    pub link_delay_excess: Histogram<u64>,
    /// The smallest delay the model can apply (configured delay minus jitter).
    pub delay_base_ns: u64,
    /// The configured one-way delay, for reading the histograms.
    pub configured_delay_ns: u64,
    /// How late the thread ran after each wake-up from its sleep (scheduler run_delay, ns): a
    /// packet that caused the wake-up was stamped that much earlier, so `overhead` includes it
    /// (`Slept::backdate`); one read after a wait it did not cause is stamped when read, and
    /// what it waited of that wait is not seen.
    pub wake_late: Histogram<u64>,
    /// How long each write(2) into the other device took (ns): the receiving side's stack
    /// runs inside it (tun_get_user -> netif_receive_skb), up to waking the receiver.
    pub write_time: Histogram<u64>,
    /// The calibrated overhead of the path's ends beyond a direct path (ns; a packet's
    /// overhead besides its wake-up is its write(2) plus this); None when not measured.
    pub ends_ns: Option<i64>,
    /// The calibrated wake-up of the forwarder by a packet's arrival (ns): from the packet
    /// entering the TUN device (its software transmit timestamp, skb_tx_timestamp in
    /// tun_net_xmit) to the forwarder's stamp of it.
    pub wake_ns: u64,
    /// Whether a packet that woke the forwarder was stamped earlier by the shortest wake-up
    /// the probes saw (`wake_min_ns`; at most by how long the forwarder had slept), so that its
    /// delay counts from its arrival.
    pub compensated: bool,
    pub wake_min_ns: u64,
    /// How much before its deadline each packet was written out (the shortest write(2) of
    /// the probes), if compensating.
    pub release_early_ns: u64,
    /// Packets whose stamp, moved earlier for the wake-up they paid, would have fallen before
    /// the forwarder last found the device empty, before they can have arrived: stamped at
    /// that moment instead, so that none leaves before its arrival plus its delay. Not zero
    /// means the wake-up accounting erred (see `Slept::backdate`).
    pub stamps_cut: u64,
}

impl DirReport {
    /// Quantile of the model's delay (ns).
    pub fn link_delay_at(&self, q: f64) -> Option<u64> {
        (!self.link_delay_excess.is_empty()).then(|| self.delay_base_ns + self.link_delay_excess.value_at_quantile(q))
    }
    /// Quantile of the emulator's added delay beyond the model (ns).
    pub fn overhead_at(&self, q: f64) -> Option<u64> {
        (!self.overhead.is_empty()).then(|| self.overhead.value_at_quantile(q))
    }
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("histogram bounds")
}

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
    pub priority: Priority,
    pub busy_poll_ns: u64,
    /// Pin the thread to this CPU.
    pub cpu: Option<usize>,
    /// The devices carry a virtio_net_hdr before each packet (GSO super-packets).
    pub vnet: bool,
    /// Capture interfaces (where packets enter, where they leave) and the capture channel.
    pub capture: Option<(CaptureTx, u32, u32)>,
    /// Calibration probes seen, the calibrated overhead and the compensation.
    pub calib: Arc<Calibration>,
}

/// Shared between a direction's thread and the calibration at link start (crate::calibrate).
#[derive(Debug, Default)]
pub struct Calibration {
    /// While set, the forwarder looks for calibration probes among the packets it reads.
    pub active: AtomicBool,
    /// What the forwarder saw of each probe.
    pub seen: std::sync::Mutex<Vec<ProbeSeen>>,
    /// Whether the probes measured the path.
    pub measured: AtomicBool,
    /// The measured overhead of the path's ends beyond a direct path (ns, `DirCalibration::
    /// ends_ns`): a packet's overhead besides its wake-up is its write(2) plus this.
    pub ends_ns: AtomicI64,
    /// The measured wake-up of the forwarder by a packet (ns): the median...
    pub wake_ns: AtomicU64,
    /// ...and the shortest.
    pub wake_min_ns: AtomicU64,
    /// The probes' median run_delay after a wake-up (ns): a wake-up that waited much longer
    /// for a CPU found it busy, not idle as the probes did, and is not compensated.
    pub run_delay_ns: AtomicU64,
    /// Write packets out this much before their deadline (never before their arrival).
    pub release_early_ns: AtomicU64,
    /// Stamp a packet that woke the forwarder earlier by `wake_min_ns`.
    pub compensate: AtomicBool,
}

impl Calibration {
    pub fn new() -> Calibration {
        Calibration::default()
    }
}

/// The forwarder's times for one calibration probe (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy)]
pub struct ProbeSeen {
    pub seq: u32,
    /// When read(2) returned it.
    pub read: u64,
    /// How much earlier it was stamped (scheduler run_delay of the wake-up before).
    pub backdate: u64,
    /// Its deadline.
    pub due: u64,
    /// write(2) into the other device: called, returned.
    pub write_start: u64,
    pub write_end: u64,
}

struct Pending {
    /// When it is written out: its deadline, or earlier by the receiving stack's share.
    at: u64,
    /// Its deadline.
    due: u64,
    seq: u64,
    arrival: u64,
    /// The calibrated wake-up it paid unseen (it woke the forwarder), and how much of it its
    /// stamp was moved earlier by.
    unseen: u64,
    made_up: u64,
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

/// Scheduling of the forwarder threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Leave the thread as it is.
    Normal,
    /// A nice value (negative needs root).
    Nice(i32),
    /// SCHED_FIFO at this priority (needs root); falls back to `Nice(-10)`, then `Normal`.
    Fifo(i32),
}

fn apply_priority(p: Priority) {
    // Best effort: without privilege the forwarder still works, only with later wake-ups.
    match p {
        Priority::Normal => {}
        Priority::Nice(n) => {
            let _ = sys::sched::set_thread_nice(n);
        }
        Priority::Fifo(prio) => {
            if sys::sched::set_thread_fifo(prio).is_err() {
                let _ = sys::sched::set_thread_nice(-10);
            }
        }
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
        f.backdate = 0;
        f.woken = (0, 0);
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
            Wait::Spin => std::hint::spin_loop(),
            Wait::Sleep(timeout) => {
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

/// Under sustained overload (full batches in a row: a sender outrunning the forwarder) a
/// forwarder at nice -10 would take the CPU from the receiving application on a machine with
/// few CPUs, and the packets it writes would be dropped at the receiver's socket (measured
/// with 64-byte UDP on 2 CPUs: 450k of 680k packets lost there, 90k at the TUN queue). So it
/// runs at the workload's priority until its input runs dry, then at its own again (a nice
/// change only, never while latency matters: an idle link never fills a batch).
///
/// A SCHED_FIFO forwarder is real-time only from a wake-up until it has been awake
/// `FIFO_AWAKE_NS`: enough to read, hold and deliver what woke it, and to spin to a deadline.
/// A thread that stays awake longer (a busy link: deadlines closer together than the spin, or
/// full batches) would otherwise never leave its CPU to the workload (real-time tasks preempt
/// every SCHED_OTHER task; only RT throttling, 5%, is left): it goes on at nice -10 and, under
/// overload, at nice 0, and is made real-time again before its next sleep.
struct Overload {
    full_batches: u32,
    prio: Priority,
    level: Level,
    /// When the thread last woke from a sleep (CLOCK_MONOTONIC ns).
    awake_since: u64,
}

/// The priority a forwarder thread runs at now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The configured one.
    Own,
    /// A SCHED_FIFO thread awake too long: SCHED_OTHER at nice -10.
    Awake,
    /// Overloaded: SCHED_OTHER at nice 0, the workload's.
    Workload,
}

/// How long a SCHED_FIFO forwarder stays real-time after a wake-up.
pub const FIFO_AWAKE_NS: u64 = 500_000;

impl Overload {
    fn new(prio: Priority) -> Overload {
        Overload { full_batches: 0, prio, level: Level::Own, awake_since: mono_ns() }
    }
    fn fifo(&self) -> bool {
        matches!(self.prio, Priority::Fifo(_))
    }
    fn demotable(&self) -> bool {
        matches!(self.prio, Priority::Nice(n) if n < 0) || self.fifo()
    }
    fn full_batch(&mut self) {
        self.full_batches += 1;
        if self.demotable() && self.level != Level::Workload && self.full_batches >= OVERLOAD_BATCHES {
            // SCHED_OTHER at nice 0 (a SCHED_FIFO thread would otherwise keep preempting the
            // receiver on its CPU: 4x fewer packets/s, docs/link.md).
            if sys::sched::set_thread_other().is_ok() {
                self.level = Level::Workload;
            }
        }
    }
    fn ran_dry(&mut self) {
        self.full_batches = 0;
        match self.level {
            // A real-time thread stays at nice -10 until its next sleep (`before_sleep`).
            Level::Own | Level::Awake => {}
            Level::Workload if self.fifo() => {
                let _ = sys::sched::set_thread_nice(-10);
                self.level = Level::Awake;
            }
            Level::Workload => {
                apply_priority(self.prio);
                self.level = Level::Own;
            }
        }
    }
    /// A turn of the loop that did not sleep.
    fn awake(&mut self, now: u64) {
        if self.fifo() && self.level == Level::Own && now.saturating_sub(self.awake_since) > FIFO_AWAKE_NS {
            let _ = sys::sched::set_thread_other();
            let _ = sys::sched::set_thread_nice(-10);
            self.level = Level::Awake;
        }
    }
    fn before_sleep(&mut self) {
        if self.fifo() && self.level != Level::Own {
            apply_priority(self.prio);
            self.level = Level::Own;
        }
    }
    fn after_sleep(&mut self, now: u64) {
        self.awake_since = now;
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
    /// How late the thread ran after its last wake-up, when the packet read first after it
    /// caused that wake-up ([`Slept::backdate`]): that packet is stamped that much earlier.
    backdate: u64,
    /// The moment before the last read(2) that found the input empty: every packet read since
    /// arrived after it ([`place`]).
    empty_at: u64,
    /// Packets whose stamp, moved earlier for their wake-up, fell before `empty_at`.
    stamps_cut: u64,
    /// After a sleep ended by the input: the calibrated wake-up the first packet read paid
    /// (median) and what it is stamped earlier for (the shortest seen), at most how long the
    /// thread slept.
    woken: (u64, u64),
    last_stamp: u64,
    last_rx: u64,
    overload: Overload,
    overhead: Histogram<u64>,
    link_delay: Histogram<u64>,
    wake_late: Histogram<u64>,
    write_time: Histogram<u64>,
}

impl Forwarder {
    fn new(io: DirectionIo) -> Forwarder {
        // A GSO super-packet is up to 64 KB plus its virtio_net_hdr.
        let hdr = if io.vnet { sys::tun::VNET_HDR_LEN } else { 0 };
        let bufsize = if io.vnet { 65_536 + hdr + 256 } else { io.mtu as usize + 256 };
        let base = io.model.delay_ns().saturating_sub(io.model.jitter_ns());
        let overload = Overload::new(io.priority);
        Forwarder {
            io,
            hdr,
            bufsize,
            pool: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            base,
            run_delay: RunDelay::open(),
            backdate: 0,
            empty_at: 0,
            stamps_cut: 0,
            woken: (0, 0),
            last_stamp: 0,
            last_rx: 0,
            overload,
            overhead: histogram(),
            link_delay: histogram(),
            wake_late: histogram(),
            write_time: histogram(),
        }
    }

    /// Read up to `BATCH` packets (until the device runs dry) and admit each; returns how many.
    fn read_batch(&mut self) -> Result<usize, ForwardError> {
        let fd = self.io.input.as_raw_fd();
        let mut got = 0;
        while got < BATCH {
            let mut buf = self.pool.pop().unwrap_or_else(|| vec![0u8; self.bufsize]);
            let asked = mono_ns();
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) => return Err(ForwardError::Closed),
                Ok(n) if n < self.hdr => self.pool.push(buf),
                Ok(n) => {
                    got += 1;
                    self.admit(buf, n);
                }
                Err(Errno::EAGAIN) => {
                    self.empty_at = asked;
                    self.pool.push(buf);
                    break;
                }
                Err(Errno::EINTR) => self.pool.push(buf),
                Err(e) => return Err(ForwardError::Read(e)),
            }
        }
        Ok(got)
    }

    /// The stamp of a packet read at `read_at`, the wake-up it paid unseen, how much earlier
    /// than `read_at - backdate` it was stamped for it, and the backdate (see [`Stamp`]).
    fn stamp(&mut self, read_at: u64) -> Stamp {
        // The first packet after a wake-up by the input paid the wake-up: stamped that much
        // earlier (if asked), and earlier by the run delay of that wake-up; the packets read
        // after it in the same batch may have arrived during that delay, so not they.
        let (unseen, early) = std::mem::take(&mut self.woken);
        let backdate = std::mem::take(&mut self.backdate);
        let made_up = if self.io.calib.compensate.load(AtomicOrdering::Relaxed) { early } else { 0 };
        let (at, cut) = place(read_at, backdate + made_up, self.empty_at, self.last_stamp);
        self.stamps_cut += u64::from(cut);
        self.last_stamp = at;
        let backdate = backdate.min(read_at - at);
        Stamp { at, unseen, made_up: read_at - at - backdate, backdate }
    }

    /// One packet read (`buf[..n]`): a calibration probe, or the model's verdict.
    fn admit(&mut self, buf: Vec<u8>, n: usize) {
        let read_at = mono_ns();
        let Stamp { at: now, unseen, made_up, backdate } = self.stamp(read_at);
        let hdr = self.hdr;
        if self.io.calib.active.load(AtomicOrdering::Relaxed) {
            if let Some(ps) = crate::calibrate::probe_seq(&buf[hdr..n]) {
                // A calibration probe: past the model, held for the probe delay.
                let at = now + self.io.model.delay_ns().min(crate::calibrate::PROBE_DELAY_NS);
                let probe = Some((ps, backdate));
                self.push(Pending { at, due: at, seq: 0, arrival: read_at, unseen, made_up, len: n, buf, probe });
                return;
            }
        }
        let v = if self.io.vnet {
            let (segs, seg_len, wire) = crate::gso::segments(&buf[..hdr], &buf[hdr..n]);
            self.io.model.on_packet_segments(now, &buf[hdr..n], segs, seg_len, wire, &mut self.io.rng)
        } else {
            self.io.model.on_packet(now, &buf[..n], &mut self.io.rng)
        };
        if let Some((tx, iface_in, _)) = &self.io.capture {
            let _ = tx.send(Record { iface: *iface_in, mono_ns: now, data: buf[hdr..n].to_vec() });
        }
        match v {
            Verdict::Deliver { at_ns } => {
                // Written out earlier by the shortest write(2) of the probes (the receiving
                // stack runs inside it, time a link's delay does not include: the packet
                // reaches the socket at its deadline), never before it arrived; the order is
                // kept (both bounds grow with arrival order).
                let early = self.io.calib.release_early_ns.load(AtomicOrdering::Relaxed);
                let at = at_ns.saturating_sub(early).max(now);
                self.push(Pending { at, due: at_ns, seq: 0, arrival: now, unseen, made_up, len: n, buf, probe: None });
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
            let p = self.heap.pop().expect("peeked");
            // The packet leaves the link when it is handed to the kernel; what the kernel's
            // receive path does inside write(2) is the peer stack's time, as on a veth pair.
            let sent = mono_ns();
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
            late + (now - sent) as i64 + ends + p.unseen as i64 - p.made_up as i64
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
            Some(p) if p.at.saturating_sub(now) <= self.io.spin_ns => Wait::Spin,
            Some(p) => Wait::Sleep(Some(p.at.saturating_sub(now) - self.io.spin_ns)),
        }
    }

    /// Sleep in ppoll; returns whether the forwarder was told to stop. Notes how late the
    /// scheduler ran the thread after the wake-up, and the calibrated wake-up a packet that
    /// woke it paid.
    fn sleep(&mut self, timeout: Option<u64>) -> Result<bool, ForwardError> {
        self.overload.before_sleep();
        let before = self.run_delay.now();
        let began = mono_ns();
        let (stopped, readable) = wait_readable(self.io.input.as_fd(), self.io.stop.as_fd(), timeout)?;
        if stopped {
            return Ok(true);
        }
        let woke = mono_ns();
        self.overload.after_sleep(woke);
        let s = Slept { began, timeout, woke, readable, sched: before.zip(self.run_delay.now()) };
        let delay = s.run_delay().unwrap_or(0);
        if s.sched.is_some() {
            let _ = self.wake_late.record(delay.max(1));
        }
        self.backdate = s.backdate();
        // A wake-up by the input, with the CPU found idle as the probes found it (not queued
        // behind another thread for longer than they were).
        let calib = &self.io.calib;
        let idle_like = delay <= calib.run_delay_ns.load(AtomicOrdering::Relaxed) + 5_000;
        if s.by_input() && idle_like {
            let slept = woke.saturating_sub(began).saturating_sub(delay);
            let wake = calib.wake_ns.load(AtomicOrdering::Relaxed);
            let wake_min = calib.wake_min_ns.load(AtomicOrdering::Relaxed);
            self.woken = (wake.min(slept), wake_min.min(slept));
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
            write_time: self.write_time,
            ends_ns: calib.measured.load(AtomicOrdering::Relaxed).then(|| calib.ends_ns.load(AtomicOrdering::Relaxed)),
            wake_ns: load(&calib.wake_ns),
            compensated: calib.compensate.load(AtomicOrdering::Relaxed),
            wake_min_ns: load(&calib.wake_min_ns),
            release_early_ns: load(&calib.release_early_ns),
            stamps_cut: self.stamps_cut,
        }
    }
}

/// Where [`Forwarder::stamp`] placed a packet (CLOCK_MONOTONIC ns).
struct Stamp {
    /// Its time on the model's clock: its delay counts from it.
    at: u64,
    /// The calibrated wake-up it paid unseen (it woke the forwarder)...
    unseen: u64,
    /// ...and how much of it the stamp was moved earlier by.
    made_up: u64,
    /// How much earlier it was stamped for the run delay of the wake-up it caused.
    backdate: u64,
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
    match ppoll(&mut fds, ts, None) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn counts(run_delay: u64, voluntary: u64, involuntary: u64) -> SchedSample {
        SchedSample { run_delay, voluntary, involuntary }
    }

    /// A sleep from 10 ms to `woke` with `delay` of run delay across it and these switches.
    fn slept(timeout: Option<u64>, woke: u64, delay: u64, voluntary: u64, involuntary: u64) -> Slept {
        let before = counts(5 * MS, 100, 7);
        let after = counts(5 * MS + delay, 100 + voluntary, 7 + involuntary);
        Slept { began: 10 * MS, timeout, woke, readable: true, sched: Some((before, after)) }
    }

    /// The run delay moves a packet's stamp back only when that packet caused the wake-up
    /// and the whole delay followed it.
    #[test]
    fn only_a_wake_up_by_the_packet_stamps_it_back_by_the_run_delay() {
        // Asleep from 10 ms, woken by the input at 15 ms, ran at 17 ms: stamped 2 ms back.
        assert_eq!(slept(None, 17 * MS, 2 * MS, 1, 0).backdate(), 2 * MS);
        assert_eq!(slept(Some(8 * MS), 17 * MS, 2 * MS, 1, 0).backdate(), 2 * MS);
        // Preempted as well: the delay may have come before the sleep (the 10.5 ms round trip
        // on an rtt=20ms link), so the packet may have arrived at any moment of it.
        assert_eq!(slept(None, 20 * MS, 9 * MS, 1, 1).backdate(), 0);
        // Never asleep (preempted on the way into ppoll, the packet there when it ran).
        assert_eq!(slept(None, 20 * MS, 9 * MS, 0, 1).backdate(), 0);
        assert_eq!(slept(None, 20 * MS, 9 * MS, 0, 0).backdate(), 0);
        // Woken by its timer at 12 ms, ran at 20 ms: the packet read came during the wait.
        assert_eq!(slept(Some(2 * MS), 20 * MS, 8 * MS, 1, 0).backdate(), 0);
        // A delay longer than the sleep cannot have followed its wake-up.
        assert_eq!(slept(None, 12 * MS, 3 * MS, 1, 0).backdate(), 0);
        // Not readable, or no counts: nothing to move.
        let mut s = slept(None, 17 * MS, 2 * MS, 1, 0);
        s.readable = false;
        assert_eq!(s.backdate(), 0);
        s.readable = true;
        s.sched = None;
        assert_eq!(s.backdate(), 0);
    }

    /// A packet is never stamped before the device was last found empty, nor before the
    /// packet read before it; a cut is reported.
    #[test]
    fn a_stamp_never_falls_before_the_device_was_last_found_empty() {
        assert_eq!(place(20 * MS, 2 * MS, 10 * MS, 0), (18 * MS, false));
        assert_eq!(place(20 * MS, 15 * MS, 10 * MS, 0), (10 * MS, true));
        assert_eq!(place(20 * MS, 2 * MS, 10 * MS, 19 * MS), (19 * MS, false));
        assert_eq!(place(20 * MS, 0, 25 * MS, 0), (20 * MS, false), "never after its read");
    }

    /// A SCHED_FIFO forwarder is real-time from a wake-up until it has been awake
    /// `FIFO_AWAKE_NS` or overloaded, and real-time again before its next sleep.
    #[test]
    fn a_fifo_forwarder_is_real_time_only_until_awake_too_long_or_overloaded() {
        std::thread::spawn(|| {
            apply_priority(Priority::Fifo(1));
            if !sys::sched::thread_is_fifo().expect("sched_getscheduler") {
                assert!(!nix::unistd::geteuid().is_root(), "root could not set SCHED_FIFO");
                return; // without privilege there is no real-time to leave
            }
            let fifo = || sys::sched::thread_is_fifo().expect("sched_getscheduler");
            let mut o = Overload::new(Priority::Fifo(1));
            let t0 = mono_ns();
            o.after_sleep(t0);
            o.awake(t0 + FIFO_AWAKE_NS / 2);
            assert!(fifo(), "demoted before FIFO_AWAKE_NS");
            o.awake(t0 + FIFO_AWAKE_NS + 1);
            assert!(!fifo(), "still real-time after FIFO_AWAKE_NS awake");
            o.before_sleep();
            assert!(fifo(), "not real-time again before sleeping");
            for _ in 0..OVERLOAD_BATCHES {
                o.full_batch();
            }
            assert!(!fifo() && o.level == Level::Workload, "still real-time under overload");
            o.ran_dry();
            assert!(!fifo() && o.level == Level::Awake, "real-time again before sleeping");
            o.before_sleep();
            assert!(fifo());
        })
        .join()
        .expect("test thread");
    }
}
