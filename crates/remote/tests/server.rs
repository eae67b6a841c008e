//! The server over real sockets on loopback (no root needed): replayed authentication, a flood
//! of junk and malformed connections, a client that vanishes mid-run, busy, and the limits.
//! Each test runs its own server on a free port. Issue 23.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tcpstall_remote::auth::{self, Channel, Key, Role};
use tcpstall_remote::client::{ClientError, Session};
use tcpstall_remote::frame;
use tcpstall_remote::msg::{self, Auth, Challenge, Limits, Opening, RunRequest, ToClient, ToServer, MAGIC, VERSION};
use tcpstall_remote::server::{ServeConfig, Server};

const KEY: [u8; 32] = [0x5a; 32];
const IO: Duration = Duration::from_secs(10);

struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(limits: Limits) -> Running {
    let server = Server::bind(ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        key: Some(Key::from_bytes(KEY)),
        limits,
        io_timeout: Duration::from_secs(5),
        log: Box::new(|_| {}),
    })
    .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.stop_flag();
    let thread = std::thread::spawn(move || server.run().unwrap());
    Running { addr, stop, thread: Some(thread) }
}

fn scenario(name: &str, sets: &[&str]) -> scenario::Scenario {
    let mut s = scenario::Scenario::builtin(name).unwrap();
    s.apply_sets(sets).unwrap();
    s
}

/// One row of `name` against the server: its p50 (ms) and slow samples.
fn row(addr: SocketAddr, name: &str, sets: &[&str], label: &str) -> Result<report::RunResult, ClientError> {
    let s = scenario(name, sets);
    let pair = s.matrix.iter().find(|p| p.label == label).unwrap().clone();
    let mut session = Session::connect(addr, &Key::from_bytes(KEY), IO)?;
    let place = lab::Placement { link: "test".into(), ..lab::Placement::loopback() };
    let opts =
        lab::LabOptions { capture: false, own_netns: false, io_timeout: Duration::from_secs(5), ..Default::default() };
    let r = session.run_row(&s.workload, &pair, &place, &opts);
    session.bye();
    r
}

/// A handshake by hand, returning the stream, the nonces and what the server answered.
fn hello(addr: SocketAddr, nc: [u8; 32]) -> (TcpStream, [u8; 32]) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO)).unwrap();
    let h = Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&nc) };
    frame::write_frame(&mut s, &msg::to_body(&h)).unwrap();
    let f = frame::read_frame(&mut s, frame::PREAUTH_MAX).unwrap();
    let Challenge::Challenge { nonce, .. } = msg::from_body(&f).unwrap() else { panic!("refused") };
    (s, auth::unhex(&nonce).unwrap())
}

#[test]
fn a_replayed_authentication_is_refused() {
    let srv = start(Limits::default());
    let key = Key::from_bytes(KEY);
    let nc = [3u8; 32];
    // A genuine session, recorded: its Hello (nc) and its Auth (bound to ns1).
    let (mut s1, ns1) = hello(srv.addr, nc);
    let recorded = msg::to_body(&Auth::Auth { proof: auth::hex(&auth::client_proof(&key, &nc, &ns1)) });
    frame::write_frame(&mut s1, &recorded).unwrap();
    let f = frame::read_frame(&mut s1, 1 << 20).unwrap();
    let mut chan = Channel::new(&key, Role::Client, &nc, &ns1);
    assert!(matches!(msg::from_body::<ToClient>(chan.open(&f).unwrap()), Ok(ToClient::Welcome { .. })));
    // A recorded message replayed within the session fails its MAC (its counter is spent).
    let ping = chan.seal(&msg::to_body(&ToServer::Ping { t1_ns: 1 }));
    frame::write_frame(&mut s1, &ping).unwrap();
    let pong = frame::read_frame(&mut s1, 1 << 20).unwrap();
    assert!(matches!(msg::from_body::<ToClient>(chan.open(&pong).unwrap()), Ok(ToClient::Pong { .. })));
    frame::write_frame(&mut s1, &ping).unwrap();
    let f = frame::read_frame(&mut s1, 1 << 20).unwrap();
    let Ok(ToClient::Refused { reason }) = msg::from_body::<ToClient>(chan.open(&f).unwrap()) else { panic!() };
    assert!(reason.contains("message authentication failed"), "{reason}");
    drop(s1);
    // The attacker replays the recorded Hello and Auth on a new connection: a fresh server
    // nonce makes the old proof worthless.
    std::thread::sleep(Duration::from_millis(100));
    let (mut s2, ns2) = hello(srv.addr, nc);
    assert_ne!(ns1, ns2);
    frame::write_frame(&mut s2, &recorded).unwrap();
    let f = frame::read_frame(&mut s2, frame::PREAUTH_MAX).unwrap();
    let Challenge::Refused { reason } = msg::from_body(&f).unwrap() else { panic!("accepted a replay") };
    assert!(reason.starts_with("authentication failed"), "{reason}");
    // And the connection is closed.
    assert!(matches!(frame::read_frame(&mut s2, 16), Err(frame::FrameError::Closed)));
}

