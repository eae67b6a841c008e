//! A watch running, without the OS: the session ([`Watcher`]) and where its records go. Each
//! record yielded is counted in the metrics, its packets written to `--write`, its JSON line
//! printed at once; on the one-second tick the ring's drops are warned about, the metrics and
//! `--write` brought up to date and the live table redrawn; at the end the summary. The binary
//! opens the outputs, hands them over as writers, and passes in what only the OS knows (the
//! clocks, the capture ring's counts: [`Clock`]).

use std::io::Write;
use std::ops::ControlFlow;
use std::sync::Arc;

use report::watch::{ring_drops_warning, watch_live_table, WatchHealth, WatchLine, WatchSummary};
use wire::write::PcapNgWriter;

use crate::{Frame, Metrics, Record, Watcher};

/// What the OS says at one instant: the clocks, and the capture ring's counts so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// ns since the Unix epoch.
    pub now_unix_ns: u64,
    /// ns since the watch began (wall clock).
    pub up_ns: u64,
    /// The process's CPU time (user and system), ns.
    pub cpu_ns: u64,
    /// PACKET_STATISTICS, summed since the ring was opened.
    pub ring_drops: u64,
    pub ring_freezes: u64,
}

/// How the records are shown on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON stall record per line, flushed per line; the summary line on standard error.
    Jsonl,
    /// A terminal: the live table redrawn every second; the summary line on standard error.
    LiveTable,
    /// Not a terminal: nothing until the end, then the summary and its top flows.
    Table,
}

/// Where a watch's records go.
pub struct Outputs {
    /// The JSON lines, the live table, the summary in [`Mode::Table`].
    pub stdout: Box<dyn Write>,
    /// Warnings, and the summary line but in [`Mode::Table`].
    pub stderr: Box<dyn Write>,
    pub mode: Mode,
    /// `--write`'s capture (its one interface is the capture's).
    pub pcap: Option<PcapNgWriter<Box<dyn Write>>>,
    /// `--metrics`: shared with the thread that serves them.
    pub metrics: Option<Arc<Metrics>>,
    /// An interface's name from its index (its index when it has none any more).
    pub ifname: fn(u32) -> String,
}

/// What ends a watch with an error.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("--write: {0}")]
    Write(std::io::Error),
    #[error(transparent)]
    Json(#[from] report::ExportError),
}

/// A watch running: the session and its outputs.
pub struct Live {
    w: Watcher,
    out: Outputs,
    /// Standard output still takes lines (a closed pipe ends the watch quietly).
    open: bool,
    /// Records yielded, not written yet.
    recs: Vec<Record>,
    /// Ring drops already warned about.
    warned_drops: u64,
    /// The process's CPU time when the watch began (ns).
    cpu0_ns: u64,
}

impl Live {
    /// `cpu0_ns`: the process's CPU time when the watch began.
    pub fn new(w: Watcher, out: Outputs, cpu0_ns: u64) -> Live {
        Live { w, out, open: true, recs: Vec::new(), warned_drops: 0, cpu0_ns }
    }

    /// The session (for its kernel records).
    pub fn watcher(&mut self) -> &mut Watcher {
        &mut self.w
    }

    /// One captured frame, in capture order.
    pub fn push(&mut self, f: &Frame<'_>) {
        self.w.push(f, &mut self.recs);
    }

