//! Captures with tcpdump inside a namespace: realtime host stamps (`-j host`) at nanosecond
//! precision, delivered and written packet by packet (`--immediate-mode -U`: without it a
//! TPACKET_V3 block not yet retired at SIGTERM is lost), started before the programs and stopped with
//! SIGTERM after them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::net::{disown_child, own_child, Net, Point};

/// A running tcpdump.
pub struct Tcpdump {
    child: Option<Child>,
}

impl Tcpdump {
    /// Starts tcpdump on `iface` at `p`, writing `out`, for TCP (and ICMP) packets; returns once
    /// it says it is listening.
    pub fn start(net: &Net, p: Point, iface: &str, out: &Path) -> anyhow::Result<Tcpdump> {
        let mut child = net
            .command(p, "tcpdump")
            .args([
                "-i",
                iface,
                "-n",
                "-U",
                "--immediate-mode",
                "-s",
                "256",
                "-j",
                "host",
                "--time-stamp-precision=nano",
                "-w",
            ])
            .arg(out)
            .args(["tcp", "or", "icmp"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run tcpdump")?;
        own_child(child.id());
        let stderr = child.stderr.take().context("tcpdump stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut said = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !said && line.contains("listening on") {
                    said = true;
                    let _ = tx.send(Ok(()));
                } else if !said {
                    let _ = tx.send(Err(line));
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut me = Tcpdump { child: Some(child) };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(())) => return Ok(me),
                Ok(Err(line)) if line.contains("tcpdump:") && !line.contains("listening") => {
                    me.stop();
                    bail!("tcpdump on {iface}: {line}");
                }
                Ok(Err(_)) => continue,
                Err(_) => {
                    me.stop();
                    bail!("tcpdump on {iface} did not start listening within 10 s");
                }
            }
        }
    }

    /// Stops it (SIGTERM, which flushes the file) and waits.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = c.wait();
            disown_child(c.id());
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.stop();
    }
}
