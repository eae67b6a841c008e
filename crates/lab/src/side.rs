//! One side of a row, run by the same code whether the other side is a thread of this process
//! (`pair.rs`) or another host (`tcpstall serve` and `lab --remote`, crates/remote): its rounds
//! on a connected socket, what it measured, and the row made from both sides' records (`row`).
//!
//! `two_hosts` holds what a row whose sides run on two hosts needs besides (the far side's
//! record, each host's own packets); only round programs (request/response) run that way.

mod capture;
pub(crate) mod row;
mod two_hosts;

pub use capture::{CaptureError, FrameRecord, HostCapture};
pub use two_hosts::{
    assemble, client_side, finish_capture, linktype_of, packed, program_bytes, round_program, serve_side,
    ClientPackets, ClientSide, ProgramError, SideRecord,
};
