#!/usr/bin/env python3
"""Reproduce the seed scenarios over real sockets so tcpdump (or `tcpstall shell --capture`) can
capture them.

Used by scripts/make-captures.sh. By default one process runs both ends on loopback (server in
a thread); ROLE=server or ROLE=client runs one end, so the two can sit in different network
namespaces behind the emulated link (HOST = the server's address for the client).

  seedcap.py PORT chunked   default|nodelay|cork   [rounds]   seed 000: 1000 B as 100 x 10 B each way
  seedcap.py PORT multi     default|nodelay|writev [requests] seed 001: 275, 24, 292 B then a 100 B reply
  seedcap.py PORT burst     default|nodelay        [rounds]   seed 002: N x 132 B echoed, N recvs (N=$N, 3)
  seedcap.py PORT corkonly  default                [rounds]   TCP_CORK never cleared: 200 ms each
"""
import os
import socket
import sys
import threading
import time

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


# Each scenario: (server(conn, strategy, count), client(sock, strategy, count)).

def chunked_server(c, strategy, rounds):
    apply(c, strategy)
    for _ in range(rounds):
        send_chunks(c, strategy, 1000, 100)
        recv_exact(c, 1000)


def chunked_client(s, strategy, rounds):
    apply(s, strategy)
    for _ in range(rounds):
        recv_exact(s, 1000)
        send_chunks(s, strategy, 1000, 100)


SIZES = (275, 24, 292)


def multi_server(c, strategy, requests):
    apply(c, strategy)
    for _ in range(requests):
        recv_exact(c, sum(SIZES))
        c.sendall(b"r" * 100)


def multi_client(s, strategy, requests):
    apply(s, strategy)
    for _ in range(requests):
        if strategy == "writev":
            s.sendmsg([b"a" * n for n in SIZES])
        else:
            for n in SIZES:
                s.sendall(b"a" * n)
        recv_exact(s, 100)


N = int(os.environ.get("N", "3"))


def burst_server(c, strategy, rounds):
    apply(c, strategy)
    for _ in range(rounds * N):
        c.sendall(recv_exact(c, 132))


def burst_client(s, strategy, rounds):
    apply(s, strategy)
    for _ in range(rounds):
        for _ in range(N):
            s.sendall(b"q" * 132)
        for _ in range(N):
            recv_exact(s, 132)


def corkonly_server(c, strategy, rounds):
    c.setsockopt(T, socket.TCP_NODELAY, 1)
    for _ in range(rounds):
        recv_exact(c, 100)
        c.sendall(b"r" * 100)


def corkonly_client(s, strategy, rounds):
    """TCP_CORK set once and never cleared (a forgotten uncork): each 100 B request waits for
    the 200 ms cork ceiling before it leaves."""
    s.setsockopt(T, socket.TCP_CORK, 1)
    for _ in range(rounds):
        s.sendall(b"c" * 100)
        recv_exact(s, 100)


SCENARIOS = {
    "chunked": (chunked_server, chunked_client),
    "multi": (multi_server, multi_client),
    "burst": (burst_server, burst_client),
    "corkonly": (corkonly_server, corkonly_client),
}


def main():
    port, kind, strategy = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    role = os.environ.get("ROLE", "both")
    host = os.environ.get("HOST", "127.0.0.1")
    server, client = SCENARIOS[kind]
    th = None
    if role in ("both", "server"):
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("0.0.0.0" if role == "server" else host, port))
        lsock.listen(1)

        def serve():
            c, _ = lsock.accept()
            server(c, strategy, count)
            c.close()
            lsock.close()

        if role == "server":
            serve()
            return
        th = threading.Thread(target=serve)
        th.start()
    # The client: retry the connect briefly (the server may still be starting in its namespace).
    for _ in range(50):
        try:
            s = socket.create_connection((host, port))
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit(f"seedcap: cannot connect to {host}:{port}")
    client(s, strategy, count)
    if th:
        th.join()
    s.close()


if __name__ == "__main__":
    main()
