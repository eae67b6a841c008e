//! The ring buffer's records (struct record in bpf/tcpev.bpf.c), parsed with `from_le_bytes`
//! (BPF runs in the host's byte order, and tcpstall's hosts are little-endian: x86-64, arm64),
//! and what they become in a trace. Pure: no OS.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use trace::{Endpoint, KernelEvent, KernelState};

/// Size of one record (struct record).
pub const RECORD_LEN: usize = 128;

/// The offsets of struct record's fields (bpf/tcpev.bpf.c): the C side asserts each one
/// (`_Static_assert(__builtin_offsetof(struct record, ts_ns) == 0, "TS_NS")`) and the test
/// `layout_matches_the_c_asserts` reads those asserts back and compares them with these.
mod at {
    pub(super) const TS_NS: usize = 0;
    pub(super) const SK: usize = 8;
    pub(super) const KIND: usize = 16;
    pub(super) const FAMILY: usize = 17;
    pub(super) const STATE: usize = 18;
    pub(super) const PAD: usize = 19;
    pub(super) const SPORT: usize = 20;
    pub(super) const DPORT: usize = 22;
    pub(super) const SADDR: usize = 24;
    pub(super) const DADDR: usize = 40;
    pub(super) const V: usize = 56;
    pub(super) const TGID: usize = 88;
    pub(super) const OWNER_FLAGS: usize = 92;
    pub(super) const CGROUP: usize = 96;
    pub(super) const COMM: usize = 104;
    pub(super) const OTHER_TGID: usize = 120;
    /// Every offset by the name the C asserts give it.
    #[cfg(test)]
    pub(super) const ALL: [(&str, usize); 17] = [
        ("RECORD_LEN", super::RECORD_LEN),
        ("OTHER_TGID", OTHER_TGID),
        ("TS_NS", TS_NS),
        ("SK", SK),
        ("KIND", KIND),
        ("FAMILY", FAMILY),
        ("STATE", STATE),
        ("PAD", PAD),
        ("SPORT", SPORT),
        ("DPORT", DPORT),
        ("SADDR", SADDR),
        ("DADDR", DADDR),
        ("V", V),
        ("TGID", TGID),
        ("OWNER_FLAGS", OWNER_FLAGS),
        ("CGROUP", CGROUP),
        ("COMM", COMM),
    ];
}

/// struct owner's flags (bpf/tcpev.bpf.c OWNER_*).
const OWNER_SHARED: u32 = 1;
const OWNER_INHERITED: u32 = 2;

/// The owner the kernel's socket-to-owner map gave a record (filled in process context: a
/// write, connect, listen; bpf/tcpev.bpf.c `claim`), whatever task the tracepoint ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawOwner {
    /// The process (thread group id).
    pub pid: u32,
    /// The writing thread's command (task->comm, up to 15 bytes).
    pub comm: [u8; 16],
    /// The cgroup v2 id (the inode number of its directory under the cgroup2 mount).
    pub cgroup_id: u64,
    /// Another process wrote on the socket before: that one.
    pub shared_with: Option<u32>,
    /// From the listening socket (the process that called listen), not yet written on.
    pub inherited: bool,
}

impl RawOwner {
    /// The command as text (up to its NUL).
    pub fn comm(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(self.comm.len());
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }
}

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// What a tracepoint reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `tcp:tcp_sendmsg_locked`, one pass of tcp_sendmsg_locked's copy loop: `left` bytes of
    /// the call still to copy, `write_seq` the sequence number the next one takes, `msg` the
    /// msghdr's address (the same in every pass of one call).
    Sendmsg { left: u32, write_seq: u32, msg: u64, size_goal: u32 },
    /// `tcp:tcp_retransmit_skb`: `[seq, end_seq)` resent; `flags` the TCP flags (SYN and FIN
    /// take one sequence number each).
    Retransmit { seq: u32, end_seq: u32, flags: u8 },
    /// `tcp:tcp_probe`: the socket's windows when a segment arrived, reported only near a window
    /// limit (bpf/tcpev.bpf.c `near_a_window_limit`); `mss` the socket's `mss_cache` then,
    /// `ca_state` its congestion state (enum tcp_ca_state, include/net/tcp.h: 0 Open).
    Probe { state: KernelState, mss: u32, ca_state: u8 },
    /// `tcp:tcp_rcv_space_adjust`: the application read.
    Read { rcv_wnd: u32 },
    /// `sock:inet_sock_set_state`: TCP state `old` -> `new` (include/net/tcp_states.h).
    SetState { old: u8, new: u8 },
    /// `tcp:tcp_cong_state_set`: the congestion state (enum tcp_ca_state).
    Cong { state: u8 },
}

