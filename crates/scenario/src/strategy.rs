//! Socket strategies: what an endpoint does to its socket around sends and receives, and the
//! exact sequence of socket operations each strategy turns a message into. Lab and model both
//! execute these plans, so the two can never disagree about what a strategy means.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One socket strategy. A side applies a set of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Opt {
    /// TCP_NODELAY set after connect/accept: Nagle off (tcp(7); Linux `tcp_nagle_check`).
    Nodelay,
    /// TCP_QUICKACK set once after connect/accept (not sticky: `__tcp_sock_set_quickack`).
    QuickackOnce,
    /// TCP_QUICKACK set again after every recv.
    QuickackEach,
    /// TCP_CORK set before each message and cleared after it (tcp(7)).
    Cork,
    /// MSG_MORE on every write of a message but the last (send(2); `tcp_sendmsg_locked`).
    MsgMore,
    /// One gathered sendmsg per message, one iovec per write (writev(2)).
    Writev,
    /// The writes copied into one buffer and sent with one send.
    Buffer,
    /// Seed 001's sequence: TCP_NODELAY set after connect; around each message NODELAY is
    /// cleared and CORK set, then CORK cleared and NODELAY set again.
    NodelayThenCork,
    /// The reader spins on non-blocking reads (recv with MSG_DONTWAIT, recv(2)) instead of
    /// sleeping in a blocking one, and asks the device to be polled from the read
    /// (SO_BUSY_POLL, socket(7); `sk_busy_loop`) where permitted. Nothing changes on the wire:
    /// it saves the reader's wake-up, at the cost of a CPU kept busy while it waits.
    BusyPoll,
}

impl Opt {
    pub const ALL: [Opt; 9] = [
        Opt::Nodelay,
        Opt::QuickackOnce,
        Opt::QuickackEach,
        Opt::Cork,
        Opt::MsgMore,
        Opt::Writev,
        Opt::Buffer,
        Opt::NodelayThenCork,
        Opt::BusyPoll,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Opt::Nodelay => "nodelay",
            Opt::QuickackOnce => "quickack-once",
            Opt::QuickackEach => "quickack-each",
            Opt::Cork => "cork",
            Opt::MsgMore => "msg-more",
            Opt::Writev => "writev",
            Opt::Buffer => "buffer",
            Opt::NodelayThenCork => "nodelay-then-cork",
            Opt::BusyPoll => "busy-poll",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Opt::Nodelay => "TCP_NODELAY after connect",
            Opt::QuickackOnce => "TCP_QUICKACK once after connect",
            Opt::QuickackEach => "TCP_QUICKACK after every recv",
            Opt::Cork => "TCP_CORK around each message",
            Opt::MsgMore => "MSG_MORE on all but the last write of a message",
            Opt::Writev => "one writev/sendmsg per message",
            Opt::Buffer => "copy a message into one buffer, one send",
            Opt::NodelayThenCork => "NODELAY, then per message NODELAY off + CORK on, CORK off + NODELAY on",
            Opt::BusyPoll => "reads spin on non-blocking recv (MSG_DONTWAIT), SO_BUSY_POLL 50 us where permitted",
        }
    }
}

impl fmt::Display for Opt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a strategy or a list of them was refused: one line for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    #[error("'{0}' is not a strategy: it means no strategy and stands alone")]
    NoneAsStrategy(String),
    #[error("unknown strategy '{0}' (expected one of: {names}; or none alone for no strategy)", names = strategy_names())]
    Unknown(String),
    #[error("the strategy list is empty (use none for no strategy)")]
    EmptyList,
    #[error("'{list}': {none} means no strategy, so it cannot be listed with strategies")]
    NoneInList { list: String, none: String },
    #[error("'{0}' has an empty item (strategies are separated by single commas)")]
    EmptyItem(String),
    #[error("writev and buffer both decide how a message is sent: pick one")]
    WritevAndBuffer,
    #[error("msg-more applies to separate writes; it cannot go with writev or buffer")]
    MsgMoreWithOneWrite,
    #[error("nodelay-then-cork already corks each message; drop cork")]
    CorkTwice,
    #[error("quickack-each already sets TCP_QUICKACK after connect; drop quickack-once")]
    QuickackTwice,
}

/// Every strategy's name, for an error message.
fn strategy_names() -> String {
    let names: Vec<_> = Opt::ALL.iter().map(|o| o.as_str()).collect();
    names.join(", ")
}

impl FromStr for Opt {
    type Err = StrategyError;
    fn from_str(s: &str) -> Result<Self, StrategyError> {
        if NONE.contains(&s) {
            return Err(StrategyError::NoneAsStrategy(s.into()));
        }
        Opt::ALL.into_iter().find(|o| o.as_str() == s).ok_or_else(|| StrategyError::Unknown(s.into()))
    }
}

/// The words for "no strategy" in a list: `none`, and `default` (the kernel's defaults).
const NONE: [&str; 2] = ["none", "default"];

/// The strategies one side applies: a set, kept sorted so equal sets compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<Opt>", into = "Vec<Opt>")]
pub struct SideOpts(Vec<Opt>);

