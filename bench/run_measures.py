"""`bench/run.py`'s measurements: calls through each target, hops, replicas, balancers, eras,
the 2026-07-28 bridge, Redis memory."""

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
from processes import (  # noqa: E402
    BENCH, CLUSTER_SECRET, PROXY, RELEASE, ROOT, Target, bench, cpu_of, descendants, ensure_redis, free_port, log, medians, rss_of, run, start_redis, wait_for_port)
from run_targets import *  # noqa: E402,F401,F403


def measure_calls(targets, tool, arguments, calls, rounds=ROUNDS):
    """Every target of `targets` ((name, Target, tool prefix), all up at once) at every
    concurrency level, in `rounds` interleaved rounds, the order of the targets turning each
    round, so drift of the machine hits them alike. Per target and level: the median of the
    rounds' p50, p99 and req/s, the lowest and highest req/s of the rounds, and CPU per call over
    all rounds (the target's own user+system time). A target that fails is left out."""
    samples = {name: {sessions: [] for sessions in CONCURRENCY} for name, _, _ in targets}
    cpu = {name: {sessions: [0.0, 0] for sessions in CONCURRENCY} for name, _, _ in targets}
    failed = set()
    for round_ in range(rounds):
        turn = targets[round_ % len(targets):] + targets[:round_ % len(targets)]
        for sessions in CONCURRENCY:
            per_session = max(calls // sessions // rounds, 20)
            for name, target, prefix in turn:
                if name in failed:
                    continue
                before = target.cpu_seconds()
                try:
                    r = bench("calls", "--url", target.url, "--sessions", sessions, "--calls", per_session,
                              "--warmup", 20, "--tool", prefix + tool, "--arguments", json.dumps(arguments))
                except subprocess.CalledProcessError as error:
                    log(name, "failed:", error.stderr)
                    failed.add(name)
                    continue
                samples[name][sessions].append(r)
                cpu[name][sessions][0] += target.cpu_seconds() - before
                cpu[name][sessions][1] += r["calls"] + 20 * sessions
    results = {}
    for name, levels in samples.items():
        if name in failed:
            continue
        results[name] = medians(levels, ("p50_us", "p99_us", "throughput_rps"))
        for sessions, runs in levels.items():
            figures = results[name][sessions]
            figures["rps_range"] = (min(r["throughput_rps"] for r in runs), max(r["throughput_rps"] for r in runs))
            seconds, done = cpu[name][sessions]
            figures["cpu_us_per_call"] = seconds * 1e6 / done
            figures["calls"] = sum(r["calls"] for r in runs)
    return results


def measure_hops(direct, launchers, tool, arguments, calls, rounds=7):
    """Added latency at every concurrency level, measured fairly: every hop and direct are up at
    once and measured in interleaved rounds, so drift of the machine hits all of them alike; per
    level and target the median of the rounds' p50 and p99, and what it adds to direct's."""
    started = [("direct", direct)]
    try:
        for name, launcher, _ in launchers:
            started.append((name, launcher(free_port())))
        samples = {(name, s): [] for name, _ in started for s in CONCURRENCY}
        for _ in range(rounds):
            for sessions in CONCURRENCY:
                for name, target in started:
                    r = bench("calls", "--url", target.url, "--sessions", sessions,
                              "--calls", max(calls // sessions, 50), "--warmup", 50,
                              "--tool", tool, "--arguments", json.dumps(arguments))
                    samples[(name, sessions)].append(r)
    finally:
        for name, target in started[1:]:
            target.stop()
    median = lambda values: sorted(values)[len(values) // 2]
    figures = {key: {k: median([r[k] for r in runs]) for k in ("p50_us", "p99_us")}
               for key, runs in samples.items()}
    return {s: {name: {k: f[k] - figures[("direct", s)][k] for k in f} | {"abs": f}
                for (name, level), f in figures.items() if level == s and name != "direct"}
            for s in CONCURRENCY}


def measure_replicas(calls, rounds=7):
    """`tools/call` on the demo through one proxy with the in-memory store, and through two
    replicas sharing Redis: on the session's owner, and on the other replica (its view of the
    session, the internal hop to the owner, the answer back through Redis). Interleaved rounds,
    medians, at one session and at eight."""
    redis_port = free_port()
    redis = start_redis(redis_port)
    started = []
    try:
        wait_for_port(redis_port, redis)
        store = f"redis://127.0.0.1:{redis_port}/0"
        env = {"RUST_LOG": "warn", "MCP_PROXY_CLUSTER_SECRET": CLUSTER_SECRET}
        memory = Target("memory", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}"], p, env=env)
        started.append(memory)
        owner = Target("owner", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                 "--store", store, "--node-id", "bench-a"], p, env=env)
        started.append(owner)
        other = Target("other", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                 "--store", store, "--node-id", "bench-b"], p, env=env)
        started.append(other)
        shapes = [("in-memory store", memory.url, None), ("Redis, on the owner", owner.url, None),
                  ("Redis, on another replica", owner.url, other.url)]
        samples = {(name, s): [] for name, _, _ in shapes for s in (1, 8)}
        for _ in range(rounds):
            for sessions in (1, 8):
                for name, url, call_url in shapes:
                    args = ["calls", "--url", url, "--sessions", sessions, "--calls", max(calls // sessions, 20),
                            "--warmup", 20]
                    if call_url:
                        args += ["--call-url", call_url]
                    samples[(name, sessions)].append(bench(*args))
    finally:
        for target in started:
            target.stop()
        os.killpg(redis.pid, 15)
        redis.wait()
    median = lambda values: sorted(values)[len(values) // 2]
    return {key: {k: median([r[k] for r in runs]) for k in ("p50_us", "p99_us", "throughput_rps")}
            for key, runs in samples.items()}


class Nginx:
    """nginx running the shipped config/nginx.conf (round-robin, no affinity), or `config`
    (config/nginx-owner.conf, routing on the replica a session id names: `names`, the replicas'
    --node-id), in front of `replicas` (loopback ports), in a folder of its own under target/;
    stopped by its PID."""

    def __init__(self, replicas, name, config="nginx.conf", names=None):
        from balancer import find_balancer, render_balancer_config
        self.dir = ROOT / "target" / f"bench-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)  # nginx's workers, run as another user, read and write here
        self.port = free_port()
        shipped = (ROOT / "config" / config).read_text()
        try:
            import pwd
            pwd.getpwnam("www-data")
        except KeyError:  # a machine without Debian's nginx user: the workers run as nobody
            shipped = shipped.replace("user www-data;", "")
        conf = self.dir / "nginx.conf"
        conf.write_text(render_balancer_config("nginx", shipped, f"127.0.0.1:{self.port}",
                                               [f"127.0.0.1:{port}" for port in replicas], str(self.dir),
                                               names))
        self.process = subprocess.Popen([find_balancer("nginx"), "-c", str(conf), "-p", f"{self.dir}/", "-e", "stderr",
                                         "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                                        stderr=open(self.dir / "output.log", "ab"), start_new_session=True)
        wait_for_port(self.port, self.process)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self):
        os.killpg(self.process.pid, 15)
        self.process.wait()


def replica_cores():
    """With 8 cores or more, the cores each replica is held to (as a pod's CPU limit holds it),
    so that one replica cannot take the whole machine: a quarter of them each, the last quarter
    left to the load generator, nginx and Redis. None on a smaller machine."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 8:
        return None
    share = len(cores) // 4
    return [cores[i * share:(i + 1) * share] for i in range(3)], cores[3 * share:]


def measure_balanced(calls, sessions=64, rounds=5, counts=(1, 3)):
    """`tools/call` through nginx in front of 1 and of 3 replicas (each set on a Redis of its
    own, both up at once), `sessions` clients, interleaved rounds, medians; and the replicas'
    CPU per call, all of them together. On 8 cores or more each replica (and its demo
    children) is held to cores of its own, and the rest to the others (`replica_cores`)."""
    started, clusters = [], {}
    pinned = replica_cores()
    held = lambda cores: ["taskset", "-c", ",".join(map(str, cores))] if cores else []
    everything = os.sched_getaffinity(0)
    if pinned:
        # The load generator (mcp-bench, a child of this script), nginx and Redis inherit this.
        os.sched_setaffinity(0, pinned[1])
    try:
        for count in counts:
            redis_port = free_port()
            redis = start_redis(redis_port)
            started.append(redis)
            wait_for_port(redis_port, redis)
            replicas = []
            for n in range(count):
                port = free_port()
                replicas.append(Target(f"replica-{n}", [
                    *held(pinned and pinned[0][n]), str(PROXY), "--listen", f"127.0.0.1:{port}", "--store", f"redis://127.0.0.1:{redis_port}/0",
                    "--node-id", f"replica-{n}", "--allowed-host", "127.0.0.1", "--allowed-host", "mcp.example.com",
                    "--max-anonymous-sessions", "100000", "--max-sessions", "100000",
                    *(["--workers", str(len(pinned[0][n]))] if pinned else [])], port,
                    env={"RUST_LOG": "warn", "MCP_PROXY_CLUSTER_SECRET": CLUSTER_SECRET}))
                started.append(replicas[-1])
            nginx = Nginx([r.port for r in replicas], f"nginx-{count}")
            started.append(nginx)
            clusters[count] = (nginx, replicas)
        samples = {count: [] for count in counts}
        for round_ in range(rounds):
            for count in (counts if round_ % 2 == 0 else counts[::-1]):
                nginx, replicas = clusters[count]
                cpu = sum(r.cpu_seconds() for r in replicas)
                r = bench("calls", "--url", nginx.url, "--sessions", sessions,
                          "--calls", max(calls // sessions, 20), "--warmup", 20)
                r["cpu_us_per_call"] = (sum(x.cpu_seconds() for x in replicas) - cpu) * 1e6 / (
                    r["calls"] + 20 * sessions)
                samples[count].append(r)
    finally:
        os.sched_setaffinity(0, everything)
        for process in reversed(started):
            if isinstance(process, subprocess.Popen):
                os.killpg(process.pid, 15)
                process.wait()
            else:
                process.stop()
    figures = medians(samples, ("p50_us", "p99_us", "throughput_rps", "cpu_us_per_call"))
    if pinned:
        figures["cores"] = (len(pinned[0][0]), len(pinned[1]))
    return figures


def balanced_table(figures, sessions=64):
    figures = dict(figures)
    cores = figures.pop("cores", None)
    one = figures[min(figures)]["throughput_rps"]
    held = ([f"Each replica and its demo children are held to {cores[0]} cores of their own (`taskset`,",
             f"`--workers {cores[0]}`), as a pod's CPU limit holds it; the load generator, nginx and Redis",
             f"to the other {cores[1]}."] if cores else
            ["The load generator, nginx, Redis, the replicas and their demo children share them: one",
             "replica may use every core, so on one machine three can do no more."])
    lines = [f"### Replicas behind nginx, {sessions} clients", "",
             f"{sessions} clients calling `tools/call` on the demo through nginx running the shipped",
             "`config/nginx.conf` (round-robin, no affinity: most calls reach a replica that does not",
             "own their session and cross to the owner), in front of one replica and of three, each set",
             f"on a Redis of its own, both up at once and alternated in rounds, medians. On {os.cpu_count()} cores.",
             *held, "",
             "| replicas | p50 µs | p99 µs | req/s | req/s ÷ 1 replica | replicas' CPU µs/call |",
             "|---:|---:|---:|---:|---:|---:|"]
    for count, f in sorted(figures.items()):
        lines.append(f"| {count} | {f['p50_us']:.0f} | {f['p99_us']:.0f} | {f['throughput_rps']:.0f} "
                     f"| {f['throughput_rps'] / one:.2f} | {f['cpu_us_per_call']:.0f} |")
    return lines + [""]


def written(target, seconds=60):
    """Waits until `target`'s writes to Redis are all written (its write-behind queue, as its
    /metrics reports it, is empty)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{target.port}/metrics") as response:
            if "\nmcp_proxy_store_write_queue 0\n" in response.read().decode():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{target.name}: writes to Redis still queued after {seconds}s")


def measure_redis_memory(sessions=1000):
    """Redis memory per idle session: `used_memory` before and after `sessions` sessions are
    opened (initialize answered, nothing else) through a replica on a shared child."""
    redis_port = free_port()
    redis = start_redis(redis_port)
    used = lambda: int(next(line.split(":", 1)[1] for line in subprocess.run(
        ["redis-cli", "-p", str(redis_port), "info", "memory"], check=True, capture_output=True,
        text=True).stdout.splitlines() if line.startswith("used_memory:")))
    replica = None
    try:
        wait_for_port(redis_port, redis)
        replica = Target("replica", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                     "--store", f"redis://127.0.0.1:{redis_port}/0", "--node-id", "bench",
                                     "--stdio", f"{shlex.quote(str(PROXY))} demo-server", "--isolation", "shared",
                                     "--max-anonymous-sessions", str(2 * sessions)],
                         p, env={"RUST_LOG": "warn", "MCP_PROXY_CLUSTER_SECRET": CLUSTER_SECRET})
        bench("idle", "--url", replica.url, "--sessions", 1)
        written(replica)
        before = used()
        bench("idle", "--url", replica.url, "--sessions", sessions)
        written(replica)
        return (used() - before) / sessions
    finally:
        if replica:
            replica.stop()
        os.killpg(redis.pid, 15)
        redis.wait()


ERAS = ("legacy", "modern", "data-layer", "anonymous", "anonymous-reuse")


def measure_eras(calls, rounds=9):
    """`tools/call` on the demo through one proxy from clients of either era: legacy ones (a
    session opened with `initialize`), 2026-07-28 ones (no session; per-request `_meta`,
    each client a principal the proxy correlates with an upstream session), and 2026-07-28 ones
    calling within a data-layer session each (`sessions/create`, then the cookie in `_meta`).
    Interleaved rounds, medians of p50, p99, throughput and the proxy's CPU per call, at one
    session and at eight."""
    env = {"RUST_LOG": "warn"}
    proxy = Target("eras", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}"], p, env=env)
    # Anonymous clients whose pooled sessions serve the next ones (stateless servers only).
    reusing = Target("eras-reuse", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                    "--anonymous-pool-reuse"], p, env=env)
    samples = {(era, s): [] for era in ERAS for s in (1, 8)}
    try:
        for _ in range(rounds):
            for sessions in (1, 8):
                for era in ERAS:
                    target = reusing if era == "anonymous-reuse" else proxy
                    per_session = max(calls // sessions, 20)
                    cpu_before = target.cpu_seconds()
                    r = bench("calls", "--url", target.url, "--sessions", sessions, "--calls", per_session,
                              "--warmup", 20, "--era", era.removesuffix("-reuse"))
                    r["cpu_us_per_call"] = (target.cpu_seconds() - cpu_before) * 1e6 / (r["calls"] + 20 * sessions)
                    samples[(era, sessions)].append(r)
    finally:
        proxy.stop()
        reusing.stop()
    figures = medians(samples, ("p50_us", "p99_us", "throughput_rps", "cpu_us_per_call"))
    for (era, sessions), f in figures.items():
        rounds_ratio = [m["p50_us"] / l["p50_us"]
                        for l, m in zip(samples[("legacy", sessions)], samples[(era, sessions)])]
        f["round_ratios"] = sorted(rounds_ratio)
    return figures


def era_table(figures, rounds=9):
    lines = ["### 2026-07-28 clients beside legacy ones", "",
             "The demo over stdio behind one proxy (default settings): `mcp-bench calls --era legacy`",
             "(sessions opened with `initialize`), `--era modern` (no session: per-request `_meta`,",
             "each client a principal of its own, served by the upstream session the proxy correlates",
             "with it) and `--era data-layer` (the same, each client calling within a data-layer session",
             "it created: the cookie in `_meta`), `--era anonymous` (2026-07-28 without a credential:",
             "each request served by a session of the anonymous pool, used once by default, or given back",
             f"for the next with `--anonymous-pool-reuse`), alternated in {rounds} rounds, medians. CPU",
             "µs/call is the proxy's own.", "",
             "| era | sessions | p50 µs | p99 µs | req/s | CPU µs/call | p50 ÷ legacy | per-round p50 ratios (min–max) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    names = {"legacy": "legacy", "modern": "2026-07-28", "data-layer": "2026-07-28, data-layer session",
             "anonymous": "2026-07-28, no credential (single-use pool)",
             "anonymous-reuse": "2026-07-28, no credential (`anonymous_pool_reuse`)"}
    for (era, sessions), f in sorted(figures.items(), key=lambda kv: (kv[0][1], ERAS.index(kv[0][0]))):
        base = figures[("legacy", sessions)]
        spread = (f"{f['round_ratios'][0]:.2f}–{f['round_ratios'][-1]:.2f}" if era != "legacy" else "")
        name = names[era]
        lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} | {f['throughput_rps']:.0f} "
                     f"| {f['cpu_us_per_call']:.0f} | {f['p50_us'] / base['p50_us']:.2f} | {spread} |")
    return lines + [""]


