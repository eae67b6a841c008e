#!/usr/bin/env python3
"""Python's http.client POSTing a file body on one kept-alive connection: it sets TCP_NODELAY
itself and sends the header and the body (read from the file object) in separate send() calls.

  http_client.py HOST PORT [requests]
"""
import http.client
import io
import sys

host, port = sys.argv[1], int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
data = b'{"user":"alice","items":[1,2,3]}' + b" " * 300
conn = http.client.HTTPConnection(host, port)
for _ in range(n):
    conn.request("POST", "/api", body=io.BytesIO(data), headers={"Content-Type": "application/json", "Content-Length": str(len(data))})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
conn.close()
