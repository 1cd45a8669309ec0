"""One replica against three on one Redis (bench/run.py --sections fleet), each set behind
nginx, for the demo over stdio (a child per session) and the demo over HTTP (one server, shared
by every replica):

- the fleet: one replica behind config/nginx.conf rendered for it alone, three behind
  config/nginx.conf (round-robin: two calls in three reach a replica that does not own their
  session and cross to the owner over the hop) and the same three behind
  config/nginx-owner.conf (each call to the replica its session id names);
- owner against non-owner: sessions opened on replica 0 of the three, called there (straight
  to their owner) or on replica 1 (`mcp-bench calls --call-url`: each call crosses the hop);
- anchors, for the HTTP server: the server called directly, the TCP relay and nginx as a plain
  HTTP reverse proxy (bench/anchors.py) in front of it.

Every path up at once and measured at every level of the run in interleaved rounds (the order
turning each round), medians of p50, p99 and req/s; over all rounds together, CPU per call (the
replicas' own, all of them together, their children apart; an anchor's own process; direct:
the server's) and the client messages that crossed the hop per call
(mcp_proxy_sessions_forwarded_total, counted where the hop arrives). Where valgrind is installed, the replicas' instructions per call (callgrind):
a call straight to its owner, and one sent to a non-owner, summed over both replicas. On 8
cores or more each replica is held to cores of its own (`replica_cores`: 4 a replica on 16)."""

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import anchors
from owner_cost import forwarded, replica
from processes import PROXY, Target, bench, free_port, log, medians, start_redis, wait_for_port
from run_measures import Nginx, replica_cores
from virtual_cost import callgrind, instructions_in, stop_counted

SERVERS = ("stdio", "HTTP")
ONE = "1 replica, nginx"
ROUND_ROBIN = "3 replicas, nginx round-robin"
OWNER_AWARE = "3 replicas, nginx owner-aware"
FLEET = (ONE, ROUND_ROBIN, OWNER_AWARE)
OWNER = "straight to its owner (replica 0)"
NON_OWNER = "to a non-owner (replica 1, hop to 0)"
DIRECT = "direct (no proxy)"
ANCHORS = (DIRECT, anchors.RELAY, anchors.NGINX, anchors.NGINX_LOGGED)
# 3 replicas ÷ 1 replica, req/s, on 16 cores or more (4 a replica), at these levels.
TARGETS = {OWNER_AWARE: 2.7, ROUND_ROBIN: 2.4}
TARGET_LEVELS = (64, 256)
TARGET_CORES = 16
FIELDS = ("p50_us", "p99_us", "throughput_rps")


def upstream_of(server, demo):
    """The replicas' upstream arguments: the demo over stdio, or the shared HTTP demo."""
    if server == "stdio":
        return ["--stdio", f"{shlex.quote(str(PROXY))} demo-server"]
    return ["--http", demo.url]


