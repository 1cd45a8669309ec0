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
from processes import (  # noqa: E402
    BENCH, CLUSTER_SECRET, PROXY, RELEASE, ROOT, Target, bench, cpu_of, descendants, ensure_redis, free_port, log, medians, rss_of, run, start_redis, wait_for_port)

NODE_TESTS = ROOT / "tests" / "node"
NODE_BENCH = ROOT / "bench" / "node"
LOOPBACK = NODE_TESTS / "loopback.cjs"
EVERYTHING = NODE_TESTS / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CRATES_ROOT = ROOT / "bench" / ".cargo"
CRATES_PROXY = CRATES_ROOT / "bin" / "mcp-proxy"
# Concurrency levels of the latency and throughput tables (`--sessions`: 1,16,64,256 on a
# many-core machine). The first is the single-session latency, the last the one the plot shows.
CONCURRENCY = [1, 8, 32]
# A do-nothing TCP relay between the load generator and the HTTP server: the least any
# user-space hop adds on this machine.
RELAY = "TCP relay (floor of any hop)"
# Interleaved rounds of the latency and throughput tables.
ROUNDS = 3
HOPS = ["mcp-session-proxy (HTTP)", "mcp-session-proxy (HTTP, 1 worker)", RELAY]


CONTEXTFORGE = "ContextForge 1.1.0 (translate)"
# Why ContextForge is not in this run, when it is not.
CONTEXTFORGE_MISSING = []


def contextforge_python():
    """The python of bench/.contextforge (bench/contextforge.sh installs it), or None."""
    python = ROOT / "bench" / ".contextforge" / "venv" / "bin" / "python"
    return python if python.exists() else None


# The parts of a run (`--sections`), in the order they are run.
SECTIONS = ["tables", "idle", "log", "replicas", "cut", "eras", "bridge", "balanced", "tls", "virtual"]
# Whether the Node peers and server-everything are in this run (`--without-node`).
WITH_NODE = [True]


def prepare(with_crates, with_contextforge=True, build=True):
    if not build:
        for binary in (PROXY, BENCH):
            if not binary.exists():
                sys.exit(f"{binary} is missing: build it (cargo build --release) or leave out --no-build")
        if not with_contextforge:
            CONTEXTFORGE_MISSING.append("left out with --without-contextforge")
        elif not contextforge_python():
            CONTEXTFORGE_MISSING.append("not installed (bench/contextforge.sh) and left out with --no-build")
        return
    run(["cargo", "build", "--release", "--bins"], cwd=ROOT)
    if with_contextforge:
        try:
            run([str(ROOT / "bench" / "contextforge.sh")], stdout=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            CONTEXTFORGE_MISSING.append(f"bench/contextforge.sh failed ({error}): it needs Python >= 3.12, "
                                        "taken from Debian 13's packages")
            log("ContextForge could not be installed; it is left out of this run")
    else:
        CONTEXTFORGE_MISSING.append("left out with --without-contextforge")
    if WITH_NODE[0]:
        run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_TESTS)
        run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_BENCH)
    if with_crates and not CRATES_PROXY.exists():
        try:
            run(["cargo", "install", "mcp-proxy", "--version", "0.6.0", "--locked",
                 "--no-default-features", "--root", str(CRATES_ROOT)])
        except subprocess.CalledProcessError:
            log("crates.io mcp-proxy 0.6.0 did not build; it is left out of this run")


