//! End-to-end tests of `tcpstall explain`.
