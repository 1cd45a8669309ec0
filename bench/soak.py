#!/usr/bin/env python3
"""Soak: many sessions held, idled out, held again — does the proxy's memory follow them?

Starts one proxy (one shared demo child, so the sessions cost the proxy and nothing else), then
runs CYCLES rounds of: open SESSIONS sessions with `mcp-bench idle` (initialize +
notifications/initialized each), read the proxy's RSS (the plateau), wait until idle expiry has
ended every one of them (`mcp_proxy_sessions_open` back to 0), read the RSS again. Reports the
RSS before any session, per session, at each plateau and after each expiry, and how much of what
the sessions took went back to the system. Passes when nothing accumulates: every plateau, and
the RSS after every expiry, stays within 10 % of the first plateau, and the RSS after every
expiry within 10 % of the first one after expiry.

    python3 bench/soak.py --proxy target/release/mcp-session-proxy \
        --bench target/release/mcp-bench [--sessions 10000] [--cycles 3] [--report FILE]

Binds 127.0.0.1 only; stops the proxy by its PID, also on errors and Ctrl-C.
"""
import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

IDLE_TTL_S = 30
TOLERANCE = 0.10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1))


def metric(port, name):
    """The sum of `name` over its label sets (one served server here)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        values = [float(line.rsplit(" ", 1)[1])
                  for line in answer.read().decode().splitlines()
                  if line.startswith(name + " ") or line.startswith(name + "{")]
    if not values:
        raise RuntimeError(f"no metric {name}")
    return int(sum(values))


def wait_for(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def settle(pid, seconds=3.0):
    """The RSS once it has stopped moving (allocators give memory back with a delay)."""
    deadline = time.monotonic() + seconds
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kib(pid)
        if abs(now - last) < 64:
            return now
        last = now
    return last


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--report")
    args = parser.parse_args()

    port = free_port()
    proxy = subprocess.Popen(
        [args.proxy, "--listen", f"127.0.0.1:{port}", "--isolation", "shared",
         "--idle-ttl", f"{IDLE_TTL_S}s", "--max-sessions", str(args.sessions * 2),
         "--max-anonymous-sessions", str(args.sessions * 2)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for("the proxy", lambda: _ready(port), 30)
        # One session first, so the shared child and the runtime are up before the baseline.
        subprocess.run([args.bench, "idle", "--url", url, "--sessions", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        wait_for("the first session to expire",
                 lambda: metric(port, "mcp_proxy_sessions_open") == 0, IDLE_TTL_S * 3)
        baseline = settle(proxy.pid)
        cycles = []
        for cycle in range(args.cycles):
            started = time.monotonic()
            subprocess.run([args.bench, "idle", "--url", url, "--sessions", str(args.sessions)],
                           check=True, stdout=subprocess.DEVNULL)
            opened = time.monotonic() - started
            held = metric(port, "mcp_proxy_sessions_open")
            plateau = settle(proxy.pid)
            wait_for("idle expiry", lambda: metric(port, "mcp_proxy_sessions_open") == 0,
                     IDLE_TTL_S * 4 + opened)
            after = settle(proxy.pid, seconds=6.0)
            cycles.append({"held": held, "open_seconds": round(opened, 1), "plateau_kib": plateau,
                           "per_session_kib": round((plateau - baseline) / max(held, 1), 2),
                           "after_expiry_kib": after})
            print(f"cycle {cycle + 1}: {held} sessions held in {opened:.1f} s, RSS {plateau} KiB "
                  f"({cycles[-1]['per_session_kib']} KiB each); after expiry {after} KiB",
                  flush=True)
    finally:
        proxy.terminate()
        try:
            proxy.wait(10)
        except subprocess.TimeoutExpired:
            proxy.kill()

    first_plateau = cycles[0]["plateau_kib"]
    first_after = cycles[0]["after_expiry_kib"]
    within_plateau = all(c["plateau_kib"] <= first_plateau * (1 + TOLERANCE)
                         and c["after_expiry_kib"] <= first_plateau * (1 + TOLERANCE)
                         for c in cycles)
    steady_after = all(c["after_expiry_kib"] <= first_after * (1 + TOLERANCE) for c in cycles)
    taken = max(first_plateau - baseline, 1)
    given_back = [round(100 * (c["plateau_kib"] - c["after_expiry_kib"]) / max(c["plateau_kib"] - baseline, 1))
                  for c in cycles]
    report = {"sessions": args.sessions, "idle_ttl_s": IDLE_TTL_S, "baseline_kib": baseline,
              "cycles": cycles, "within_first_plateau": within_plateau,
              "after_expiry_steady": steady_after, "given_back_percent": given_back,
              "left_after_expiry_percent_of_sessions": round(100 * (first_after - baseline) / taken)}
    print(json.dumps(report, indent=2))
    if args.report:
        with open(args.report, "w") as out:
            json.dump(report, out, indent=2)
    print(f"soak: before any session {baseline} KiB, first plateau {first_plateau} KiB, after the "
          f"first expiry {first_after} KiB ({given_back[0]} % of what the sessions took given "
          f"back); every plateau and RSS after expiry within {TOLERANCE:.0%} of the first plateau: "
          f"{'yes' if within_plateau else 'NO'}; RSS after expiry steady across cycles: "
          f"{'yes' if steady_after else 'NO'}")
    sys.exit(0 if within_plateau and steady_after else 1)


def _ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
