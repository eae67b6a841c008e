//! Runs scenarios over real sockets (OS).

mod placement;
pub use placement::Placement;
