//! Stopping a lab run from another thread (the CLI's Ctrl-C handler, [`Interrupts`]).
//!
//! `run_scenario` checks the flag between rows. The row in progress is stopped promptly: every
//! socket of the row (listener and both connected ends) is registered here while it is open, and
//! `cancel()` shuts them down, so a thread blocked in accept(2), recv(2) or send(2) returns at
//! once (shutdown(2) wakes the sleepers: `inet_shutdown` calls `sk_state_change`, and a listening
//! socket is stopped by `tcp_disconnect` -> `inet_csk_listen_stop`, net/ipv4/af_inet.c).
//!
//! The registry holds a duplicate of each socket (dup(2) via `Socket::try_clone`), never a raw fd
//! number, so a shutdown can never reach an unrelated file that reused the number; the duplicate
//! is dropped when the owner unregisters, before the owner closes its socket.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use socket2::Socket;

/// A cancellation token: cheap to clone; clones share the flag and the registry.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    flag: AtomicBool,
    next: AtomicU64,
    socks: Mutex<Vec<(u64, Socket)>>,
    /// A watchdog cancels this token when its run overruns ([`Cancel::watched`]).
    watched: bool,
    /// The token this one also obeys: its cancel shuts this one's sockets too.
    parent: Option<Cancel>,
}

/// Two tokens are equal when they are clones of one another.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Cancel {}

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the run to stop: set the flag and shut down every registered socket.
    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
        for (_, s) in self.socks().iter() {
            // The peer may already have closed; nothing to do then.
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// A token for one run that a watchdog cancels when the run overruns: the run's sockets
    /// then need no per-call timeouts (SO_RCVTIMEO and SO_SNDTIMEO arm a kernel timer on every
    /// blocking wait, sk_wait_data -> schedule_timeout in net/core/sock.c: measured 2.5-3% of a
    /// 4 us same-CPU round trip).
    /// Cancelling `parent` (Ctrl-C) cancels it too: its sockets are registered with both.
    pub(crate) fn watched(parent: &Cancel) -> Self {
        Cancel { inner: Arc::new(Inner { watched: true, parent: Some(parent.clone()), ..Inner::default() }) }
    }

    /// Whether a watchdog guards the run ([`Cancel::watched`]).
    pub(crate) fn is_watched(&self) -> bool {
        self.inner.watched
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst) || self.inner.parent.as_ref().is_some_and(Cancel::is_cancelled)
    }

    fn socks(&self) -> MutexGuard<'_, Vec<(u64, Socket)>> {
        // A panic while holding the lock leaves a plain Vec behind: still usable.
        self.inner.socks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `sock` until the returned guard is dropped (drop the guard before the socket).
    /// A token already cancelled shuts the socket down at once.
    pub(crate) fn watch(&self, sock: &Socket) -> Watch<'_> {
        let parent = self.inner.parent.as_ref().map(|p| p.register(sock));
        Watch { cancel: self, id: self.register(sock), parent }
    }

    /// Register a duplicate of `sock`; its id in the registry.
    fn register(&self, sock: &Socket) -> u64 {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        // dup(2) can only fail for lack of descriptors; the flag checks between rows remain.
        if let Ok(dup) = sock.try_clone() {
            let mut socks = self.socks();
            // Checked under the lock `cancel` takes after setting the flag: either cancel sees
            // this socket, or this sees the flag.
            if self.is_cancelled() {
                let _ = dup.shutdown(std::net::Shutdown::Both);
            }
            socks.push((id, dup));
        }
        id
    }
}

/// Keeps a socket registered with a [`Cancel`]; unregisters it when dropped.
pub(crate) struct Watch<'a> {
    cancel: &'a Cancel,
    id: u64,
    /// The socket's id in the parent's registry, if the token has a parent.
    parent: Option<u64>,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.cancel.socks().retain(|(id, _)| *id != self.id);
        if let (Some(p), Some(pid)) = (&self.cancel.inner.parent, self.parent) {
            p.socks().retain(|(id, _)| *id != pid);
        }
    }
}

/// Ctrl-C (and SIGTERM, SIGHUP) while a run is going: the first signal calls the given action
/// (cancels the run: the row in progress stops, the finished rows are kept); a second one ends
/// the process at once with 128 + the signal. The signals are read on a thread of their own.
pub struct Interrupts {
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<Option<i32>>,
}

