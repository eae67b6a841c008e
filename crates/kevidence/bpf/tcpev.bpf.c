// SPDX-License-Identifier: GPL-2.0
// tcpstall kernel evidence: eBPF programs on TCP tracepoints (include/trace/events/tcp.h,
// include/trace/events/sock.h), attached as BTF raw tracepoints (tp_btf: BPF_RAW_TRACEPOINT_OPEN
// of a program loaded against the tracepoint's btf_trace_<name> type; no tracefs needed). The
// arguments (TP_PROTO) are typed kernel pointers, read with plain loads the verifier checks
// against the kernel's BTF (no bpf_probe_read_kernel call per field: a tenth of the cost), and
// bpf_skc_to_tcp_sock gives the tcp_sock. Each program keeps
// only sockets whose local or remote port is in `ports` (and, when `cfg.netns` is set, whose
// network namespace has that inode), and writes one fixed 128-byte record to the `events` ring
// buffer. A record that finds the ring full is counted in `lost` (never dropped silently).
//
// Owners (cfg.flags & CFG_OWNERS): a socket-to-owner map (`owners`, keyed by the socket's
// address) is filled in process context only: by the write (tcp_sendmsg_locked runs in the
// writing task), by connect (CLOSE -> SYN_SENT in tcp_v4_connect/tcp_v6_connect) and by listen
// (CLOSE -> LISTEN in inet_csk_listen_start, kept per port in `listeners`; a child socket
// created in softirq, LISTEN -> SYN_RECV in inet_csk_clone_lock, inherits its listener's owner,
// marked inherited until its own first write). Every record copies its socket's owner from the
// map, never from the current task: resends and timers run in softirq, where the current task
// is whoever was interrupted (datadog-agent #3893).
//
// Kernel structures are declared with only the fields read, marked preserve_access_index: the
// loader (aya) relocates every field offset against the running kernel's BTF (CO-RE), so no
// vmlinux.h is needed and the object runs on any kernel with BTF whose fields keep their names
// (tp_btf and bpf_skc_to_tcp_sock: Linux 5.9 and later).
//
// Built by build.rs: clang -target bpf -O2 -g (the -g is what emits the BTF CO-RE needs).

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// include/uapi/linux/bpf.h
#define BPF_NOEXIST 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27

// include/linux/socket.h
#define AF_INET 2
#define AF_INET6 10

// Record kinds (crates/kevidence/src/record.rs mirrors them).
#define K_SENDMSG 1
#define K_RETRANSMIT 2
#define K_PROBE 3
#define K_READ 4
#define K_STATE 5
#define K_CONG 6

// include/net/tcp_states.h
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_CLOSE 7
#define TCP_LISTEN 10

// ---- the kernel's structures, only the fields read (names as in the kernel; CO-RE) ----
// include/linux/ns_common.h
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));
// include/net/net_namespace.h
struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));
// include/net/net_namespace.h: typedef struct { struct net *net; } possible_net_t;
struct possible_net_tcpstall {
	struct net *net;
};
struct in6_addr {
	__u8 s6_addr[16];
};
// include/net/sock.h: struct sock_common (skc_daddr and skc_rcv_saddr sit in an anonymous
// union, skc_dport and skc_num in another; CO-RE finds them by name).
struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
	struct possible_net_tcpstall skc_net;
} __attribute__((preserve_access_index));
struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));
// include/net/inet_connection_sock.h: icsk_ca_state is a 5-bit field (enum tcp_ca_state),
// read with BPF_CORE_READ_BITFIELD (its bit offset is relocated too).
struct inet_connection_sock {
	__u8 icsk_ca_state : 5;
} __attribute__((preserve_access_index));
// include/linux/tcp.h: struct tcp_sock (it begins with its inet_connection_sock)
struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 mss_cache;
	__u32 write_seq;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 snd_wnd;
	__u32 srtt_us;
	__u32 rcv_wnd;
} __attribute__((preserve_access_index));
// include/linux/uio.h: struct iov_iter (count sits in an anonymous union); include/linux/socket.h
struct iov_iter {
	unsigned long count;
} __attribute__((preserve_access_index));
struct msghdr {
	struct iov_iter msg_iter;
} __attribute__((preserve_access_index));
// include/linux/skbuff.h
struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));

// ---- maps ----
#define CFG_READS 1 // report reads (tcp_rcv_space_adjust); else that program returns at once
#define CFG_OWNERS 2 // keep the socket-to-owner map and copy owners into records
struct config {
	__u32 netns; // network namespace inode to keep (0: any)
	__u16 any_port; // 1: no port filter
	__u16 flags; // CFG_READS | CFG_OWNERS
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} cfg SEC(".maps");