def start_fleet(server, pinned, started):
    """Redis, one replica (`solo`) and three (replica-0..2) on it, nginx in front of the one
    and two nginx in front of the three; for the HTTP server also the server and its anchors.
    Returns the paths: name → (url, call url or None, what its CPU is counted over, the
    replicas whose hops are counted)."""
    redis_port = free_port()
    redis = start_redis(redis_port)
    started.append(redis)
    wait_for_port(redis_port, redis)
    demo, paths = None, {}
    if server == "HTTP":
        port = free_port()
        demo = Target("demo-http", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{port}"], port)
        started.append(demo)
        address = f"127.0.0.1:{port}"
        relay = anchors.relay(free_port(), address)
        plain = anchors.nginx(free_port(), address)
        logged = anchors.nginx(free_port(), address, access_log=True)
        started += [relay, plain, logged]
        for name, target in zip(ANCHORS, (demo, relay, plain, logged)):
            paths[name] = (f"http://127.0.0.1:{target.port}/mcp", None, [target], [])
    upstream = upstream_of(server, demo)
    solo = replica("solo", redis_port, pinned and pinned[0][0], upstream)
    started.append(solo)
    three = []
    for n in range(3):
        three.append(replica(f"replica-{n}", redis_port, pinned and pinned[0][n], upstream))
        started.append(three[-1])
    names = [r.name for r in three]
    tag = server.lower()
    one = Nginx([solo.port], f"nginx-fleet-{tag}-1", "nginx.conf", ["solo"])
    started.append(one)
    round_robin = Nginx([r.port for r in three], f"nginx-fleet-{tag}-3", "nginx.conf", names)
    started.append(round_robin)
    owner_aware = Nginx([r.port for r in three], f"nginx-fleet-{tag}-owner", "nginx-owner.conf", names)
    started.append(owner_aware)
    paths[ONE] = (one.url, None, [solo], [solo])
    paths[ROUND_ROBIN] = (round_robin.url, None, three, three)
    paths[OWNER_AWARE] = (owner_aware.url, None, three, three)
    # Owner against non-owner: the CPU of both replicas, the owner's first.
    paths[OWNER] = (three[0].url, None, three[:2], three)
    paths[NON_OWNER] = (three[0].url, three[1].url, three[:2], three)
    return paths


def measured(url, call_url, counted, replicas, sessions, calls):
    """One run of `sessions` clients on `url` (their calls on `call_url`): mcp-bench's figures,
    the calls done (warm-up included), the CPU seconds each of `counted` spent, and the hops."""
    cpu, hops = [c.cpu_seconds() for c in counted], forwarded(replicas) if replicas else 0.0
    args = ["calls", "--url", url, "--sessions", sessions, "--calls", max(calls // sessions, 20), "--warmup", 20]
    r = bench(*args, *(["--call-url", call_url] if call_url else []))
    if r["errors"]:
        log(f"{url} → {call_url or url}, {sessions} sessions: {r['errors']} calls answered with an error")
    r["done"] = r["calls"] + 20 * sessions
    r["spent"] = [c.cpu_seconds() - before for c, before in zip(counted, cpu)]
    r["hops"] = forwarded(replicas) - hops if replicas else 0.0
    return r


def totals(runs):
    """CPU µs per call (all, and the first two processes apart) and hops per call over all of
    `runs` together: /proc counts CPU in clock ticks, too coarse for one run alone."""
    done = sum(r["done"] for r in runs)
    spent = [sum(part) * 1e6 / done for part in zip(*(r["spent"] for r in runs))]
    return {"cpu_us_per_call": sum(spent), "owner_us": (spent + [0.0])[0],
            "other_us": (spent + [0.0, 0.0])[1], "hops_per_call": sum(r["hops"] for r in runs) / done}


def measure_server(server, levels, calls, rounds, pinned):
    """Every path of `server` up at once, `rounds` interleaved rounds at each level; medians
    per (path, sessions), with the lowest and highest req/s of the rounds; and callgrind's
    instructions per call."""
    started = []
    try:
        paths = start_fleet(server, pinned, started)
        order = list(paths)
        samples = {(name, s): [] for name in order for s in levels}
        for round_ in range(rounds):
            log(f"fleet, {server} server: round {round_ + 1} of {rounds}")
            turn = order[round_ % len(order):] + order[:round_ % len(order)]
            for sessions in levels:
                for name in turn:
                    samples[(name, sessions)].append(measured(*paths[name], sessions, calls))
    finally:
        stop_all(started)
    figures = medians(samples, FIELDS)
    for key, runs in samples.items():
        figures[key].update(totals(runs))
        figures[key]["rps_range"] = (min(r["throughput_rps"] for r in runs),
                                     max(r["throughput_rps"] for r in runs))
    return {"calls": figures, "instructions": measure_instructions(server)}


def stop_all(started):
    for process in reversed(started):
        if isinstance(process, subprocess.Popen):
            os.killpg(process.pid, 15)
            process.wait()
        else:
            process.stop()


def measure_fleet(calls, levels, rounds=5):
    """Both servers, one after the other (`measure_server`). On 8 cores or more the replicas
    are held to cores of their own (the one replica to the first of the three's, measured in
    turn with it), the load generator, nginx, Redis and the HTTP server to the rest."""
    pinned = replica_cores()
    everything = os.sched_getaffinity(0)
    if pinned:
        os.sched_setaffinity(0, pinned[1])
    try:
        figures = {server: measure_server(server, levels, calls, rounds, pinned) for server in SERVERS}
    finally:
        os.sched_setaffinity(0, everything)
    figures["levels"] = list(levels)
    figures["rounds"] = rounds
    figures["cores"] = (len(pinned[0][0]), len(pinned[1])) if pinned else None
    return figures


def measure_instructions(server, sessions=8, few=50, many=250):
    """The replicas' own user-space instructions per call (callgrind), two replicas on a Redis
    of their own and sessions opened on the first: called there (the owner's count), and called
    on the second (both counts, apart and summed); the difference between runs of `many` and of
    `few` calls per session, so that starting, opening and stopping stay out of it. `None`
    without valgrind."""
    if not shutil.which("valgrind"):
        return None
    folder = Path(tempfile.mkdtemp(prefix="mcp-bench-fleet-"))
    started = []
    try:
        redis_port = free_port()
        redis = start_redis(redis_port)
        started.append(redis)
        wait_for_port(redis_port, redis)
        demo = None
        if server == "HTTP":
            port = free_port()
            demo = Target("demo-http", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{port}"], port)
            started.append(demo)
        upstream = upstream_of(server, demo)

        def counted(hop, calls):
            outs = [folder / f"{name}-{hop}-{calls}.out" for name in ("a", "b")]
            pair = []
            try:
                for name, out in zip(("replica-a", "replica-b"), outs):
                    pair.append(replica(name, redis_port, None, upstream, prefix=callgrind(out),
                                        extra=["--drain-delay", "0s"]))
                bench("calls", "--url", pair[0].url, "--sessions", sessions, "--calls", calls,
                      "--warmup", 0, *(["--call-url", pair[1].url] if hop else []))
            finally:
                for target in reversed(pair):
                    stop_counted(target)
            return [instructions_in(out) for out in outs]

        per_call = lambda hop: [(m - f) / (sessions * (many - few))
                                for m, f in zip(counted(hop, many), counted(hop, few))]
        owner, (a, b) = per_call(False)[0], per_call(True)
        return {OWNER: owner, NON_OWNER: a + b, "owner_part": a, "other_part": b}
    except (subprocess.CalledProcessError, RuntimeError, AttributeError, OSError) as error:
        log(f"fleet, {server} server: no instruction counts ({error})")
        return None
    finally:
        stop_all(started)
        shutil.rmtree(folder, ignore_errors=True)


def fleet_table(figures):
    levels, cores = figures["levels"], figures["cores"]
    held = ([f"Each replica (and its demo children) is held to {cores[0]} cores of its own (`taskset`, as many",
             f"`--workers`); the load generator, nginx, Redis and the HTTP server to the other {cores[1]}."]
            if cores else
            [f"On {os.cpu_count()} cores: the replicas, nginx, Redis, the server and the load generator share",
             "them all, so three replicas have no more CPU than one."])
    lines = ["### The fleet: one replica against three, behind nginx", "",
             "`tools/call` (echo) on the demo over stdio (a child per session) and over HTTP (one server",
             "shared by every replica): through nginx in front of one replica (`config/nginx.conf` rendered",
             "for it alone) and in front of three on the same Redis, round-robin (`config/nginx.conf`) and",
             "owner-aware (`config/nginx-owner.conf`); sessions opened on replica 0 of the three and",
             "called there, or on replica 1 (each call crossing the hop to its owner); for the HTTP server",
             "its anchors: the server called directly, the TCP relay and nginx as a plain reverse proxy",
             f"(one process, access log off, then on). All up at once, {figures['rounds']} interleaved rounds at",
             "each level, medians of p50, p99 and req/s.",
             "CPU µs/call, over all rounds: the replicas' own, all of them together (owner and non-owner:",
             "replicas 0 and 1), their children apart; an anchor's own process; direct: the server's.",
             "Hops/call: client messages the replicas took over the hop, per call (warm-up included).",
             *held, ""]
    for server in SERVERS:
        calls = figures[server]["calls"]
        names = (ANCHORS if server == "HTTP" else ()) + FLEET + (OWNER, NON_OWNER)
        lines += [f"#### The demo over {server}", "",
                  "| path | sessions | p50 µs | p99 µs | req/s | req/s ÷ 1 replica | CPU µs/call | hops/call "
                  "| req/s of the rounds (min–max) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for sessions in levels:
            one = calls[(ONE, sessions)]["throughput_rps"]
            for name in names:
                f = calls[(name, sessions)]
                ratio = f"{f['throughput_rps'] / one:.2f}" if name in FLEET else ""
                hops = f"{f['hops_per_call']:.2f}" if name not in ANCHORS else ""
                low, high = f["rps_range"]
                lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} "
                             f"| {f['throughput_rps']:.0f} | {ratio} | {f['cpu_us_per_call']:.0f} | {hops} "
                             f"| {low:.0f}–{high:.0f} |")
        lines.append("")
    return lines + hop_table(figures) + targets_table(figures)


def hop_table(figures):
    """Owner against non-owner: CPU µs per call at each level, and instructions per call."""
    levels = figures["levels"]
    lines = ["#### A call on its owner against one on a non-owner", "",
             "Sessions opened on replica 0, called there or on replica 1: the CPU per call of both",
             "replicas (from the rounds above, and of each apart), and their own user-space instructions",
             "per call (callgrind, 8 sessions, the difference between runs of 250 and of 50 calls per",
             "session, two replicas on a Redis of their own): instructions are the same on every run,",
             "where CPU time here moves by 10–25 % between runs. Under valgrind the hop's HMACs run sha2's",
             "portable SHA-256, not the CPU's SHA extensions: the counts overstate the hop (PROFILE.md,",
             "\"The fleet on 2 cores\").", "",
             "| server | call | replicas | " + " | ".join(f"CPU µs/call, {s}" for s in levels)
             + " | instructions per call | ÷ owner's |",
             "|---|---|---|" + "---:|" * (len(levels) + 2)]
    for server in SERVERS:
        calls, counts = figures[server]["calls"], figures[server]["instructions"]
        rows = [(OWNER, "0", "cpu_us_per_call", OWNER), (NON_OWNER, "0 and 1", "cpu_us_per_call", NON_OWNER),
                (f"{NON_OWNER}: the owner's part", "0", "owner_us", "owner_part"),
                (f"{NON_OWNER}: the non-owner's part", "1", "other_us", "other_part")]
        for label, which, key, counted in rows:
            shape = OWNER if label == OWNER else NON_OWNER
            cpu = " | ".join(f"{calls[(shape, s)][key]:.0f}" for s in levels)
            if counts:
                count = f"{counts[counted]:,.0f} | {counts[counted] / counts[OWNER]:.2f}"
            else:
                count = "– | –"
            lines.append(f"| {server} | {label} | {which} | {cpu} | {count} |")
    if not any(figures[server]["instructions"] for server in SERVERS):
        lines += ["", "valgrind is not installed here: no instruction counts."]
    return lines + [""]


def ratios(figures, server, setup):
    """3 replicas ÷ 1 replica, req/s, at each level the targets name (those of the run past
    one session where it has none of them)."""
    calls, levels = figures[server]["calls"], figures["levels"]
    named = [s for s in levels if s in TARGET_LEVELS] or levels[1:]
    return {s: calls[(setup, s)]["throughput_rps"] / calls[(ONE, s)]["throughput_rps"] for s in named}


def targets_table(figures):
    cores, count = figures["cores"], os.cpu_count()
    where = f"{count} cores" + (f", {cores[0]} a replica" if cores else "")
    lines = [f"Targets, on {TARGET_CORES} cores or more (4 a replica), at "
             f"{' and '.join(map(str, TARGET_LEVELS))} sessions: 3 replicas ≥ {TARGETS[OWNER_AWARE]}× the req/s",
             f"of one with owner-aware routing, ≥ {TARGETS[ROUND_ROBIN]}× with round-robin, for either server.", "",
             "| target | figure | met? | why, where missed |", "|---|---|---|---|"]
    for server in SERVERS:
        for setup, bound in TARGETS.items():
            found = ratios(figures, server, setup)
            met = all(r >= bound for r in found.values())
            why = "" if met else why_missed(figures, server)
            routing = setup.split("nginx ")[1]
            lines.append(f"| 3 replicas ≥ {bound}× one, {routing} ({server} server, {where}) "
                         f"| {', '.join(f'{r:.2f}× ({s})' for s, r in found.items())} "
                         f"| {'met' if met else 'missed'} | {why} |")
    return lines + [""]


def why_missed(figures, server):
    if os.cpu_count() < TARGET_CORES:
        return (f"on {os.cpu_count()} cores the replicas, nginx, Redis, the server and the load generator "
                "share the cores: three replicas have no more CPU than one, and every call that crosses "
                "the hop spends more of it (PROFILE.md, \"The fleet on 2 cores\")")
    return "see PROFILE.md, \"The fleet on 2 cores\""


def fleet_json(figures):
    out = {k: v for k, v in figures.items() if k not in SERVERS}
    for server in SERVERS:
        out[server] = {"calls": {f"{name} / {s}": f for (name, s), f in figures[server]["calls"].items()},
                       "instructions": figures[server]["instructions"]}
    return out
