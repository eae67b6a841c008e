#!/usr/bin/env python3
"""Python's http.server, unmodified behaviour: BaseHTTPRequestHandler with Nagle left on
(disable_nagle_algorithm = False). On a kept-alive connection it writes the response header
block (end_headers flushes it) and the body in two writes: Nagle holds the body until the
client ACKs the header, which the client delays.

  http_server.py HOST PORT
"""
import http.server
import sys


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


http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