// ports[p] != 0: keep sockets with local or remote port p. An array, not a hash: the verifier
// inlines array lookups (no helper call), and every record pays two of them.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); // 16 MiB: about 120,000 records (136 bytes each with the header)
} events SEC(".maps");

// [0]: records that found the ring full (the records written are counted by the reader:
// a counter per record would cost a map update each).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

// A socket's owner: the process that last wrote on it (or connected, or listened on its port).
#define OWNER_SHARED 1 // another process wrote on it before: `other_tgid`
#define OWNER_INHERITED 2 // from the listener, until the socket's own first write
struct owner {
	__u32 tgid; // the process (the kernel's tgid: what user space calls a pid)
	__u32 flags; // OWNER_*
	__u64 cgroup; // bpf_get_current_cgroup_id(): the cgroup v2 directory's inode number
	char comm[16]; // the writing thread's command (task->comm)
	__u32 other_tgid; // with OWNER_SHARED: the previous owner
	__u32 pad;
};

#define BPF_MAP_TYPE_LRU_HASH 9
// Keyed by the socket's address; least recently used first out (a socket that closed without
// a TCP_CLOSE record, or one of many, ages out).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct owner);
} owners SEC(".maps");

// Listening sockets' owners, keyed by network namespace inode << 16 | local port.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct owner);
} listeners SEC(".maps");

// The layout crates/kevidence/src/record.rs parses: its `layout` test reads every assert below
// and checks the offset against its own constant of that name (one source, checked both sides).
struct record {
	__u64 ts_ns; // bpf_ktime_get_ns(): CLOCK_MONOTONIC
	__u64 sk; // the socket's address: its identity while it lives
	__u8 kind;
	__u8 family;
	__u8 state; // the socket's TCP state (include/net/tcp_states.h)
	__u8 pad; // K_PROBE: the congestion state (icsk_ca_state); else 0
	__u16 sport; // local port, host order
	__u16 dport; // remote port, host order
	__u8 saddr[16]; // local address (IPv4 in the first 4 bytes)
	__u8 daddr[16]; // remote address
	__u32 v[8]; // the kind's values
	__u32 tgid; // the socket's owner (0: unknown), from `owners`
	__u32 owner_flags; // OWNER_*
	__u64 cgroup;
	char comm[16];
	__u32 other_tgid; // with OWNER_SHARED: the process that wrote before
	__u32 pad2;
};
_Static_assert(sizeof(struct record) == 128, "RECORD_LEN");
_Static_assert(__builtin_offsetof(struct record, ts_ns) == 0, "TS_NS");
_Static_assert(__builtin_offsetof(struct record, sk) == 8, "SK");
_Static_assert(__builtin_offsetof(struct record, kind) == 16, "KIND");
_Static_assert(__builtin_offsetof(struct record, family) == 17, "FAMILY");
_Static_assert(__builtin_offsetof(struct record, state) == 18, "STATE");
_Static_assert(__builtin_offsetof(struct record, pad) == 19, "PAD");
_Static_assert(__builtin_offsetof(struct record, sport) == 20, "SPORT");
_Static_assert(__builtin_offsetof(struct record, dport) == 22, "DPORT");
_Static_assert(__builtin_offsetof(struct record, saddr) == 24, "SADDR");
_Static_assert(__builtin_offsetof(struct record, daddr) == 40, "DADDR");
_Static_assert(__builtin_offsetof(struct record, v) == 56, "V");
_Static_assert(__builtin_offsetof(struct record, tgid) == 88, "TGID");
_Static_assert(__builtin_offsetof(struct record, owner_flags) == 92, "OWNER_FLAGS");
_Static_assert(__builtin_offsetof(struct record, cgroup) == 96, "CGROUP");
_Static_assert(__builtin_offsetof(struct record, comm) == 104, "COMM");
_Static_assert(__builtin_offsetof(struct record, other_tgid) == 120, "OTHER_TGID");

static __always_inline void count_lost(void)
{
	__u32 i = 0;
	__u64 *n = bpf_map_lookup_elem(&counts, &i);
	if (n)
		*n += 1;
}

