//! A thread that empties the ring buffer every 10 ms (the programs submit without waking it:
//! BPF_RB_NO_WAKEUP; the 16 MiB ring holds about 120,000 records, 0.3 s of a busy
//! connection's 400,000 a second), keeping the records as they lie until the owner takes them;
//! they are parsed then, on the owner's thread (the lab takes a row's records when the row has
//! ended: the parsing is not on the CPU of the round trips being timed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::{parse_into, ClockMap, Counts, Filter, Record, Source, RECORD_LEN};

/// Records held at most between two takes (about 100 MB); beyond, records are counted in
/// [`ReaderCounts::overflow`] and not kept.
pub const MAX_HELD: usize = 1 << 20;

struct Inner {
    src: Mutex<Source>,
    /// Records as the ring held them, parsed by [`Reader::take`].
    held: Mutex<Vec<[u8; RECORD_LEN]>>,
    stop: AtomicBool,
    unparsed: AtomicU64,
    overflow: AtomicU64,
    /// CPU time of the reader thread (CLOCK_THREAD_CPUTIME_ID), ns.
    cpu_ns: AtomicU64,
    /// Whether the programs are detached ([`Reader::pause`]): then no record can arrive and the
    /// thread sleeps on `wake` instead of waking every 10 ms (it would wake 100 times a second
    /// beside a connection being timed).
    paused: Mutex<bool>,
    wake: Condvar,
    /// Where the reader thread is to run ([`Reader::keep_on`]): `Some(None)` back where it
    /// started, `Some(Some(set))` on `set`; taken and applied by the thread itself on its next
    /// wake-up (it never moves another thread, whose id could have been reused).
    wanted: Mutex<Option<Option<nix::sched::CpuSet>>>,
    /// The CPUs the thread may run on, read back (sched_getaffinity(2)) after each move; at
    /// first those of the thread that spawned it.
    cpus: Mutex<Option<nix::sched::CpuSet>>,
}

/// The source and its reader thread. Dropping it stops the thread and detaches the programs.
pub struct Reader {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

/// What the kernel and the reader counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderCounts {
    pub kernel: Counts,
    /// Records that did not parse.
    pub unparsed: u64,
    /// Records not kept: the owner had not taken [`MAX_HELD`] records yet.
    pub overflow: u64,
    /// CPU time the reader thread used, ns.
    pub reader_cpu_ns: u64,
}

