//! Ground truth for tcpstall's classifier (issue 32): real programs on real sockets between
//! network namespaces, labelled from what they wrote (their own logs or strace), what left
//! their hosts (a capture at each sender), what the receiver acknowledged and what the kernel
//! resent (tcp:tcp_retransmit_skb with tcp:tcp_cong_state_set); then the classifier's
//! scorecard against those labels.
//!
//! - [`shape`]: the workloads and the corpus's cases; [`peer`]: the workload program;
//!   [`programs`]: third-party programs; [`log`]: the programs' write logs;
//! - [`net`]: the paths (veth through a router namespace; the emulated link), loss rules, cleanup;
//!   [`capture`]: tcpdump; [`kernel`]: the eBPF records; [`views`]: derived captures;
//! - [`label`]: the labeler (pure); [`corpus`]: the generator;
//! - [`verdicts`]: the classifier through its public API; [`score`]: the scorecard.

#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod baseline;
pub mod capture;
pub mod corpus;
pub mod kernel;
pub mod label;
pub mod log;
pub mod net;
pub mod packets;
pub mod peer;
pub mod programs;
pub mod score;
pub mod shape;
pub mod strace;
pub mod verdicts;
pub mod views;

/// The committed baseline of the small corpus (`score --write-baseline`).
pub const BASELINE: &str = "scorecard.json";
