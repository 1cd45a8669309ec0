#!/usr/bin/env python3
"""Two builds of the proxy side by side (a change's before and after): stdio (a demo child per
session) and HTTP (in front of the demo's HTTP server), 1 and 8 sessions. Both builds are up at
once and measured in interleaved rounds, the order alternating, so drift of the machine hits both
alike; per cell the median of the rounds. Prints a Markdown table.

    bench/compare.py MCP_BENCH BEFORE_BINARY AFTER_BINARY [ROUNDS]

Every process it starts binds 127.0.0.1 and is stopped by its own PID.
"""
import json, subprocess, sys, time, socket, os, signal
BENCH = sys.argv[1]; BUILDS = dict(zip(["before", "after"], sys.argv[2:4])); ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 5

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def wait_port(port, proc):
    for _ in range(400):
        if proc.poll() is not None: raise RuntimeError("exited")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.1): return
        except OSError: time.sleep(0.025)
    raise RuntimeError("no listen")

procs = []
def start(args, port):
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
    procs.append(p); wait_port(port, p); return p

try:
    demo_port = free_port()
    start([BUILDS["after"], "demo-server", "--http", f"127.0.0.1:{demo_port}"], demo_port)
    targets = {}
    for name, exe in BUILDS.items():
        for kind in ["stdio", "http"]:
            port = free_port()
            extra = [] if kind == "stdio" else ["--http", f"http://127.0.0.1:{demo_port}/mcp"]
            start([exe, "--listen", f"127.0.0.1:{port}", *extra], port)
            targets[(name, kind)] = f"http://127.0.0.1:{port}/mcp"
    samples = {}
    for r in range(ROUNDS):
        for sessions, calls in [(1, 2000), (8, 500)]:
            order = list(targets.items())
            if r % 2:
                order.reverse()  # neither build always goes first
            for (name, kind), url in order:
                out = subprocess.run([BENCH, "calls", "--url", url, "--sessions", str(sessions), "--calls", str(calls), "--warmup", "50"],
                                     check=True, capture_output=True, text=True).stdout
                samples.setdefault((kind, sessions, name), []).append(json.loads(out))
    med = lambda v: sorted(v)[len(v)//2]
    print("| upstream | sessions | build | p50 µs | p99 µs | req/s |")
    print("|---|---:|---|---:|---:|---:|")
    for (kind, sessions, name), runs in sorted(samples.items()):
        print(f"| {kind} | {sessions} | {name} | {round(med([x['p50_us'] for x in runs]))} | {round(med([x['p99_us'] for x in runs]))} | {med([round(x['throughput_rps']) for x in runs])} |")
finally:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try: p.wait(10)
        except subprocess.TimeoutExpired: p.kill()