impl SideOpts {
    pub fn new(mut opts: Vec<Opt>) -> Result<Self, StrategyError> {
        opts.sort();
        opts.dedup();
        let has = |o| opts.contains(&o);
        if has(Opt::Writev) && has(Opt::Buffer) {
            return Err(StrategyError::WritevAndBuffer);
        }
        if has(Opt::MsgMore) && (has(Opt::Writev) || has(Opt::Buffer)) {
            return Err(StrategyError::MsgMoreWithOneWrite);
        }
        if has(Opt::Cork) && has(Opt::NodelayThenCork) {
            return Err(StrategyError::CorkTwice);
        }
        if has(Opt::QuickackOnce) && has(Opt::QuickackEach) {
            return Err(StrategyError::QuickackTwice);
        }
        Ok(SideOpts(opts))
    }
    pub fn none() -> Self {
        SideOpts(Vec::new())
    }
    pub fn has(&self, o: Opt) -> bool {
        self.0.contains(&o)
    }
    pub fn opts(&self) -> &[Opt] {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Nagle is off for the sends of this side (TCP_NODELAY set and not overridden by a cork
    /// around the message; TCP_CORK overrides TCP_NODELAY, tcp(7)).
    pub fn nodelay_at_connect(&self) -> bool {
        self.has(Opt::Nodelay) || self.has(Opt::NodelayThenCork)
    }

    /// Reads spin on non-blocking recv instead of sleeping (busy-poll): a host-side choice the
    /// wire does not show, so the model runs it as the default.
    pub fn busy_poll(&self) -> bool {
        self.has(Opt::BusyPoll)
    }

    /// Socket operations right after connect()/accept().
    pub fn setup_ops(&self) -> Vec<SockOp> {
        let mut ops = Vec::new();
        if self.nodelay_at_connect() {
            ops.push(SockOp::Nodelay(true));
        }
        if self.has(Opt::QuickackOnce) || self.has(Opt::QuickackEach) {
            ops.push(SockOp::Quickack);
        }
        ops
    }

    /// Socket operations after every recv call.
    pub fn after_recv_ops(&self) -> &'static [SockOp] {
        if self.has(Opt::QuickackEach) {
            &[SockOp::Quickack]
        } else {
            &[]
        }
    }

    /// How one application message made of `writes` (byte counts, in order) is handed to TCP.
    pub fn plan_message(&self, writes: &[u32]) -> MessagePlan {
        let mut pre = Vec::new();
        let mut post = Vec::new();
        if self.has(Opt::NodelayThenCork) {
            pre.extend([SockOp::Nodelay(false), SockOp::Cork(true)]);
            post.extend([SockOp::Cork(false), SockOp::Nodelay(true)]);
        } else if self.has(Opt::Cork) {
            pre.push(SockOp::Cork(true));
            post.push(SockOp::Cork(false));
        }
        let calls = if self.has(Opt::Writev) {
            vec![Call::Gather(writes.to_vec())]
        } else if self.has(Opt::Buffer) {
            vec![Call::Send { len: writes.iter().sum(), more: false }]
        } else {
            let last = writes.len().saturating_sub(1);
            writes
                .iter()
                .enumerate()
                .map(|(i, &len)| Call::Send { len, more: self.has(Opt::MsgMore) && i < last })
                .collect()
        };
        MessagePlan { pre, calls, post }
    }

    /// Parse a list of strategies separated by `,` or `+`; `none` (or `default`) alone for no
    /// strategy. An empty list, an empty item, and `none` among strategies are errors.
    pub fn parse_list(s: &str) -> Result<Self, StrategyError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(StrategyError::EmptyList);
        }
        if NONE.contains(&s) {
            return Ok(SideOpts::none());
        }
        let items: Vec<&str> = s.split([',', '+']).map(str::trim).collect();
        if let Some(none) = items.iter().find(|p| NONE.contains(p)) {
            return Err(StrategyError::NoneInList { list: s.into(), none: (*none).into() });
        }
        if items.iter().any(|p| p.is_empty()) {
            return Err(StrategyError::EmptyItem(s.into()));
        }
        let opts = items.into_iter().map(str::parse::<Opt>).collect::<Result<Vec<_>, _>>()?;
        SideOpts::new(opts)
    }
}

impl TryFrom<Vec<Opt>> for SideOpts {
    type Error = StrategyError;
    fn try_from(v: Vec<Opt>) -> Result<Self, StrategyError> {
        SideOpts::new(v)
    }
}

impl From<SideOpts> for Vec<Opt> {
    fn from(s: SideOpts) -> Vec<Opt> {
        s.0
    }
}

impl fmt::Display for SideOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<_> = self.0.iter().map(|o| o.as_str()).collect();
        f.write_str(&names.join("+"))
    }
}

/// A socket option change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockOp {
    Nodelay(bool),
    Cork(bool),
    /// setsockopt(TCP_QUICKACK, 1).
    Quickack,
}

