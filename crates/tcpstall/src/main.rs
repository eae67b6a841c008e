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
    sys::process::limit_malloc_arenas();
    let args = flags::Cli::parse();
    match cli::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("tcpstall: {}", one_line(&e));
            std::process::exit(2);
        }
    }
}

/// One line, no backtrace: the chain of contexts and sources joined by ": ", each cause left out
/// when the message before it already ends with it (an error type that writes its source into
/// its own message, as `cannot read key file F: {source}`, is not printed twice).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_source_written_into_its_error_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        #[derive(Debug)]
        struct Read {
            source: std::io::Error,
        }
        impl std::fmt::Display for Read {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read key file k: {}", self.source)
            }
        }
        impl std::error::Error for Read {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let e = anyhow::Error::from(Read { source: io }).context("serve");
        assert_eq!(one_line(&e), "serve: cannot read key file k: No such file or directory");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }
}
