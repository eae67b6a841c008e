#!/usr/bin/env python3
"""A real program that is not tcpstall: Python's http.client POSTs to Python's http.server.

Both are the standard library, unmodified. http.client sets TCP_NODELAY and sends the request
header and body in two send() calls; http.server's BaseHTTPRequestHandler (Nagle left on,
`disable_nagle_algorithm = False`) writes the response header block in one write (end_headers
flushes it) and the body in a second write. On a kept-alive connection the client delays its
ACK of the header and the server's Nagle holds the body: a ~40 ms stall per request.

  httppost.py PORT [requests]
"""
import http.client
import http.server
import sys
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the connection becomes interactive

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
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    conn = http.client.HTTPConnection("127.0.0.1", port)
    body = b'{"user":"alice","items":[1,2,3]}' + b" " * 300
    for _ in range(n):
        conn.request("POST", "/api", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
    conn.close()
    srv.shutdown()
    srv.server_close()


if __name__ == "__main__":
    main()