/// One call that hands bytes to TCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// send(2) of `len` bytes, with MSG_MORE when `more`.
    Send { len: u32, more: bool },
    /// One sendmsg(2) gathering these buffers.
    Gather(Vec<u32>),
}

impl Call {
    pub fn len(&self) -> u32 {
        match self {
            Call::Send { len, .. } => *len,
            Call::Gather(v) => v.iter().sum(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The socket operations and calls that send one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePlan {
    pub pre: Vec<SockOp>,
    pub calls: Vec<Call>,
    pub post: Vec<SockOp>,
}

/// A labelled pair of strategies: one row of a strategy matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyPair {
    pub label: String,
    #[serde(default)]
    pub client: SideOpts,
    #[serde(default)]
    pub server: SideOpts,
}

impl StrategyPair {
    pub fn new(client: SideOpts, server: SideOpts) -> Self {
        let label = match (client.is_empty(), server.is_empty()) {
            (true, true) => "default".to_string(),
            (false, true) => format!("client:{client}"),
            (true, false) => format!("server:{server}"),
            (false, false) => format!("client:{client} server:{server}"),
        };
        StrategyPair { label, client, server }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_more_marks_all_but_the_last_write() {
        let s = SideOpts::parse_list("msg-more").unwrap();
        let p = s.plan_message(&[275, 24, 292]);
        assert_eq!(
            p.calls,
            vec![
                Call::Send { len: 275, more: true },
                Call::Send { len: 24, more: true },
                Call::Send { len: 292, more: false }
            ]
        );
        assert!(p.pre.is_empty() && p.post.is_empty());
    }

    #[test]
    fn nodelay_then_cork_follows_seed_001_sequence() {
        let s = SideOpts::parse_list("nodelay-then-cork").unwrap();
        assert_eq!(s.setup_ops(), vec![SockOp::Nodelay(true)]);
        let p = s.plan_message(&[1, 2]);
        assert_eq!(p.pre, vec![SockOp::Nodelay(false), SockOp::Cork(true)]);
        assert_eq!(p.post, vec![SockOp::Cork(false), SockOp::Nodelay(true)]);
    }

    #[test]
    fn writev_and_buffer_make_one_call() {
        let w = SideOpts::parse_list("writev").unwrap().plan_message(&[10, 10]);
        assert_eq!(w.calls, vec![Call::Gather(vec![10, 10])]);
        let b = SideOpts::parse_list("buffer").unwrap().plan_message(&[10, 10]);
        assert_eq!(b.calls, vec![Call::Send { len: 20, more: false }]);
    }

    #[test]
    fn conflicting_and_unknown_strategies_are_rejected() {
        assert!(SideOpts::parse_list("writev,buffer").is_err());
        assert!(SideOpts::parse_list("msg-more,writev").is_err());
        let e = SideOpts::parse_list("nagle").unwrap_err().to_string();
        assert!(e.contains("unknown strategy 'nagle'"), "{e}");
        assert_eq!(SideOpts::parse_list("none").unwrap(), SideOpts::none());
    }

    /// QA 13: `none,nodelay` said "unknown strategy 'none' (expected ..., or none)", and an
    /// empty list silently meant none.
    #[test]
    fn none_stands_alone_and_a_list_is_never_empty() {
        assert_eq!(SideOpts::parse_list(" default ").unwrap(), SideOpts::none());
        assert_eq!(
            SideOpts::parse_list("none,nodelay").unwrap_err().to_string(),
            "'none,nodelay': none means no strategy, so it cannot be listed with strategies"
        );
        assert!(SideOpts::parse_list("nodelay+default").unwrap_err().to_string().contains("default means no strategy"));
        assert_eq!(
            SideOpts::parse_list("").unwrap_err().to_string(),
            "the strategy list is empty (use none for no strategy)"
        );
        assert_eq!(
            SideOpts::parse_list("  ").unwrap_err().to_string(),
            "the strategy list is empty (use none for no strategy)"
        );
        assert!(SideOpts::parse_list("nodelay,,cork").unwrap_err().to_string().contains("has an empty item"));
        assert!(SideOpts::parse_list("nodelay,").unwrap_err().to_string().contains("has an empty item"));
        let e = SideOpts::parse_list("nodelay,nagle").unwrap_err().to_string();
        assert!(e.starts_with("unknown strategy 'nagle' (expected one of: nodelay, "), "{e}");
        assert!(e.ends_with("; or none alone for no strategy)"), "{e}");
        assert!("none".parse::<Opt>().unwrap_err().to_string().contains("stands alone"));
        assert_eq!(
            SideOpts::parse_list("cork + nodelay").unwrap(),
            SideOpts::new(vec![Opt::Nodelay, Opt::Cork]).unwrap()
        );
    }

    #[test]
    fn quickack_each_rearms_after_recv() {
        let s = SideOpts::parse_list("quickack-each").unwrap();
        assert_eq!(s.after_recv_ops(), &[SockOp::Quickack]);
        assert_eq!(s.setup_ops(), vec![SockOp::Quickack]);
        assert!(SideOpts::parse_list("quickack-once").unwrap().after_recv_ops().is_empty());
    }
}
