#!/usr/bin/env python3
"""A backend that streams its reply, as a token stream does: Python's http.server writing the
response header, then the body 5 ms later (the next piece ready). Behind a proxy that forwards
each piece as it comes (nginx `proxy_buffering off`, HAProxy), the proxy writes the two pieces
separately to its client.

  stream_server.py HOST PORT
"""
import http.server
import sys
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
        time.sleep(0.005)
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
