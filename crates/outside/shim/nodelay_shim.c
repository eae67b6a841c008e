// tcpstall outside: an LD_PRELOAD shim that sets TCP_NODELAY on the TCP sockets a program
// connects or accepts, for programs whose code cannot change (issue 34). Where a cgroup BPF
// sock_ops program can attach it is the cleaner fix; this one needs the program to be linked
// dynamically against libc (a static binary or a Go program makes its system calls itself and
// never calls these functions: tcpstall checks the ELF and says so).
//
// connect(), accept() and accept4() are wrapped: the real function (dlsym RTLD_NEXT) runs, then
// on success, for a stream socket of AF_INET or AF_INET6, setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
// (tcp(7); net/ipv4/tcp.c __tcp_sock_set_nodelay). A non-blocking connect returning EINPROGRESS
// is covered too (the option may be set on a connecting socket). errno is kept as the real call
// left it. Built by build.rs: cc -shared -fPIC -O2.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static void nodelay(int fd)
{
	int type = 0, one = 1, saved = errno;
	socklen_t tl = sizeof(type);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
	    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	errno = saved;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	int r = real(fd, addr, len);
	if (r == 0 || errno == EINPROGRESS)
		nodelay(fd);
	return r;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	static int (*real)(int, struct sockaddr *, socklen_t *);
	if (!real)
		real = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
	int r = real(fd, addr, len);
	if (r >= 0)
		nodelay(r);
	return r;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	static int (*real)(int, struct sockaddr *, socklen_t *, int);
	if (!real)
		real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
	int r = real(fd, addr, len, flags);
	if (r >= 0)
		nodelay(r);
	return r;
}
