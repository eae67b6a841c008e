//! Shapes (what a workload does on its sockets) and the corpus's cases (a shape on a path, with
//! a loss rule and a seed). Data only: the `peer` program runs a shape, `corpus` picks cases.

use serde::{Deserialize, Serialize};

/// Socket options of one side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideOpts {
    /// TCP_NODELAY from the start (Nagle off, tcp(7)).
    #[serde(default)]
    pub nodelay: bool,
    /// TCP_NODELAY set before request K (0-based): Nagle on until then.
    #[serde(default)]
    pub nodelay_after: Option<u32>,
    /// TCP_CORK set once and never released (tcp(7): the kernel sends a partial frame after
    /// 200 ms, `tcp_probe_timer`).
    #[serde(default)]
    pub cork: bool,
    /// Every write with MSG_MORE (send(2)): the last one of a message too, so its tail waits.
    #[serde(default)]
    pub msg_more: bool,
    /// TCP_QUICKACK set again after every read (`__tcp_sock_set_quickack`: not sticky).
    #[serde(default)]
    pub quickack: bool,
    /// SO_RCVBUF (bytes), set before connect/listen: a small one makes a zero window.
    #[serde(default)]
    pub rcvbuf: Option<u32>,
    /// Pause between reads of at most `read_chunk` bytes (a slow reader), ms.
    #[serde(default)]
    pub read_pause_ms: u32,
    /// Read at most this many bytes per read (0 = as much as fits the buffer).
    #[serde(default)]
    pub read_chunk: u32,
}

/// What the two sides exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum Mode {
    /// Per request: the client's writes, then the server's response writes (seed 001).
    RequestResponse,
    /// Per request: `n` client messages of the first client write size, each echoed by the
    /// server as it is read; the client reads the `n` echoes after sending all (seed 002).
    Echo { n: u32 },
    /// Per request: `bytes` from the client in one write, then a 1-byte application ACK from
    /// the server once it has read them all (seed 004).
    Bulk { bytes: u32 },
    /// The client writes every `period_ms`; the server only reads.
    Periodic { period_ms: u32 },
}

/// One workload: a mode, sizes, think times and options per side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub name: String,
    pub requests: u32,
    #[serde(flatten)]
    pub mode: Mode,
    /// The client's write sizes per request (bytes).
    pub client_writes: Vec<u32>,
    /// The server's response write sizes per request.
    pub server_writes: Vec<u32>,
    /// The client's think time before each request: uniform in [min, max] ms, seeded.
    pub think_ms: (u32, u32),
    pub client: SideOpts,
    pub server: SideOpts,
}

impl Shape {
    /// Bytes the server reads per request.
    pub fn request_bytes(&self) -> u64 {
        match self.mode {
            Mode::RequestResponse | Mode::Periodic { .. } => self.client_writes.iter().map(|&w| u64::from(w)).sum(),
            Mode::Echo { n } => u64::from(n) * u64::from(self.echo_size()),
            Mode::Bulk { bytes } => u64::from(bytes),
        }
    }
    /// Bytes the client reads per request.
    pub fn response_bytes(&self) -> u64 {
        match self.mode {
            Mode::RequestResponse => self.server_writes.iter().map(|&w| u64::from(w)).sum(),
            Mode::Echo { .. } => self.request_bytes(),
            Mode::Bulk { .. } => 1,
            Mode::Periodic { .. } => 0,
        }
    }
    /// One echo message's size.
    pub fn echo_size(&self) -> u32 {
        self.client_writes.first().copied().unwrap_or(1).max(1)
    }
}

/// A loss rule on the path (iptables in the router namespace, or the emulated link's loss).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "loss")]
pub enum Loss {
    None,
    /// Every `every`-th client-to-server data segment dropped (`-m statistic --mode nth`).
    NthData {
        every: u32,
    },
    /// Every `every`-th server-to-client data segment of exactly `len` payload bytes (the
    /// response's tail write) dropped: a tail drop.
    TailData {
        every: u32,
        len: u32,
    },
    /// Every `every`-th pure ACK from the server dropped.
    NthAck {
        every: u32,
    },
    /// The emulated link's random loss (percent, each direction, seeded).
    Random {
        percent: u32,
    },
}

/// One case of the corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub name: String,
    pub shape: Shape,
    /// Round trip of the path in ms (0 = the veth pair, else the emulated link).
    pub rtt_ms: u32,
    pub loss: Loss,
    pub seed: u64,
}

