//! End-to-end tests of `tcpstall simulate`.