impl Interrupts {
    /// SIGINT, SIGTERM and SIGHUP cancel `cancel`. This starts a thread: call it after anything
    /// that needs a single-threaded process (the emulated link's user namespace).
    pub fn start(cancel: Cancel) -> std::io::Result<Interrupts> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        Interrupts::on(&[SIGINT, SIGTERM, SIGHUP], move || cancel.cancel())
    }

    /// The first of `signals` calls `first`; a second one ends the process (exit 128 + signal).
    pub fn on(signals: &[i32], first: impl Fn() + Send + 'static) -> std::io::Result<Interrupts> {
        let mut signals = signal_hook::iterator::Signals::new(signals)?;
        let handle = signals.handle();
        // The iterator lives until `handle.close()`: dropping it early would leave close()
        // writing into a closed pipe (SIGPIPE).
        let thread = std::thread::spawn(move || {
            let mut got = None;
            for sig in signals.forever() {
                if got.is_some() {
                    // The user insists: leave now. Whatever a link left is swept by the next run.
                    std::process::exit(128 + sig);
                }
                got = Some(sig);
                first();
            }
            got
        });
        Ok(Interrupts { handle, thread })
    }

    /// Stop listening; the first signal received, if any. (signal-hook leaves its handler
    /// installed: a signal after this is ignored, and the process is about to exit.)
    pub fn stop(self) -> Option<i32> {
        self.handle.close();
        self.thread.join().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::{Duration, Instant};

    #[test]
    fn cancel_wakes_a_blocked_recv_and_accept() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Socket::from(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let (_peer, _) = l.accept().unwrap();
        let listener = Socket::from(l);
        let cancel = Cancel::new();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            let w1 = cancel.watch(&c);
            let w2 = cancel.watch(&listener);
            let reader = s.spawn(|| (&c).read(&mut [0u8; 16]));
            let acceptor = s.spawn(|| listener.accept().map(|_| ()));
            std::thread::sleep(Duration::from_millis(50));
            cancel.cancel();
            // shutdown(SHUT_RD): recv returns 0 (end of stream) instead of blocking.
            assert_eq!(reader.join().unwrap().unwrap(), 0);
            assert!(acceptor.join().unwrap().is_err(), "accept on a shut-down listener fails (EINVAL)");
            drop((w1, w2));
        });
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(cancel.is_cancelled());
        assert!(cancel.socks().is_empty(), "guards unregister their sockets");
    }

    #[test]
    fn cancelling_the_parent_stops_a_watched_run() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Socket::from(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let (_peer, _) = l.accept().unwrap();
        let user = Cancel::new();
        let run = Cancel::watched(&user);
        assert!(run.is_watched() && !user.is_watched());
        std::thread::scope(|s| {
            let w = run.watch(&c);
            let reader = s.spawn(|| (&c).read(&mut [0u8; 16]));
            std::thread::sleep(Duration::from_millis(50));
            user.cancel();
            assert_eq!(reader.join().unwrap().unwrap(), 0, "the parent's cancel shut the socket");
            drop(w);
        });
        assert!(run.is_cancelled());
        assert!(user.socks().is_empty() && run.socks().is_empty(), "both registries emptied");
    }

    #[test]
    fn a_socket_watched_after_cancel_is_shut_at_once() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Socket::from(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let cancel = Cancel::new();
        cancel.cancel();
        let _w = cancel.watch(&c);
        assert_eq!((&c).read(&mut [0u8; 4]).unwrap(), 0);
        assert_eq!(cancel, cancel.clone());
        assert_ne!(cancel, Cancel::new());
    }

    #[test]
    fn a_signal_cancels_and_stop_returns_it() {
        let cancel = Cancel::new();
        let i = Interrupts::start(cancel.clone()).unwrap();
        // SIGHUP: the test harness does not handle it, and the handler installed above does.
        signal_hook::low_level::raise(signal_hook::consts::SIGHUP).unwrap();
        let t0 = Instant::now();
        while !cancel.is_cancelled() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(cancel.is_cancelled());
        assert_eq!(i.stop(), Some(signal_hook::consts::SIGHUP));
    }
}
