"""Owner-aware routing against round-robin (bench/run.py --sections owner): two sets of three
replicas, each on a Redis of its own, both up at once, one behind nginx running the shipped
config/nginx.conf (round-robin: most calls reach a replica that does not own their session and
cross to the owner over the hop), the other behind config/nginx-owner.conf (each call to the
replica its session id names). `tools/call` of the demo's echo from `sessions` clients through
each, alternated in rounds, medians: p50, p99, req/s, the replicas' own CPU per call (all three
together, their demo children apart) and the client messages that crossed the hop (the owners'
mcp_proxy_sessions_forwarded_total) per call."""

import os
import subprocess
import urllib.request

from processes import CLUSTER_SECRET, PROXY, Target, bench, free_port, medians, start_redis, wait_for_port
from run_measures import Nginx, replica_cores

SETUPS = {"round-robin": "nginx.conf", "owner-aware": "nginx-owner.conf"}
REPLICAS = 3


def forwarded(replicas):
    """The client messages the replicas took from one another over the hop, so far."""
    total = 0.0
    for replica in replicas:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/metrics") as response:
            for line in response.read().decode().splitlines():
                if line.startswith("mcp_proxy_sessions_forwarded_total"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def replica(name, redis_port, cores=None, upstream=(), prefix=(), extra=()):
    """A replica named `name` (its --node-id) on the Redis at `redis_port`, in front of
    `upstream` (its --stdio or --http arguments; the bundled demo when empty), held to `cores`
    (`taskset`, as many workers) when given, its command after `prefix` (valgrind)."""
    port = free_port()
    held = ["taskset", "-c", ",".join(map(str, cores))] if cores else []
    return Target(name, [
        *held, *prefix, str(PROXY), "--listen", f"127.0.0.1:{port}",
        "--store", f"redis://127.0.0.1:{redis_port}/0", "--node-id", name,
        "--allowed-host", "127.0.0.1", "--allowed-host", "mcp.example.com",
        "--max-anonymous-sessions", "100000", "--max-sessions", "100000",
        *(["--workers", str(len(cores))] if cores else []), *upstream, *extra], port,
        env={"RUST_LOG": "warn", "MCP_PROXY_CLUSTER_SECRET": CLUSTER_SECRET})


def start_set(setup, config, pinned, started):
    """Redis, three replicas named replica-0..2 (their --node-id), and nginx running `config`
    in front of them; each added to `started` as it starts."""
    redis_port = free_port()
    redis = start_redis(redis_port)
    started.append(redis)
    wait_for_port(redis_port, redis)
    replicas, names = [], [f"replica-{n}" for n in range(REPLICAS)]
    for n, name in enumerate(names):
        replicas.append(replica(name, redis_port, pinned and pinned[0][n]))
        started.append(replicas[-1])
    nginx = Nginx([r.port for r in replicas], f"nginx-{setup}", config, names)
    started.append(nginx)
    return nginx, replicas


def measure_owner(calls, sessions=32, rounds=5):
    """Both sets up at once, `rounds` rounds alternating which goes first; medians per set. On
    8 cores or more each replica is held to cores of its own (`replica_cores`)."""
    started, sets = [], {}
    pinned = replica_cores()
    everything = os.sched_getaffinity(0)
    if pinned:
        os.sched_setaffinity(0, pinned[1])
    try:
        for setup, config in SETUPS.items():
            sets[setup] = start_set(setup, config, pinned, started)
        samples = {setup: [] for setup in SETUPS}
        for round_ in range(rounds):
            order = list(SETUPS) if round_ % 2 == 0 else list(SETUPS)[::-1]
            for setup in order:
                nginx, replicas = sets[setup]
                cpu, hops = sum(r.cpu_seconds() for r in replicas), forwarded(replicas)
                r = bench("calls", "--url", nginx.url, "--sessions", sessions,
                          "--calls", max(calls // sessions, 20), "--warmup", 20)
                done = r["calls"] + 20 * sessions
                r["cpu_us_per_call"] = (sum(x.cpu_seconds() for x in replicas) - cpu) * 1e6 / done
                r["hops_per_call"] = (forwarded(replicas) - hops) / done
                samples[setup].append(r)
    finally:
        os.sched_setaffinity(0, everything)
        for process in reversed(started):
            if isinstance(process, subprocess.Popen):
                os.killpg(process.pid, 15)
                process.wait()
            else:
                process.stop()
    return medians(samples, ("p50_us", "p99_us", "throughput_rps", "cpu_us_per_call", "hops_per_call"))


def owner_table(figures, sessions=32):
    plain = figures["round-robin"]
    lines = [f"### Owner-aware routing against round-robin, 3 replicas, {sessions} clients", "",
             f"{sessions} clients calling `tools/call` (echo) on the demo through nginx in front of three",
             "replicas, each set on a Redis of its own, both up at once and alternated in rounds, medians:",
             "`config/nginx.conf` (round-robin) and `config/nginx-owner.conf` (each call to the replica its",
             f"session id names). On {os.cpu_count()} cores; the replicas' CPU is all three's own, their demo",
             "children apart; hops per call: client messages the replicas forwarded to an owner.", "",
             "| nginx running | p50 µs | p99 µs | req/s | req/s ÷ round-robin | replicas' CPU µs/call | hops/call |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for setup, config in SETUPS.items():
        f = figures[setup]
        lines.append(f"| `{config}` | {f['p50_us']:.0f} | {f['p99_us']:.0f} | {f['throughput_rps']:.0f} "
                     f"| {f['throughput_rps'] / plain['throughput_rps']:.2f} | {f['cpu_us_per_call']:.0f} "
                     f"| {f['hops_per_call']:.2f} |")
    return lines + [""]
