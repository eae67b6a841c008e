//! Third-party programs as cases: Python's http.client POSTing to http.server, nginx + curl,
//! redis-server + redis-cli, mosquitto + mosquitto_pub (QoS 1), nc fed line by line. Each runs
//! unmodified under `strace` (src/strace.rs), whose output is the truth of their writes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::log::write_jsonl;
use crate::net::Proc;
use crate::net::{Net, Point};
use crate::shape::{Case, Loss, Mode, Shape, SideOpts, Size};

const HTTPPOST: &str = include_str!("../programs/httppost.py");

/// The programs, and whether each is on this machine (its binaries on PATH).
pub const PROGRAMS: [(&str, &[&str]); 6] = [
    ("python-http", &["python3"]),
    ("nginx-curl", &["nginx", "curl"]),
    ("redis", &["redis-server", "redis-cli"]),
    ("mosquitto", &["mosquitto", "mosquitto_pub"]),
    ("nc", &["nc"]),
    ("ssh", &["sshd", "ssh", "ssh-keygen"]),
];

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file())).unwrap_or(false)
}

/// The third-party cases of `size` (those whose programs are installed, and strace).
pub fn cases(size: Size, seed: u64) -> Vec<Case> {
    let (n, rtts): (u32, &[u32]) = match size {
        Size::Small => (25, &[0]),
        Size::Full => (80, &[0, 20, 80]),
    };
    if !on_path("strace") {
        eprintln!("third-party programs skipped: strace is not installed");
        return Vec::new();
    }
    let mut out = Vec::new();
    for &rtt in rtts {
        for (name, bins) in PROGRAMS {
            if size == Size::Small && name != "python-http" && name != "redis" {
                continue;
            }
            if let Some(b) = bins.iter().find(|b| !on_path(b)) {
                eprintln!("{name} skipped: {b} is not installed");
                continue;
            }
            let shape = Shape {
                name: format!("prog-{name}"),
                requests: n,
                mode: Mode::RequestResponse,
                client_writes: Vec::new(),
                server_writes: Vec::new(),
                think_ms: (0, 100),
                client: SideOpts::default(),
                server: SideOpts::default(),
            };
            out.push(Case { name: format!("{name}-rtt{rtt}"), shape, rtt_ms: rtt, loss: Loss::None, seed });
        }
    }
    out
}

/// The system's Python (a version manager's shim would run its own scripts under strace).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn strace(net: &Net, p: Point, out: &Path) -> std::process::Command {
    let mut c = net.command(p, "strace");
    c.args([
        "-f",
        "-qq",
        "-ttt",
        "-yy",
        "-e",
        "trace=write,writev,sendto,sendmsg,setsockopt",
        "-e",
        "signal=none",
        "-o",
    ])
    .arg(out);
    c
}

/// OpenSSH: sshd with a generated host key and a key of its own for the client (nothing of the
/// machine's ssh configuration is used or changed: `-f /dev/null`, every file in the case's
/// directory), the client running a command that prints a line every 50 ms.
fn ssh(dir: &Path, ip: &str, port: u16, n: u32) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    // sshd's privilege separation directory (sshd(8)); created if missing, as the package's
    // service would.
    std::fs::create_dir_all("/run/sshd")?;
    let key = |name: &str| -> anyhow::Result<PathBuf> {
        let k = dir.join(name);
        let _ = std::fs::remove_file(&k);
        let st = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&k)
            .stdin(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("ssh-keygen failed");
        }
        Ok(k)
    };
    let host = key("ssh-host-key")?;
    let user = key("ssh-client-key")?;
    let auth = dir.join("authorized_keys");
    std::fs::copy(dir.join("ssh-client-key.pub"), &auth)?;
    let d = |p: &Path| p.display().to_string();
    let server = vec![
        "/usr/sbin/sshd".into(),
        "-D".into(),
        "-e".into(),
        "-f".into(),
        "/dev/null".into(),
        "-o".into(),
        format!("ListenAddress={ip}:{port}"),
        "-o".into(),
        format!("HostKey={}", d(&host)),
        "-o".into(),
        format!("AuthorizedKeysFile={}", d(&auth)),
        "-o".into(),
        "StrictModes=no".into(),
        "-o".into(),
        "PermitRootLogin=yes".into(),
        "-o".into(),
        "UsePAM=no".into(),
        "-o".into(),
        "PidFile=none".into(),
    ];
    let client = vec![
        "ssh".into(),
        "-F".into(),
        "/dev/null".into(),
        "-i".into(),
        d(&user),
        "-o".into(),
        "StrictHostKeyChecking=no".into(),
        "-o".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-p".into(),
        port.to_string(),
        format!("root@{ip}"),
        format!("i=0; while [ $i -lt {n} ]; do echo line $i; sleep 0.05; i=$((i+1)); done"),
    ];
    Ok((server, client))
}

/// Waits until something listens on `port` in the server's namespace (ss(8); no connection is
/// made, so the capture holds only the case's).
fn wait_listening(net: &Net, port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = net.run(Point::Server, &["ss", "-Hltn", &format!("sport = :{port}")]).unwrap_or_default();
        if !out.trim().is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the server did not listen on port {port} within 10 s")
}

