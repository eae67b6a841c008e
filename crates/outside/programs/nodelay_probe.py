#!/usr/bin/env python3
"""Prints getsockopt(TCP_NODELAY) of a connected and of an accepted TCP socket this program
made itself (it never sets the option): `connected=N accepted=N`. A fix applied from outside
(sock_ops in its cgroup, the LD_PRELOAD shim) shows as 1.
"""
import socket

ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
c = socket.create_connection(ls.getsockname())
a, _ = ls.accept()
opt = lambda s: s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
print("connected=%d accepted=%d" % (opt(c), opt(a)))