fn opts() -> SideOpts {
    SideOpts::default()
}

fn shape(name: &str, mode: Mode, requests: u32, cw: &[u32], sw: &[u32], think: (u32, u32)) -> Shape {
    Shape {
        name: name.into(),
        requests,
        mode,
        client_writes: cw.to_vec(),
        server_writes: sw.to_vec(),
        think_ms: think,
        client: opts(),
        server: opts(),
    }
}

/// The shapes of the corpus, `scale` requests per request-heavy shape.
// long: one table of every shape, each with its options; splitting it would scatter the table.
pub fn shapes(scale: u32) -> Vec<Shape> {
    use Mode::*;
    let rr = RequestResponse;
    let n = scale;
    let mut v = Vec::new();
    // Seed 001: 275, 24, 292 then a 100-byte reply; 50 ms between requests, Nagle on.
    v.push(shape("seed001-nagle", rr.clone(), n, &[275, 24, 292], &[100], (50, 50)));
    let mut s = shape("seed001-nodelay", rr.clone(), n, &[275, 24, 292], &[100], (50, 50));
    s.client.nodelay = true;
    v.push(s);
    // Think times 0-500 ms between single-write requests: nothing is held.
    v.push(shape("think-0-500", rr.clone(), n / 2, &[300], &[120], (0, 500)));
    // The server writes its response in two calls, Nagle on (http.server's shape).
    v.push(shape("response-two-writes", rr.clone(), n, &[200], &[145, 172], (20, 120)));
    let mut s = shape("response-two-writes-nodelay", rr.clone(), n, &[200], &[145, 172], (20, 120));
    s.server.nodelay = true;
    v.push(s);
    // NODELAY set midway: stalls stop after request K.
    let mut s = shape("nodelay-midway", rr.clone(), n, &[275, 24, 292], &[100], (30, 80));
    s.client.nodelay_after = Some(n / 2);
    v.push(s);
    // TCP_CORK never released: every request's tail waits for the probe timer.
    let mut s = shape("cork-forgotten", rr.clone(), n / 2, &[120, 80], &[60], (20, 100));
    s.client.cork = true;
    v.push(s);
    // MSG_MORE on every write, the last one too.
    let mut s = shape("msg-more-tail", rr.clone(), n / 2, &[90, 60], &[60], (20, 100));
    s.client.msg_more = true;
    v.push(s);
    // Server QUICKACK after each read: the client's Nagle hold ends at once.
    let mut s = shape("quickack-server", rr.clone(), n, &[275, 24, 292], &[100], (20, 80));
    s.server.quickack = true;
    v.push(s);
    // Seed 002: bursts of N 132-byte messages then N echoes.
    v.push(shape("burst3-echo", Echo { n: 3 }, n, &[132], &[], (10, 60)));
    v.push(shape("burst2-echo", Echo { n: 2 }, n, &[132], &[], (10, 60)));
    let mut s = shape("burst16-echo-nodelay", Echo { n: 16 }, n / 2, &[132], &[], (10, 60));
    s.client.nodelay = true;
    s.server.nodelay = true;
    v.push(s);
    // Seed 004: 100,000 bytes then a 1-byte application ACK.
    v.push(shape("bulk-100k-app-ack", Bulk { bytes: 100_000 }, n / 4, &[], &[], (20, 80)));
    // A slow reader: 4 KB receive buffer, reads 1 KB every 20 ms: the window closes.
    let mut s = shape("slow-reader", Bulk { bytes: 48_000 }, (n / 25).max(2), &[], &[], (10, 50));
    s.server.rcvbuf = Some(4096);
    s.server.read_pause_ms = 20;
    s.server.read_chunk = 1024;
    v.push(s);
    // Periodic senders: every 100 ms (negatives) and every 30 ms (Nagle behind a delayed ACK).
    v.push(shape("periodic-100ms", Periodic { period_ms: 100 }, n, &[64], &[], (0, 0)));
    v.push(shape("periodic-30ms-two-writes", Periodic { period_ms: 30 }, n, &[40, 40], &[], (0, 0)));
    // Many small writes per request each way (seed 000: 10 x 10 bytes).
    v.push(shape("chunked-10x10", rr, n / 2, &[10; 10], &[10; 10], (20, 80)));
    v
}

