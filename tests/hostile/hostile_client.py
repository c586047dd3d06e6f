#!/usr/bin/env python3
"""Hostile and sloppy HTTP clients against a loom server (loopback only).

Used by tests/e2e_hostile_test.sh. Each phase runs for a bounded time while a
monitor measures how long an honest caller waits for `GET /v1/whoami`; the
phase fails (exit 1, a line starting with FAIL) when what the server does is
not what docs/server.md says. Usage:

  hostile_client.py PHASE --port P --token T [--user-token U] [--job J]

PHASE: slowloris | idle | follow | framing | release
"""
import argparse
import json
import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def connect(port, timeout=5.0):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s, within):
    """What the server sends until it closes, or `within` seconds pass."""
    s.settimeout(within)
    out = b""
    end = time.time() + within
    try:
        while time.time() < end:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out, False


def request(port, method, path, token=None, body=b"", timeout=10.0):
    """One request on a fresh connection: (status, body bytes, seconds)."""
    start = time.time()
    s = connect(port, timeout)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if token:
        head += "Authorization: Bearer %s\r\n" % token
    head += "Content-Length: %d\r\n\r\n" % len(body)
    s.sendall(head.encode() + body)
    data, _ = read_all(s, timeout)
    s.close()
    took = time.time() - start
    if not data.startswith(b"HTTP/1.1 "):
        return 0, data, took
    status = int(data[9:12])
    return status, data.split(b"\r\n\r\n", 1)[-1], took


class Monitor(threading.Thread):
    """An honest caller: GET /v1/whoami every 0.2 s; keeps the worst wait."""

    def __init__(self, port, token):
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.worst, self.failures, self.count = 0.0, 0, 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                status, _, took = request(self.port, "GET", "/v1/whoami",
                                          self.token, timeout=10)
                if status != 200:
                    self.failures += 1
            except OSError:
                self.failures += 1
                took = 10.0
            self.worst = max(self.worst, took)
            self.count += 1
            time.sleep(0.2)

    def finish(self, what, bound):
        self.stop.set()
        self.join()
        print("%s: honest caller's worst wait %.3f s over %d requests, %d "
              "failed" % (what, self.worst, self.count, self.failures),
              flush=True)
        if self.failures or self.worst > bound:
            fail("%s: an honest caller waited %.2f s (bound %.1f s) or failed "
                 "(%d)" % (what, self.worst, bound, self.failures))


def slowloris(args):
    """Connections that send a header line every second and never finish."""
    mon = Monitor(args.port, args.token)
    mon.start()
    socks = []
    for _ in range(args.count):
        s = connect(args.port)
        s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    end = time.time() + args.seconds
    answered = 0
    while time.time() < end and socks:
        time.sleep(1.0)
        alive = []
        for s in socks:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                alive.append(s)
            except OSError:
                answered += 1
        socks = alive
    # By now (past the head deadline) the server has answered each with 408
    # and closed it.
    got408 = 0
    for s in socks:
        data, closed = read_all(s, 5.0)
        if data.startswith(b"HTTP/1.1 408"):
            got408 += 1
        elif closed:
            answered += 1
        s.close()
    mon.finish("slowloris", args.bound)
    print("slowloris: %d of %d connections answered 408, %d closed" %
          (got408, args.count, answered), flush=True)
    if got408 + answered < args.count:
        fail("slowloris: %d connections were still open past the head deadline"
             % (args.count - got408 - answered))


def idle(args):
    """Connections that connect and send nothing (or half a request)."""
    mon = Monitor(args.port, args.token)
    mon.start()
    socks = [connect(args.port) for _ in range(args.count)]
    for i, s in enumerate(socks):
        if i % 2:
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(args.seconds)
    mon.finish("idle", args.bound)
    for s in socks:
        s.close()


