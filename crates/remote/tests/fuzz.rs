//! A fuzz-style test of the control protocol's decoder and the server's state machine that runs
//! on stable Rust for a bounded time (cargo-fuzz needs nightly; fuzz/fuzz_targets/remote_machine.rs
//! is the same target for it): random bytes and mutations of valid frames from a seeded RNG,
//! through `frame::split` and `ServerMachine::on_frame`. It passes when nothing panics and every
//! refusal leaves the machine closed. 2 s by default, 10 s with CI set, TCPSTALL_FUZZ_SECS to
//! choose; the seed is printed so a failure can be replayed (TCPSTALL_FUZZ_SEED).

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use tcpstall_remote::auth::{self, Channel, Key, Role};
use tcpstall_remote::frame;
use tcpstall_remote::machine::{Action, ServerMachine, State, Unlimited};
use tcpstall_remote::msg::{self, Auth, Challenge, Limits, Opening, RunRequest, ToServer, MAGIC, VERSION};

fn budget() -> Duration {
    if let Some(s) = std::env::var("TCPSTALL_FUZZ_SECS").ok().and_then(|s| s.parse().ok()) {
        return Duration::from_secs_f64(s);
    }
    Duration::from_secs(if std::env::var_os("CI").is_some() { 10 } else { 2 })
}

const KEY: [u8; 32] = [0x42; 32];

fn machine(rng: &mut SmallRng) -> ServerMachine {
    let mut n = [0u8; 32];
    rng.fill_bytes(&mut n);
    ServerMachine::new(Key::from_bytes(KEY), Limits::default(), "fuzz".into(), n)
}

/// Valid bodies the mutator starts from.
fn seeds(nc: &[u8; 32], ns: &[u8; 32], chan: &mut Channel) -> Vec<Vec<u8>> {
    let w = scenario::Scenario::builtin("rr").unwrap().workload;
    let run = RunRequest {
        run: 1,
        label: "default".into(),
        workload: w,
        client: scenario::SideOpts::none(),
        server: scenario::SideOpts::none(),
        data_port: 0,
    };
    vec![
        msg::to_body(&Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(nc) }),
        msg::to_body(&Opening::Data { token: auth::hex(&[7; 32]) }),
        msg::to_body(&Auth::Auth { proof: auth::hex(&auth::client_proof(&Key::from_bytes(KEY), nc, ns)) }),
        chan.seal(&msg::to_body(&ToServer::Ping { t1_ns: 1 })),
        chan.seal(&msg::to_body(&ToServer::Run(run))),
        chan.seal(&msg::to_body(&ToServer::RoundsDone { run: 1 })),
        chan.seal(&msg::to_body(&ToServer::Bye)),
    ]
}

fn mutate(rng: &mut SmallRng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.gen_range(1..5) {
        match rng.gen_range(0..6) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !b.is_empty() => {
                let n = rng.gen_range(0..b.len());
                b.truncate(n);
            }
            2 => {
                let i = rng.gen_range(0..=b.len());
                b.insert(i, rng.gen());
            }
            3 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b.remove(i);
            }
            4 => b.extend_from_slice(b"{\"x\":[[[[[[[[[[1e999999]]]]]]]]]]}"),
            _ => {
                let i = rng.gen_range(0..=b.len());
                let n = rng.gen_range(0..8);
                b.splice(i..i, std::iter::repeat_n(b'"', n));
            }
        }
    }
    b
}

/// Feed `bodies` to a machine as one byte stream (framed), as the server would read it.
fn drive(rng: &mut SmallRng, m: &mut ServerMachine, stream: &[u8]) {
    let (frames, _err) = frame::split(stream, 1 << 20);
    for f in frames {
        if f.len() > m.max_frame() {
            // The server would have refused the header: the connection ends.
            return;
        }
        let before_closed = m.state() == &State::Closed;
        match m.on_frame(&f, rng.gen(), &mut Unlimited) {
            Ok(actions) => {
                assert!(!before_closed, "a closed machine accepted a frame");
                for a in actions {
                    if let Action::Start(r) = a {
                        // A run that starts was checked: the machine answers it and finishes it.
                        let _ = m.run_ready(r.run, &[1; 32]);
                        let _ = m.run_finished(Err("fuzz"));
                    }
                }
            }
            Err(_) => {
                assert_eq!(m.state(), &State::Closed, "a refusal must end the session");
                return;
            }
        }
    }
}

