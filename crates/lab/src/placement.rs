//! Where the client and the server of a lab run live. The lab itself only knows network
//! namespace files to enter (per thread, with setns) and the address the server listens on;
//! the link emulator (`tcpstall-link`) creates them.

use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// A network namespace file (e.g. /proc/PID/ns/net or /run/netns/NAME) the client thread
    /// enters before creating its socket; None = stay where it is.
    pub client_netns: Option<PathBuf>,
    /// Likewise for the server thread.
    pub server_netns: Option<PathBuf>,
    /// Address the server binds and the client connects to.
    pub server_ip: IpAddr,
    /// Short description for reports ("loopback", "rtt=20ms,rate=100mbit,mtu=1500").
    pub link: String,
}

impl Placement {
    /// Both ends on loopback in the caller's namespace.
    pub fn loopback() -> Self {
        Placement {
            client_netns: None,
            server_netns: None,
            server_ip: IpAddr::from([127, 0, 0, 1]),
            link: "loopback".into(),
        }
    }

    /// The client lives in a namespace of its own, apart from the server's: each side's TcpExt
    /// counters are its own.
    pub(crate) fn client_apart(&self) -> bool {
        self.client_netns.is_some() && self.client_netns != self.server_netns
    }
}
