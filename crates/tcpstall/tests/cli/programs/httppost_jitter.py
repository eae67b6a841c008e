#!/usr/bin/env python3
"""Issue 34's 25-request capture: Python's http.client POSTs bodies of 175 or 176 bytes to
Python's http.server on one kept-alive connection, thinking 5 to 45 ms between requests.
Both unmodified standard library (http.client sets TCP_NODELAY; http.server leaves Nagle on
and writes its header block and body in two writes: scripts/httppost.py says more).

  httppost_jitter.py PORT [requests]
"""
import http.client
import http.server
import random
import sys
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = b'{"ok":true,"echo":%d}' % len(body) + b" " * 150
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rng = random.Random(34)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(n):
        body = b"x" * (175 + rng.randint(0, 1))
        conn.request("POST", "/api", body=body, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
        time.sleep(rng.uniform(0.005, 0.045))
    conn.close()
    srv.shutdown()
    srv.server_close()


if __name__ == "__main__":
    main()
