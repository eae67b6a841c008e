//! End-to-end tests of `tcpstall lab`.
