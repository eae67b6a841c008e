//! End-to-end tests of `tcpstall link`.
