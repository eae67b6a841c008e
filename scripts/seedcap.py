#!/usr/bin/env python3
"""Reproduce the seed scenarios over real loopback sockets so tcpdump can capture them.

Used by scripts/make-captures.sh until `tcpstall lab` can produce the same captures. One
process: the server runs in a thread, the client in the main thread; both use plain blocking
sockets and the socket options named by the strategy.

  seedcap.py PORT chunked   default|nodelay|cork   [rounds]   seed 000: 1000 B as 100 x 10 B each way
  seedcap.py PORT multi     default|nodelay|writev [requests] seed 001: 275, 24, 292 B then a 100 B reply
  seedcap.py PORT burst     default|nodelay        [rounds]   seed 002: N=3 x 132 B, echoed, 3 recvs
  seedcap.py PORT corkonly  default                [rounds]   TCP_CORK never cleared: 200 ms each
"""
import socket
import sys
import threading

T = socket.IPPROTO_TCP


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed")
        buf += chunk
    return buf


def apply(s, strategy):
    if strategy == "nodelay":
        s.setsockopt(T, socket.TCP_NODELAY, 1)


def send_chunks(s, strategy, total, n):
    size = total // n
    if strategy == "cork":
        s.setsockopt(T, socket.TCP_CORK, 1)
    for _ in range(n):
        s.sendall(b"x" * size)
    if strategy == "cork":
        s.setsockopt(T, socket.TCP_CORK, 0)  # uncork: flush now (tcp_push_pending_frames)


def chunked(lsock, port, strategy, rounds):
    def server():
        c, _ = lsock.accept()
        apply(c, strategy)
        for _ in range(rounds):
            send_chunks(c, strategy, 1000, 100)
            recv_exact(c, 1000)
        c.close()

    th = threading.Thread(target=server)
    th.start()
    s = socket.create_connection(("127.0.0.1", port))
    apply(s, strategy)
    for _ in range(rounds):
        recv_exact(s, 1000)
        send_chunks(s, strategy, 1000, 100)
    th.join()
    s.close()


def multi(lsock, port, strategy, requests):
    sizes = (275, 24, 292)

    def server():
        c, _ = lsock.accept()
        apply(c, strategy)
        for _ in range(requests):
            recv_exact(c, sum(sizes))
            c.sendall(b"r" * 100)
        c.close()

    th = threading.Thread(target=server)
    th.start()
    s = socket.create_connection(("127.0.0.1", port))
    apply(s, strategy)
    for _ in range(requests):
        if strategy == "writev":
            s.sendmsg([b"a" * n for n in sizes])
        else:
            for n in sizes:
                s.sendall(b"a" * n)
        recv_exact(s, 100)
    th.join()
    s.close()


def burst(lsock, port, strategy, rounds, n=3):
    def server():
        c, _ = lsock.accept()
        apply(c, strategy)
        for _ in range(rounds * n):
            c.sendall(recv_exact(c, 132))
        c.close()

    th = threading.Thread(target=server)
    th.start()
    s = socket.create_connection(("127.0.0.1", port))
    apply(s, strategy)
    for _ in range(rounds):
        for _ in range(n):
            s.sendall(b"q" * 132)
        for _ in range(n):
            recv_exact(s, 132)
    th.join()
    s.close()


def corkonly(lsock, port, strategy, rounds):
    """TCP_CORK set once and never cleared (a forgotten uncork): each 100 B request waits for
    the 200 ms cork ceiling before it leaves."""

    def server():
        c, _ = lsock.accept()
        c.setsockopt(T, socket.TCP_NODELAY, 1)
        for _ in range(rounds):
            recv_exact(c, 100)
            c.sendall(b"r" * 100)
        c.close()

    th = threading.Thread(target=server)
    th.start()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(T, socket.TCP_CORK, 1)
    for _ in range(rounds):
        s.sendall(b"c" * 100)
        recv_exact(s, 100)
    th.join()
    s.close()


def main():
    port, kind, strategy = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(1)
    {"chunked": chunked, "multi": multi, "burst": burst, "corkonly": corkonly}[kind](lsock, port, strategy, count)
    lsock.close()


if __name__ == "__main__":
    main()
