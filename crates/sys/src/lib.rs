//! The only crate of tcpstall with `unsafe` code. Each block carries a `// SAFETY:` comment.
//! Everything else reaches the OS through safe crates (socket2, nix) or through here.
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
#![allow(unsafe_code)]

pub mod bpf;
pub mod clock;
pub mod host;
pub mod packet;
pub mod peersock;
pub mod process;
pub mod ring;
pub mod sched;
pub mod sockopt;
pub mod tcpinfo;
pub mod tun;
