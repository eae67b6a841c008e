#!/usr/bin/env python3
"""Two real services side by side, for `watch --kernel`'s owners and `tcpstall sockets`.

  owners.py http-server PORT        Python's http.server, unmodified (Nagle left on:
                                    BaseHTTPRequestHandler.disable_nagle_algorithm is False);
                                    it writes the response header block, then the body: on a
                                    kept-alive connection Nagle holds the body until the
                                    client's delayed ACK of the header (~40 ms a request)
  owners.py http-client PORT N FILE http.client POSTing FILE N times on one connection
                                    (http.client sets TCP_NODELAY; the body is a file object)
  owners.py nodelay-server PORT     a socketserver that sets TCP_NODELAY on each accepted
                                    socket and answers in the same two writes: no stall
  owners.py nodelay-client PORT N [PAUSE_MS]
                                    its client (TCP_NODELAY, request in two writes)
  a line "ready" on standard output once listening; clients exit when done, servers on SIGTERM.
"""
import http.client
import http.server
import os
import socket
import socketserver
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = b'{"ok":true,"len":%d}' % len(body) + b" " * 150
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()  # write 1: status line and headers
        self.wfile.write(reply)  # write 2: the body

    def log_message(self, *args):
        pass


class NoDelay(socketserver.StreamRequestHandler):
    def setup(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def handle(self):
        while True:
            line = self.rfile.read(64)
            if len(line) < 64:
                return
            self.wfile.write(b"H" * 40)  # write 1
            self.wfile.write(b"B" * 150)  # write 2


class Threading(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "http-server":
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        print("ready", os.getpid(), flush=True)
        srv.serve_forever()
    elif mode == "http-client":
        n, path = int(sys.argv[3]), sys.argv[4]
        conn = http.client.HTTPConnection("127.0.0.1", port)
        for _ in range(n):
            with open(path, "rb") as f:
                size = str(os.path.getsize(path))
                conn.request("POST", "/upload", body=f, headers={"Content-Length": size})
            conn.getresponse().read()
        conn.close()
    elif mode == "nodelay-server":
        srv = Threading(("127.0.0.1", port), NoDelay)
        print("ready", os.getpid(), flush=True)
        srv.serve_forever()
    elif mode == "nodelay-client":
        n = int(sys.argv[3])
        pause = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            s.sendall(b"q" * 24)
            s.sendall(b"r" * 40)
            got = 0
            while got < 190:
                got += len(s.recv(4096))
            time.sleep(pause)
        s.close()
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