# The paths of `measure_bridge`: the 2026-07-28 client's, and the legacy client's through the
# proxy's bridge to the same demo (a child of its own per session, or the one HTTP server).
DIRECT_MODERN = "2026-07-28 client → demo (HTTP, direct)"
BRIDGE_PATHS = [DIRECT_MODERN,
                "legacy client → proxy → demo (stdio, a child per session)",
                "legacy client → proxy → demo (HTTP)"]


def measure_bridge(calls, rounds=7):
    """`tools/call` echo on the demo in its 2026-07-28 mode: from a 2026-07-28 client straight
    to the demo serving 2026-07-28 over HTTP itself (`mcp-bench calls --era modern`), and from a
    legacy client (`--era legacy`) through the proxy with `--upstream-protocol 2026-07-28`, its
    upstream the modern demo over stdio (the per-session deployment: each session gets a child
    of its own), or the same HTTP demo. Interleaved rounds, medians of p50, p99, throughput, the
    proxy's CPU per call and the server's (the HTTP demo's process, or the proxy's children),
    at one session and at eight."""
    env = {"RUST_LOG": "warn"}
    modern_stdio = f"{shlex.quote(str(PROXY))} demo-server --protocol 2026-07-28"
    started = []
    try:
        demo = Target("modern-demo", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{(p := free_port())}",
                                      "--protocol", "2026-07-28"], p, env=env)
        started.append(demo)
        over_stdio = Target("bridge-stdio", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                             "--stdio", modern_stdio, "--upstream-protocol", "2026-07-28"], p, env=env)
        started.append(over_stdio)
        over_http = Target("bridge-http", [str(PROXY), "--listen", f"127.0.0.1:{(p := free_port())}",
                                           "--http", demo.url, "--upstream-protocol", "2026-07-28"], p, env=env)
        started.append(over_http)
        # (path, where the client calls, its era, the proxy or None, the server's processes)
        shapes = [(BRIDGE_PATHS[0], demo, "modern", None, lambda: [demo.process.pid]),
                  (BRIDGE_PATHS[1], over_stdio, "legacy", over_stdio, lambda: descendants(over_stdio.process.pid)),
                  (BRIDGE_PATHS[2], over_http, "legacy", over_http, lambda: [demo.process.pid])]
        samples = {(name, s): [] for name, *_ in shapes for s in (1, 8)}
        for _ in range(rounds):
            for sessions in (1, 8):
                for name, target, era, proxy, servers in shapes:
                    per_session = max(calls // sessions, 20)
                    proxy_before = proxy.cpu_seconds() if proxy else 0.0
                    server_before = {pid: cpu_of(pid) for pid in servers()}
                    r = bench("calls", "--url", target.url, "--sessions", sessions, "--calls", per_session,
                              "--warmup", 20, "--era", era)
                    if r["errors"]:
                        log(f"{name}, {sessions} sessions: {r['errors']} calls answered with an error")
                    done = r["calls"] + 20 * sessions
                    r["proxy_cpu_us_per_call"] = ((proxy.cpu_seconds() - proxy_before) * 1e6 / done
                                                  if proxy else 0.0)
                    server_after = {pid: cpu_of(pid) for pid in servers()}
                    r["server_cpu_us_per_call"] = sum(
                        cpu - server_before.get(pid, 0.0) for pid, cpu in server_after.items()) * 1e6 / done
                    samples[(name, sessions)].append(r)
    finally:
        for target in reversed(started):
            target.stop()
    figures = medians(samples, ("p50_us", "p99_us", "throughput_rps", "proxy_cpu_us_per_call",
                                "server_cpu_us_per_call"))
    for (name, sessions), f in figures.items():
        f["round_ratios"] = sorted(m["p50_us"] / d["p50_us"] for d, m in
                                   zip(samples[(DIRECT_MODERN, sessions)], samples[(name, sessions)]))
    return figures


def bridge_table(figures, rounds=7):
    lines = ["### A legacy client in front of a 2026-07-28 server", "",
             "`tools/call` echo on the demo in its 2026-07-28 mode. Direct: a 2026-07-28 client",
             "(`mcp-bench calls --era modern`) to `demo-server --http ADDR --protocol 2026-07-28`, which",
             "serves 2026-07-28 over HTTP itself. Through the proxy: a legacy client (`--era legacy`,",
             "sessions opened with `initialize`) to `--upstream-protocol 2026-07-28`, which bridges each",
             "session to the modern demo over stdio (a child per session, started when the session",
             "opens) or to the same HTTP demo. All three up at once and alternated in "
             f"{rounds} rounds, medians.",
             "CPU µs/call: the proxy's own process, and the server's (the HTTP demo, or the proxy's",
             "demo children, their start included), per call including the warm-up.", "",
             "| path | sessions | p50 µs | p99 µs | req/s | proxy CPU µs/call | server CPU µs/call "
             "| p50 ÷ direct | req/s ÷ direct | per-round p50 ratios (min–max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = {name: i for i, name in enumerate(BRIDGE_PATHS)}
    for (name, sessions), f in sorted(figures.items(), key=lambda kv: (kv[0][1], order[kv[0][0]])):
        base = figures[(DIRECT_MODERN, sessions)]
        direct = name == DIRECT_MODERN
        proxy = "–" if direct else f"{f['proxy_cpu_us_per_call']:.0f}"
        spread = "" if direct else f"{f['round_ratios'][0]:.2f}–{f['round_ratios'][-1]:.2f}"
        lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} | {f['throughput_rps']:.0f} "
                     f"| {proxy} | {f['server_cpu_us_per_call']:.0f} | {f['p50_us'] / base['p50_us']:.2f} "
                     f"| {f['throughput_rps'] / base['throughput_rps']:.2f} | {spread} |")
    return lines + [""]