// The owner of the current task, in process context.
static __always_inline void current_owner(struct owner *o, __u32 tgid)
{
	__builtin_memset(o, 0, sizeof(*o));
	o->tgid = tgid;
	o->cgroup = bpf_get_current_cgroup_id();
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

// Process context only (a write, connect): the current task owns `sk`. A socket another
// process wrote on before is marked shared (a fork, a handed-over fd); one whose owner was
// inherited from its listener takes its writer's without a mark.
static __always_inline void claim(struct sock *sk)
{
	__u64 key = (__u64)sk;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct owner *o = bpf_map_lookup_elem(&owners, &key);
	if (o && o->tgid == tgid && !(o->flags & OWNER_INHERITED))
		return;
	struct owner n;
	current_owner(&n, tgid);
	if (o && o->tgid != tgid && !(o->flags & OWNER_INHERITED)) {
		n.flags = OWNER_SHARED;
		n.other_tgid = o->tgid;
	} else if (o && (o->flags & OWNER_SHARED)) {
		n.flags = OWNER_SHARED;
		n.other_tgid = o->other_tgid;
	}
	bpf_map_update_elem(&owners, &key, &n, 0);
}

static __always_inline __u64 listener_key(struct sock *sk)
{
	struct net *net = sk->__sk_common.skc_net.net;
	__u64 ns = net ? net->ns.inum : 0;
	return ns << 16 | sk->__sk_common.skc_num;
}

// The record's owner, from the map (in any context).
static __always_inline void copy_owner(struct record *r)
{
	__u64 key = r->sk;
	struct owner *o = bpf_map_lookup_elem(&owners, &key);
	if (!o)
		return;
	r->tgid = o->tgid;
	r->owner_flags = o->flags;
	r->cgroup = o->cgroup;
	__builtin_memcpy(r->comm, o->comm, sizeof(r->comm));
	r->other_tgid = o->other_tgid;
}

// Whether the filter keeps `sk` (ports and network namespace).
static __always_inline int kept(struct sock *sk, struct config *c)
{
	if (!c->any_port) {
		__u32 sp = sk->__sk_common.skc_num;
		__u32 dp = __builtin_bswap16(sk->__sk_common.skc_dport);
		__u8 *a = bpf_map_lookup_elem(&ports, &sp);
		__u8 *b = bpf_map_lookup_elem(&ports, &dp);
		if (!(a && *a) && !(b && *b))
			return 0;
	}
	if (c->netns) {
		struct net *net = sk->__sk_common.skc_net.net;
		if (!net || net->ns.inum != c->netns)
			return 0;
	}
	return 1;
}

// The record for `sk`, which the filter `c` keeps, reserved in the ring (NULL when the ring is
// full, counted, or the family is neither IPv4 nor IPv6); with owners on, the owner is copied in
// (the caller claims `sk` first in process context).
static __always_inline struct record *record_for(struct sock *sk, struct config *c, __u8 kind)
{
	__u16 sport = sk->__sk_common.skc_num;
	__u16 dport = __builtin_bswap16(sk->__sk_common.skc_dport);
	unsigned short family = sk->__sk_common.skc_family;
	if (family != AF_INET && family != AF_INET6)
		return 0;
	struct record *r = bpf_ringbuf_reserve(&events, sizeof(struct record), 0);
	if (!r) {
		count_lost();
		return 0;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_ns = bpf_ktime_get_ns();
	r->sk = (__u64)sk;
	r->kind = kind;
	r->family = family;
	r->state = sk->__sk_common.skc_state;
	r->sport = sport;
	r->dport = dport;
	if (family == AF_INET) {
		__be32 s = sk->__sk_common.skc_rcv_saddr;
		__be32 d = sk->__sk_common.skc_daddr;
		__builtin_memcpy(r->saddr, &s, 4);
		__builtin_memcpy(r->daddr, &d, 4);
	} else {
		bpf_core_read(r->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(r->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	if (c->flags & CFG_OWNERS)
		copy_owner(r);
	return r;
}

// The record for `sk` when the filter keeps it, else NULL (see record_for).
static __always_inline struct record *start(struct sock *sk, __u8 kind)
{
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &zero);
	if (!c || !kept(sk, c))
		return 0;
	return record_for(sk, c, kind);
}

// BPF_RB_NO_WAKEUP (include/uapi/linux/bpf.h): no wakeup of the reader per record (an
// irq_work and a context switch each, which on a busy connection cost more than the record);
// the reader drains the ring on a 10 ms timer instead.
#define BPF_RB_NO_WAKEUP 1

static __always_inline void submit(struct record *r)
{
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

// TRACE_EVENT(tcp_sendmsg_locked, TP_PROTO(const struct sock *sk, const struct msghdr *msg,
// const struct sk_buff *skb, int size_goal)): called from tcp_sendmsg_locked (net/ipv4/tcp.c)
// once per pass of its copy loop, before the bytes are queued. v0 = msg_data_left(msg) (the
// bytes still to copy; the whole write on the first pass), v1 = tp->write_seq (the sequence
// number the next byte takes), v2/v3 = the msghdr's address (a later pass of the same call
// has the same one), v4 = size_goal.
SEC("tp_btf/tcp_sendmsg_locked")
int tcpstall_sendmsg(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct msghdr *msg = (struct msghdr *)ctx[1];
	// The filter once (every write on the host runs this program; a busy connection's writes
	// are the records that cost most: crates/kevidence/benches/overhead.rs).
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &zero);
	if (!c || !kept(sk, c))
		return 0;
	// Process context: the writer owns the socket (claimed before the record copies it).
	if (c->flags & CFG_OWNERS)
		claim(sk);
	struct record *r = record_for(sk, c, K_SENDMSG);
	if (!r)
		return 0;
	r->v[0] = (__u32)msg->msg_iter.count;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp)
		r->v[1] = tp->write_seq;
	r->v[2] = (__u32)ctx[1];
	r->v[3] = (__u32)(ctx[1] >> 32);
	r->v[4] = (__u32)ctx[3];
	submit(r);
	return 0;
}

// DECLARE_TRACE tcp_retransmit_skb, TP_PROTO(const struct sock *sk, const struct sk_buff *skb):
// called from __tcp_retransmit_skb (net/ipv4/tcp_output.c) when a resend went out (RTO, fast
// retransmit, tail-loss probe). The range is the skb's control block, struct tcp_skb_cb
// (include/net/tcp.h): seq at offset 0, end_seq at 4, tcp_flags at 12. v0 = seq, v1 = end_seq,
// v2 = tcp_flags.
SEC("tp_btf/tcp_retransmit_skb")
int tcpstall_retransmit(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct sk_buff *skb = (struct sk_buff *)ctx[1];
	struct record *r = start(sk, K_RETRANSMIT);
	if (!r)
		return 0;
	__u8 cb[16];
	if (bpf_core_read(cb, sizeof(cb), &skb->cb) == 0) {
		__builtin_memcpy(&r->v[0], &cb[0], 4);
		__builtin_memcpy(&r->v[1], &cb[4], 4);
		r->v[2] = cb[12];
	}
	submit(r);
	return 0;
}

// include/net/tcp.h: enum tcp_ca_state
#define TCP_CA_OPEN 0

// Whether a window state can matter to a window claim (the classifier reads one only to
// confirm or refute one: crates/analyze/src/classify/release.rs `kernel_cwnd`, window.rs
// `rule`). Near a limit means within one MSS of it (a flight one segment short of a window
// could not send a full segment more):
// - the congestion window: the flight (snd_nxt - snd_una) + mss >= snd_cwnd * mss, the bound
//   `tcp_cwnd_test` (net/ipv4/tcp_output.c) applies in segments (in_flight < cwnd);
// - the peer's window: the flight + mss >= snd_wnd, i.e. the usable window is under one segment,
//   the bound `tcp_snd_wnd_test` (net/ipv4/tcp_output.c) applies (end_seq <= tcp_wnd_end);
// - a small peer window (snd_wnd < 2 * mss: a zero or nearly closed window, a receiver that
//   shrank it);
// - loss recovery: a congestion state other than Open (icsk_ca_state: Disorder, CWR, Recovery,
//   Loss), where the cwnd is being cut or rebuilt.
// Far from every limit no record is written: the absence says no window held the data. Stateless
// (no per-socket map): each segment's record depends only on the socket's fields then.
static __always_inline int near_a_window_limit(struct tcp_sock *tp)
{
	__u64 mss = tp->mss_cache;
	if (mss == 0)
		return 1; // not yet known: keep the record
	__u64 flight = (__u32)(tp->snd_nxt - tp->snd_una);
	__u64 cwnd = (__u64)tp->snd_cwnd * mss;
	__u64 wnd = tp->snd_wnd;
	if (flight + mss >= cwnd || flight + mss >= wnd || wnd < 2 * mss)
		return 1;
	return BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state) != TCP_CA_OPEN;
}

// TRACE_EVENT(tcp_probe, TP_PROTO(struct sock *sk, const struct sk_buff *skb)): called from
// tcp_rcv_established (net/ipv4/tcp_input.c) for each segment an established socket receives,
// before it is processed. Kept only near a window limit (near_a_window_limit above); the
// fields are those the tracepoint's own record copies:
// v0 snd_una, v1 snd_nxt, v2 snd_cwnd, v3 snd_ssthresh, v4 snd_wnd, v5 srtt_us >> 3, v6 rcv_wnd,
// and v7 mss_cache (the MSS the test above used).
SEC("tp_btf/tcp_probe")
int tcpstall_probe(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	// The socket's fields first (cheap loads): most segments of a busy connection are far
	// from every window limit and end here, before the filter's map lookups and the ring.
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp || !near_a_window_limit(tp))
		return 0;
	struct record *r = start(sk, K_PROBE);
	if (!r)
		return 0;
	r->v[0] = tp->snd_una;
	r->v[1] = tp->snd_nxt;
	r->v[2] = tp->snd_cwnd;
	r->v[3] = tp->snd_ssthresh;
	r->v[4] = tp->snd_wnd;
	r->v[5] = tp->srtt_us >> 3;
	r->v[6] = tp->rcv_wnd;
	r->v[7] = tp->mss_cache;
	r->pad = BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state);
	submit(r);
	return 0;
}

