//! Helpers shared by the end-to-end tests, and the harness's registration of them.
//!
//! The test binary runs under `libtest-mimic` (`harness = false`) so that a test which needs
//! something this machine lacks (root, a tool) is reported as `ignored` with the reason in the
//! normal `cargo test` output, and listed again at the end. When the environment variable `CI`
//! is set (to anything but "", "0" or "false"), such a test FAILS instead, naming what it
//! lacked: CI runs as root with the tools installed, so a skip there hides a broken setup.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use libtest_mimic::Trial;

/// True when running as root (CI is).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// True when the environment says this is CI (`CI` set, and not "", "0" or "false").
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// True when `tool` is on the PATH.
pub(crate) fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Need {
    /// Root: network namespaces, TUN devices, a private loopback with MTU 1500.
    Root,
    /// A program on the PATH.
    Tool(&'static str),
    /// Any other check: `Err(what is missing)`.
    Check(fn() -> Result<(), String>),
}

impl Need {
    fn missing(&self) -> Option<String> {
        match self {
            Need::Root if !is_root() => Some("root (network namespaces, TUN devices)".into()),
            Need::Tool(t) if !have(t) => Some(format!("{t} on the PATH")),
            Need::Check(f) => f().err(),
            _ => None,
        }
    }
}

/// Tests that did not run here, with the reason (printed once more after the run).
static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A test that needs nothing but the tcpstall binary and loopback sockets.
pub(crate) fn test(name: &str, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// A test that needs `needs`: runs when all are there; otherwise ignored with the reason, or,
/// under CI, a failure naming what is missing.
pub(crate) fn needs(name: &str, needs: &[Need], f: fn()) -> Trial {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    if missing.is_empty() {
        return test(name, f);
    }
    let why = format!("needs {}", missing.join(" and "));
    if in_ci() {
        let msg = format!("{name} cannot run: it {why} (CI is set, so a test that cannot run fails)");
        return Trial::test(name, move || Err(msg.into()));
    }
    SKIPPED.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{name}: {why}"));
    // If forced to run (--ignored), it says why instead of passing without testing anything.
    let msg = format!("not run: {why}");
    Trial::test(name, move || Err(msg.into())).with_ignored_flag(true).with_kind(format!("skipped, {why}"))
}

/// Run the trials like libtest, then list the skipped tests with their reasons.
pub(crate) fn run(trials: Vec<Trial>) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let listing = args.list;
    let conclusion = libtest_mimic::run(&args, trials);
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !listing && !skipped.is_empty() && !args.ignored && !args.include_ignored {
        println!("{} tests skipped on this machine (set CI=1 to make them fail instead):", skipped.len());
        for s in &skipped {
            println!("  SKIPPED {s}");
        }
        println!();
    }
    conclusion.exit()
}

/// Serialises the tests that measure time or load the machine (real sockets, the emulated
/// link, stalls timed against 30 ms): run side by side in one process they would delay each
/// other's packets and timers. Also the tests that use system-wide state (named namespaces,
/// BPF programs on the TCP tracepoints, the leftovers sweep, `watch` on a loopback) hold it
/// against each other; it does not keep out other processes on the machine, so such a test
/// looks only at what its own runs made (their pids, their names: leftovers.rs), never at the
/// whole system.
pub(crate) fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A timing check that may miss on a loaded machine: tried at most twice; when both tries miss,
/// panics with both figures.
pub(crate) fn twice<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    match f() {
        Ok(v) => v,
        Err(first) => match f() {
            Ok(v) => {
                eprintln!("{what}: the first try missed ({first}); the second met it");
                v
            }
            Err(second) => panic!("{what}: both tries missed\n  first:  {first}\n  second: {second}"),
        },
    }
}

pub(crate) fn tcpstall() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("tcpstall").expect("tcpstall binary")
}

/// Runs a copy of the tcpstall binary as nobody with no capabilities (setpriv), with `args`.
/// The copy lives in a fresh directory nobody can enter; exec is retried on ETXTBSY ("Text
/// file busy"): a test forking at the same time can hold the copy's write descriptor a moment.
pub(crate) fn run_unprivileged(args: &[&str]) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("tcpstall");
    std::fs::copy(assert_cmd::cargo::cargo_bin("tcpstall"), &bin).unwrap();
    for attempt in 0.. {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
            .arg(&bin)
            .args(args)
            .output()
            .unwrap();
        if attempt < 20 && String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        return out;
    }
    unreachable!()
}

/// A child's stderr read on a thread: each line as it comes (the first on the channel), and
/// all lines after the first joined when it ends.
pub(crate) fn stderr_lines(
    e: std::process::ChildStderr,
) -> (std::sync::mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut rest = Vec::new();
        for (i, l) in std::io::BufReader::new(e).lines().map_while(Result::ok).enumerate() {
            if i == 0 {
                let _ = tx.send(l);
            } else {
                rest.push(l);
            }
        }
        rest.join("\n")
    });
    (rx, h)
}

/// A tcpdump writing one test's capture. [`Tcpdump::start`] returns once tcpdump says it is
/// listening (a loaded machine can take seconds to start one, and the first exchanges would go
/// unrecorded); [`Tcpdump::stop_all`] waits until the files stop growing, then stops them with
/// SIGINT. tcpdump `-U` writes each packet as it reads it, but one starved on a loaded host reads
/// its last packets late, and stopping it loses what it had not read yet: once a stall of ten
/// (load 11, remote.rs), once the last of 25 HTTP exchanges, so that replay found 24 (soak,
/// load 5, advise.rs). Killed on drop, so a failing test leaves no tcpdump behind.
pub(crate) struct Tcpdump {
    child: Option<std::process::Child>,
    file: std::path::PathBuf,
}

impl Tcpdump {
    /// Runs `prefix` (`["tcpdump"]`, or `["ip", "netns", "exec", NS, "tcpdump"]`) with `args`,
    /// then `-U -w FILE FILTER`.
    pub(crate) fn start(prefix: &[&str], args: &[&str], file: &std::path::Path, filter: &str) -> Tcpdump {
        use std::io::BufRead;
        let mut child = std::process::Command::new(prefix[0])
            .args(&prefix[1..])
            .args(args)
            .args(["-U", "-w"])
            .arg(file)
            .arg(filter)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{prefix:?}: {e}"));
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while err.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("listening on") {
            line.clear();
        }
        let dump = Tcpdump { child: Some(child), file: file.to_path_buf() };
        assert!(line.contains("listening on"), "tcpdump {args:?} {filter} did not start: {line}");
        // Keep reading its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        dump
    }

    /// Waits until every file has stopped growing (unchanged for 1 s, at most 20 s in all), then
    /// stops each tcpdump with SIGINT (SIGKILL after 5 s) and waits for it.
    pub(crate) fn stop_all(dumps: Vec<Tcpdump>) {
        use std::time::{Duration, Instant};
        let size = || dumps.iter().map(|d| std::fs::metadata(&d.file).map_or(0, |m| m.len())).collect::<Vec<_>>();
        let (t0, mut last, mut quiet) = (Instant::now(), size(), 0);
        while quiet < 2 && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(500));
            let now = size();
            quiet = if now == last { quiet + 1 } else { 0 };
            last = now;
        }
        for mut d in dumps {
            let Some(mut child) = d.child.take() else { continue };
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGINT);
            let t = Instant::now();
            while child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// [`Tcpdump::stop_all`] of this one.
    pub(crate) fn stop(self) {
        Tcpdump::stop_all(vec![self]);
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