impl ReaderCounts {
    /// Every record lost on the way: ring full, unparsed or not kept.
    pub fn lost(&self) -> u64 {
        self.kernel.lost + self.unparsed + self.overflow
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Read the ring straight into `held` (no batch between: one copy of each record fewer, and
    /// no allocation per drain), keeping at most [`MAX_HELD`].
    fn drain(&self) {
        let mut src = lock(&self.src);
        let mut held = lock(&self.held);
        let (_, bad) = src.drain_raw(&mut held);
        self.unparsed.fetch_add(bad, Ordering::Relaxed);
        if held.len() > MAX_HELD {
            self.overflow.fetch_add((held.len() - MAX_HELD) as u64, Ordering::Relaxed);
            held.truncate(MAX_HELD);
        }
    }
}

impl Reader {
    /// Start reading `src` on a thread of its own (drains the ring every 10 ms).
    pub fn spawn(src: Source) -> std::io::Result<Reader> {
        let inner = Arc::new(Inner {
            src: Mutex::new(src),
            held: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            unparsed: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            paused: Mutex::new(false),
            wake: Condvar::new(),
            wanted: Mutex::new(None),
            cpus: Mutex::new(None),
        });
        let i = inner.clone();
        let thread = std::thread::Builder::new().name("tcpstall-kevidence".into()).spawn(move || {
            use nix::time::{clock_gettime, ClockId};
            let me = nix::unistd::Pid::from_raw(0);
            let home = nix::sched::sched_getaffinity(me).ok();
            *lock(&i.cpus) = home;
            while !i.stop.load(Ordering::Acquire) {
                {
                    let mut paused = lock(&i.paused);
                    while *paused && !i.stop.load(Ordering::Acquire) {
                        paused = i.wake.wait(paused).unwrap_or_else(|e| e.into_inner());
                    }
                }
                if let Some(want) = lock(&i.wanted).take() {
                    if let Some(set) = want.or(home) {
                        // Refused (a CPU gone offline): it stays, and `cpus` says where.
                        let _ = nix::sched::sched_setaffinity(me, &set);
                    }
                    *lock(&i.cpus) = nix::sched::sched_getaffinity(me).ok();
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                i.drain();
                if let Ok(t) = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID) {
                    i.cpu_ns.store(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64, Ordering::Relaxed);
                }
            }
        })?;
        Ok(Reader { inner, thread: Some(thread) })
    }

    /// Keep the reader thread on `cpus` (sched_setaffinity(2)), or back on the CPUs it started
    /// with (`None`): the lab keeps it off the CPUs its timed threads are pinned to, where its
    /// wake-ups would delay theirs. The thread moves itself on its next wake-up (at once if it is
    /// paused and then resumed; else within its 10 ms sleep); [`Reader::cpus`] says where it is.
    pub fn keep_on(&self, cpus: Option<nix::sched::CpuSet>) {
        *lock(&self.inner.wanted) = Some(cpus);
        let _paused = lock(&self.inner.paused);
        self.inner.wake.notify_all();
    }

    /// The CPUs the reader thread may run on, as read back after its last move (None if they
    /// could not be read).
    pub fn cpus(&self) -> Option<Vec<usize>> {
        let set = (*lock(&self.inner.cpus))?;
        Some((0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect())
    }

    /// The records read since the last take, in the order the ring delivered them (per CPU in
    /// time order; across CPUs nearly so: sort by time if it matters).
    pub fn take(&self) -> Vec<Record> {
        self.inner.drain();
        let raw = std::mem::take(&mut *lock(&self.inner.held));
        let mut records = Vec::with_capacity(raw.len());
        let unparsed = parse_into(&raw, &mut records);
        self.inner.unparsed.fetch_add(unparsed, Ordering::Relaxed);
        records
    }

    /// A new filter, and a fresh start: the records of the old one are read and discarded.
    pub fn restart(&self, f: &Filter) -> Result<(), crate::SourceError> {
        lock(&self.inner.src).set_filter(f)?;
        self.take();
        Ok(())
    }

    /// See [`Source::pause`]: detach the programs (loaded, not running) until [`Reader::resume`].
    /// The reader thread sleeps until resumed (records already in the ring are read by the
    /// next [`Reader::take`]).
    pub fn pause(&self) {
        lock(&self.inner.src).pause();
        *lock(&self.inner.paused) = true;
    }

    /// See [`Source::resume`].
    pub fn resume(&self) {
        lock(&self.inner.src).resume();
        *lock(&self.inner.paused) = false;
        self.inner.wake.notify_all();
    }

    pub fn counts(&self) -> ReaderCounts {
        ReaderCounts {
            kernel: lock(&self.inner.src).counts(),
            unparsed: self.inner.unparsed.load(Ordering::Relaxed),
            overflow: self.inner.overflow.load(Ordering::Relaxed),
            reader_cpu_ns: self.inner.cpu_ns.load(Ordering::Relaxed),
        }
    }

    /// See [`Source::run_stats`].
    pub fn run_stats(&self) -> Vec<(&'static str, u64, u64)> {
        lock(&self.inner.src).run_stats()
    }

    /// See [`Source::status`].
    pub fn status(&self) -> String {
        lock(&self.inner.src).status()
    }

    /// The clocks now (for converting the records' times).
    pub fn clock(&self) -> ClockMap {
        ClockMap::sample()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        {
            // Under the lock the thread checks `stop` with: it sees the flag or the notice.
            let _paused = lock(&self.inner.paused);
            self.inner.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
