/* Bare 1-byte TCP ping-pong on loopback: the baseline of the rr bench (crates/lab/benches/rr.rs).
 * usage: pingpong ROUNDS spin|block [CLIENT_CPU SERVER_CPU]
 * spin: both ends spin on recv(MSG_DONTWAIT) (a busy-polling reader, `pp -b 1` style); block:
 * plain blocking recv. With two CPU numbers the client (main) thread and the server thread are
 * pinned to them (sched_setaffinity), as the lab's --pin does; -1 leaves a side unpinned.
 * Prints "RATE P99_NS CPU_NS": round trips per second of the client's loop, the 99th percentile of
 * one round trip, and both threads' CPU time per round trip (CLOCK_THREAD_CPUTIME_ID read around
 * each loop, as the lab reads its sides': a figure the other jobs on the machine barely move).
 * Inside the loop: the socket calls and one clock read per round (for the p99), nothing else. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long rounds;
static int spin;
static int server_cpu = -1;
static long long server_cpu_ns;

static void die(const char *what) { perror(what); exit(1); }

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) die("sched_setaffinity");
}

static void get1(int fd, char *b) {
    for (;;) {
        ssize_t n = recv(fd, b, 1, spin ? MSG_DONTWAIT : 0);
        if (n == 1) return;
        if (n == 0) { fprintf(stderr, "peer closed\n"); exit(1); }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
    }
}

static void put1(int fd, const char *b) {
    if (send(fd, b, 1, MSG_NOSIGNAL) != 1) die("send");
}

static long long clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void *server(void *arg) {
    pin(server_cpu);
    int l = *(int *)arg, s = accept(l, NULL, NULL);
    char b;
    if (s < 0) die("accept");
    long long cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < rounds; i++) { get1(s, &b); put1(s, &b); }
    server_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    close(s);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5) { fprintf(stderr, "usage: pingpong ROUNDS spin|block [CLIENT_CPU SERVER_CPU]\n"); return 2; }
    rounds = atol(argv[1]);
    spin = strcmp(argv[2], "spin") == 0;
    int client_cpu = argc == 5 ? atoi(argv[3]) : -1;
    server_cpu = argc == 5 ? atoi(argv[4]) : -1;
    long long *lat = malloc(sizeof *lat * (rounds > 0 ? rounds : 1));
    if (!lat) die("malloc");
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al)) die("listen");
    pthread_t t;
    pthread_create(&t, NULL, server, &l);
    pin(client_cpu);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) die("connect");
    char b = 1;
    long long cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    long long t0 = ns(), prev = t0;
    for (long i = 0; i < rounds; i++) {
        put1(c, &b);
        get1(c, &b);
        long long now = ns();
        lat[i] = now - prev;
        prev = now;
    }
    long long client_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    pthread_join(t, NULL);
    double s = (prev - t0) / 1e9;
    qsort(lat, rounds, sizeof *lat, cmp);
    printf("%.0f %lld %.1f\n", rounds / s, rounds > 0 ? lat[(rounds * 99) / 100] : 0,
           rounds > 0 ? (double)(client_cpu_ns + server_cpu_ns) / rounds : 0.0);
    return 0;
}
