//! End-to-end tests of the `tcpstall` binary: one test binary, one module per area.

mod explain;
mod explain_fuzz;
mod lab;
mod link;
mod simulate;
mod support;
mod validation;
