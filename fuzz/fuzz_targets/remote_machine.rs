//! cargo-fuzz target for `tcpstall serve`'s control protocol: the input is a byte stream as a
//! peer would send it, split into frames (the size checked before allocation) and fed to the
//! server's state machine. The stable-Rust version of this target runs in CI:
//! crates/remote/tests/fuzz.rs.
//!   cd fuzz && cargo +nightly fuzz run remote_machine
#![no_main]

use libfuzzer_sys::fuzz_target;
use remote::auth::Key;
use remote::frame;
use remote::machine::{Action, ServerMachine, State, Unlimited};
use remote::msg::Limits;

fuzz_target!(|data: &[u8]| {
    let mut m = ServerMachine::new(Key::from_bytes([0x42; 32]), Limits::default(), "fuzz".into(), [7; 32]);
    let (frames, _) = frame::split(data, 1 << 20);
    for f in frames {
        if f.len() > m.max_frame() {
            return;
        }
        match m.on_frame(&f, 0, &mut Unlimited) {
            Ok(actions) => {
                for a in actions {
                    if let Action::Start(r) = a {
                        let _ = m.run_ready(r.run, &[1; 32]);
                        let _ = m.run_finished(Err::<_, &str>("fuzz"));
                    }
                }
            }
            Err(_) => {
                assert_eq!(m.state(), &State::Closed);
                return;
            }
        }
    }
});