def upstreams():
    """The upstreams every proxy fronts: (name, stdio command, tool, arguments, direct-HTTP launcher)."""
    demo = [str(PROXY), "demo-server"]
    everything = ["node", str(EVERYTHING), "stdio"]

    def direct_demo(port):
        return Target("direct", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{port}"], port)

    def direct_everything(port):
        return Target("direct", ["node", "--require", str(LOOPBACK), str(EVERYTHING), "streamableHttp"],
                      port, env={"PORT": str(port)})

    return [
        ("demo", demo, "echo", {"text": "hello"}, direct_demo),
        ("server-everything", everything, "echo", {"message": "hello"}, direct_everything),
    ][:2 if WITH_NODE[0] else 1]


def targets_for(stdio, direct_url, with_crates):
    """Every proxy in front of the same server: (name, launcher, tool prefix)."""
    quoted = " ".join(shlex.quote(part) for part in stdio)
    mcp_proxy_npm = NODE_BENCH / "node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs"
    supergateway = NODE_BENCH / "node_modules/supergateway/dist/index.js"
    launchers = [
        ("mcp-session-proxy (stdio)", lambda p: Target(
            "ours", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--stdio", quoted, "--warm", "2"], p,
            env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (stdio, shared)", lambda p: Target(
            "ours-shared", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--stdio", quoted,
                            "--isolation", "shared"], p, env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (HTTP)", lambda p: Target(
            "ours-http", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--http", direct_url], p,
            env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (HTTP, 1 worker)", lambda p: Target(
            "ours-http-1", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--http", direct_url,
                            "--workers", "1"], p, env={"RUST_LOG": "warn"}), ""),
        (RELAY, lambda p: Target(
            "relay", [str(BENCH), "relay", "--listen", f"127.0.0.1:{p}",
                      "--to", direct_url.split("/")[2]], p), ""),
    ]
    node_peers = [
        ("supergateway 4.0.0", lambda p: Target(
            "supergateway", ["node", "--require", str(LOOPBACK), str(supergateway), "--stdio", quoted,
                             "--outputTransport", "streamableHttp", "--stateful", "--port", str(p),
                             "--logLevel", "none"], p), ""),
        ("npm mcp-proxy 6.7.19", lambda p: Target(
            "mcp-proxy-npm", ["node", str(mcp_proxy_npm), "--host", "127.0.0.1", "--port", str(p),
                              "--server", "stream", "--", *stdio], p), ""),
    ]
    if WITH_NODE[0]:
        launchers += node_peers
    if contextforge_python() and not CONTEXTFORGE_MISSING:
        launchers.append((CONTEXTFORGE, lambda p: contextforge(p, quoted), ""))
    if with_crates and CRATES_PROXY.exists():
        def crates(p):
            config = ROOT / "target" / f"bench-crates-{p}.toml"
            config.write_text(
                f'[proxy]\nname = "bench"\nseparator = "/"\n[proxy.listen]\nhost = "127.0.0.1"\nport = {p}\n'
                f'[[backends]]\nname = "up"\ntransport = "stdio"\ncommand = {json.dumps(stdio[0])}\n'
                f'args = {json.dumps(stdio[1:])}\n')
            return Target("mcp-proxy-crates", [str(CRATES_PROXY), "--config", str(config)], p, path="/",
                          env={"RUST_LOG": "warn"})
        launchers.append(("crates.io mcp-proxy 0.6.0", crates, "up/"))
    return launchers


def contextforge(port, command):
    """ContextForge's stdio → Streamable HTTP bridge in front of `command` (one child for every
    client; it keeps no sessions). Its settings, which it checks even for the bridge, want
    secrets: throwaway ones."""
    secret = lambda: base64.b64encode(os.urandom(48)).decode().translate(str.maketrans("", "", "+/="))
    return Target("contextforge", [str(contextforge_python()), "-m", "mcpgateway.translate", "--stdio", command,
                                   "--expose-streamable-http", "--host", "127.0.0.1", "--port", str(port),
                                   "--logLevel", "warning"], port,
                  env={"JWT_SECRET_KEY": secret(), "AUTH_ENCRYPTION_SECRET": secret(), "EMAIL_AUTH_ENABLED": "false"})


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
    """nginx running the shipped config/nginx.conf (round-robin, no affinity) in front of
    `replicas` (loopback ports), in a folder of its own under target/; stopped by its PID."""

    def __init__(self, replicas, name):
        from balancer import find_balancer, render_balancer_config
        self.dir = ROOT / "target" / f"bench-{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)  # nginx's workers, run as another user, read and write here
        self.port = free_port()
        shipped = (ROOT / "config" / "nginx.conf").read_text()
        try:
            import pwd
            pwd.getpwnam("www-data")
        except KeyError:  # a machine without Debian's nginx user: the workers run as nobody
            shipped = shipped.replace("user www-data;", "")
        conf = self.dir / "nginx.conf"
        conf.write_text(render_balancer_config("nginx", shipped, f"127.0.0.1:{self.port}",
                                               [f"127.0.0.1:{port}" for port in replicas], str(self.dir)))
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