    /// After each wait for the capture: with `tick` (the one-second clock) the session's tick
    /// first; the records yielded written; then the tick's outputs. Break when the watch is
    /// over (the count reached, standard output closed).
    pub fn step(&mut self, tick: Option<&Clock>) -> Result<ControlFlow<()>, LiveError> {
        if let Some(c) = tick {
            self.w.tick(c.now_unix_ns, &mut self.recs);
        }
        if self.emit()?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
        if let Some(c) = tick {
            self.tick(c)?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The end. With `settle` (the watch ended without an error) the flows still alive are
    /// finished and their last records written (a gap pending at the end is classified now);
    /// `--write` is flushed in any case.
    pub fn finish(&mut self, settle: bool) -> Result<(), LiveError> {
        let mut r = Ok(());
        if settle {
            self.w.finish(&mut self.recs);
            r = self.emit().map(|_| ());
        }
        if let Some(p) = self.out.pcap.as_mut() {
            r = r.and(p.flush().map_err(LiveError::Write));
        }
        r
    }

    /// The summary, on `interface`, `--write`'s file `written_to`: with its top flows on
    /// standard output in [`Mode::Table`], else its line on standard error.
    pub fn summary(&mut self, c: &Clock, interface: &str, written_to: Option<String>) {
        let health = self.health(c);
        let summary = WatchSummary {
            seconds: c.up_ns as f64 / 1e9,
            interface,
            health: &health,
            by_cause: self.w.by_cause(),
            written_to,
        };
        if self.out.mode == Mode::Table {
            let _ = self.out.stdout.write_all(summary.text(&self.w.top(20)).as_bytes());
            let _ = self.out.stdout.flush();
        } else {
            let _ = writeln!(self.out.stderr, "{}", summary.line());
        }
    }

    /// Writes the records yielded: metrics, `--write`'s packets, the JSON lines.
    fn emit(&mut self) -> Result<ControlFlow<()>, LiveError> {
        let out = &mut self.out;
        for r in self.recs.drain(..) {
            if let Some(m) = &out.metrics {
                let owner = r.owner.as_ref().map(|o| (o.comm.as_str(), o.cgroup.as_deref().unwrap_or("")));
                m.stall(r.stall.cause.as_str(), r.port, owner, r.stall.length.as_secs_f64());
            }
            if let Some(p) = out.pcap.as_mut() {
                for pkt in &r.packets {
                    p.packet(0, pkt.ts_ns, &pkt.data, pkt.orig_len).map_err(LiveError::Write)?;
                }
            }
            if out.mode == Mode::Jsonl && self.open {
                let line = WatchLine {
                    schema_version: report::SCHEMA_VERSION,
                    kind: "stall",
                    flow: format!("{}-{}", r.key.a, r.key.b),
                    a: r.key.a,
                    b: r.key.b,
                    interface: (out.ifname)(r.key.interface),
                    start_unix_ns: r.start_unix_ns,
                    stall: &r.stall,
                    kernel: r.kernel,
                    owner: r.owner.as_deref(),
                    peer_owner: r.peer_owner.as_deref(),
                };
                let text = line.to_jsonl()?;
                // A closed pipe (| head) ends the watch quietly.
                self.open = writeln!(out.stdout, "{text}").and_then(|_| out.stdout.flush()).is_ok();
            }
        }
        Ok(if self.w.done() || !self.open { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    /// The one-second tick's outputs: the ring's drops warned about, the metrics, `--write`
    /// flushed, the live table redrawn.
    fn tick(&mut self, c: &Clock) -> Result<(), LiveError> {
        let h = self.health(c);
        if h.ring_drops > self.warned_drops {
            let _ = writeln!(self.out.stderr, "{}", ring_drops_warning(h.ring_drops));
            self.warned_drops = h.ring_drops;
        }
        if let Some(m) = &self.out.metrics {
            m.health(h.packets_seen, h.ring_drops, h.flows_tracked as u64);
            if let Some(k) = &h.kernel {
                m.kernel(k);
            }
        }
        if let Some(p) = self.out.pcap.as_mut() {
            p.flush().map_err(LiveError::Write)?;
        }
        if self.out.mode == Mode::LiveTable {
            let table = watch_live_table(&h, &self.w.top(25), c.up_ns as f64 / 1e9, c.now_unix_ns);
            let _ = self.out.stdout.write_all(table.as_bytes());
            let _ = self.out.stdout.flush();
        }
        Ok(())
    }

    /// The session's counts with the ring's and the process's own.
    pub fn health(&self, c: &Clock) -> WatchHealth {
        WatchHealth {
            ring_drops: c.ring_drops,
            ring_freezes: c.ring_freezes,
            cpu_share_of_one_cpu: cpu_share(c.cpu_ns.saturating_sub(self.cpu0_ns), c.up_ns),
            ..self.w.health()
        }
    }
}

/// The process's CPU time over the wall-clock time, as a share of one CPU (0 before any time
/// passed).
pub fn cpu_share(cpu_ns: u64, wall_ns: u64) -> f64 {
    if wall_ns > 0 {
        cpu_ns as f64 / wall_ns as f64
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
