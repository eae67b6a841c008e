#!/usr/bin/env python3
"""A raw MQTT 3.1.1 client (no library): connects, subscribes to a topic at QoS 0, then
publishes to it at QoS 1, N times, each time waiting for both the broker's PUBACK and the
delivery of its own message. The broker answers each publish with two separate writes (the
delivery and the PUBACK): with mosquitto's default set_tcp_nodelay false, Nagle holds the
second until this client's delayed ACK of the first.

  mqtt_rr.py HOST PORT [requests]
"""
import socket
import sys

host, port = sys.argv[1], int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 10


def rl(n):  # MQTT remaining length (3.1.1 section 2.2.3)
    out = b""
    while True:
        d, n = n % 128, n // 128
        out += bytes([d | (0x80 if n else 0)])
        if not n:
            return out


def packet(kind, body):
    return bytes([kind]) + rl(len(body)) + body


def s16(b):
    return len(b).to_bytes(2, "big") + b


def read_packet(s, buf):
    while True:
        if len(buf) >= 2:
            mult, length, i = 1, 0, 1
            while i < len(buf):
                length += (buf[i] & 0x7F) * mult
                mult *= 128
                if not buf[i] & 0x80:
                    break
                i += 1
            else:
                i = None
            if i is not None and len(buf) >= i + 1 + length:
                return buf[0] >> 4, buf[i + 1 : i + 1 + length], buf[i + 1 + length :]
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit("broker closed the connection")
        buf += chunk


s = socket.create_connection((host, port))
buf = b""
s.sendall(packet(0x10, s16(b"MQTT") + bytes([4, 0x02]) + (60).to_bytes(2, "big") + s16(b"tcpstall-rr")))
kind, _, buf = read_packet(s, buf)
assert kind == 2, kind  # CONNACK
s.sendall(packet(0x82, (1).to_bytes(2, "big") + s16(b"tcpstall/rr") + bytes([0])))
kind, _, buf = read_packet(s, buf)
assert kind == 9, kind  # SUBACK
payload = b"x" * 64
for i in range(n):
    pid = (i % 60000) + 2
    s.sendall(packet(0x32, s16(b"tcpstall/rr") + pid.to_bytes(2, "big") + payload))
    got = set()
    while got != {3, 4}:
        kind, _, buf = read_packet(s, buf)
        got.add(kind)  # 3 PUBLISH (the delivery), 4 PUBACK
s.sendall(packet(0xE0, b""))
s.close()
