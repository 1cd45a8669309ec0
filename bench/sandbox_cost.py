#!/usr/bin/env python3
"""What the stdio sandbox costs: a child's start (a new session's `initialize` answered, the
proxy starting its child), and a call's p50 through the proxy, each without and with the
sandbox, interleaved in one run.

    cargo build --release && python3 bench/sandbox_cost.py [--starts 200] [--calls 2000] [--proxy PATH]

The child is the bundled demo server (the proxy's binary); confined, with the proxy's defaults
plus `network = "none"` and a memory limit. Every process it
starts binds 127.0.0.1 and is stopped by its own PID. Standard library only.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROXY = os.path.join(ROOT, "target/release/mcp-session-proxy")
# The binary measured: PROXY, or --proxy.
BINARY = [PROXY]
INIT = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}) + "\n").encode()


def start_once(port: int) -> float:
    """Seconds from a new session's initialize to its answer: the proxy starting the session's
    child (confined: its private directory, its cache, the launcher confining itself) and the
    child answering. The session is ended after, its child released."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    started = time.perf_counter()
    session, _ = post(conn, json.loads(INIT))
    took = time.perf_counter() - started
    conn.request("DELETE", "/mcp", headers={"mcp-session-id": session,
                                            "mcp-protocol-version": "2025-11-25"})
    conn.getresponse().read()
    conn.close()
    return took


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proxy(confined: bool):
    port = free_port()
    argv = [BINARY[0], "--listen", f"127.0.0.1:{port}", "--drain-delay", "0s"]
    if confined:
        argv += ["--sandbox", "--sandbox-network", "none", "--sandbox-memory", "1GiB"]
    child = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return child, port
        except OSError:
            time.sleep(0.05)
    child.kill()
    raise RuntimeError("the proxy did not listen")


def post(conn, body, session=None):
    headers = {"content-type": "application/json",
               "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-11-25"}
    if session:
        headers["mcp-session-id"] = session
    conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.getheader("mcp-session-id"), data


def calls(port, n):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    session, _ = post(conn, json.loads(INIT))
    post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    took = []
    for i in range(n):
        t = time.perf_counter()
        post(conn, {"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x"}}}, session)
        took.append(time.perf_counter() - t)
    conn.close()
    return took


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=200)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--proxy", default=PROXY,
                   help="the binary to measure (another build, to compare) [default: %(default)s]")
    args = p.parse_args()
    BINARY[0] = args.proxy
    starts = {False: [], True: []}
    per_call = {False: [], True: []}
    proxies = {c: proxy(c) for c in (False, True)}
    try:
        for _ in range(args.starts):
            for confined in (False, True):
                starts[confined].append(start_once(proxies[confined][1]))
        for _ in range(4):
            for confined in (False, True):
                per_call[confined] += calls(proxies[confined][1], args.calls // 4)
    finally:
        for child, _ in proxies.values():
            child.terminate()
            child.wait()
    ms = lambda xs: round(statistics.median(xs) * 1000, 3)  # noqa: E731
    report = {
        "start_p50_ms": {"plain": ms(starts[False]), "sandboxed": ms(starts[True])},
        "call_p50_ms": {"plain": ms(per_call[False]), "sandboxed": ms(per_call[True])},
        "starts": args.starts, "calls": args.calls,
    }
    report["start_added_ms"] = round(report["start_p50_ms"]["sandboxed"]
                                     - report["start_p50_ms"]["plain"], 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
