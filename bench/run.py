#!/usr/bin/env python3
"""The benchmark run: every proxy side by side, against the same upstream, in one run.

Builds the release binaries, installs the pinned peers (npm mcp-proxy 6.7.19, npm supergateway
4.0.0, crates.io mcp-proxy 0.6.0), starts each target on 127.0.0.1, drives it with mcp-bench, and
writes BENCHMARKS.md (ratios to direct and to each peer) and bench/results.svg.

    bench/run.py            the full run (minutes)
    bench/run.py --quick    fewer calls, for trying the script itself

Every process it starts binds 127.0.0.1 and is stopped by its own PID.
"""

import argparse
import base64
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tls_cost import measure_tls, tls_json, tls_table  # noqa: E402
from virtual_cost import measure_virtual, virtual_json, virtual_table  # noqa: E402
from owner_cost import measure_owner, owner_table  # noqa: E402
from fleet import fleet_json, fleet_table, measure_fleet  # noqa: E402
from processes import (  # noqa: E402
    BENCH, CLUSTER_SECRET, PROXY, RELEASE, ROOT, Target, bench, cpu_of, descendants, ensure_redis, free_port, log, medians, rss_of, run, start_redis, wait_for_port)
from run_targets import *  # noqa: E402,F401,F403
from run_measures import *  # noqa: E402,F401,F403
from run_report import *  # noqa: E402,F401,F403