#[test]
fn the_decoder_and_state_machine_survive_random_and_mutated_frames() {
    let seed = std::env::var("TCPSTALL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (TCPSTALL_FUZZ_SEED={seed} replays it)");
    let mut rng = SmallRng::seed_from_u64(seed);
    let end = Instant::now() + budget();
    let mut cases = 0u64;
    let mut authenticated = 0u64;
    while Instant::now() < end {
        cases += 1;
        let mut m = machine(&mut rng);
        match rng.gen_range(0..4) {
            // Pure noise, possibly with a plausible length prefix.
            0 => {
                let n = rng.gen_range(0..600);
                let mut b = vec![0u8; n];
                rng.fill_bytes(&mut b);
                if rng.gen_bool(0.5) && n >= 4 {
                    b[..4].copy_from_slice(&((n - 4) as u32).to_be_bytes());
                }
                drive(&mut rng, &mut m, &b);
            }
            // Mutated opening frames.
            1 => {
                let nc: [u8; 32] = rng.gen();
                let mut chan = Channel::new(&Key::from_bytes(KEY), Role::Client, &nc, &[0; 32]);
                let s = seeds(&nc, &[0; 32], &mut chan);
                let pick = s[rng.gen_range(0..s.len())].clone();
                let body = mutate(&mut rng, pick);
                drive(&mut rng, &mut m, &frame::encode(&body));
            }
            // A real handshake, then mutated (or valid) session messages.
            _ => {
                let nc: [u8; 32] = rng.gen();
                let hello =
                    msg::to_body(&Opening::Hello { magic: MAGIC.into(), version: VERSION, nonce: auth::hex(&nc) });
                let a = m.on_frame(&hello, 0, &mut Unlimited).expect("hello");
                let Some(Action::Send(c)) = a.first() else { panic!("no challenge") };
                let Ok(Challenge::Challenge { nonce, .. }) = msg::from_body::<Challenge>(c) else {
                    panic!("challenge")
                };
                let ns = auth::unhex::<32>(&nonce).unwrap();
                let mut chan = Channel::new(&Key::from_bytes(KEY), Role::Client, &nc, &ns);
                let s = seeds(&nc, &ns, &mut Channel::new(&Key::from_bytes(KEY), Role::Client, &nc, &ns));
                m.on_frame(&s[2], 0, &mut Unlimited).expect("auth");
                assert_eq!(m.state(), &State::Ready);
                authenticated += 1;
                let mut stream = Vec::new();
                for _ in 0..rng.gen_range(1..6) {
                    let body = match rng.gen_range(0..4) {
                        0 => chan.seal(&msg::to_body(&ToServer::Ping { t1_ns: rng.gen() })),
                        1 => mutate(&mut rng, chan.seal(&msg::to_body(&ToServer::Ping { t1_ns: 5 }))),
                        2 => {
                            let pick = s[rng.gen_range(0..s.len())].clone();
                            chan.seal(&mutate(&mut rng, pick))
                        }
                        _ => {
                            let pick = s[rng.gen_range(3..s.len())].clone();
                            mutate(&mut rng, pick)
                        }
                    };
                    stream.extend(frame::encode(&body));
                }
                if rng.gen_bool(0.2) {
                    let n = rng.gen_range(0..stream.len());
                    stream.truncate(n);
                }
                drive(&mut rng, &mut m, &stream);
            }
        }
    }
    println!("{cases} cases, {authenticated} past authentication");
    assert!(cases > 100, "only {cases} cases in the time budget");
}
