#!/usr/bin/env python3
"""Idle sessions on one replica, 10k → 100k → 1M: what each costs and what stays flat.

One proxy in front of one shared demo child (in memory, or with `--redis` on a redis-server of
its own), sessions opened with mcp-bench (initialize, then idle) up to each step; at each step:
the proxy's RSS per session, the rate the step's sessions were opened at, one active session's
p50 and p99 (`tools/call`), the proxy's CPU while the sessions sit idle (what the sweeps cost),
the last idle sweep's time and the sessions it looked at, and with Redis its `used_memory` per
session. Then an expiry wave: a proxy with a short idle TTL, its sessions expiring as they came,
and the time of each sweep per session it ended.

    bench/sessions.py                          the curve of target/release/mcp-session-proxy
    bench/sessions.py --bins OLD,NEW           each build in turn, one table
    bench/sessions.py --steps 10000,100000 --redis

Every process it starts binds 127.0.0.1 and is stopped by its own PID.
"""

import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from processes import CLUSTER_SECRET, PROXY, Target, bench, ensure_redis, free_port, log, start_redis, wait_for_port  # noqa: E402

STEPS = [10_000, 100_000, 1_000_000]
# Idle CPU is read over this long at each step.
IDLE_WINDOW = float(os.environ.get("IDLE_WINDOW", "10"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def metrics(target):
    """The target's /metrics, as {name: value} of the default server's series (or unlabelled)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{target.port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    figures = {}
    for line in text.splitlines():
        found = re.match(r'^(\w+)(?:\{server="default"\})?\s+(\S+)$', line)
        if found:
            figures[found[1]] = float(found[2])
    return figures


def cpu_ticks(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def redis_used(port):
    info = subprocess.run(["redis-cli", "-p", str(port), "info", "memory"], check=True,
                          capture_output=True, text=True).stdout
    return int(re.search(r"^used_memory:(\d+)", info, re.M)[1])


def start_proxy(binary, extra=(), env=None):
    port = free_port()
    return Target("sessions", [binary, "--listen", f"127.0.0.1:{port}",
                               "--stdio", f"{shlex.quote(str(PROXY))} demo-server", "--isolation", "shared",
                               "--max-sessions", "3000000", "--max-anonymous-sessions", "3000000",
                               *extra], port, env={"RUST_LOG": "warn", **(env or {})})


def written(target, seconds=300):
    """Waits until the target's writes to Redis are all written."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if metrics(target).get("mcp_proxy_store_write_queue", 0) == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"writes to Redis still queued after {seconds}s")


def curve(binary, steps=STEPS, redis=False, concurrency=8):
    """The figures of each step, for one build."""
    redis_server, redis_port, extra, env = None, None, [], {}
    if redis:
        redis_port = free_port()
        redis_server = start_redis(redis_port)
        wait_for_port(redis_port, redis_server)
        extra = ["--store", f"redis://127.0.0.1:{redis_port}/0", "--node-id", "bench"]
        env = {"MCP_PROXY_CLUSTER_SECRET": CLUSTER_SECRET}
    proxy, rows = None, []
    try:
        proxy = start_proxy(binary, extra, env)
        bench("idle", "--url", proxy.url, "--sessions", 1)
        if redis:
            written(proxy)
        base_rss, base_redis = proxy.rss_kib(), redis_used(redis_port) if redis else 0
        opened = 0
        for step in steps:
            log(f"{Path(binary).name}: opening sessions up to {step:,}")
            created = bench("idle", "--url", proxy.url, "--sessions", step - opened,
                            "--concurrency", concurrency)
            opened = step
            if redis:
                written(proxy)
            rss = proxy.rss_kib()
            before = cpu_ticks(proxy.process.pid)
            time.sleep(IDLE_WINDOW)
            idle_cpu = (cpu_ticks(proxy.process.pid) - before) / CLOCK_TICKS / IDLE_WINDOW
            figures = metrics(proxy)
            active = bench("calls", "--url", proxy.url, "--sessions", 1, "--calls", 3000, "--warmup", 100)
            row = {"sessions": step, "rss_mib": rss / 1024,
                   "bytes_per_session": (rss - base_rss) * 1024 / step,
                   "opened_per_second": created["per_second"],
                   "p50_us": active["p50_us"], "p99_us": active["p99_us"],
                   "idle_cpu_percent": 100 * idle_cpu,
                   "sweep_us": figures.get("mcp_proxy_idle_sweep_seconds", float("nan")) * 1e6,
                   "sweep_looks": figures.get("mcp_proxy_idle_sweep_looks_total", float("nan"))}
            if redis:
                row["redis_bytes_per_session"] = (redis_used(redis_port) - base_redis) / step
            log(row)
            rows.append(row)
    finally:
        if proxy:
            proxy.stop()
        if redis_server:
            os.killpg(redis_server.pid, 15)
            redis_server.wait()
    return rows


def expiry_wave(binary, sessions=100_000, ttl=15, concurrency=8):
    """Sessions opened for a while, each expiring `ttl` s after it was opened: every sweep's
    time against the sessions it ended (sampled once a second from /metrics)."""
    proxy = start_proxy(binary, ["--idle-ttl", f"{ttl}s"])
    samples = []
    try:
        bench("idle", "--url", proxy.url, "--sessions", sessions, "--concurrency", concurrency)
        last = metrics(proxy)
        deadline = time.time() + 3 * ttl + 30
        while time.time() < deadline:
            time.sleep(1)
            now = metrics(proxy)
            ended = now["mcp_proxy_sessions_expired_total"] - last["mcp_proxy_sessions_expired_total"]
            if ended > 0:
                samples.append((ended, now.get("mcp_proxy_idle_sweep_seconds", float("nan"))))
            last = now
            if now["mcp_proxy_sessions_expired_total"] >= sessions:
                break
    finally:
        proxy.stop()
    per_session = sorted(seconds / ended * 1e6 for ended, seconds in samples if ended >= 100)
    return {"sessions": sessions, "ttl_s": ttl, "ticks": len(samples),
            "us_per_ended_session_p50": per_session[len(per_session) // 2] if per_session else float("nan"),
            "largest_sweep_ms": max((s for _, s in samples), default=float("nan")) * 1e3}


def table(results, redis=False, first="build"):
    lines = [f"| {first} | sessions | RSS MiB | bytes per session | opened per s | active p50 µs | active p99 µs "
             "| idle CPU % | last idle sweep µs | idle sweep looks so far |" + (" Redis bytes per session |" if redis else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if redis else "")]
    for build, rows in results:
        for r in rows:
            looks = "–" if r["sweep_looks"] != r["sweep_looks"] else f"{r['sweep_looks']:.0f}"
            sweep = "–" if r["sweep_us"] != r["sweep_us"] else f"{r['sweep_us']:.0f}"
            lines.append(f"| {build} | {r['sessions']:,} | {r['rss_mib']:.0f} | {r['bytes_per_session']:.0f} "
                         f"| {r['opened_per_second']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} "
                         f"| {r['idle_cpu_percent']:.1f} | {sweep} | {looks} |"
                         + ((f" {r['redis_bytes_per_session']:.0f} |" if "redis_bytes_per_session" in r else " – |")
                            if redis else ""))
    return lines


def svg(results, path):
    """Three small panels over sessions open (log scale): bytes per session, opened per second,
    active p50 — one line per build."""
    panels = [("bytes per idle session", "bytes_per_session"), ("sessions opened per second", "opened_per_second"),
              ("active session p50 µs", "p50_us")]
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    width, height, pad = 260, 170, 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{len(panels) * width}" height="{height + 40}" '
             'font-family="sans-serif" font-size="11">']
    for index, (title, key) in enumerate(panels):
        x0 = index * width + pad
        values = [r[key] for _, rows in results for r in rows]
        top = max(values) * 1.15 if values else 1
        xs = sorted({r["sessions"] for _, rows in results for r in rows})
        lo, hi = math.log10(xs[0]), math.log10(xs[-1]) if len(xs) > 1 else math.log10(xs[0]) + 1
        place = lambda n: x0 + (math.log10(n) - lo) / (hi - lo or 1) * (width - pad - 20)
        level = lambda v: 20 + (1 - v / top) * (height - 40)
        parts.append(f'<text x="{x0}" y="12">{title}</text>')
        parts.append(f'<line x1="{x0}" y1="{height - 20}" x2="{x0 + width - pad - 20}" y2="{height - 20}" stroke="#999"/>')
        parts.append(f'<line x1="{x0}" y1="20" x2="{x0}" y2="{height - 20}" stroke="#999"/>')
        parts.append(f'<text x="{x0 - 4}" y="24" text-anchor="end">{top:.0f}</text>')
        parts.append(f'<text x="{x0 - 4}" y="{height - 20}" text-anchor="end">0</text>')
        for n in xs:
            parts.append(f'<text x="{place(n):.0f}" y="{height - 6}" text-anchor="middle">{n:,}</text>')
        for b, (build, rows) in enumerate(results):
            points = " ".join(f"{place(r['sessions']):.1f},{level(r[key]):.1f}" for r in rows)
            parts.append(f'<polyline fill="none" stroke="{colours[b % 4]}" stroke-width="2" points="{points}"/>')
    for b, (build, _) in enumerate(results):
        parts.append(f'<text x="{pad + b * 220}" y="{height + 30}" fill="{colours[b % 4]}">{build}</text>')
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bins", default=str(PROXY), help="builds, comma-separated (one table)")
    parser.add_argument("--steps", default=",".join(map(str, STEPS)))
    parser.add_argument("--redis", action="store_true", help="the proxy on a redis-server of its own")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--svg", default=None, help="where to draw the curve")
    parser.add_argument("--wave", action="store_true", help="also the expiry wave (100k sessions)")
    args = parser.parse_args()
    if args.redis and not ensure_redis():
        sys.exit("redis-server is needed for --redis")
    steps = [int(s) for s in args.steps.split(",")]
    results = [(Path(b).name if b != str(PROXY) else "mcp-session-proxy", curve(b, steps, args.redis, args.concurrency))
               for b in args.bins.split(",")]
    print("\n".join(table(results, args.redis)))
    if args.svg:
        svg(results, args.svg)
    if args.wave:
        for b in args.bins.split(","):
            print(f"expiry wave, {Path(b).name}: {expiry_wave(b)}")


if __name__ == "__main__":
    main()
