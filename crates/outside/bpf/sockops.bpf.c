// SPDX-License-Identifier: GPL-2.0
// tcpstall outside: a cgroup sock_ops program that sets TCP options on every TCP socket of the
// cgroup it is attached to, from outside the program that owns them (issue 34).
//
// The kernel runs it at each socket's sock_ops callbacks (include/uapi/linux/bpf.h
// BPF_SOCK_OPS_*). On the two "established" callbacks, an active open's (connect) and a passive
// one's (the child of accept), it calls bpf_setsockopt(SOL_TCP, ...), which net/core/filter.c
// sol_tcp_sockopt allows for TCP_NODELAY and for the BPF-only TCP_BPF_DELACK_MAX (the delayed
// ACK's maximum, in microseconds: inet_csk(sk)->icsk_delack_max, used by tcp_send_delayed_ack).
// Setting TCP_NODELAY from sock_ops goes through __tcp_sock_set_nodelay, as setsockopt does.
//
// The values are read-only globals (`volatile const`, .rodata) that the loader (aya) sets
// before loading: 0 leaves the option alone. `applied` counts the sockets changed (slot 0
// TCP_NODELAY, slot 1 TCP_BPF_DELACK_MAX) and keeps the delayed-ACK maximum the kernel took
// (slot 2, µs).
//
// TCP_BPF_DELACK_MAX: net/core/filter.c bpf_sol_tcp_setsockopt converts the value with
// usecs_to_jiffies (rounding up) and refuses, with -EINVAL, less than TCP_TIMEOUT_MIN (2
// jiffies, include/net/tcp.h) or more than TCP_DELACK_MAX (HZ/5, 200 ms); the value is then
// icsk_delack_max, the cap tcp_send_delayed_ack (net/ipv4/tcp_output.c) puts on the ATO,
// which otherwise starts at TCP_ATO_MIN = HZ/25 = 40 ms. The jiffy is the kernel's (CONFIG_HZ,
// not visible here), so the asked value is doubled until the kernel takes it, at most 4 times:
// the first power-of-two multiple of the ask that is more than 1 jiffy, which the kernel
// rounds up to 2 jiffies, its minimum: 2 ms at HZ=1000, 8 ms at HZ=250, 4 ms asked and 6.7 ms
// held at HZ=300, 16 ms asked and 20 ms held at HZ=100. Slot 2 keeps the accepted ask; user
// space rounds it to the jiffies the kernel holds (sockops.rs, kernel_delack_us).
//
// Built by build.rs: clang -target bpf -O2 -g.

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

// include/uapi/linux/bpf.h: the context's first field is the callback (the loader rewrites
// context loads by offset; only `op` is read), the callbacks, the map type, the BPF-only option.
struct bpf_sock_ops {
	__u32 op;
};
#define BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB 4
#define BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB 5
#define BPF_MAP_TYPE_ARRAY 2
#define TCP_BPF_DELACK_MAX 1003
// include/linux/socket.h, include/uapi/linux/tcp.h
#define SOL_TCP 6
#define TCP_NODELAY 1

// Defaults 0; build.rs also builds sockops-nodelay.o with -DTCPSTALL_NODELAY=1, the object a user
// deploys with bpftool (which cannot set globals).
#ifndef TCPSTALL_NODELAY
#define TCPSTALL_NODELAY 0
#endif
#ifndef TCPSTALL_DELACK_MAX_US
#define TCPSTALL_DELACK_MAX_US 0
#endif
volatile const __u32 nodelay = TCPSTALL_NODELAY;
volatile const __u32 delack_max_us = TCPSTALL_DELACK_MAX_US;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} applied SEC(".maps");

static void keep(__u32 slot, __u64 v)
{
	__u64 *n = bpf_map_lookup_elem(&applied, &slot);
	if (n)
		*n = v;
}

static void count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&applied, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("sockops")
int tcpstall_sockops(struct bpf_sock_ops *skops)
{
	int op = skops->op;
	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (nodelay) {
		int one = 1;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_NODELAY, &one, sizeof(one)) == 0)
			count(0);
	}
	if (delack_max_us) {
		int us = delack_max_us;
		// Doubled until at least TCP_TIMEOUT_MIN at this kernel's HZ (above).
		for (int i = 0; i < 5; i++, us *= 2) {
			if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_DELACK_MAX, &us, sizeof(us)) == 0) {
				count(1);
				keep(2, us);
				break;
			}
		}
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