def follow(args):
    """One user opens many log follow streams of its job."""
    mon = Monitor(args.port, args.token)
    mon.start()
    socks, statuses = [], []
    for _ in range(args.count):
        s = connect(args.port)
        s.sendall(("GET /v1/jobs/%s/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer %s\r\n\r\n" %
                   (args.job, args.user_token)).encode())
        socks.append(s)
    for s in socks:
        s.settimeout(10)
        try:
            head = s.recv(4096)
        except socket.timeout:
            head = b""
        statuses.append(int(head[9:12]) if head.startswith(b"HTTP/1.1 ")
                        else 0)
    time.sleep(args.seconds)
    mon.finish("follow", args.bound)
    for s in socks:
        s.close()
    print("follow: statuses %s" % sorted(statuses), flush=True)
    if statuses.count(200) < 1 or statuses.count(429) < 1 or \
            statuses.count(200) + statuses.count(429) != len(statuses):
        fail("follow: expected some 200 streams and the rest 429, got %s" %
             statuses)


def framing(args):
    """Requests that two readers could frame differently."""
    who = ("GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s"
           "\r\n\r\n" % args.token).encode()
    cases = [
        ("two lengths", b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 5\r\n"
         b"Content-Length: 6\r\n\r\nhello!", [400]),
        ("chunked and length", b"POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding:"
         b" chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", [400]),
        ("xchunked", b"POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: xchunked"
         b"\r\n\r\n", [501]),
        ("negative length", b"POST /v1/jobs HTTP/1.1\r\nContent-Length: -5"
         b"\r\n\r\n", [400]),
        ("folded header", b"GET /v1/whoami HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n",
         [400]),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", [400, 505]),
        ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
         [400]),
        ("huge head", b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
         [431]),
        ("huge body", b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 2000000"
         b"\r\n\r\n", [413]),
    ]
    for name, raw, want in cases:
        s = connect(args.port)
        start = time.time()
        s.sendall(raw)
        # As a client that has nothing more to send: the server answers,
        # then closes at once instead of lingering.
        s.shutdown(socket.SHUT_WR)
        data, closed = read_all(s, 5.0)
        s.close()
        status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
        took = time.time() - start
        if status not in want or not closed or took > 3.0:
            fail("framing: %s: got %s (closed %s) after %.2f s, want %s" %
                 (name, data[:80], closed, took, want))
        print("framing: %s -> %d in %.3f s, closed" % (name, status, took),
              flush=True)
    # An unauthenticated POST whose body is an authenticated request: one
    # answer (401); the body is never read as a request.
    s = connect(args.port)
    s.sendall(("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
               "Connection: close\r\n\r\n" % len(who)).encode() + who)
    data, _ = read_all(s, 5.0)
    s.close()
    if data.count(b"HTTP/1.1 ") != 1 or not data.startswith(b"HTTP/1.1 401"):
        fail("framing: a request smuggled in a body was answered: %r" %
             data[:300])
    print("framing: smuggled request in a body -> one 401", flush=True)
    # Two pipelined requests in one segment: two answers, in order.
    s = connect(args.port)
    s.sendall(who + who.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    data, _ = read_all(s, 5.0)
    s.close()
    if data.count(b"HTTP/1.1 200") != 2:
        fail("framing: two pipelined requests got %d answers" %
             data.count(b"HTTP/1.1 "))
    print("framing: two pipelined requests -> two answers", flush=True)
    # A wrong method is 405 with Allow; a zero-padded id matches no route.
    status, _, _ = request(args.port, "DELETE", "/v1/jobs", args.token)
    if status != 405:
        fail("framing: DELETE /v1/jobs got %d, want 405" % status)
    status, _, _ = request(args.port, "GET", "/v1/jobs/0000000000000000001",
                           args.token)
    if status != 404:
        fail("framing: a zero-padded job id got %d, want 404" % status)
    print("framing: 405 for a wrong method, 404 for a padded id", flush=True)


def release(args):
    """One request naming one job 5,000 times is cheap."""
    body = json.dumps({"ids": [int(args.job)] * 5000}).encode()
    status, data, took = request(args.port, "POST", "/v1/jobs/release",
                                 args.user_token, body, timeout=30)
    print("release: 5,000 copies of one id -> %d in %.3f s" % (status, took),
          flush=True)
    if status != 200 or took > args.bound:
        fail("release: %d after %.2f s (bound %.1f s): %r" %
             (status, took, args.bound, data[:200]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--user-token", default="")
    p.add_argument("--job", default="1")
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--bound", type=float, default=1.5)
    args = p.parse_args()
    {"slowloris": slowloris, "idle": idle, "follow": follow,
     "framing": framing, "release": release}[args.phase](args)


if __name__ == "__main__":
    main()