def replica_table(figures):
    lines = ["### Replicas sharing Redis", "",
             "The demo behind one proxy with the in-memory store, and behind two replicas sharing a",
             "Redis on this machine: calls on the session's owner, and calls on the other replica (its",
             "view of the session: the message goes to the owner over the internal HTTP hop, the",
             "answer comes back with the hop and through Redis). 7 interleaved rounds, medians. The",
             "floor for the non-owner is the in-memory figure plus one HTTP proxy hop (see \"Latency",
             "added\": the proxy in front of an HTTP server).", "",
             "| where | sessions | p50 µs | p99 µs | req/s | p50 ÷ in-memory | p99 ÷ in-memory |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for (name, sessions), f in figures.items():
        base = figures[("in-memory store", sessions)]
        lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} | {f['throughput_rps']:.0f} "
                     f"| {f['p50_us'] / base['p50_us']:.2f} | {f['p99_us'] / base['p99_us']:.2f} |")
    return lines + [""]


def latency_table(name, rows, direct):
    lines = [f"### {name}: `tools/call` latency and throughput", "",
             "| target | sessions | p50 µs | p99 µs | req/s | p50 ÷ direct | req/s ÷ direct | CPU µs/call "
             "| req/s of the rounds (min–max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for target, results in rows:
        for sessions, r in results.items():
            d = direct[sessions]
            lines.append(
                f"| {target} | {sessions} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['throughput_rps']:.0f} "
                f"| {r['p50_us'] / d['p50_us']:.2f} | {r['throughput_rps'] / d['throughput_rps']:.2f} "
                f"| {r['cpu_us_per_call']:.0f} | {r['rps_range'][0]:.0f}–{r['rps_range'][1]:.0f} |")
    return lines


def peer_ratios(name, rows):
    """Ours against each peer: per-session children against the stdio bridges (one child per
    client, like ours), and the shared child against crates.io mcp-proxy (one backend for all)."""
    table = dict(rows)
    lines = [f"### {name}: mcp-session-proxy against each peer", "",
             "| ours | peer | sessions | p50: ours ÷ peer | p99: ours ÷ peer | req/s: ours ÷ peer |",
             "|---|---|---:|---:|---:|---:|"]
    for target, results in rows:
        if target.startswith(("mcp-session-proxy", "direct", "TCP relay")):
            continue
        for mine in ours_against(target):
            ours = table.get(mine)
            if not ours:
                continue
            for sessions, peer in results.items():
                o = ours[sessions]
                lines.append(f"| {mine} | {target} | {sessions} | {o['p50_us'] / peer['p50_us']:.2f} "
                             f"| {o['p99_us'] / peer['p99_us']:.2f} | {o['throughput_rps'] / peer['throughput_rps']:.2f} |")
    return lines


def ours_against(peer):
    """Which of ours a peer is compared with: the shared child against those with one backend for
    all clients (crates.io mcp-proxy; ContextForge's bridge, also against per-session children),
    per-session children against the stdio bridges with a child per client."""
    if peer.startswith("crates.io"):
        return ["mcp-session-proxy (stdio, shared)"]
    if peer == CONTEXTFORGE:
        return ["mcp-session-proxy (stdio, shared)", "mcp-session-proxy (stdio)"]
    return ["mcp-session-proxy (stdio)"]


def targets(series, added, idle, micro, replicas=None, eras=None, redis_bytes=None, balanced=None):
    """The figures the project set itself, each met or missed."""
    top = CONCURRENCY[-1]

    def results_of(upstream, name):
        for u, target, results in series:
            if u == upstream and target == name:
                return results
        return None

    def rps(upstream, name):
        for u, target, results in series:
            if u == upstream and target.startswith(name):
                return results[top]["throughput_rps"]
        return None

    lines = []
    for upstream, by_level in added.items():
        hops = by_level[1]
        floor = hops.get(RELAY)
        for hop in HOPS[:2]:
            if hop not in hops:
                continue
            a = hops[hop]
            beside = f"; the TCP relay adds {floor['p50_us']:.0f} µs, {floor['p99_us']:.0f} µs" if floor else ""
            lines.append(f"| added latency ≤ 25 µs p50, ≤ 250 µs p99 ({upstream}, {hop[19:-1]}, 1 session) "
                         f"| {a['p50_us']:.0f} µs, {a['p99_us']:.0f} µs{beside} "
                         f"| {'met' if a['p50_us'] <= 25 and a['p99_us'] <= 250 else 'missed'} |")
        for peer, factor in (("crates.io mcp-proxy", 1.5), ("npm mcp-proxy", 5.0)):
            mine = "mcp-session-proxy (stdio, shared)" if peer.startswith("crates") else "mcp-session-proxy (stdio)"
            ours = rps(upstream, mine)
            theirs = rps(upstream, peer)
            if ours and theirs:
                ratio = ours / theirs
                lines.append(f"| throughput ≥ {factor}× {peer} ({upstream}, {top} sessions; ours: {mine[19:-1]}) | {ratio:.1f}× "
                             f"| {'met' if ratio >= factor else 'missed'} |")
        lines += load_targets(upstream, results_of, by_level)
    lines += idle_targets(idle)
    if micro:
        lines.append(f"| replay of 1,000 events ≤ 1 ms | {micro['replay_1000_us']:.0f} µs "
                     f"| {'met' if micro['replay_1000_us'] <= 1000 else 'missed'} |")
    if replicas:
        ratio = replicas[("Redis, on another replica", 1)]["p50_us"] / replicas[("in-memory store", 1)]["p50_us"]
        lines.append(f"| p50 through a non-owner replica ≤ 2× the in-memory store (1 session) | {ratio:.2f}× "
                     f"| {'met' if ratio <= 2 else 'missed'} |")
        owner = {s: replicas[("Redis, on the owner", s)]["throughput_rps"]
                 / replicas[("in-memory store", s)]["throughput_rps"] for s in (1, 8)}
        lines.append(f"| req/s on the owner ≥ 0.95× the in-memory store | "
                     + ", ".join(f"{r:.2f}× ({s})" for s, r in owner.items())
                     + f" | {'met' if min(owner.values()) >= 0.95 else 'missed'} |")
    if redis_bytes is not None:
        kib = redis_bytes / 1024
        lines.append(f"| ≤ 2 KiB of Redis per idle session | {kib:.2f} KiB | {'met' if kib <= 2 else 'missed'} |")
    for sessions, figures in (balanced or {}).items():
        ratio = figures[3]["throughput_rps"] / figures[1]["throughput_rps"]
        held = f", {figures['cores'][0]} cores a replica" if "cores" in figures else ""
        lines.append(f"| 3 replicas behind nginx ≥ 2.5× the req/s of one ({sessions} sessions, {os.cpu_count()} cores{held}) "
                     f"| {ratio:.2f}× | {'met' if ratio >= 2.5 else 'missed'} |")
    if eras:
        ratio = eras[("modern", 1)]["p50_us"] / eras[("legacy", 1)]["p50_us"]
        lines.append(f"| 2026-07-28 `tools/call` p50 ≤ 1.05× legacy through the proxy (demo, stdio, 1 session) "
                     f"| {ratio:.2f}× | {'met' if ratio <= 1.05 else 'missed'} |")
        for era, what in (("anonymous", "single-use pool, the default"), ("anonymous-reuse", "`anonymous_pool_reuse`")):
            if (era, 1) in eras:
                ratios = {s: eras[(era, s)]["p50_us"] / eras[("modern", s)]["p50_us"] for s in (1, 8)}
                lines.append(f"| anonymous 2026-07-28 calls (stdio, {what}) p50 ≤ 1.2× principal-correlated ones "
                             f"| {ratios[1]:.2f}× (1), {ratios[8]:.2f}× (8) "
                             f"| {'met' if max(ratios.values()) <= 1.2 else 'missed'} |")
    table = ["### Targets", "", "| target | figure | met? | why, where missed |", "|---|---|---|---|"]
    return table + [f"{line} {why_missed(line) if line.endswith('| missed |') else ''} |" for line in lines] + [""]


# Why a target is missed, by the words of its row (first match); PROFILE.md has the measurements.
WHY_MISSED = (
    ("added latency ≤ 25 µs",
     "the floor of any user-space hop (the relay, beside it) plus the proxy's HTTP work on both sides; on 2 cores the floor alone is above 25 µs (PROFILE.md, \"The floor\")"),
    ("HTTP upstream",
     "two HTTP/1 exchanges and a second task per call against the relay's one copy; one task per "
     "exchange and h2c tried and lost (PROFILE.md, \"The HTTP hop against the relay\")"),
    ("per-session children: req/s ≥ 3× ContextForge",
     "ContextForge's bridge drives one child for all its clients (it matches answers by id): its "
     "like is the shared child; a child per session costs a process each, a Node one in front of "
     "server-everything (PROFILE.md, \"Targets missed against the peers\")"),
    ("ContextForge",
     "at few sessions req/s follows latency, most of it the load generator's and the server's on "
     "2 cores (direct's figure beside); the lead grows with load, as ContextForge's CPU per call "
     "binds it; in front of server-everything one Node child bounds both (PROFILE.md, \"Targets "
     "missed against the peers\")"),
    ("(server-everything",
     "one Node process, the server, bounds every proxy in front of it, and its figures move by up "
     "to 60 % between full runs (PROFILE.md, \"Targets missed against the peers\")"),
    ("npm mcp-proxy",
     "within run-to-run noise: a ratio of req/s moves 11 % (median) to 23 % (90th percentile) "
     "between full runs here (PROFILE.md, \"Targets missed against the peers\")"),
    ("shared child",
     "one child serves every session: its own throughput bounds the figure (PROFILE.md, "
     "\"One shared child under load\")"),
    ("on the owner",
     "a session's record and requests in flight are written to Redis (PROFILE.md, \"The owner "
     "on Redis under load\")"),
    ("3 replicas behind nginx",
     "two calls in three cross to their owner over the internal hop; on 2 cores the replicas, the "
     "balancer, the server and the load share the cores (PROFILE.md, \"Replicas behind a balancer\")"),
    ("2026-07-28 `tools/call`",
     "per-request metadata read and checked on every call: 91.7k instructions against 66.6k "
     "(PROFILE.md, \"A 2026-07-28 call beside a legacy one, again\")"),
    ("single-use pool",
     "each call waits for a child of its own to start; with `anonymous_pool_reuse` it is met "
     "(PROFILE.md, \"A 2026-07-28 call beside a legacy one, again\")"),
)


def why_missed(line):
    """The reason a missed target's row gives, from WHY_MISSED."""
    return next((why for words, why in WHY_MISSED if words in line), "see PROFILE.md")


def idle_targets(idle):
    """The targets of idle sessions on one replica (bench/sessions.py's curve)."""
    if not idle:
        return []
    rows = {r["sessions"]: r for r in idle}
    lines = []
    if 100_000 in rows:
        b = rows[100_000]["bytes_per_session"]
        lines.append(f"| ≤ 2 KiB per idle session at 100,000 sessions (shared child, in memory) | {b:,.0f} bytes "
                     f"| {'met' if b <= 2048 else 'missed'} |")
    if 1_000_000 in rows:
        mib = rows[1_000_000]["rss_mib"]
        lines.append(f"| 1,000,000 idle sessions on one replica within 2.5 GB | {mib:,.0f} MiB RSS "
                     f"| {'met' if mib * 2**20 <= 2.5e9 else 'missed'} |")
    first, last = idle[0], idle[-1]
    for key, what in (("opened_per_second", "session creation rate"), ("p50_us", "an active session's p50")):
        ratio = max(first[key], last[key]) / min(first[key], last[key])
        lines.append(f"| {what} flat from {first['sessions']:,} to {last['sessions']:,} sessions (≤ 1.2×) "
                     f"| {first[key]:,.0f} → {last[key]:,.0f} ({ratio:.2f}×) | {'met' if ratio <= 1.2 else 'missed'} |")
    sweep = last["sweep_us"]
    lines.append(f"| the idle sweep costs what expires, not what exists (its time at {last['sessions']:,}) "
                 f"| {sweep:.0f} µs, idle CPU {last['idle_cpu_percent']:.1f} % | "
                 f"{'met' if sweep < 1000 and last['idle_cpu_percent'] < 1 else 'missed'} |")
    return lines


def over(a, b):
    """a ÷ b, or None where b is nothing (too few calls to measure)."""
    return a / b if b else None


def load_targets(upstream, results_of, added):
    """The targets under load, at every level past one session: the HTTP upstream against the
    TCP relay, the shared child against itself and against crates.io mcp-proxy, per-session
    children against direct."""
    loaded = CONCURRENCY[1:]
    relay, http = results_of(upstream, RELAY), results_of(upstream, "mcp-session-proxy (HTTP)")
    shared = results_of(upstream, "mcp-session-proxy (stdio, shared)")
    crates = results_of(upstream, "crates.io mcp-proxy 0.6.0")
    per_session = results_of(upstream, "mcp-session-proxy (stdio)")
    direct = results_of(upstream, "direct (no proxy)")
    lines = []

    def row(what, ratios, bound, at_least):
        ratios = {s: r for s, r in ratios.items() if r is not None}
        if not ratios:
            return
        figures = ", ".join(f"{r:.2f}× ({s})" for s, r in ratios.items())
        met = all((r >= bound) if at_least else (r <= bound) for r in ratios.values())
        lines.append(f"| {what} ({upstream}) | {figures} | {'met' if met else 'missed'} |")

    if relay and http:
        ratios = {s: hops["mcp-session-proxy (HTTP)"]["p50_us"] / hops[RELAY]["p50_us"]
                  for s, hops in added.items()
                  if "mcp-session-proxy (HTTP)" in hops and RELAY in hops and hops[RELAY]["p50_us"] > 0}
        if ratios:
            row("HTTP upstream: added p50 ≤ 2× the relay's", ratios, 2, False)
        row("HTTP upstream: CPU per call ≤ 2× the relay's",
            {s: over(http[s]["cpu_us_per_call"], relay[s]["cpu_us_per_call"]) for s in CONCURRENCY}, 2, False)
        row("HTTP upstream: req/s ≥ 0.9× the relay's",
            {s: http[s]["throughput_rps"] / relay[s]["throughput_rps"] for s in loaded}, 0.9, True)
    if shared and len(loaded) > 1:
        first = shared[loaded[0]]["throughput_rps"]
        row(f"shared child: req/s at every level ≥ 0.9× its {loaded[0]}-session figure",
            {s: shared[s]["throughput_rps"] / first for s in loaded[1:]}, 0.9, True)
    if shared and crates:
        row("shared child: req/s ≥ 1.5× crates.io mcp-proxy",
            {s: shared[s]["throughput_rps"] / crates[s]["throughput_rps"] for s in loaded}, 1.5, True)
    if per_session and direct:
        row("per-session children: req/s ≥ 0.95× direct",
            {s: per_session[s]["throughput_rps"] / direct[s]["throughput_rps"] for s in loaded}, 0.95, True)
    contextforge = results_of(upstream, CONTEXTFORGE)
    for mine, ours in (("shared child", shared), ("per-session children", per_session)):
        if ours and contextforge:
            row(f"{mine}: req/s ≥ 3× ContextForge's bridge",
                {s: ours[s]["throughput_rps"] / contextforge[s]["throughput_rps"] for s in CONCURRENCY}, 3, True)
            if direct and lines and lines[-1].endswith("| missed |"):
                # What no proxy at all does against it, to put a miss in proportion.
                bare = ", ".join(f"{direct[s]['throughput_rps'] / contextforge[s]['throughput_rps']:.2f}×"
                                 for s in CONCURRENCY)
                lines[-1] = lines[-1].replace(" | missed |", f"; direct (no proxy): {bare} | missed |")
    return lines


def svg_plot(series, path):
    """Bars: requests per second at the highest concurrency, per target and upstream."""
    width, bar, gap, left = 760, 16, 6, 250
    top = CONCURRENCY[-1]
    rows = [(f"{upstream}: {target}", results[top]["throughput_rps"]) for upstream, target, results in series]
    top = max(v for _, v in rows) or 1
    height = 40 + len(rows) * (bar + gap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             f'<text x="10" y="18" font-size="13">tools/call requests per second, {top} concurrent sessions</text>']
    for i, (label, value) in enumerate(rows):
        y = 30 + i * (bar + gap)
        w = (width - left - 70) * value / top
        colour = "#2b7bba" if "mcp-session-proxy" in label else ("#999" if "direct" in label else "#d98b2b")
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 12}">{value:.0f}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def machine():
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    memory = next(line.split(":", 1)[1].strip() for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return f"{os.cpu_count()} × {model}, {memory} memory, {platform.system()} {platform.release()}"


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
         "balanced": balanced, "tls": tls_json(tls or {}),
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
