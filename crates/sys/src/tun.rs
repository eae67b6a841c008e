//! TUN device creation (owned by the link work).
