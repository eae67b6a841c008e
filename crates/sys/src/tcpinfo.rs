//! getsockopt(TCP_INFO) (owned by the lab work).