#[test]
fn a_peer_trickling_bytes_is_closed_at_the_handshake_limit() {
    let srv = start(Limits { handshake_ms: 500, ..Limits::default() });
    let mut s = TcpStream::connect(srv.addr).unwrap();
    let t0 = Instant::now();
    let hello = frame::encode(&msg::to_body(&Opening::Hello {
        magic: MAGIC.into(),
        version: VERSION,
        nonce: auth::hex(&[1; 32]),
    }));
    // One byte every 100 ms: each read is quick, the whole frame is not.
    for b in hello {
        if s.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if t0.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
fn a_wrong_key_is_refused_by_both_ends() {
    let srv = start(Limits::default());
    let e = Session::connect(srv.addr, &Key::from_bytes([1; 32]), IO).err().unwrap().to_string();
    // The client checks the server's proof first: a server without the key is not trusted.
    assert!(e.starts_with("authentication failed:"), "{e}");
}

#[test]
fn junk_and_malformed_connections_do_not_stop_a_real_client() {
    let srv = start(Limits { max_conn_per_minute: 5000, ..Limits::default() });
    let t0 = Instant::now();
    // 1,000 junk connections: noise, a huge length, silence, an HTTP request.
    let mut open = Vec::new();
    for i in 0..1000u32 {
        let Ok(mut s) = TcpStream::connect(srv.addr) else { continue };
        let _ = match i % 4 {
            0 => s.write_all(&i.to_be_bytes().repeat(8)),
            1 => s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]),
            2 => Ok(()),
            _ => s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        };
        open.push(s);
        if open.len() >= 200 {
            open.clear();
        }
    }
    drop(open);
    // 100 malformed or truncated messages, each on its own connection.
    let hello = msg::to_body(&Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&[1; 32]) });
    for i in 0..100usize {
        let Ok(mut s) = TcpStream::connect(srv.addr) else { continue };
        let f = frame::encode(&hello);
        let bytes: Vec<u8> = match i % 5 {
            0 => f[..i % f.len()].to_vec(),
            1 => frame::encode(&hello[..hello.len() / 2]),
            2 => frame::encode(br#"{"hello":{"magic":"tcpstall-remote","version":99,"nonce":"00"}}"#),
            3 => frame::encode(br#"{"data":{"token":"zz"}}"#),
            _ => {
                let mut v = f.clone();
                v.extend(frame::encode(b"{\"auth\":{\"proof\":\"00\"}}"));
                v
            }
        };
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    // A real client gets its run, its stall as on loopback here (seed 001's default: Nagle
    // behind the delayed ACK, about 40 ms).
    let r = row(srv.addr, "multi-write", &["requests=10", "warmup=2"], "default").unwrap();
    assert_eq!(r.rounds, 10);
    assert!(r.latency_us.p50 > 30_000.0, "p50 {} us", r.latency_us.p50);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}

#[test]
fn a_client_that_vanishes_mid_run_does_not_wedge_the_server() {
    let srv = start(Limits::default());
    let key = Key::from_bytes(KEY);
    let nc = [9u8; 32];
    let (mut s, ns) = hello(srv.addr, nc);
    frame::write_frame(&mut s, &msg::to_body(&Auth::Auth { proof: auth::hex(&auth::client_proof(&key, &nc, &ns)) }))
        .unwrap();
    let mut chan = Channel::new(&key, Role::Client, &nc, &ns);
    let _welcome = chan.open(&frame::read_frame(&mut s, 1 << 20).unwrap()).unwrap().to_vec();
    // A long run (100 rounds of ~88 ms): set up, started, then abandoned.
    let run = RunRequest {
        run: 1,
        label: "default".into(),
        workload: scenario("chunked", &[]).workload,
        client: scenario::SideOpts::none(),
        server: scenario::SideOpts::none(),
        data_port: 0,
    };
    frame::write_frame(&mut s, &chan.seal(&msg::to_body(&ToServer::Run(run)))).unwrap();
    let f = frame::read_frame(&mut s, 1 << 20).unwrap();
    let Ok(ToClient::RunReady { token, .. }) = msg::from_body::<ToClient>(chan.open(&f).unwrap()) else { panic!() };
    let mut d = TcpStream::connect(srv.addr).unwrap();
    frame::write_frame(&mut d, &msg::to_body(&Opening::Data { token })).unwrap();
    let mut k = [0u8; 1];
    d.read_exact(&mut k).unwrap();
    d.write_all(&[0u8; 10]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(d);
    drop(s);
    // The one session slot is free again within a few seconds.
    let t0 = Instant::now();
    let r = loop {
        match row(srv.addr, "rr", &["rounds=20"], "default") {
            Ok(r) => break r,
            Err(e) if e.to_string().contains("busy") && t0.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(r.rounds, 20);
}

#[test]
fn busy_and_over_limit_runs_are_refused_with_a_reason() {
    let srv = start(Limits { max_run_bytes: 100_000, max_run_secs: 1, ..Limits::default() });
    let first = Session::connect(srv.addr, &Key::from_bytes(KEY), IO).unwrap();
    assert_eq!(first.limits.max_run_bytes, 100_000, "the limits reach the client");
    let e = Session::connect(srv.addr, &Key::from_bytes(KEY), IO).err().unwrap().to_string();
    assert!(e.starts_with("the server refused: busy"), "{e}");
    first.bye();
    std::thread::sleep(Duration::from_millis(300));
    // Seed 000 moves 2 x 1000 bytes x 100+ rounds: over 100,000.
    let e = row(srv.addr, "chunked", &[], "default").unwrap_err().to_string();
    assert!(e.contains("over limit: run 'default' moves"), "{e}");
    std::thread::sleep(Duration::from_millis(300));
    // Under the byte limit but longer than a second: cut, and said so.
    let e = row(srv.addr, "chunked", &["round=40", "send=1000"], "default").unwrap_err().to_string();
    assert!(e.contains("over limit: the run was cut after 1 s"), "{e}");
}

#[test]
fn an_idle_session_is_closed_with_its_reason() {
    let srv = start(Limits { idle_secs: 1, ..Limits::default() });
    let key = Key::from_bytes(KEY);
    let nc = [4u8; 32];
    let (mut s, ns) = hello(srv.addr, nc);
    frame::write_frame(&mut s, &msg::to_body(&Auth::Auth { proof: auth::hex(&auth::client_proof(&key, &nc, &ns)) }))
        .unwrap();
    let mut chan = Channel::new(&key, Role::Client, &nc, &ns);
    let _welcome = chan.open(&frame::read_frame(&mut s, 1 << 20).unwrap()).unwrap().to_vec();
    // Say nothing: within a second and a bit the server ends the session, and says why.
    let t0 = Instant::now();
    let f = frame::read_frame(&mut s, 1 << 20).unwrap();
    let Ok(ToClient::Refused { reason }) = msg::from_body::<ToClient>(chan.open(&f).unwrap()) else { panic!() };
    assert!(reason.starts_with("idle for 1 s"), "{reason}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
fn connections_over_the_per_source_rate_are_closed_at_accept() {
    let srv = start(Limits { max_conn_per_minute: 3, ..Limits::default() });
    for _ in 0..3 {
        let (_s, _ns) = hello(srv.addr, [5; 32]);
    }
    // The fourth from this address within the minute: closed without a word.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(IO)).unwrap();
    let h = Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&[5; 32]) };
    let _ = frame::write_frame(&mut s, &msg::to_body(&h));
    assert!(matches!(frame::read_frame(&mut s, frame::PREAUTH_MAX), Err(frame::FrameError::Closed)));
}