def started_for_cut():
    """The targets of the cut-and-resume comparison, each in front of the demo: (name, launcher)."""
    demo = f"{shlex.quote(str(PROXY))} demo-server"
    targets = [("mcp-session-proxy (stdio)", lambda p: Target(
        "ours", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--stdio", demo], p, env={"RUST_LOG": "warn"}))]
    if contextforge_python() and not CONTEXTFORGE_MISSING:
        targets.append((CONTEXTFORGE, lambda p: contextforge(p, demo)))
    return targets


def cut_section(launchers):
    """A POST stream cut mid-call and resumed with Last-Event-ID on each target (bench/cut.py)."""
    import cut
    lines = ["### A POST stream cut mid-call, resumed with Last-Event-ID", "",
             f"The demo's `progress` tool ({cut.STEPS} notifications {cut.DELAY_MS} ms apart, then its answer);",
             "the client drops the POST's connection after three notifications (or 300 ms for a target",
             "that answers with JSON only), waits until the call is over, then GETs with the last",
             "`Last-Event-ID` it saw (`bench/cut.py`).", "",
             "| target | session id | event ids | before the cut | resume | replayed | answer | lost |",
             "|---|---|---|---:|---|---:|---|---:|"]
    if CONTEXTFORGE_MISSING:
        lines.insert(-4, f"{CONTEXTFORGE} is not in this run: {'; '.join(CONTEXTFORGE_MISSING)}.")
    for name, launcher in launchers:
        target = launcher(free_port())
        try:
            r = cut.cut_and_resume(target.url)
        finally:
            target.stop()
        yes = lambda b: "yes" if b else "no"
        lines.append(f"| {name} | {yes(r['session'])} | {yes(r['event_ids'])} | {r['before_cut']} progress "
                     f"| HTTP {r['resume_status']} | {r['replayed_progress']} progress "
                     f"| {'replayed' if r['replayed_answer'] else ('before the cut' if r['answered_before_cut'] else 'lost')} "
                     f"| {r['lost']} of {cut.STEPS} progress |")
    return lines + [""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, to try the script")
    parser.add_argument("--without-crates", action="store_true",
                        help="leave out crates.io mcp-proxy (its build takes minutes)")
    parser.add_argument("--without-contextforge", action="store_true",
                        help="leave out ContextForge (its install takes a minute)")
    parser.add_argument("--without-node", action="store_true",
                        help="leave out the Node peers and server-everything (a machine without Node)")
    parser.add_argument("--no-build", action="store_true",
                        help="use target/release as it is: no build, no npm, no peers to install")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"the parts to run (default all: {','.join(SECTIONS)})")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md",
                        help="where the report goes (default BENCHMARKS.md, with bench/*.svg)")
    parser.add_argument("--sessions", default=",".join(map(str, CONCURRENCY)),
                        help="concurrency levels of the latency and throughput tables, from 1 "
                             "(default 1,8,32; 1,16,64,256 on a many-core machine)")
    args = parser.parse_args()
    levels = sorted({int(level) for level in args.sessions.split(",")})
    if levels[0] != 1 or len(levels) < 2:
        parser.error("--sessions starts at 1 and names at least one more level")
    CONCURRENCY[:] = levels
    calls = 400 if args.quick else 4000
    sections = set(args.sections.split(","))
    if sections - set(SECTIONS):
        parser.error(f"--sections takes {', '.join(SECTIONS)}")
    WITH_NODE[0] = not args.without_node
    with_crates = not args.without_crates and not args.no_build
    prepare(with_crates, not args.without_contextforge, build=not args.no_build)
    drawn = args.output.resolve() == (ROOT / "BENCHMARKS.md").resolve()

    report = [f"# Benchmarks", "",
              f"Made by `bench/run.py{' ' if len(sys.argv) > 1 else ''}{' '.join(sys.argv[1:])}` on {datetime.date.today()}: {machine()}.",
              "Every target runs on this machine, bound to 127.0.0.1, driven by `mcp-bench` (Rust,",
              "keep-alive connections, real sessions). Ratios compare targets of the same run. The two",
              "Rust proxies run with `RUST_LOG=warn` (the crates.io one logs every message at its",
              "default level); the Node peers with their defaults. The load generator,",
              f"the proxy and the server share the CPUs. Concurrency levels: {', '.join(map(str, CONCURRENCY))} sessions",
              f"(`--sessions`); cores: {os.cpu_count()}. In the latency and throughput tables every target",
              f"of a server is up at once and measured in {ROUNDS} interleaved rounds (the order turning each",
              "round), medians of the rounds; the last column shows how far the rounds spread.",
              "`bench/noise.py` compares two runs: the noise of each figure, and what moved beyond it.", ""]
    series, added = [], {}
    for upstream, stdio, tool, arguments, direct_launcher in (upstreams() if "tables" in sections else []):
        port = free_port()
        direct = direct_launcher(port)
        started = [("direct (no proxy)", direct, "")]
        try:
            launchers = targets_for(stdio, direct.url, with_crates)
            log(upstream, "added latency, interleaved rounds")
            added[upstream] = measure_hops(direct, [l for l in launchers if l[0] in HOPS], tool, arguments,
                                           calls // 2)
            for name, launcher, prefix in launchers:
                try:
                    started.append((name, launcher(free_port()), prefix))
                except RuntimeError as error:
                    log(name, "did not start:", error)
            log(upstream, f"every target, {ROUNDS} interleaved rounds")
            results = measure_calls(started, tool, arguments, calls)
        finally:
            for _, target, _ in started:
                target.stop()
        rows = [(name, results[name]) for name, _, _ in started if name in results]
        report += latency_table(upstream, rows, results["direct (no proxy)"]) + [""] + peer_ratios(upstream, rows) + [""]
        series += [(upstream, target, results) for target, results in rows]

    report += [] if not added else ["### Latency added over direct (HTTP upstream, one extra hop)", "",
               "CPU µs/call (tables above) is the target process's own user+system time per call (its",
               "children not included): the proxy's work, as opposed to waiting for the CPUs it shares.",
               f"The {RELAY} only copies bytes: what it adds is the cost of the extra process",
               "and the two extra loopback round trips, which no proxy avoids. Where the rest goes:",
               "[bench/PROFILE.md](bench/PROFILE.md). Direct and every hop are up together and measured",
               "at each level in 7 interleaved rounds (median of the rounds), so drift hits them alike.",
               "Past one session the CPUs are saturated: what a hop adds there is mostly its share of them.", "",
               "| upstream | sessions | hop | p50 µs | p99 µs | added p50 µs | added p99 µs | added p50 ÷ relay's |",
               "|---|---:|---|---:|---:|---:|---:|---:|"]
    for upstream, by_level in added.items():
        for sessions, hops in by_level.items():
            floor = hops.get(RELAY)
            for hop, a in hops.items():
                ratio = f"{a['p50_us'] / floor['p50_us']:.1f}" if floor and floor["p50_us"] > 0 else "–"
                report.append(f"| {upstream} | {sessions} | {hop} | {a['abs']['p50_us']:.0f} | {a['abs']['p99_us']:.0f} "
                              f"| {a['p50_us']:.0f} | {a['p99_us']:.0f} | {ratio} |")
    report.append("")
    idle, curves, wave, micro, resumed, replicas, redis_bytes, eras, bridge = [None] * 9
    if "idle" in sections:
        idle, curves, wave, lines = idle_section(args.quick, drawn)
        report += lines
    if "log" in sections:
        micro, resumed, lines = log_section(args.quick)
        report += lines
    if series and drawn:
        report += [f"![requests per second at {CONCURRENCY[-1]} sessions](bench/results.svg)", ""]
    if "replicas" in sections and ensure_redis():
        log("replicas on Redis, interleaved rounds")
        replicas = measure_replicas(calls // 2)
        report += replica_table(replicas)
        redis_bytes = measure_redis_memory()
        report += [f"Redis memory per idle session (1,000 sessions, `used_memory` before and after): "
                   f"{redis_bytes / 1024:.2f} KiB.", ""]
    balanced = {}
    if "balanced" in sections and ensure_redis():
        for sessions in sorted({64, CONCURRENCY[-1]}):
            log(f"1 and 3 replicas behind nginx, {sessions} sessions")
            balanced[sessions] = measure_balanced(calls, sessions)
            report += balanced_table(balanced[sessions], sessions)
    owner = None
    if "owner" in sections and ensure_redis():
        log(f"3 replicas behind nginx, round-robin and owner-aware, {CONCURRENCY[-1]} sessions")
        owner = measure_owner(calls, CONCURRENCY[-1])
        report += owner_table(owner, CONCURRENCY[-1])
    fleet = None
    if "fleet" in sections and ensure_redis():
        log("1 replica against 3 behind nginx, stdio and HTTP servers, interleaved rounds")
        fleet = measure_fleet(calls // 2, CONCURRENCY)
        report += fleet_table(fleet)
    if "cut" in sections:
        report += cut_section(started_for_cut())
    if "eras" in sections:
        log("2026-07-28 clients beside legacy ones, interleaved rounds")
        eras = measure_eras(calls // 2)
        report += era_table(eras)
    if "bridge" in sections:
        log("legacy clients in front of a 2026-07-28 server, interleaved rounds")
        bridge = measure_bridge(calls // 2)
        report += bridge_table(bridge)
    tls = None
    if "tls" in sections:
        log("TLS against plain, upstream and listener, interleaved rounds")
        tls = measure_tls(calls)
        report += tls_table(tls)
    composed = None
    if "virtual" in sections:
        log("virtual servers against the member's own path, interleaved rounds")
        composed = measure_virtual(calls)
        report += virtual_table(composed)
    report += targets(series, added, idle, micro, replicas, eras, redis_bytes, balanced)
    many_cores = ROOT / "bench" / "manycore.md"
    if drawn and many_cores.exists():
        # Figures of a many-core machine, made there with --sections tables and balanced.
        report += ["", many_cores.read_text()]
    if series and drawn:
        svg_plot(series, ROOT / "bench" / "results.svg")
    args.output.write_text("\n".join(report))
    (ROOT / "target" / "bench-results.json").write_text(json.dumps(
        {"cores": os.cpu_count(), "sessions": CONCURRENCY, "redis_bytes_per_idle_session": redis_bytes,
         "idle": curves, "expiry_wave": wave,
         "series": [[u, t, r] for u, t, r in series], "added": added, "micro": micro, "resume_ms": resumed,
         "replicas": {f"{name} / {sessions}": f for (name, sessions), f in (replicas or {}).items()},
         "eras": {f"{era} / {sessions}": f for (era, sessions), f in (eras or {}).items()},
         "bridge": {f"{name} / {sessions}": f for (name, sessions), f in (bridge or {}).items()},
         "balanced": balanced, "owner": owner, "fleet": fleet_json(fleet) if fleet else None,
         "tls": tls_json(tls or {}),
         "virtual": virtual_json(composed) if composed else None},
        indent=1, default=str))
    log(f"wrote {args.output}")


def idle_section(quick, drawn):
    """Idle sessions on one replica, 10k → 1M (bench/sessions.py), in memory and on Redis;
    per-session children; ContextForge's bridge, which keeps no sessions."""
    import sessions
    steps = [1_000, 10_000] if quick else sessions.STEPS
    log("idle sessions on one replica:", steps)
    idle = sessions.curve(str(PROXY), steps)
    curves = [("in memory", idle)]
    if ensure_redis():
        curves.append(("on Redis", sessions.curve(str(PROXY), steps, redis=True)))
    wave = sessions.expiry_wave(str(PROXY), 10_000 if quick else 100_000)
    if drawn:
        sessions.svg(curves, ROOT / "bench" / "sessions.svg")
    port = free_port()
    per_session = Target("ours", [str(PROXY), "--listen", f"127.0.0.1:{port}"], port)
    try:
        bench("idle", "--url", per_session.url, "--sessions", 100)
        children = per_session.rss_kib(with_children=True) - per_session.rss_kib()
    finally:
        per_session.stop()
    contextforge_idle = None
    if contextforge_python() and not CONTEXTFORGE_MISSING:
        bridge = contextforge(free_port(), f"{shlex.quote(str(PROXY))} demo-server")
        try:
            bench("idle", "--url", bridge.url, "--sessions", 1)
            before = bridge.rss_kib()
            bench("idle", "--url", bridge.url, "--sessions", 1000)
            contextforge_idle = (before, bridge.rss_kib())
        finally:
            bridge.stop()
    report = ["### Idle sessions on one replica", "",
               "One proxy in front of one shared demo child, sessions opened by `mcp-bench idle",
               "--concurrency 8` (initialize, then nothing) up to each step (`bench/sessions.py`): the",
               "proxy's RSS per session, the rate that step's sessions were opened at, one active",
               "session's `tools/call` p50 and p99 among them, the proxy's CPU over 10 s of idleness",
               "(the sweeps), the last idle sweep's time (`mcp_proxy_idle_sweep_seconds`) and the sessions",
               "the idle sweep looked at so far; on Redis also Redis' `used_memory` per session.", ""]
    report += sessions.table(curves, redis=True, first="store") + [""]
    report += (["![idle sessions on one replica](bench/sessions.svg)", ""] if drawn else []) + [
               f"An expiry wave: {wave['sessions']:,} sessions opened over a few seconds with a "
               f"{wave['ttl_s']} s idle TTL, each ending {wave['ttl_s']} s after it was opened: the sweeps "
               f"took {wave['us_per_ended_session_p50']:.1f} µs per session they ended (median of "
               f"{wave['ticks']} ticks; the largest tick {wave['largest_sweep_ms']:.0f} ms).", "",
               "| figure | value |", "|---|---:|",
               f"| demo child per session (per-session isolation, 100 sessions) | {children / 100 / 1024:.1f} MiB |"]
    if contextforge_idle:
        before, after = contextforge_idle
        report += [f"| {CONTEXTFORGE}: RSS with no client, and per client that initialized | "
                   f"{before / 1024:.0f} MiB, {(after - before) * 1024 / 1000:.0f} bytes (it keeps no sessions) |"]
    report += [""]
    return idle, curves, wave, report


def log_section(quick):
    """The event log's micro-benchmarks and a resume of 1,000 missed events."""
    micro = bench("log", "--events", 1_000_000 if not quick else 100_000)
    port = free_port()
    ours = Target("ours", [str(PROXY), "--listen", f"127.0.0.1:{port}"], port)
    try:
        resumed = [bench("resume", "--url", ours.url, "--missed", 1000)["resume_ms"] for _ in range(5)]
    finally:
        ours.stop()
    report = ["### Event log and resume", "",
               "| figure | value |", "|---|---:|",
               f"| append (no coalescing) | {micro['append_per_second'] / 1e6:.2f} M events/s |",
               f"| append with coalescing (10 keys) | {micro['append_coalescing_per_second'] / 1e6:.2f} M events/s |",
               f"| replay of 1,000 events (read from the log) | {micro['replay_1000_us']:.0f} µs |",
               f"| resume of a session that missed 1,000 events (GET to last event, median of 5) | {sorted(resumed)[2]:.1f} ms |", ""]
    return micro, resumed, report


if __name__ == "__main__":
    main()
