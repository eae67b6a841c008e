//! Emulated links: namespaces, TUN devices and a userspace forwarder
pub mod model;
