#!/usr/bin/env python3
"""Two (or more) builds of the proxy side by side: each up at once in front of the same kind of
server, measured in interleaved rounds (so drift of the machine hits them alike), medians.

Usage: bench/ab.py BIN[,BIN...] [--sessions 1,8,32] [--rounds 5] [--http] [--demo BIN] [-- ARGS]

Each BIN serves the demo over stdio (a child of its own per BIN; `--demo` picks the binary that
runs `demo-server`, to tell the proxy's side from the child's), or with `--http` one demo over
HTTP that every BIN fronts. ARGS go to every BIN (e.g. `-- --isolation shared`).
"""

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PROXY, Target, bench, free_port  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bins")
    parser.add_argument("--sessions", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--demo", default=None, help="the binary that runs demo-server")
    parser.add_argument("args", nargs="*")
    options = parser.parse_intermixed_args()
    bins = options.bins.split(",")
    levels = [int(level) for level in options.sessions.split(",")]
    demo_bin = options.demo or str(PROXY)
    started, targets = [], []
    try:
        if options.http:
            port = free_port()
            demo = Target("demo", [demo_bin, "demo-server", "--http", f"127.0.0.1:{port}"], port)
            started.append(demo)
        for binary in bins:
            port = free_port()
            upstream = (["--http", demo.url] if options.http
                        else ["--stdio", f"{shlex.quote(options.demo or binary)} demo-server"])
            target = Target("ab", [binary, "--listen", f"127.0.0.1:{port}", *upstream, *options.args], port,
                            env={"RUST_LOG": "warn"})
            started.append(target)
            targets.append((binary, target))
        samples = {(binary, level): [] for binary, _ in targets for level in levels}
        for _ in range(options.rounds):
            for level in levels:
                for binary, target in targets:
                    cpu = target.cpu_seconds()
                    r = bench("calls", "--url", target.url, "--sessions", level,
                              "--calls", max(options.calls // level, 20), "--warmup", 20)
                    r["cpu_us_per_call"] = (target.cpu_seconds() - cpu) * 1e6 / (r["calls"] + 20 * level)
                    samples[(binary, level)].append(r)
        print("| build | sessions | req/s | p50 µs | p99 µs | proxy CPU µs/call |")
        print("|---|---:|---:|---:|---:|---:|")
        for level in levels:
            for binary, _ in targets:
                runs = samples[(binary, level)]
                median = lambda key: sorted(r[key] for r in runs)[len(runs) // 2]
                print(f"| {binary} | {level} | {median('throughput_rps'):.0f} | {median('p50_us'):.0f} "
                      f"| {median('p99_us'):.0f} | {median('cpu_us_per_call'):.0f} |")
    finally:
        for target in reversed(started):
            target.stop()


if __name__ == "__main__":
    main()
