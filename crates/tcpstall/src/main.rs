//! tcpstall: the binary only orchestrates; the work is in the library crates. `flags/` turns
//! the command line into typed requests, `cli/` runs them.

// The flags' doc comments are their `--help` texts, where `HOST[:PORT]` is help, not an
// intra-doc link.
#![allow(rustdoc::broken_intra_doc_links)]
// Every dependency is used (the lint stands in for cargo-udeps; dev-dependencies are the tests').
#![cfg_attr(not(test), deny(unused_crate_dependencies))]

mod cli;
mod flags;

use clap::Parser;

fn main() {
    sys::process::default_sigpipe();
    let args = flags::Cli::parse();
    match cli::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line, no backtrace: the chain of contexts joined by ": ".
            eprintln!("tcpstall: {e:#}");
            std::process::exit(2);
        }
    }
}