// DECLARE_TRACE tcp_rcv_space_adjust, TP_PROTO(struct sock *sk): called first thing in
// tcp_rcv_space_adjust (net/ipv4/tcp_input.c), which tcp_recvmsg_locked calls after copying
// data to the application: a read. v0 = rcv_wnd. Opt-in (cfg.reads; the loader attaches the
// program only when asked): no rule of the classifier reads them, and a request/response
// connection makes one per message.
SEC("tp_btf/tcp_rcv_space_adjust")
int tcpstall_read(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &zero);
	if (!c || !(c->flags & CFG_READS))
		return 0;
	struct record *r = start(sk, K_READ);
	if (!r)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp)
		r->v[0] = tp->rcv_wnd;
	submit(r);
	return 0;
}

// TRACE_EVENT(inet_sock_set_state, TP_PROTO(const struct sock *sk, const int oldstate,
// const int newstate)) (include/trace/events/sock.h): every TCP state change (open, close).
// v0 = oldstate, v1 = newstate. With owners: CLOSE -> SYN_SENT (connect) and CLOSE -> LISTEN
// (listen) run in the calling task; LISTEN -> SYN_RECV (a child created in softirq) inherits
// its listener's owner; a socket's TCP_CLOSE record still carries its owner, then the entry goes.
SEC("tp_btf/inet_sock_set_state")
int tcpstall_state(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int oldstate = (int)ctx[1], newstate = (int)ctx[2];
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&cfg, &zero);
	int owning = c && (c->flags & CFG_OWNERS) && kept(sk, c);
	if (owning) {
		if (oldstate == TCP_CLOSE && newstate == TCP_SYN_SENT) {
			claim(sk);
		} else if (oldstate == TCP_CLOSE && newstate == TCP_LISTEN) {
			__u64 lk = listener_key(sk);
			struct owner n;
			current_owner(&n, bpf_get_current_pid_tgid() >> 32);
			bpf_map_update_elem(&listeners, &lk, &n, 0);
		} else if (newstate == TCP_SYN_RECV) {
			__u64 lk = listener_key(sk);
			struct owner *l = bpf_map_lookup_elem(&listeners, &lk);
			if (l) {
				struct owner n = *l;
				n.flags = OWNER_INHERITED;
				n.other_tgid = 0;
				__u64 key = (__u64)sk;
				bpf_map_update_elem(&owners, &key, &n, BPF_NOEXIST);
			}
		}
	}
	struct record *r = start(sk, K_STATE);
	if (r) {
		r->v[0] = (__u32)oldstate;
		r->v[1] = (__u32)newstate;
		submit(r);
	}
	if (owning && newstate == TCP_CLOSE) {
		__u64 key = (__u64)sk;
		bpf_map_delete_elem(&owners, &key);
		if (oldstate == TCP_LISTEN) {
			__u64 lk = listener_key(sk);
			bpf_map_delete_elem(&listeners, &lk);
		}
	}
	return 0;
}

// TRACE_EVENT(tcp_cong_state_set, TP_PROTO(struct sock *sk, const u8 ca_state)): called from
// tcp_set_ca_state (include/net/tcp.h / net/ipv4/tcp_cong.c), 5.19 and later.
// v0 = the new enum tcp_ca_state.
SEC("tp_btf/tcp_cong_state_set")
int tcpstall_cong(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct record *r = start(sk, K_CONG);
	if (!r)
		return 0;
	r->v[0] = (__u32)(__u8)ctx[1];
	submit(r);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