/// The cases of the corpus: `small` for the test, `full` for the scorecard.
pub fn cases(size: Size, seed: u64) -> Vec<Case> {
    let mut out = Vec::new();
    let (scale, rtts): (u32, &[u32]) = match size {
        Size::Small => (40, &[0, 20]),
        Size::Full => (200, &[0, 20, 80]),
    };
    let small_set = [
        "seed001-nagle",
        "seed001-nodelay",
        "think-0-500",
        "response-two-writes",
        "cork-forgotten",
        "burst3-echo",
        "periodic-100ms",
    ];
    for &rtt in rtts {
        for s in shapes(scale) {
            if size == Size::Small && !small_set.contains(&s.name.as_str()) {
                continue;
            }
            // The small corpus crosses the emulated link with one shape.
            if size == Size::Small && rtt > 0 && s.name != "seed001-nagle" {
                continue;
            }
            let name = format!("{}-rtt{rtt}", s.name);
            out.push(Case { name, shape: s, rtt_ms: rtt, loss: Loss::None, seed });
        }
    }
    out.extend(loss_cases(size, seed, scale));
    for (i, c) in out.iter_mut().enumerate() {
        c.seed = seed.wrapping_mul(1000).wrapping_add(i as u64);
    }
    out
}

/// The cases with loss: iptables drops on the veth path, random loss on the link.
fn loss_cases(size: Size, seed: u64, scale: u32) -> Vec<Case> {
    let mut out = Vec::new();
    let mut nodelay = shape("rr-nodelay", Mode::RequestResponse, scale, &[400], &[300], (20, 120));
    nodelay.client.nodelay = true;
    nodelay.server.nodelay = true;
    let tail = shape("rr-tail", Mode::RequestResponse, scale, &[300], &[1000, 200], (20, 120));
    // A writer every 300 ms whose reader only ACKs: a lost ACK before the pause makes the
    // sender resend what the receiver had (spurious).
    let mut pauses = shape("periodic-300ms-nodelay", Mode::Periodic { period_ms: 300 }, scale / 2, &[200], &[], (0, 0));
    pauses.client.nodelay = true;
    let mut rules = vec![
        ("drop-nth-data", nodelay.clone(), Loss::NthData { every: 4 }),
        ("drop-tail", tail, Loss::TailData { every: 3, len: 200 }),
        ("drop-acks", pauses, Loss::NthAck { every: 2 }),
    ];
    if size == Size::Full {
        let mut bulk = shape("bulk-lossy", Mode::Bulk { bytes: 60_000 }, scale / 4, &[], &[], (20, 60));
        bulk.server.nodelay = true;
        rules.push(("drop-nth-bulk", bulk, Loss::NthData { every: 17 }));
    }
    for (name, s, loss) in rules {
        out.push(Case { name: format!("{name}-rtt0"), shape: s, rtt_ms: 0, loss, seed });
    }
    if size == Size::Full {
        for rtt in [20, 80] {
            out.push(Case {
                name: format!("random-loss-rtt{rtt}"),
                shape: nodelay.clone(),
                rtt_ms: rtt,
                loss: Loss::Random { percent: 3 },
                seed,
            });
        }
    }
    out
}

/// Corpus size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Size {
    Small,
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_has_at_least_fifteen_shapes_and_three_rtts() {
        let c = cases(Size::Full, 1);
        let shapes: std::collections::BTreeSet<_> = c.iter().map(|c| c.shape.name.clone()).collect();
        let rtts: std::collections::BTreeSet<_> = c.iter().map(|c| c.rtt_ms).collect();
        assert!(shapes.len() >= 15, "{shapes:?}");
        assert!(rtts.len() >= 3);
        let names: std::collections::BTreeSet<_> = c.iter().map(|c| c.name.clone()).collect();
        assert_eq!(names.len(), c.len(), "case names are unique");
    }

    #[test]
    fn a_shape_round_trips_through_json() {
        for s in shapes(10) {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Shape>(&j).unwrap(), s);
        }
    }

    #[test]
    fn bytes_per_request() {
        let s = shape("x", Mode::Echo { n: 3 }, 1, &[132], &[], (0, 0));
        assert_eq!((s.request_bytes(), s.response_bytes()), (396, 396));
        let s = shape("x", Mode::RequestResponse, 1, &[275, 24, 292], &[100], (0, 0));
        assert_eq!((s.request_bytes(), s.response_bytes()), (591, 100));
    }
}