/// One record: when (CLOCK_MONOTONIC), which socket, what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub mono_ns: u64,
    /// The socket's kernel address: its identity while it lives (reused after it is freed).
    pub sk: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The socket's TCP state when the tracepoint fired (include/net/tcp_states.h).
    pub tcp_state: u8,
    pub kind: Kind,
    /// The socket's owner, when the map knew it (owners on, and the socket written on,
    /// connected or accepted since the programs were attached).
    pub owner: Option<RawOwner>,
}

/// TCP_ESTABLISHED .. TCP_CLOSE_WAIT etc. (include/net/tcp_states.h), for people.
pub fn tcp_state_name(s: u8) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "?",
    }
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// An address as the kernel keeps it (network byte order). An IPv4-mapped IPv6 address (an
/// AF_INET6 socket talking IPv4, RFC 4291 2.5.5.2) becomes the IPv4 address the packets carry.
fn addr(family: u8, b: &[u8], port: u16) -> SocketAddr {
    let ip = if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    } else {
        let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes"));
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    };
    SocketAddr::new(ip, port)
}

/// Parse one ring buffer record; None when it is not one (wrong size, unknown kind or family).
pub fn parse(b: &[u8]) -> Option<Record> {
    if b.len() < RECORD_LEN {
        return None;
    }
    let family = b[at::FAMILY];
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    let v = |i: usize| u32le(b, at::V + 4 * i);
    let kind = match b[at::KIND] {
        1 => {
            Kind::Sendmsg { left: v(0), write_seq: v(1), msg: u64::from(v(2)) | u64::from(v(3)) << 32, size_goal: v(4) }
        }
        2 => Kind::Retransmit { seq: v(0), end_seq: v(1), flags: v(2) as u8 },
        3 => Kind::Probe {
            state: KernelState {
                snd_una: v(0),
                snd_nxt: v(1),
                snd_cwnd: v(2),
                ssthresh: v(3),
                snd_wnd: v(4),
                srtt_us: v(5),
                rcv_wnd: v(6),
            },
            mss: v(7),
            ca_state: b[at::PAD],
        },
        4 => Kind::Read { rcv_wnd: v(0) },
        5 => Kind::SetState { old: v(0) as u8, new: v(1) as u8 },
        6 => Kind::Cong { state: v(0) as u8 },
        _ => return None,
    };
    let pid = u32le(b, at::TGID);
    let flags = u32le(b, at::OWNER_FLAGS);
    let owner = (pid != 0).then(|| RawOwner {
        pid,
        comm: b[at::COMM..at::COMM + 16].try_into().expect("16 bytes"),
        cgroup_id: u64le(b, at::CGROUP),
        shared_with: (flags & OWNER_SHARED != 0).then(|| u32le(b, at::OTHER_TGID)),
        inherited: flags & OWNER_INHERITED != 0,
    });
    Some(Record {
        mono_ns: u64le(b, at::TS_NS),
        sk: u64le(b, at::SK),
        local: addr(family, &b[at::SADDR..at::SADDR + 16], u16le(b, at::SPORT)),
        remote: addr(family, &b[at::DADDR..at::DADDR + 16], u16le(b, at::DPORT)),
        tcp_state: b[at::STATE],
        kind,
        owner,
    })
}

/// The endpoint of the flow between `a` and `b` (either order of the socket's own view) that
/// the record's socket is: A when it is `a`. None when the socket is not of that flow.
pub fn endpoint(r: &Record, a: SocketAddr, b: SocketAddr) -> Option<Endpoint> {
    if r.local == a && r.remote == b {
        Some(Endpoint::A)
    } else if r.local == b && r.remote == a {
        Some(Endpoint::B)
    } else {
        None
    }
}

/// Turns records into trace events, one socket's writes at a time: `tcp_sendmsg_locked` fires
/// once per pass of the copy loop (net/ipv4/tcp.c: `while (msg_data_left(msg))`), so a write
/// larger than one skb's size goal, or one that waited for send-buffer space
/// (`sk_stream_wait_memory`), reports again with fewer bytes left. A pass of the same call has
/// the same msghdr, and its bytes left end at the same sequence number (write_seq + left):
/// that is one write, reported once, at its first pass (when the application called).
#[derive(Debug, Default)]
pub struct Converter {
    /// Per socket: the msghdr and the end sequence of its last write.
    writes: HashMap<u64, (u64, u32, u32)>,
}

