#!/usr/bin/env python3
"""What a client can make the proxy hold, with a bound and without it (the same binary, the
bound set out of reach): requests in flight in one session (a WebSocket client pipelining
calls that do not return), and connections left open. Prints the proxy's RSS (VmRSS) and the
gauges before and after each load, as RELIABILITY.md's bounds table shows them.

    python3 bench/bounds.py --proxy target/debug/mcp-session-proxy
"""

import argparse
import base64
import json
import os
import re
import socket
import subprocess
import sys
import time


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(l.split()[1] for l in status if l.startswith("VmRSS:")))


def metric(port: int, name: str) -> float:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        text = b""
        while chunk := s.recv(65536):
            text += chunk
    values = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text.decode(), re.M)
    return sum(float(v) for v in values)


def start(proxy: str, args: list[str]) -> tuple[subprocess.Popen, int]:
    child = subprocess.Popen([proxy, "--listen", "127.0.0.1:0", "--log-format", "json", *args],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, RUST_LOG="info"))
    for line in child.stderr:
        addr = json.loads(line).get("fields", {}).get("addr")
        if addr:
            # Keep reading its log, so that writing it never blocks the proxy.
            subprocess.Popen(["cat"], stdin=child.stderr, stdout=subprocess.DEVNULL)
            return child, int(addr.rsplit(":", 1)[1])
    raise SystemExit("the proxy did not start")


def settle(pid: int) -> int:
    """RSS once it stopped moving (three equal readings 200 ms apart)."""
    readings = []
    while len(readings) < 3 or len(set(readings[-3:])) > 1:
        readings.append(rss_kib(pid))
        time.sleep(0.2)
    return readings[-1]


class WebSocket:
    """Just enough of RFC 6455 for text frames to /mcp."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nupgrade: websocket\r\n"
                           f"connection: Upgrade\r\nsec-websocket-key: {key}\r\n"
                           "sec-websocket-version: 13\r\nsec-websocket-protocol: mcp\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.buffer = b""

    def send(self, message: dict):
        data = json.dumps(message).encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        n = len(data)
        header += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def recv(self) -> dict:
        def need(k):
            while len(self.buffer) < k:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError
                self.buffer += chunk
        need(2)
        n = self.buffer[1] & 0x7F
        at = 2
        if n == 126:
            need(4)
            n, at = int.from_bytes(self.buffer[2:4], "big"), 4
        elif n == 127:
            need(10)
            n, at = int.from_bytes(self.buffer[2:10], "big"), 10
        need(at + n)
        data, self.buffer = self.buffer[at:at + n], self.buffer[at + n:]
        return json.loads(data)


def inflight(proxy: str, calls: int, bound: int | None) -> dict:
    args = ["--max-inflight", str(bound if bound else 1 << 40)]
    child, port = start(proxy, args)
    try:
        ws = WebSocket(port)
        ws.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bounds", "version": "1"}}})
        ws.recv()
        before = settle(child.pid)
        for n in range(calls):
            ws.send({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                     "params": {"name": "sleep", "arguments": {"ms": 600_000}}})
        refused = calls - (bound or calls)
        for _ in range(refused):
            ws.recv()
        while metric(port, "mcp_proxy_requests_inflight") < min(calls, bound or calls):
            time.sleep(0.1)
        after = settle(child.pid)
        return {"bound": bound, "calls": calls, "rss_before_kib": before, "rss_after_kib": after,
                "in_flight": metric(port, "mcp_proxy_requests_inflight"),
                "refused": metric(port, "mcp_proxy_requests_inflight_refused_total")}
    finally:
        child.kill()
        child.wait()


def healthz(port: int) -> str:
    """The status line of one `GET /healthz` on a new connection."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        try:
            return s.recv(65536).split(b"\r\n", 1)[0].decode()
        except ConnectionResetError:
            return "reset"


def connections(proxy: str, count: int, bound: int | None) -> dict:
    args = ["--max-connections", str(bound if bound else 1 << 40)]
    child, port = start(proxy, args)
    held = []
    try:
        before = settle(child.pid)
        for _ in range(count):
            held.append(socket.create_connection(("127.0.0.1", port)))
        # Accepted in order: once this one is answered, every one before it was taken.
        probe = healthz(port)
        after = settle(child.pid)
        for s in held:
            s.close()
        while metric(port, "mcp_proxy_http_connections_open") > 1:
            time.sleep(0.1)
        return {"bound": bound, "connections": count, "rss_before_kib": before,
                "rss_after_kib": after, "one_more": probe,
                "refused": metric(port, "mcp_proxy_http_connections_refused_total")}
    finally:
        for s in held:
            s.close()
        child.kill()
        child.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--proxy", required=True)
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--connections", type=int, default=4_000)
    args = p.parse_args()
    results = [
        inflight(args.proxy, args.calls, None),
        inflight(args.proxy, args.calls, 256),
        connections(args.proxy, args.connections, None),
        connections(args.proxy, args.connections, 1_000),
    ]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