/// Runs a third-party case; its strace outputs become the logs `logs` (client, server).
// long: one arm per program, each its server and client command lines.
pub fn run(case: &Case, net: &Net, addr: SocketAddr, dir: &Path, logs: &[PathBuf; 2]) -> anyhow::Result<()> {
    let name = case.shape.name.trim_start_matches("prog-");
    let (ip, port) = (addr.ip().to_string(), addr.port());
    let n = case.shape.requests;
    let traces = [dir.join("client.strace"), dir.join("server.strace")];
    let lines = |n: u32, ms: u32| {
        format!("i=0; while [ $i -lt {n} ]; do echo \"message $i of the case\"; sleep 0.{ms:03}; i=$((i+1)); done")
    };
    let mut server = strace(net, Point::Server, &traces[1]);
    let mut client = strace(net, Point::Client, &traces[0]);
    match name {
        "python-http" => {
            let script = dir.join("httppost.py");
            std::fs::write(&script, HTTPPOST)?;
            server.arg(python()).arg(&script).args(["server", &ip, &port.to_string()]);
            client.arg(python()).arg(&script).args(["client", &ip, &port.to_string(), &n.to_string()]);
            client.arg(case.seed.to_string());
        }
        "nginx-curl" => {
            let www = dir.join("www");
            std::fs::create_dir_all(&www)?;
            std::fs::write(www.join("small.json"), vec![b'x'; 300])?;
            std::fs::write(www.join("page.html"), vec![b'y'; 6000])?;
            let conf = dir.join("nginx.conf");
            std::fs::write(
                &conf,
                format!(
                    "daemon off; master_process off; worker_processes 1; user root;\nerror_log {d}/nginx-error.log;\npid {d}/nginx.pid;\n\
                     events {{ worker_connections 64; }}\nhttp {{ access_log off; keepalive_requests 10000; keepalive_timeout 60s;\n\
                     client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
                     server {{ listen {ip}:{port}; root {w}; }} }}\n",
                    d = dir.display(),
                    w = www.display()
                ),
            )?;
            server.args(["nginx", "-c"]).arg(&conf);
            client.args(["curl", "-s", "-o", "/dev/null"]);
            for i in 0..n {
                let f = if i % 2 == 0 { "small.json" } else { "page.html" };
                client.arg(format!("http://{ip}:{port}/{f}"));
            }
        }
        "redis" => {
            server.args([
                "redis-server",
                "--bind",
                &ip,
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ]);
            server.args(["--protected-mode", "no", "--dir"]).arg(dir);
            client.args(["redis-cli", "-h", &ip, "-p", &port.to_string(), "-r", &n.to_string(), "-i", "0.05"]);
            client.args(["SET", "key", "a-value-of-some-thirty-bytes-long"]);
        }
        "mosquitto" => {
            let conf = dir.join("mosquitto.conf");
            std::fs::write(&conf, format!("listener {port} {ip}\nallow_anonymous true\npersistence false\n"))?;
            server.args(["mosquitto", "-c"]).arg(&conf);
            let mut c = net.command(Point::Client, "sh");
            let cmd = format!(
                "{} | strace -f -qq -ttt -yy -e trace=write,writev,sendto,sendmsg,setsockopt -e signal=none -o {} mosquitto_pub -h {ip} -p {port} -t truth/test -q 1 -l",
                lines(n, 60),
                traces[0].display()
            );
            c.args(["-c", &cmd]);
            client = c;
        }
        "nc" => {
            server.args(["nc", "-l", &ip, &port.to_string()]);
            let mut c = net.command(Point::Client, "sh");
            let cmd = format!(
                "{} | strace -f -qq -ttt -yy -e trace=write,writev,sendto,sendmsg,setsockopt -e signal=none -o {} nc -N {ip} {port}",
                lines(n, 80),
                traces[0].display()
            );
            c.args(["-c", &cmd]);
            client = c;
        }
        "ssh" => {
            let (server_cmd, client_cmd) = ssh(dir, &ip, port, n)?;
            server.args(server_cmd);
            client.args(client_cmd);
        }
        other => bail!("{other}: no such program"),
    }
    server.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    client.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut srv = Proc::spawn(server).context("starting the server")?;
    let out = srv.0.as_mut().and_then(|c| c.stdout.take());
    if name == "python-http" {
        if let Some(o) = out {
            let mut line = String::new();
            BufReader::new(o).read_line(&mut line)?;
        }
    }
    wait_listening(net, port)?;
    let mut cl = Proc::spawn(client).context("starting the client")?;
    cl.wait(Duration::from_secs(60 + u64::from(n) * (1 + u64::from(case.rtt_ms) / 20)), name)?;
    std::thread::sleep(Duration::from_millis(300));
    net.stop_programs();
    drop(srv);
    let client_ip = crate::net::CLIENT_IP.to_string();
    for (i, t) in traces.iter().enumerate() {
        let text = std::fs::read_to_string(t).unwrap_or_default();
        let lines = crate::strace::parse(&text, port, &client_ip);
        let side = if i == 0 { crate::log::Side::Client } else { crate::log::Side::Server };
        let mine: Vec<_> = lines
            .into_iter()
            .filter(|l| match l {
                crate::log::LogLine::Write { side: s, .. } | crate::log::LogLine::Opt { side: s, .. } => *s == side,
            })
            .collect();
        write_jsonl(&logs[i], &mine)?;
    }
    Ok(())
}
