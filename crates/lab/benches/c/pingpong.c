/* Bare 1-byte TCP ping-pong on loopback: the baseline of the rr bench (crates/lab/benches/rr.rs).
 * usage: pingpong ROUNDS spin|block
 * spin: both ends spin on recv(MSG_DONTWAIT) (a busy-polling reader); block: plain blocking recv.
 * Prints round trips per second of the client's loop. No measurement inside the loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long rounds;
static int spin;

static void die(const char *what) { perror(what); exit(1); }

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

static void *server(void *arg) {
    int l = *(int *)arg, s = accept(l, NULL, NULL);
    char b;
    if (s < 0) die("accept");
    for (long i = 0; i < rounds; i++) { get1(s, &b); put1(s, &b); }
    close(s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: pingpong ROUNDS spin|block\n"); return 2; }
    rounds = atol(argv[1]);
    spin = strcmp(argv[2], "spin") == 0;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al)) die("listen");
    pthread_t t;
    pthread_create(&t, NULL, server, &l);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) die("connect");
    char b = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < rounds; i++) { put1(c, &b); get1(c, &b); }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f\n", rounds / s);
    return 0;
}
