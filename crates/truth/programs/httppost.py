#!/usr/bin/env python3
"""Python's http.client POSTs a file body to Python's http.server (standard library, unmodified;
the handler as scripts/httppost.py): run by tcpstall-truth in two network namespaces.

  httppost.py server HOST PORT
  httppost.py client HOST PORT REQUESTS SEED
"""
import http.client
import http.server
import random
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        reply = b'{"ok":true,"echo":%d}' % len(body) + b" " * 150
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()  # write 1: status line and headers
        self.wfile.write(reply)  # write 2: the body

    def log_message(self, *args):
        pass


def main():
    role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server":
        srv = http.server.HTTPServer((host, port), Handler)
        print("ready", flush=True)
        srv.serve_forever()
        return
    n, seed = int(sys.argv[4]), int(sys.argv[5])
    rnd = random.Random(seed)
    conn = http.client.HTTPConnection(host, port)
    body = b'{"user":"alice","items":[1,2,3]}' + b" " * 300
    for _ in range(n):
        time.sleep(rnd.uniform(0.0, 0.1))
        conn.request("POST", "/api", body=body, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()


if __name__ == "__main__":
    main()