impl Converter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The trace's kernel event for the record, or None: a later pass of a write already
    /// reported, or a state change (open/close; the record's 4-tuple maps sockets to flows).
    pub fn event(&mut self, r: &Record) -> Option<KernelEvent> {
        match r.kind {
            Kind::Sendmsg { left, write_seq, msg, .. } => {
                let end = write_seq.wrapping_add(left);
                if let Some(&(m, e, l)) = self.writes.get(&r.sk) {
                    if m == msg && e == end && left < l {
                        self.writes.insert(r.sk, (m, e, left));
                        return None;
                    }
                }
                self.writes.insert(r.sk, (msg, end, left));
                Some(KernelEvent::Sendmsg { bytes: left, seq: write_seq })
            }
            Kind::Retransmit { seq, end_seq, flags } => {
                // SYN and FIN take one sequence number each (RFC 9293 3.4): the rest is data.
                let ctl = u32::from(flags & 0x02 != 0) + u32::from(flags & 0x01 != 0);
                Some(KernelEvent::Retransmit { seq, len: end_seq.wrapping_sub(seq).saturating_sub(ctl) })
            }
            Kind::Probe { state, .. } => Some(KernelEvent::State(state)),
            Kind::Read { .. } => Some(KernelEvent::Read),
            Kind::Cong { state } => Some(KernelEvent::CongState { state }),
            Kind::SetState { new, .. } => {
                // TCP_CLOSE: the socket is gone; its address may be reused by another one.
                if new == 7 {
                    self.writes.remove(&r.sk);
                }
                None
            }
        }
    }
}

/// The map from the kernel's CLOCK_MONOTONIC (bpf_ktime_get_ns, the records' clock) to
/// CLOCK_REALTIME (the packet captures' clock: skb stamps from ktime_get_real, read back by
/// TPACKET and SO_TIMESTAMPNS).
///
/// Sampled as monotonic, realtime, monotonic, best of a few tries: the offset is known within
/// half the narrowest bracket (`error_ns`, typically under a microsecond). The two clocks run
/// at the same NTP-disciplined rate (adjtimex slews both), so the offset only moves when the
/// realtime clock is stepped (settimeofday, an NTP step): a long run samples again now and then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockMap {
    /// realtime - monotonic, ns.
    pub offset_ns: i128,
    /// Uncertainty of the offset, ns (half the sampling bracket).
    pub error_ns: u64,
}

impl ClockMap {
    /// From one bracketed sample: monotonic before, realtime, monotonic after.
    pub fn from_sample(mono_before: u64, real: u64, mono_after: u64) -> ClockMap {
        let mid = (u128::from(mono_before) + u128::from(mono_after)) / 2;
        ClockMap { offset_ns: real as i128 - mid as i128, error_ns: mono_after.saturating_sub(mono_before).div_ceil(2) }
    }

    /// Sample the clocks now (five tries, the narrowest bracket kept).
    pub fn sample() -> ClockMap {
        use nix::time::{clock_gettime, ClockId};
        let ns = |id| clock_gettime(id).map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64);
        (0..5)
            .map(|_| {
                let m0 = ns(ClockId::CLOCK_MONOTONIC);
                let r = ns(ClockId::CLOCK_REALTIME);
                let m1 = ns(ClockId::CLOCK_MONOTONIC);
                ClockMap::from_sample(m0, r, m1)
            })
            .min_by_key(|c| c.error_ns)
            .expect("five samples")
    }

    /// A monotonic time as realtime ns since the Unix epoch.
    pub fn to_realtime(&self, mono_ns: u64) -> u64 {
        (mono_ns as i128 + self.offset_ns).clamp(0, u64::MAX as i128) as u64
    }
}

/// The records of one connection as trace events, sorted by time: `side` names the endpoint a
/// record's socket is (None: another connection, skipped); times are the records' monotonic
/// stamps mapped by `clock` to realtime, minus `origin_ns` (the trace's time 0, realtime;
/// earlier ones are clamped to 0). Evidence numbers count from `first`.
pub fn to_events(
    recs: &[Record],
    clock: &ClockMap,
    origin_ns: u64,
    mut side: impl FnMut(&Record) -> Option<Endpoint>,
    first: u64,
) -> Vec<trace::Event> {
    let mut sorted: Vec<&Record> = recs.iter().collect();
    sorted.sort_by_key(|r| r.mono_ns);
    let mut conv = Converter::new();
    let mut out = Vec::new();
    for r in sorted {
        let Some(from) = side(r) else { continue };
        let Some(k) = conv.event(r) else { continue };
        out.push(trace::Event {
            t: trace::Instant(clock.to_realtime(r.mono_ns).saturating_sub(origin_ns)),
            from,
            kind: trace::EventKind::Kernel(k),
            evidence: trace::Evidence::Kernel(first + out.len() as u64),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: u8, family: u8, sk: u64, v: [u32; 8]) -> Vec<u8> {
        let mut b = vec![0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&1_000u64.to_le_bytes());
        b[8..16].copy_from_slice(&sk.to_le_bytes());
        b[16] = kind;
        b[17] = family;
        b[18] = 1;
        b[20..22].copy_from_slice(&40000u16.to_le_bytes());
        b[22..24].copy_from_slice(&5001u16.to_le_bytes());
        b[24..28].copy_from_slice(&[127, 0, 0, 1]);
        b[40..44].copy_from_slice(&[127, 0, 0, 2]);
        for (i, x) in v.iter().enumerate() {
            b[56 + 4 * i..60 + 4 * i].copy_from_slice(&x.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_record_parses_with_its_socket_and_ports() {
        let r = parse(&raw(1, AF_INET, 7, [54, 1000, 0xdead, 0x1, 1448, 0, 0, 0])).unwrap();
        assert_eq!(r.local, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(r.remote, "127.0.0.2:5001".parse().unwrap());
        assert_eq!(r.kind, Kind::Sendmsg { left: 54, write_seq: 1000, msg: 0x1_0000_dead, size_goal: 1448 });
        assert_eq!((r.mono_ns, r.sk, r.tcp_state), (1_000, 7, 1));
        assert_eq!(endpoint(&r, r.remote, r.local), Some(Endpoint::B));
        assert_eq!(endpoint(&r, r.local, r.remote), Some(Endpoint::A));
        assert_eq!(endpoint(&r, r.local, "127.0.0.2:1".parse().unwrap()), None);
    }

    #[test]
    fn a_window_state_parses_with_its_mss_and_congestion_state() {
        let mut b = raw(3, AF_INET, 7, [100, 1548, 10, 7, 65536, 40, 65483, 32768]);
        b[19] = 4;
        let r = parse(&b).unwrap();
        let Kind::Probe { state, mss, ca_state } = r.kind else { panic!("{r:?}") };
        assert_eq!((state.snd_una, state.snd_nxt, state.snd_cwnd, state.ssthresh), (100, 1548, 10, 7));
        assert_eq!((state.snd_wnd, state.srtt_us, state.rcv_wnd, mss, ca_state), (65536, 40, 65483, 32768, 4));
        assert_eq!(Converter::new().event(&r), Some(KernelEvent::State(state)));
    }

    /// One source for the layout: every `_Static_assert` on struct record in the C file names
    /// an offset (or the size) this side parses at, and this side has no offset the C lacks.
    #[test]
    fn layout_matches_the_c_asserts() {
        let c = include_str!("../bpf/tcpev.bpf.c");
        let mut seen = Vec::new();
        for l in c.lines().filter(|l| l.starts_with("_Static_assert(") && l.contains("struct record")) {
            let (expr, name) = l.rsplit_once(", \"").expect("an assert with a name");
            let name = name.trim_end_matches("\");").trim_end_matches('"');
            let n: usize = expr.rsplit("== ").next().unwrap().trim().parse().expect(l);
            let ours = at::ALL.iter().find(|(k, _)| *k == name).unwrap_or_else(|| panic!("{name} not in at::ALL"));
            assert_eq!(ours.1, n, "{name}: C says {n}, Rust {}", ours.1);
            seen.push(name.to_string());
        }
        for (k, _) in at::ALL {
            assert!(seen.iter().any(|s| s == k), "{k}: no C assert");
        }
    }

    #[test]
    fn an_owner_parses_with_its_command_cgroup_and_sharing() {
        let mut b = raw(2, AF_INET, 7, [0; 8]);
        assert_eq!(parse(&b).unwrap().owner, None, "tgid 0: unknown");
        b[88..92].copy_from_slice(&4242u32.to_le_bytes());
        b[92..96].copy_from_slice(&1u32.to_le_bytes());
        b[96..104].copy_from_slice(&77u64.to_le_bytes());
        b[104..111].copy_from_slice(b"python3");
        b[120..124].copy_from_slice(&17u32.to_le_bytes());
        let o = parse(&b).unwrap().owner.unwrap();
        assert_eq!(
            (o.pid, o.comm(), o.cgroup_id, o.shared_with, o.inherited),
            (4242, "python3".into(), 77, Some(17), false)
        );
        b[92..96].copy_from_slice(&2u32.to_le_bytes());
        let o = parse(&b).unwrap().owner.unwrap();
        assert_eq!((o.shared_with, o.inherited), (None, true));
    }

    #[test]
    fn bad_records_are_refused() {
        assert!(parse(&[0u8; 10]).is_none());
        assert!(parse(&raw(9, AF_INET, 1, [0; 8])).is_none());
        assert!(parse(&raw(1, 1, 1, [0; 8])).is_none());
    }

    #[test]
    fn a_v4_mapped_v6_socket_has_the_ipv4_addresses_of_its_packets() {
        let mut b = raw(4, AF_INET6, 1, [0; 8]);
        b[24..40].copy_from_slice(&Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().octets());
        b[40..56].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        let r = parse(&b).unwrap();
        assert_eq!(r.local, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(r.remote, "[::1]:5001".parse().unwrap());
    }

    #[test]
    fn the_passes_of_one_write_are_one_write_and_a_new_call_is_another() {
        let mut c = Converter::new();
        let pass = |left, seq, msg| parse(&raw(1, AF_INET, 9, [left, seq, msg, 0, 1448, 0, 0, 0])).unwrap();
        // A 3000-byte write in three passes (skb size goal 1448), then a 54-byte write.
        assert_eq!(c.event(&pass(3000, 100, 0x50)), Some(KernelEvent::Sendmsg { bytes: 3000, seq: 100 }));
        assert_eq!(c.event(&pass(1552, 1548, 0x50)), None);
        assert_eq!(c.event(&pass(104, 2996, 0x50)), None);
        assert_eq!(c.event(&pass(54, 3100, 0x50)), Some(KernelEvent::Sendmsg { bytes: 54, seq: 3100 }));
        // The same 54 bytes again from a new call at the same stack address: a new write.
        assert_eq!(c.event(&pass(54, 3154, 0x50)), Some(KernelEvent::Sendmsg { bytes: 54, seq: 3154 }));
    }

    #[test]
    fn a_resend_counts_its_data_bytes_not_syn_or_fin() {
        let mut c = Converter::new();
        let r = parse(&raw(2, AF_INET, 1, [100, 154, 0x11, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(c.event(&r), Some(KernelEvent::Retransmit { seq: 100, len: 53 }));
        let syn = parse(&raw(2, AF_INET, 1, [7, 8, 0x02, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(c.event(&syn), Some(KernelEvent::Retransmit { seq: 7, len: 0 }));
    }

    #[test]
    fn the_clock_map_puts_the_sample_midpoint_on_the_realtime_reading() {
        let c = ClockMap::from_sample(1_000, 1_700_000_000_000_000_500, 2_000);
        assert_eq!(c.error_ns, 500);
        assert_eq!(c.to_realtime(1_500), 1_700_000_000_000_000_500);
        assert_eq!(c.to_realtime(2_500), 1_700_000_000_000_001_500);
        let now = ClockMap::sample();
        assert!(now.error_ns < 1_000_000, "{now:?}");
    }

    #[test]
    fn to_events_keeps_one_connection_in_time_order_on_the_packets_clock() {
        let mut a = parse(&raw(1, AF_INET, 9, [54, 100, 1, 0, 0, 0, 0, 0])).unwrap();
        a.mono_ns = 2_000;
        let mut b = parse(&raw(4, AF_INET, 9, [0; 8])).unwrap();
        b.mono_ns = 1_500;
        let mut other = b;
        other.remote = "127.0.0.2:1".parse().unwrap();
        let clock = ClockMap { offset_ns: 10_000, error_ns: 0 };
        let ev = to_events(&[a, other, b], &clock, 11_000, |r| (r.remote.port() == 5001).then_some(Endpoint::A), 7);
        assert_eq!(ev.len(), 2);
        assert_eq!((ev[0].t, ev[1].t), (trace::Instant(500), trace::Instant(1_000)));
        assert_eq!(ev[0].kind, trace::EventKind::Kernel(KernelEvent::Read));
        assert_eq!(ev[1].evidence, trace::Evidence::Kernel(8));
    }
}
