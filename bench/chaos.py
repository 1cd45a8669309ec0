#!/usr/bin/env python3
"""Chaos run: replicas of mcp-session-proxy sharing one redis-server, in front of the bundled
demo server, with clients that check the proxy's promises while replicas are killed and
restarted, client streams are cut and load bursts come and go.

    bench/chaos.py --proxy target/release/mcp-session-proxy --bench target/release/mcp-bench \\
        --seconds 120 --seed 7 --report chaos.json

With --through nginx or --through haproxy the clients reach the replicas through that balancer,
running the shipped config/nginx.conf or config/haproxy.cfg (rendered for the loopback ports as
tests/it/harness/balancer.rs does), instead of each request going to a random replica. A
request in flight on a killed replica then comes back from the balancer as a 502 (a server error
here) or a closed connection: the balancers rightly send no POST that reached a replica again.

Measurements instead of the chaos run, counted rather than judged (exit status 0 unless the run
broke, or --max-failed or --max-failed-not-in-flight was passed and exceeded):

    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --through nginx --kill-owner
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --through haproxy --rolling-restart
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --sentinel --kill-redis-master
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \
        --redis-cluster --kill-redis-master

--kill-redis-master (with --sentinel: the Redis master has a replica and three Sentinels; with
--redis-cluster: a cluster of three masters with a replica each, made by redis-cli --cluster
create): kill -9 of the master (of the cluster: the master serving the slot of a random
client's session), --rounds times, the killed one back as the new master's replica each time;
every session is waited on, from the kill to its next successful call, and the report gives the
time the Sentinels or the cluster took to promote a replica and the Redis round trips per call.
--kill-owner: kill -9 of the replica owning a random client's session, started again after
--down seconds, --rounds times; --rolling-restart: SIGTERM to each replica in turn, started again
once it has exited (--passes times over all of them). Under --clients (8) clients, each with a
session calling tools one after another (counter, echo, progress over SSE), each call once: the report counts calls and failed
calls by error text, and the time from each kill or SIGTERM to the next successful call of each
session the replica owned (p50, p99, max). A failed call is "in flight at a kill" when it was
sent before the killed replica was reaped and answered after the SIGKILL; the others are counted
apart (--max-failed-not-in-flight bounds them). Replicas are named replica-<i> (kept across restarts),
so a session id tells its owner.

Everything it starts (redis-server, the replicas, the balancer, mcp-bench) listens on 127.0.0.1
only and is stopped by its own handle, also on an exception, Ctrl-C or SIGTERM; if this script
itself is killed, its children get SIGKILL from the kernel (PR_SET_PDEATHSIG). The report (JSON,
on stdout and in --report) names the folder holding each replica's log; the exit status is 1 when
a failure counter is non-zero. Only the standard library and httpx are used.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import datetime
import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter

try:
    import httpx
except ImportError:  # the repository's venv carries httpx's successor, same API
    import httpx2 as httpx  # type: ignore[no-redef]

PROTOCOL = "2025-11-25"
INTERRUPTED = "went away while this request was in flight"
UNUSABLE_AFTER = 20.0  # seconds a session may fail to complete one request
LIVE_WINDOW = 5.0  # rule (i): the GET stream must stay attached this long after the response

FAILURES = [
    "lost_progress",
    "lost_updates",
    "duplicated",
    "out_of_order",
    "crossing",
    "not_found_live",
    "unusable",
    "server_errors",
    "unavailable_without_retry_after",
    "counter_mismatch",
    "unexpected_answers",
    "script_errors",
]

RULES = [
    "lost_progress: a progress call answered with a result (not an error) must have received "
    "every progress value 1..steps over its POST stream and all its resumes; one count per call.",
    "interrupted (allowed, reported): a call answered with JSON-RPC -32603 whose message says the "
    "replica 'went away while this request was in flight'; its events still count for "
    "duplicated/out_of_order.",
    "duplicated: the same progress value of one call, or the same (tag, index) update, received "
    "twice (over every stream and resume of the session).",
    "out_of_order: progress values of one call not increasing; indexes of one tag not increasing; "
    "the sequence part of SSE ids (<stream>.<seq>) not increasing on one stream across its "
    "resumes (a repeated id whose message was already counted as duplicated is not counted "
    "again); a priming id behind the last id received on that stream.",
    "crossing: a message carrying another worker's URI (demo://chaos/<w>/...) or another "
    "session's tag or progress token (cw<w>s<generation>-...).",
    "lost_updates (i) live: for an emit_updates call answered with success while the GET stream "
    "was attached, and stayed attached without a break from before the call was sent until 5 s "
    "after its response, each of its `count` updates must arrive on that attachment within "
    "those 5 s; one count per missing update; "
    "a missing update is excused (reported as live_excused_by_gap) when an untagged "
    "resources/updated for its URI (the gap rule) arrived on that attachment after the call was "
    "sent; with --allow-live-coalescing, also when a later update of the same URI arrived on "
    "that attachment within those 5 s (coalesced into it). live_coalesced reports how many "
    "missing updates were of that kind, with or without the flag.",
    "lost_updates (ii) final: after the faults stop, a quiet period and one last resume of the "
    "GET stream from its last id on a random replica (read for a few seconds), for each URI of "
    "the worker's final session: the newest update of a successful emit_updates call (or a newer "
    "one of a later call whose outcome is unknown) must have been received, or an untagged "
    "resources/updated for that URI must have arrived after the last tagged one received; one "
    "count per URI.",
    "not_found_live: every 404 for a session the worker has not deleted (the worker then starts "
    "a new session, as the spec requires).",
    "unusable: a session that could not complete one request (or re-attach its GET stream) for "
    "20 s; the worker then starts a new session.",
    "server_errors: any 5xx other than 503.",
    "unavailable_without_retry_after: a 503 without a Retry-After header.",
    "counter_mismatch: a counter value that is neither last+1 (up to last+1+k after k calls of "
    "unknown outcome) nor a restart from 1 (a 'state reset' after a takeover: reported, allowed).",
    "unexpected_answers: a 4xx other than 404 to a well-formed request, a JSON-RPC error other "
    "than the interrupted one, a malformed SSE event or message.",
    "script_errors: an exception in this script (a bug here, not in the proxy).",
    "reported, not failures: 503s (honoured: wait Retry-After, then retry on a random replica), "
    "interrupted calls, state resets, takeovers seen (a new 2^32 block of SSE sequence numbers "
    "in a session), connection errors (a killed replica: retried elsewhere), calls of unknown "
    "outcome (connection lost after sending), kills done, burst requests done.",
    "unexercised: a run passes only when every check had something to check: at least one "
    "kill -9 (unless --no-kills), one live update check made (not skipped), one progress call "
    "and one update received; otherwise it fails naming what was not exercised.",
]

_libc = None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):
    _prctl = None


def _child_setup():
    """In the child before exec: die with this script (PR_SET_PDEATHSIG = 1)."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now() -> float:
    return time.monotonic()


def wall() -> str:
    """UTC, as the proxies' JSON logs write their timestamps (comparable as strings)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Stats:
    def __init__(self):
        self.counts = Counter()
        self.examples: dict[str, list] = {}
        self.methods = Counter()  # other notifications seen on GET streams
        self.broken = Counter()  # why GET streams broke (not cut by the client)
        # every live loss or coalescing: (session, GET replica, wall time), to tell owners
        # from views afterwards (from the replicas' logs)
        self.live_records: dict[str, list] = {"lost": [], "coalesced": []}

    def add(self, name: str, n: int = 1, example: dict | None = None):
        self.counts[name] += n
        if example is not None:
            bucket = self.examples.setdefault(name, [])
            if len(bucket) < 50:
                example = dict(example)
                example.setdefault("t", round(now() - START, 2))
                example.setdefault("at", wall())
                bucket.append(example)


START = now()
STATS = Stats()


# --------------------------------------------------------------------------- processes


class Proc:
    """A child started by this script, stopped by its own PID (its process group is its own:
    start_new_session, so the demo servers a replica started go with it)."""

    def __init__(self, name: str, argv: list[str], log_path: str | None,
                 stdout_too: bool = False, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        env = {**os.environ, **(env or {})}
        env.setdefault("RUST_LOG", "info")
        try:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log if stdout_too else subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                preexec_fn=_child_setup,
                env=env,
            )
        finally:
            if log_path:
                log.close()
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _signal_group(self, sig):
        try:
            os.killpg(self.pid, sig)  # the group this child leads (its PID)
        except (ProcessLookupError, PermissionError):
            pass

    def kill9(self):
        """kill -9 of the replica and of the servers it started (as if its host died)."""
        if self.alive():
            self.popen.kill()
        self._signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, grace: float = 5.0):
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                try:
                    self.popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        # Whatever of its group is left (servers it had not released yet).
        self._signal_group(signal.SIGKILL)


class Cluster:
    def __init__(self, args, log_dir: str, named: bool = False):
        self.args = args
        self.log_dir = log_dir
        self.secret = secrets.token_hex(16)
        self.redis: Proc | None = None
        self.redis_port = free_port()
        self.ports = [free_port() for _ in range(args.replicas)]
        self.procs: list[Proc | None] = [None] * args.replicas
        self.starts = [0] * args.replicas
        self.down = [True] * args.replicas
        self.logs: list[str] = []
        # Named replicas (replica-<i>, kept across restarts, as a deployment names them) tell
        # by a session's id which replica owns it; otherwise each start picks a random name.
        self.named = named
        # --sentinel: the master (self.redis) has a replica and three Sentinels.
        self.sentinels = Sentinels(self) if getattr(args, "sentinel", False) else None
        # --redis-cluster: six nodes instead of one Redis.
        self.redis_cluster = RedisCluster(self) if getattr(args, "redis_cluster", False) else None

    def store_url(self) -> str:
        if self.sentinels is not None:
            return self.sentinels.url()
        if self.redis_cluster is not None:
            return self.redis_cluster.url()
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def redis_server(self, name: str, port: int, *extra: str) -> Proc:
        """A redis-server on `port` keeping nothing on disk but in the log folder."""
        return Proc(name, ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                           "--save", "", "--appendonly", "no", "--dir", self.log_dir,
                           "--repl-diskless-sync-delay", "0", *extra],
                    os.path.join(self.log_dir, f"{name}.log"))

    async def listening(self, port: int, proc: Proc, what: str):
        deadline = now() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                if now() > deadline or not proc.alive():
                    raise RuntimeError(f"{what} did not start")
                await asyncio.sleep(0.05)

    async def start(self):
        if self.redis_cluster is not None:
            await self.redis_cluster.start()
        else:
            self.redis = self.redis_server("redis", self.redis_port)
            await self.listening(self.redis_port, self.redis, "redis-server")
        if self.sentinels is not None:
            await self.sentinels.start()
        for i in range(len(self.ports)):
            self.spawn(i)
        await asyncio.gather(*(self.ready(i) for i in range(len(self.ports))))

    def spawn(self, i: int):
        self.starts[i] += 1
        log = os.path.join(self.log_dir, f"replica-{i}.start-{self.starts[i]}.log")
        self.logs.append(log)
        argv = [
            self.args.proxy,
            "--listen", f"127.0.0.1:{self.ports[i]}",
            "--store", self.store_url(),
            "--log-format", "json",
        ]
        if self.named:
            argv += ["--node-id", f"replica-{i}"]
        if self.args.through:
            # The Host clients send through the balancer, and the one of HAProxy's checks.
            argv += ["--allowed-host", "127.0.0.1", "--allowed-host", "mcp.example.com"]
        # The secret in the environment: every local user reads a command line.
        self.procs[i] = Proc(f"replica-{i}", argv, log,
                             env={"MCP_PROXY_CLUSTER_SECRET": self.secret})

    async def ready(self, i: int, bound: float = 30.0):
        deadline = now() + bound
        async with httpx.AsyncClient(timeout=1.0) as client:
            while True:
                proc = self.procs[i]
                if proc is None or not proc.alive():
                    # The port may still be held for an instant: try again, bounded.
                    if now() > deadline:
                        raise RuntimeError(f"replica {i} exited; see {proc.log_path if proc else '?'}")
                    await asyncio.sleep(0.3)
                    self.spawn(i)
                    continue
                try:
                    r = await client.get(self.url(i) + "/readyz")
                    if r.status_code == 200:
                        self.down[i] = False
                        return
                except httpx.TransportError:
                    pass
                if now() > deadline:
                    raise RuntimeError(f"replica {i} not ready within {bound} s")
                await asyncio.sleep(0.1)

    def kill9(self, i: int):
        self.down[i] = True
        proc = self.procs[i]
        if proc is not None:
            proc.kill9()

    async def terminate(self, i: int, grace: float = 60.0):
        """SIGTERM, as a rolling restart stops a replica; returns once it has exited."""
        self.down[i] = True
        proc = self.procs[i]
        if proc is not None:
            await asyncio.to_thread(proc.stop, grace)

    def stop_all(self):
        for proc in self.procs:
            if proc is not None:
                proc.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.sentinels is not None:
            self.sentinels.stop()
        if self.redis_cluster is not None:
            self.redis_cluster.stop()


SERVICE = "mcp-store"


class Sentinels:
    """--sentinel: a replica of the cluster's master and three Sentinels watching them
    (quorum 2, a master down after 500 ms); the master can be killed and the servers swap
    roles at each failover (the killed one comes back as the new master's replica)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.replica_port = free_port()
        self.ports = [free_port() for _ in range(3)]
        self.servers: dict[int, Proc] = {}  # port -> the redis-server on it (master included)
        self.procs: list[Proc] = []

    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    async def start(self):
        c = self.cluster
        self.servers[c.redis_port] = c.redis
        replica = c.redis_server("redis-replica", self.replica_port,
                                 "--replicaof", "127.0.0.1", str(c.redis_port))
        self.servers[self.replica_port] = replica
        await c.listening(self.replica_port, replica, "the replica")
        await self.until(lambda: "master_link_status:up" in self.cli(
            self.replica_port, "INFO", "replication"), "the replica to copy the master")
        for n, port in enumerate(self.ports):
            config = os.path.join(c.log_dir, f"sentinel-{n}.conf")
            with open(config, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {c.log_dir}\n"
                        f"sentinel monitor {SERVICE} 127.0.0.1 {c.redis_port} 2\n"
                        f"sentinel down-after-milliseconds {SERVICE} 500\n"
                        f"sentinel failover-timeout {SERVICE} 5000\n")
            self.procs.append(Proc(f"sentinel-{n}", ["redis-server", config, "--sentinel"],
                                   os.path.join(c.log_dir, f"sentinel-{n}.log")))
        for port in self.ports:
            await self.until(lambda port=port: self.knows_all(port),
                             "each Sentinel to know the replica and the others")

    def cli(self, port: int, *command: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True,
                              text=True, timeout=5)
        return done.stdout

    def knows_all(self, port: int) -> bool:
        replicas = self.cli(port, "SENTINEL", "REPLICAS", SERVICE)
        others = self.cli(port, "SENTINEL", "SENTINELS", SERVICE)
        return "master-link-status" in replicas and others.count("runid") == 2

    def master(self) -> int | None:
        """The master's port as the Sentinels name it."""
        for port in self.ports:
            lines = self.cli(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE).split()
            if len(lines) == 2 and lines[1].isdigit():
                return int(lines[1])
        return None

    async def until(self, probe, what: str, bound: float = 30.0):
        deadline = now() + bound
        while not await asyncio.to_thread(probe):
            if now() > deadline:
                raise RuntimeError(f"{what}: not within {bound:g} s")
            await asyncio.sleep(0.05)

    async def kill_master(self) -> tuple[int, float]:
        """kill -9 of the master; returns once the Sentinels named another (and the killed
        one is back as its replica): the new master's port and the seconds it took."""
        old = self.master()
        since = now()
        self.servers[old].kill9()
        await self.until(lambda: self.master() not in (None, old), "a new master", 60)
        took = now() - since
        new = self.master()
        self.servers[old] = self.cluster.redis_server(
            f"redis-{old}-again", old, "--replicaof", "127.0.0.1", str(new))
        await self.until(lambda: "master_link_status:up" in self.cli(old, "INFO", "replication"),
                         "the killed master to come back as a replica")
        return new, took

    def stop(self):
        for proc in self.procs:
            proc.stop()
        for port, proc in self.servers.items():
            if proc is not self.cluster.redis:
                proc.stop()


class RedisCluster:
    """--redis-cluster: six redis-server --cluster-enabled yes, made three masters with a
    replica each by redis-cli --cluster create (a node failed after 1 s of silence); a master
    can be killed, and comes back as its promoted replica's replica."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.ports = [free_port() for _ in range(6)]
        self.servers: dict[int, Proc] = {}

    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]},127.0.0.1:{self.ports[3]}"

    def node(self, port: int, again: int = 0) -> Proc:
        c = self.cluster
        return c.redis_server(f"redis-node-{port}" + (f"-again-{again}" if again else ""), port,
                              "--cluster-enabled", "yes",
                              "--cluster-config-file", f"nodes-{port}.conf",
                              "--cluster-port", str(self.bus[port]),
                              "--cluster-node-timeout", "1000",
                              "--cluster-replica-validity-factor", "0")

    async def start(self):
        c = self.cluster
        self.bus = {port: free_port() for port in self.ports}
        for port in self.ports:
            self.servers[port] = self.node(port)
            await c.listening(port, self.servers[port], "a cluster node")
        done = await asyncio.to_thread(
            subprocess.run, ["redis-cli", "--cluster", "create",
                             *(f"127.0.0.1:{p}" for p in self.ports),
                             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create: {done.stdout} {done.stderr}")
        await self.until(self.whole, "the cluster to be whole")

    def cli(self, port: int, *command: str) -> str:
        try:
            done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True,
                                  text=True, timeout=5)
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout

    def whole(self, but: int | None = None) -> bool:
        """Every live node says the cluster is ok and every replica copied its master."""
        for port in self.ports:
            if port == but:
                continue
            if "cluster_state:ok" not in self.cli(port, "CLUSTER", "INFO"):
                return False
            replication = self.cli(port, "INFO", "replication")
            if "role:master" not in replication and "master_link_status:up" not in replication:
                return False
        return True

    def master_of(self, key: str) -> int | None:
        """The port of the live master serving `key`'s slot."""
        for port in self.ports:
            slot = self.cli(port, "CLUSTER", "KEYSLOT", key).strip()
            nodes = self.cli(port, "CLUSTER", "NODES")
            if not slot.isdigit() or not nodes:
                continue
            for line in nodes.splitlines():
                fields = line.split()
                if len(fields) < 9 or "master" not in fields[2] or "fail" in fields[2]:
                    continue
                for r in fields[8:]:
                    if r.startswith("["):
                        continue
                    lo, _, hi = r.partition("-")
                    if int(lo) <= int(slot) <= int(hi or lo):
                        return int(fields[1].split("@")[0].rsplit(":", 1)[1])
            return None
        return None

    async def until(self, probe, what: str, bound: float = 60.0):
        deadline = now() + bound
        while not await asyncio.to_thread(probe):
            if now() > deadline:
                raise RuntimeError(f"{what}: not within {bound:g} s")
            await asyncio.sleep(0.05)

    async def kill_master(self, key: str) -> tuple[int, int, float]:
        """kill -9 of the master serving `key`; returns once a replica serves its slots (and
        the killed one is back as a replica): the old and new master's ports, the seconds."""
        old = self.master_of(key)
        since = now()
        self.servers[old].kill9()
        await self.until(lambda: self.master_of(key) not in (None, old), "a promoted replica")
        took = now() - since
        new = self.master_of(key)
        again = sum(1 for name in os.listdir(self.cluster.log_dir) if f"node-{old}" in name)
        self.servers[old] = self.node(old, again)
        await self.until(lambda: self.whole(), "the killed master back as a replica")
        return old, new, took

    def stop(self):
        for proc in self.servers.values():
            proc.stop()


# --------------------------------------------------------------------------- balancers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from balancer import BALANCER_CONFIGS, find_balancer, render_balancer_config  # noqa: E402


class Balancer:
    """nginx or HAProxy running a shipped configuration in front of the replicas, on a
    loopback port of its own; its configuration, logs and temporary files in a folder of the
    run's logs."""

    def __init__(self, kind: str, config: str | None, cluster: Cluster):
        self.kind = kind
        self.config = config or os.path.join(ROOT, BALANCER_CONFIGS[kind])
        self.cluster = cluster
        self.dir = os.path.join(cluster.log_dir, kind)
        self.port = 0
        self.proc: Proc | None = None
        self.program = find_balancer(kind)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self):
        os.makedirs(self.dir, exist_ok=True)
        # nginx's workers run as www-data when this runs as root: they must reach the folder.
        for folder in (self.cluster.log_dir, self.dir):
            os.chmod(folder, 0o755)
        with open(self.config) as f:
            shipped = f.read()
        for _ in range(3):  # a port taken between our look and its bind: another one
            self.port = free_port()
            conf = os.path.join(self.dir, f"{self.kind}.conf")
            with open(conf, "w") as f:
                f.write(render_balancer_config(
                    self.kind, shipped, f"127.0.0.1:{self.port}",
                    [f"127.0.0.1:{p}" for p in self.cluster.ports], self.dir,
                    # HAProxy's log names replicas as this script does
                    [f"replica-{i}" for i in range(len(self.cluster.ports))]))
            if self.kind == "nginx":
                argv = [self.program, "-c", conf, "-p", self.dir + "/", "-e", "stderr",
                        "-g", "daemon off;"]
            else:
                argv = [self.program, "-f", conf, "-db"]
            self.proc = Proc(self.kind, argv, os.path.join(self.dir, "output.log"),
                             stdout_too=True)
            deadline = now() + 20
            while self.proc.alive() and now() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    await asyncio.sleep(0.05)
            self.proc.stop()
        raise RuntimeError(f"{self.kind} did not start; see {self.dir}/output.log")

    def stop(self):
        if self.proc is not None:
            self.proc.stop()  # SIGTERM: nginx's master stops its workers first


# --------------------------------------------------------------------------- SSE


class SSEParser:
    """Incremental SSE parser (WHATWG): CR, LF or CRLF line ends, comments, retry, multi-line
    data. Yields one dict per block that set anything: {id, data (None: no data field), retry}."""

    def __init__(self):
        self.buf = b""
        self._reset()

    def _reset(self):
        self.id = None
        self.data: list[str] | None = None
        self.retry = None
        self.any = False

    def feed(self, chunk: bytes) -> list[dict]:
        self.buf += chunk
        out = []
        while True:
            i_n = self.buf.find(b"\n")
            i_r = self.buf.find(b"\r")
            if i_n < 0 and i_r < 0:
                break
            if i_r >= 0 and (i_n < 0 or i_r < i_n):
                if i_r + 1 == len(self.buf):
                    break  # a CR at the end: wait to see whether LF follows
                line = self.buf[:i_r]
                skip = 2 if self.buf[i_r + 1:i_r + 2] == b"\n" else 1
                self.buf = self.buf[i_r + skip:]
            else:
                line = self.buf[:i_n]
                self.buf = self.buf[i_n + 1:]
            text = line.decode("utf-8", errors="replace")
            if text == "":
                if self.any:
                    out.append({
                        "id": self.id,
                        "data": None if self.data is None else "\n".join(self.data),
                        "retry": self.retry,
                    })
                self._reset()
                continue
            if text.startswith(":"):
                continue
            field, sep, value = text.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if field == "data":
                self.data = (self.data or []) + [value]
                self.any = True
            elif field == "id":
                if "\0" not in value:
                    self.id = value
                    self.any = True
            elif field == "retry":
                if value.isdigit():
                    self.retry = int(value)
                    self.any = True
            # "event" and unknown fields: nothing to keep
        return out


def parse_event_id(text: str):
    stream, dot, seq = text.rpartition(".")
    if not dot or not seq.isdigit():
        return None
    return stream, int(seq)


# --------------------------------------------------------------------------- clients

TAG_RE = re.compile(r"cw(\d+)s(\d+)-")
URI_RE = re.compile(r"demo://chaos/(\d+)/")


def mark_unusable(sess, what: str):
    if not sess.unusable:
        sess.unusable = True
        STATS.add("unusable", example={"session": sess.sid, "what": what})
    sess.over = True


def script_error(e: BaseException, sess=None):
    import traceback
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    print(text, file=sys.stderr, flush=True)
    STATS.add("script_errors", example={"session": sess.sid if sess else None,
                                        "error": text[-800:]})


class SessionLost(Exception):
    pass


class Unusable(Exception):
    pass


class Unknown(Exception):
    """The connection broke after the request was sent: its outcome is unknown."""


class Session:
    def __init__(self, worker: "Worker", gen: int):
        self.worker = worker
        self.gen = gen
        self.prefix = f"cw{worker.index}s{gen}"
        self.sid: str | None = None
        self.uris = [f"demo://chaos/{worker.index}/{k}" for k in range(3)]
        self.over = False  # deleted, lost or unusable: no more requests
        self.deleted = False
        self.lost = False
        self.unusable = False
        self.stop_get = False
        self.started = now()
        self.next_id = 1
        self.calls = 0
        # GET stream
        self.get_task: asyncio.Task | None = None
        self.attach_task: asyncio.Task | None = None
        self.cut_requested = False
        self.last_get_id: str | None = None
        self.retry_ms = 1000
        self.epochs: list[dict] = []  # {start, end, replica}
        self.current_epoch: int | None = None
        # what was received
        self.order = 0
        self.stream_seq: dict[str, int] = {}
        self.blocks: set[int] = set()
        self.updates: dict[tuple, tuple] = {}  # (tag, index) -> (time, epoch, order)
        self.tag_max: dict[str, int] = {}
        self.uri_last_tagged_order: dict[str, int] = {}
        self.uri_best_tagged: dict[str, tuple] = {}  # uri -> (call n, index)
        self.uri_last_untagged_order: dict[str, int] = {}
        self.invalidations: list[tuple] = []  # (uri, time, epoch)
        self.progress_calls: dict[str, dict] = {}  # token -> call
        # what was sent
        self.emits: list[dict] = []
        self.newest_ok: dict[str, tuple] = {}  # uri -> (call n, index)
        self.counter_last = 0
        self.counter_unknown = 0

    def headers(self, **extra) -> dict:
        h = {"mcp-protocol-version": PROTOCOL}
        if self.sid:
            h["mcp-session-id"] = self.sid
        h.update(extra)
        return h

    def note_seq(self, stream: str, seq: int, priming: bool, already_counted: bool, where: str,
                 last_seen: dict[str, int] | None = None):
        """Counts takeovers (a new id block) and ids out of order on `stream`; `last_seen` holds
        the last id per stream of one reading (the session's GET streams by default)."""
        if last_seen is None:
            last_seen = self.stream_seq
        block = seq >> 32
        if block not in self.blocks:
            if self.blocks:
                STATS.add("takeovers_seen")
            self.blocks.add(block)
        last = last_seen.get(stream)
        if priming:
            if last is not None and seq < last:
                STATS.add("out_of_order", example={
                    "session": self.sid, "what": f"priming id {stream}.{seq} behind the last id "
                    f"{stream}.{last} received on that stream", "where": where})
            return
        if last is not None and seq <= last and not already_counted:
            STATS.add("out_of_order", example={
                "session": self.sid, "what": f"event id {stream}.{seq} after {stream}.{last}",
                "where": where})
        if last is None or seq > last:
            last_seen[stream] = seq

    def scan_crossing(self, data: str, where: str) -> bool:
        w = self.worker.index
        for m in URI_RE.finditer(data):
            if int(m.group(1)) != w:
                STATS.add("crossing", example={"session": self.sid, "worker": w, "where": where,
                                               "message": data[:300]})
                return True
        for m in TAG_RE.finditer(data):
            if (int(m.group(1)), int(m.group(2))) != (w, self.gen):
                STATS.add("crossing", example={"session": self.sid, "worker": w, "where": where,
                                               "message": data[:300]})
                return True
        return False


class Worker:
    def __init__(self, index: int, run: "Run"):
        self.index = index
        self.run = run
        self.rng = random.Random(run.args.seed * 1000 + index)
        self.session: Session | None = None
        self.gen = 0
        self.client = httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=0, max_connections=50),
            timeout=httpx.Timeout(connect=2.0, read=15.0, write=5.0, pool=5.0),
        )

    def replica(self) -> int:
        return self.rng.randrange(len(self.run.cluster.ports))

    # ----------------------------------------------------------------- requests

    async def send(self, sess: Session | None, method: str, headers: dict, body: bytes | None,
                   handler, deadline: float, what: str, safe: bool = False, read_timeout=15.0):
        """One HTTP request, retried on a random replica after a refused connection or a 503
        (honouring Retry-After) until `deadline`. `handler(response, replica)` reads a 200.
        A 404 ends the session (SessionLost); a broken connection after sending raises Unknown
        unless `safe` (then it is retried)."""
        while True:
            if now() > deadline:
                raise Unusable(what)
            r_i = self.replica()
            url = self.run.client_url(r_i)
            timeout = httpx.Timeout(connect=2.0, write=5.0, pool=5.0,
                                    read=max(1.0, min(read_timeout, deadline - now())))
            retry_in = None
            try:
                async with self.client.stream(method, url, headers=headers, content=body,
                                              timeout=timeout) as r:
                    status = r.status_code
                    if status == 200 or status == 202:
                        return await handler(r, r_i)
                    text = (await r.aread()).decode("utf-8", "replace")[:300]
                    if status == 503:
                        STATS.add("unavailable_503")
                        ra = r.headers.get("retry-after")
                        if ra is None:
                            STATS.add("unavailable_without_retry_after", example={
                                "session": sess.sid if sess else None, "replica": r_i,
                                "what": what, "body": text})
                            retry_in = 0.5
                        else:
                            try:
                                retry_in = min(float(ra), 5.0)
                            except ValueError:
                                retry_in = 1.0
                    elif status == 404:
                        if sess is not None and not sess.deleted:
                            STATS.add("not_found_live", example={
                                "session": sess.sid, "replica": r_i,
                                "port": self.run.cluster.ports[r_i], "what": what, "body": text,
                                "session_age_s": round(now() - sess.started, 1),
                                "probe": await self.probe(sess, r_i)})
                        raise SessionLost(what)
                    elif status >= 500:
                        STATS.add("server_errors", example={
                            "session": sess.sid if sess else None, "replica": r_i,
                            "status": status, "what": what, "body": text})
                        retry_in = 0.5
                    else:
                        STATS.add("unexpected_answers", example={
                            "session": sess.sid if sess else None, "replica": r_i,
                            "status": status, "what": what, "body": text})
                        retry_in = 0.5
            except (httpx.ConnectError, httpx.ConnectTimeout):
                STATS.add("connection_refused")
                retry_in = 0.1
            except httpx.TransportError as e:
                if isinstance(e, httpx.TimeoutException) and now() >= deadline - 0.5:
                    raise Unusable(f"{what}: no answer")
                STATS.add("connection_lost")
                if not safe:
                    raise Unknown(f"{what}: {type(e).__name__}")
                retry_in = 0.2
            await asyncio.sleep(retry_in * self.rng.uniform(1.0, 1.2))

    async def probe(self, sess: Session, refused_by: int) -> dict:
        """After a 404: does any other replica still know the session? (diagnosis only)"""
        out = {}
        body = json.dumps({"jsonrpc": "2.0", "id": "probe", "method": "ping"}).encode()
        for i in range(len(self.run.cluster.ports)):
            if i == refused_by:
                continue
            try:
                r = await self.client.post(
                    self.run.cluster.url(i) + "/mcp", content=body,
                    headers=sess.headers(**{"content-type": "application/json",
                                            "accept": "application/json, text/event-stream"}),
                    timeout=3.0)
                out[f"replica-{i}"] = r.status_code
            except httpx.HTTPError as e:
                out[f"replica-{i}"] = type(e).__name__
        return out

    async def rpc(self, sess: Session, method: str, params: dict, what: str, safe=False,
                  deadline: float | None = None) -> dict:
        """A request whose answer is read whole (JSON, or an SSE stream read to its response)."""
        rid = sess.next_id
        sess.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                           "params": params}).encode()
        headers = sess.headers(**{"content-type": "application/json",
                                  "accept": "application/json, text/event-stream"})

        async def handler(r, r_i):
            ctype = r.headers.get("content-type", "")
            if ctype.startswith("application/json"):
                return json.loads(await r.aread())
            parser = SSEParser()
            async for chunk in r.aiter_bytes():
                for ev in parser.feed(chunk):
                    if ev["data"]:
                        sess.scan_crossing(ev["data"], what)
                        msg = json.loads(ev["data"])
                        if msg.get("id") == rid and "method" not in msg:
                            return msg
            raise Unknown(f"{what}: the stream ended before the response")

        return await self.send(sess, "POST", headers, body, handler,
                               deadline or now() + UNUSABLE_AFTER, what, safe=safe,
                               read_timeout=UNUSABLE_AFTER)

    async def notify(self, sess: Session, method: str):
        body = json.dumps({"jsonrpc": "2.0", "method": method}).encode()
        headers = sess.headers(**{"content-type": "application/json",
                                  "accept": "application/json, text/event-stream"})

        async def handler(r, r_i):
            await r.aread()
            if r.status_code != 202:
                STATS.add("unexpected_answers", example={
                    "session": sess.sid, "what": f"{method} answered {r.status_code}"})

        await self.send(sess, "POST", headers, body, handler, now() + UNUSABLE_AFTER, method,
                        safe=True)

    def check_error(self, sess: Session, msg: dict, what: str) -> str:
        """'ok', 'interrupted' or 'error' for a JSON-RPC response."""
        if "error" in msg:
            err = msg["error"] or {}
            if err.get("code") == -32603 and INTERRUPTED in str(err.get("message", "")):
                STATS.add("interrupted")
                return "interrupted"
            STATS.add("unexpected_answers", example={"session": sess.sid, "what": what,
                                                     "error": err})
            return "error"
        result = msg.get("result") or {}
        if result.get("isError"):
            STATS.add("unexpected_answers", example={"session": sess.sid, "what": what,
                                                     "result": result})
            return "error"
        return "ok"

    # ----------------------------------------------------------------- session

    async def open_session(self):
        self.gen += 1
        sess = Session(self, self.gen)
        sess.started = now()
        self.session = sess
        rid = sess.next_id
        sess.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": f"chaos-{self.index}", "version": "1"}}}).encode()
        headers = {"content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": PROTOCOL}

        async def handler(r, r_i):
            sid = r.headers.get("mcp-session-id")
            raw = await r.aread()
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                events = [e for e in SSEParser().feed(raw + b"\n\n") if e["data"]]
                msg = json.loads(events[-1]["data"]) if events else {}
            else:
                msg = json.loads(raw)
            if not sid or "result" not in msg:
                STATS.add("unexpected_answers", example={"what": "initialize", "body": msg})
                raise Unusable("initialize")
            return sid

        # A lost answer to initialize leaves a session we never learn of: just try again.
        sess.sid = await self.send(None, "POST", headers, body, handler,
                                   now() + UNUSABLE_AFTER, "initialize", safe=True)
        STATS.add("sessions_opened")
        await self.notify(sess, "notifications/initialized")
        sess.get_task = asyncio.create_task(self.get_loop(sess))
        for uri in sess.uris:
            msg = await self.rpc(sess, "resources/subscribe", {"uri": uri}, "subscribe", safe=True)
            self.check_error(sess, msg, "subscribe")

    async def close_session(self, sess: Session, delete: bool):
        sess.over = True
        self.check_live(sess)  # what is due; later ones cannot be judged any more
        if sess.get_task:
            sess.get_task.cancel()
            await asyncio.gather(sess.get_task, return_exceptions=True)
        if delete and not sess.deleted and sess.sid:
            sess.deleted = True
            try:
                await self.send(sess, "DELETE", sess.headers(), None, self._read_all,
                                now() + 5, "DELETE", safe=True)
            except (SessionLost, Unusable, Unknown):
                pass

    @staticmethod
    async def _read_all(r, r_i):
        await r.aread()
        return r.status_code

    # ----------------------------------------------------------------- GET stream

    def cut_get(self, sess: Session):
        if sess.attach_task and not sess.attach_task.done():
            sess.cut_requested = True
            sess.attach_task.cancel()
            STATS.add("get_cuts")

    async def get_loop(self, sess: Session):
        failing_since = None
        while not sess.over and not sess.stop_get:
            sess.cut_requested = False
            sess.attach_task = asyncio.create_task(self.attach_get(sess))
            try:
                await asyncio.wait([sess.attach_task])
            except asyncio.CancelledError:
                # This loop is cancelled: its attachment goes with it (never left reading).
                sess.attach_task.cancel()
                await asyncio.gather(sess.attach_task, return_exceptions=True)
                raise
            t = sess.attach_task
            outcome = None if t.cancelled() else (t.exception() or t.result())
            if isinstance(outcome, SessionLost):
                sess.over = True
                sess.lost = True
                return
            if isinstance(outcome, BaseException):
                script_error(outcome, sess)
                outcome = None
            if outcome == "attached" or (t.cancelled() and sess.cut_requested):
                failing_since = None
            elif failing_since is None:
                failing_since = now()
            if failing_since is not None and now() - failing_since > UNUSABLE_AFTER:
                mark_unusable(sess, "the GET stream could not re-attach")
                return
            if t.cancelled() and sess.cut_requested:
                await asyncio.sleep(self.rng.uniform(0, 0.3))  # the client chose to go
            elif outcome == "attached":
                await asyncio.sleep(sess.retry_ms / 1000.0)  # the server ended it: honour retry
            elif isinstance(outcome, (int, float)):
                await asyncio.sleep(outcome)
            else:
                await asyncio.sleep(0.2)

    async def attach_get(self, sess: Session, read_for: float | None = None):
        """One attachment of the GET stream: 'attached' once it ended after a 200, a delay to
        wait before the next try otherwise. Records everything it reads."""
        r_i = self.replica()
        headers = sess.headers(accept="text/event-stream")
        if sess.last_get_id:
            headers["last-event-id"] = sess.last_get_id
        epoch = None
        try:
            async with self.client.stream(
                    "GET", self.run.client_url(r_i), headers=headers,
                    timeout=httpx.Timeout(connect=2.0, read=40.0, write=5.0, pool=5.0)) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode("utf-8", "replace")[:300]
                    if r.status_code == 503:
                        STATS.add("unavailable_503")
                        ra = r.headers.get("retry-after")
                        if ra is None:
                            STATS.add("unavailable_without_retry_after", example={
                                "session": sess.sid, "replica": r_i, "what": "GET"})
                            return 0.5
                        try:
                            return min(float(ra), 5.0)
                        except ValueError:
                            return 1.0
                    if r.status_code == 404:
                        if not sess.deleted and not sess.lost:
                            STATS.add("not_found_live", example={
                                "session": sess.sid, "replica": r_i,
                                "port": self.run.cluster.ports[r_i],
                                "what": f"GET Last-Event-ID {sess.last_get_id}", "body": text,
                                "session_age_s": round(now() - sess.started, 1),
                                "probe": await self.probe(sess, r_i)})
                        raise SessionLost("GET")
                    name = "server_errors" if r.status_code >= 500 else "unexpected_answers"
                    STATS.add(name, example={"session": sess.sid, "replica": r_i,
                                             "status": r.status_code, "body": text,
                                             "what": f"GET Last-Event-ID {sess.last_get_id}"})
                    return 0.5
                sess.epochs.append({"start": now(), "end": None, "replica": r_i})
                epoch = len(sess.epochs) - 1
                sess.current_epoch = epoch
                STATS.add("get_attachments")
                parser = SSEParser()
                stop_at = now() + read_for if read_for else None
                it = r.aiter_bytes().__aiter__()
                while True:
                    if stop_at is not None:
                        left = stop_at - now()
                        if left <= 0:
                            break
                        try:
                            chunk = await asyncio.wait_for(it.__anext__(), left)
                        except asyncio.TimeoutError:
                            break
                    else:
                        chunk = await it.__anext__()
                    for ev in parser.feed(chunk):
                        self.on_get_event(sess, ev, epoch, r_i)
        except StopAsyncIteration:
            pass
        except (httpx.ConnectError, httpx.ConnectTimeout):
            STATS.add("connection_refused")
            return 0.1
        except httpx.TransportError as e:
            STATS.add("get_broken")
            STATS.broken[f"{type(e).__name__} after {now() - sess.epochs[epoch]['start']:.0f}s"
                         if epoch is not None else type(e).__name__] += 1
        finally:
            if epoch is not None:
                sess.epochs[epoch]["end"] = now()
                if sess.current_epoch == epoch:
                    sess.current_epoch = None
        return "attached" if epoch is not None else 0.2

    def on_get_event(self, sess: Session, ev: dict, epoch: int, r_i: int):
        if ev["retry"] is not None:
            sess.retry_ms = min(ev["retry"], 5000)
        data = ev["data"]
        where = f"GET on replica-{r_i}"
        parsed_id = parse_event_id(ev["id"]) if ev["id"] else None
        if ev["id"] is not None and parsed_id is None:
            STATS.add("unexpected_answers", example={"session": sess.sid,
                                                     "what": f"event id {ev['id']!r}"})
        if not data:
            if parsed_id:  # priming: a position to resume from
                sess.note_seq(parsed_id[0], parsed_id[1], True, False, where)
                sess.last_get_id = ev["id"]
            return
        sess.order += 1
        crossed = sess.scan_crossing(data, where)
        try:
            msg = json.loads(data)
        except ValueError:
            STATS.add("unexpected_answers", example={"session": sess.sid, "what": "not JSON",
                                                     "data": data[:200]})
            return
        dup = False
        method = msg.get("method")
        if method == "notifications/resources/updated" and not crossed:
            dup = self.on_update(sess, msg.get("params") or {}, epoch)
        elif method == "notifications/progress" and not crossed:
            STATS.add("progress_on_get_stream")
            call = sess.progress_calls.get(str((msg.get("params") or {}).get("progressToken")))
            if call:
                dup = self.on_progress(sess, call, msg["params"], where)
        elif method is not None:
            STATS.add("other_notifications")
            STATS.methods[method] += 1
        if parsed_id:
            sess.note_seq(parsed_id[0], parsed_id[1], False, dup, where)
            sess.last_get_id = ev["id"]

    def on_update(self, sess: Session, params: dict, epoch: int) -> bool:
        uri = params.get("uri")
        meta = params.get("_meta") or {}
        if uri not in sess.uris:
            return False
        tag = meta.get("demo/tag")
        if tag is None:
            STATS.add("untagged_updates")
            sess.uri_last_untagged_order[uri] = sess.order
            sess.invalidations.append((uri, now(), epoch))
            return False
        index = meta.get("demo/index")
        key = (tag, index)
        if key in sess.updates:
            STATS.add("duplicated", example={"session": sess.sid, "what": f"update {key} twice",
                                             "uri": uri})
            return True
        if index < sess.tag_max.get(tag, -1):
            STATS.add("out_of_order", example={
                "session": sess.sid, "what": f"update {tag} index {index} after "
                f"{sess.tag_max[tag]}"})
        sess.tag_max[tag] = max(index, sess.tag_max.get(tag, -1))
        m = re.fullmatch(r"cw\d+s\d+-e(\d+)", str(tag))
        rank = (int(m.group(1)), index) if m else (-1, -1)
        sess.updates[key] = (now(), epoch, sess.order, uri, rank)
        STATS.add("updates_received")
        sess.uri_last_tagged_order[uri] = sess.order
        if rank > sess.uri_best_tagged.get(uri, (-1, -1)):
            sess.uri_best_tagged[uri] = rank
        return False

    def on_progress(self, sess: Session, call: dict, params: dict, where: str) -> bool:
        value = params.get("progress")
        if value in call["seen"]:
            STATS.add("duplicated", example={
                "session": sess.sid, "what": f"progress {value} of {call['token']} twice",
                "where": where})
            return True
        if call["seen"] and value < max(call["seen"]):
            STATS.add("out_of_order", example={
                "session": sess.sid, "what": f"progress {value} of {call['token']} after "
                f"{max(call['seen'])}", "where": where})
        call["seen"].add(value)
        return False

    # ----------------------------------------------------------------- actions

    async def do_emit(self, sess: Session):
        sess.calls += 1
        n = sess.calls
        tag = f"{sess.prefix}-e{n}"
        count = self.rng.randint(3, 9)
        epoch = sess.current_epoch
        attached_since = sess.epochs[epoch]["start"] if epoch is not None else None
        t_send = now()
        record = {"n": n, "tag": tag, "count": count, "t_send": t_send, "epoch": epoch,
                  "at_send": wall(),
                  "outcome": None, "checked": False}
        sess.emits.append(record)
        try:
            msg = await self.rpc(sess, "tools/call", {"name": "emit_updates", "arguments": {
                "uris": sess.uris, "count": count, "tag": tag}}, f"emit_updates {tag}")
        except Unknown:
            STATS.add("unknown_outcome")
            record["outcome"] = "unknown"
            return
        record["outcome"] = self.check_error(sess, msg, f"emit_updates {tag}")
        record["t_resp"] = now()
        if record["outcome"] == "ok":
            STATS.add("emit_calls_ok")
            for i in range(count):
                sess.newest_ok[sess.uris[i % 3]] = (n, i)
            if attached_since is None or attached_since >= t_send:
                record["epoch"] = None

    def check_live(self, sess: Session, final: bool = False):
        for rec in sess.emits:
            if rec["checked"]:
                continue
            if rec["outcome"] != "ok":
                rec["checked"] = True
                continue
            due = rec["t_resp"] + LIVE_WINDOW
            # Checked a little after it is due, so a gap notice on its way is counted in.
            if now() < due + 2.0 and not final:
                continue
            rec["checked"] = True
            epoch = rec["epoch"]
            if epoch is None:
                STATS.add("live_checks_skipped")
                continue
            ep = sess.epochs[epoch]
            if (ep["end"] is not None and ep["end"] < due) or (ep["end"] is None and now() < due):
                STATS.add("live_checks_skipped")
                continue
            STATS.add("live_checks")
            for i in range(rec["count"]):
                got = sess.updates.get((rec["tag"], i))
                if got is not None and got[1] == epoch and got[0] <= due:
                    continue
                uri = sess.uris[i % 3]
                excused = any(u == uri and e == epoch and t >= rec["t_send"]
                              for (u, t, e) in sess.invalidations)
                if excused:
                    STATS.add("live_excused_by_gap")
                    continue
                # Coalesced: a later update of the same URI arrived on this attachment (an
                # undelivered update replaced by a newer one of its URI). Reported either way.
                coalesced = any(v[1] == epoch and v[0] <= due and v[3] == uri
                                and v[4] > (rec["n"], i) for v in sess.updates.values())
                if coalesced:
                    STATS.add("live_coalesced")
                    STATS.live_records["coalesced"].append((sess.sid, ep["replica"],
                                                            rec["at_send"]))
                    if self.run.args.allow_live_coalescing:
                        continue
                got = sorted(j for (tg, j), v in sess.updates.items()
                             if tg == rec["tag"] and v[1] == epoch and v[0] <= due)
                later = sorted(j for (tg, j), v in sess.updates.items()
                               if tg == rec["tag"] and not (v[1] == epoch and v[0] <= due))
                STATS.live_records["lost"].append((sess.sid, ep["replica"], rec["at_send"]))
                example = {
                    "rule": "live", "session": sess.sid, "tag": rec["tag"], "index": i,
                    "uri": uri, "count": rec["count"], "received_live": got,
                    "received_later": later, "coalesced_into_a_later_one": coalesced,
                    "get_replica": ep["replica"], "get_port": self.run.cluster.ports[ep["replica"]],
                    "sent_at": round(rec["t_send"] - START, 2), "at": rec["at_send"]}
                STATS.add("lost_updates", example=example)
                STATS.add("lost_updates_live")
                if not coalesced:
                    STATS.add("lost_updates_live_not_superseded", example=example)

    async def do_progress(self, sess: Session):
        sess.calls += 1
        n = sess.calls
        token = f"{sess.prefix}-p{n}"
        steps = self.rng.randint(5, 20)
        delay = self.rng.randint(5, 20)
        call = {"token": token, "steps": steps, "seen": set(), "outcome": None,
                "last_id": None, "stream_seq": {}}
        sess.progress_calls[token] = call
        rid = sess.next_id
        sess.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
            "name": "progress", "arguments": {"steps": steps, "delay_ms": delay},
            "_meta": {"progressToken": token}}}).encode()
        cuts = self.run.args.cuts
        deadline = now() + UNUSABLE_AFTER + steps * delay / 1000.0
        STATS.add("progress_calls")

        async def read(r, r_i, cut_after):
            """Reads a POST answer or a resume: 'done', 'cut' or 'ended'."""
            where = f"progress {token} on replica-{r_i}"
            ctype = r.headers.get("content-type", "")
            if ctype.startswith("application/json"):
                msg = json.loads(await r.aread())
                call["outcome"] = self.check_error(sess, msg, where)
                return "done"
            parser = SSEParser()
            data_events = 0
            try:
                async for chunk in r.aiter_bytes():
                    for ev in parser.feed(chunk):
                        pid = parse_event_id(ev["id"]) if ev["id"] else None
                        if not ev["data"]:
                            if pid:
                                call["last_id"] = ev["id"]
                                sess.note_seq(*pid, True, False, where, call["stream_seq"])
                                if cut_after == 0:
                                    STATS.add("progress_cuts")
                                    return "cut"
                            continue
                        data_events += 1
                        crossed = sess.scan_crossing(ev["data"], where)
                        msg = json.loads(ev["data"])
                        dup = False
                        if msg.get("method") == "notifications/progress" and not crossed:
                            p = msg.get("params") or {}
                            if str(p.get("progressToken")) == token:
                                dup = self.on_progress(sess, call, p, where)
                        elif "method" not in msg and msg.get("id") == rid:
                            call["outcome"] = self.check_error(sess, msg, where)
                        elif not crossed:
                            STATS.add("unexpected_answers", example={
                                "session": sess.sid, "what": f"unexpected on {where}",
                                "message": ev["data"][:200]})
                        if pid:
                            call["last_id"] = ev["id"]
                            sess.note_seq(*pid, False, dup, where, call["stream_seq"])
                        if call["outcome"] is not None:
                            return "done"
                        if cut_after is not None and data_events >= cut_after:
                            STATS.add("progress_cuts")
                            return "cut"
            except httpx.TransportError:
                STATS.add("connection_lost")
            return "ended"

        def cut_point():
            if cuts and self.rng.random() < 0.35:
                return self.rng.randint(0, max(1, steps // 2))
            return None

        try:
            state = await self.send(
                sess, "POST", sess.headers(**{"content-type": "application/json",
                                              "accept": "application/json, text/event-stream"}),
                body, lambda r, r_i: read(r, r_i, cut_point()), deadline,
                f"progress {token}", read_timeout=10.0)
        except Unknown:
            state = "ended"
        while state != "done":
            if call["last_id"] is None:
                STATS.add("unknown_outcome")  # nothing to resume from
                return
            if now() > deadline:
                raise Unusable(f"progress {token}: no response")
            if state == "ended":
                await asyncio.sleep(0.2)
            else:
                await asyncio.sleep(self.rng.uniform(0, 0.15))
            STATS.add("progress_resumes")
            headers = sess.headers(accept="text/event-stream")
            headers["last-event-id"] = call["last_id"]
            try:
                state = await self.send(
                    sess, "GET", headers, None,
                    lambda r, r_i: read(r, r_i, cut_point() if self.rng.random() < 0.5 else None),
                    deadline, f"resume {call['last_id']} of {token}", read_timeout=10.0)
            except Unknown:
                state = "ended"
        outcome = call["outcome"]
        if outcome == "ok":
            missing = sorted(set(range(1, steps + 1)) - call["seen"])
            if missing:
                STATS.add("lost_progress", example={"session": sess.sid, "token": token,
                                                    "steps": steps, "missing": missing})

    async def do_counter(self, sess: Session):
        try:
            msg = await self.rpc(sess, "tools/call", {"name": "counter", "arguments": {}},
                                 "counter")
        except Unknown:
            STATS.add("unknown_outcome")
            sess.counter_unknown += 1
            return
        outcome = self.check_error(sess, msg, "counter")
        if outcome != "ok":
            sess.counter_unknown += 1
            return
        try:
            value = int(msg["result"]["content"][0]["text"])
        except (KeyError, IndexError, ValueError, TypeError):
            STATS.add("unexpected_answers", example={"session": sess.sid, "what": "counter",
                                                     "message": msg})
            return
        last, k = sess.counter_last, sess.counter_unknown
        STATS.add("counter_calls")
        if last + 1 <= value <= last + 1 + k:
            pass
        elif value <= last and 1 <= value <= 1 + k:
            STATS.add("state_resets")
        else:
            STATS.add("counter_mismatch", example={"session": sess.sid, "last": last,
                                                   "unknown_calls": k, "got": value})
        sess.counter_last = value
        sess.counter_unknown = 0

    # ----------------------------------------------------------------- loop

    async def main(self, stop: asyncio.Event):
        await asyncio.sleep(self.rng.uniform(0, 1.0))
        while not stop.is_set():
            sess = self.session
            try:
                if sess is None or sess.over:
                    if sess is not None:
                        await self.close_session(sess, delete=True)
                    await self.open_session()
                    continue
                x = self.rng.random()
                cuts = self.run.args.cuts
                if x < 0.38:
                    await self.do_emit(sess)
                elif x < 0.68:
                    await self.do_progress(sess)
                elif x < 0.97:
                    await self.do_counter(sess)
                elif x < 0.99:
                    if cuts:
                        self.cut_get(sess)
                    else:
                        await self.do_counter(sess)
                else:
                    STATS.add("deletes")
                    await self.close_session(sess, delete=True)
                    self.session = None
                    continue
            except SessionLost:
                sess = self.session
                if sess is not None:
                    sess.lost = True
                    sess.over = True
                    STATS.add("sessions_lost")
            except Unusable as e:
                sess = self.session
                if sess is not None:
                    mark_unusable(sess, str(e))
                else:
                    STATS.add("unusable", example={"what": str(e)})
            except Exception as e:  # a bug in this script: counted, the session left behind
                script_error(e, self.session)
                if self.session is not None:
                    self.session.over = True
                await asyncio.sleep(0.5)
            if self.session is not None:
                self.check_live(self.session)
            # Think time; now and then a longer pause, so streams also carry updates at rest.
            if self.rng.random() < 0.05:
                await asyncio.sleep(self.rng.uniform(2.0, 6.0))
            else:
                await asyncio.sleep(self.rng.uniform(0.05, 0.3))

    async def final(self):
        """After the quiet period: one last resume of the GET stream, then the final checks."""
        sess = self.session
        if sess is None or sess.over:
            return
        if sess.get_task:
            sess.stop_get = True  # no more re-attaching
            if sess.attach_task:
                sess.cut_requested = True
                sess.attach_task.cancel()
            sess.get_task.cancel()
            await asyncio.gather(sess.get_task, return_exceptions=True)
        deadline = now() + UNUSABLE_AFTER
        while True:
            try:
                outcome = await self.attach_get(sess, read_for=3.0)
            except SessionLost:
                STATS.add("sessions_lost")
                sess.lost = sess.over = True
                return
            if outcome == "attached":
                break
            if now() > deadline:
                mark_unusable(sess, "the final resume of the GET stream")
                return
            await asyncio.sleep(outcome if isinstance(outcome, (int, float)) else 0.2)
        self.check_live(sess, final=True)
        STATS.add("final_checks")
        for uri in sess.uris:
            if uri not in sess.newest_ok:
                continue
            newest = sess.newest_ok[uri]
            best = sess.uri_best_tagged.get(uri, (-1, -1))
            if best >= newest:
                continue
            if sess.uri_last_untagged_order.get(uri, -1) > sess.uri_last_tagged_order.get(uri, -1):
                STATS.add("final_excused_by_gap")
                continue
            STATS.add("lost_updates_final")
            STATS.add("lost_updates", example={
                "rule": "final", "session": sess.sid, "uri": uri,
                "newest_sent": f"{sess.prefix}-e{newest[0]} index {newest[1]}",
                "newest_received": f"{sess.prefix}-e{best[0]} index {best[1]}" if best[0] >= 0
                else None, "last_get_id": sess.last_get_id})


# --------------------------------------------------------------------------- faults


class Run:
    def __init__(self, args, cluster: Cluster, balancer: Balancer | None = None):
        self.args = args
        self.cluster = cluster
        self.balancer = balancer
        self.rng = random.Random(args.seed)
        self.workers: list[Worker] = []
        self.bench_procs: set = set()

    def client_url(self, i: int) -> str:
        """Where a client request goes: the balancer, or else replica `i`."""
        return self.balancer.url() if self.balancer else self.cluster.url(i) + "/mcp"

    async def killer(self, stop: asyncio.Event):
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.args.kill_every * self.rng.uniform(0.7, 1.3))
                return
            except asyncio.TimeoutError:
                pass
            i = self.rng.randrange(len(self.cluster.ports))
            self.cluster.kill9(i)
            STATS.add("kills")
            down = self.rng.uniform(0.3, 4.0)
            print(f"[{now() - START:7.1f}s] kill -9 replica-{i} (port {self.cluster.ports[i]}), "
                  f"restart in {down:.1f}s", file=sys.stderr, flush=True)
            await asyncio.sleep(down)
            self.cluster.spawn(i)
            await self.cluster.ready(i)

    async def cutter(self, stop: asyncio.Event):
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.rng.uniform(2.0, 6.0))
                return
            except asyncio.TimeoutError:
                pass
            w = self.rng.choice(self.workers)
            if w.session is not None and not w.session.over:
                w.cut_get(w.session)

    async def burster(self, stop: asyncio.Event):
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 20 * self.rng.uniform(0.75, 1.25))
                return
            except asyncio.TimeoutError:
                pass
            i = self.rng.randrange(len(self.cluster.ports))
            argv = [self.args.bench, "calls", "--url", self.cluster.url(i) + "/mcp",
                    "--sessions", "16", "--calls", str(self.args.burst_calls), "--warmup", "5"]
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL, preexec_fn=_child_setup)
            self.bench_procs.add(proc)
            STATS.add("bursts")
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), 12)
                try:
                    report = json.loads(out)
                    STATS.add("burst_requests", int(report.get("calls", 0)))
                    STATS.add("burst_errors", int(report.get("errors", 0)))
                except ValueError:
                    STATS.add("burst_failed")
            except asyncio.TimeoutError:
                STATS.add("burst_timed_out")
                proc.kill()
                await proc.wait()
            finally:
                self.bench_procs.discard(proc)

    def stop_bench(self):
        for proc in list(self.bench_procs):
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass

    async def main(self):
        args = self.args
        await self.cluster.start()
        if self.balancer:
            await self.balancer.start()
        print(f"[{now() - START:7.1f}s] redis on {self.cluster.redis_port}, replicas on "
              f"{self.cluster.ports}"
              + (f", {self.balancer.kind} on {self.balancer.port}" if self.balancer else "")
              + f", logs in {self.cluster.log_dir}", file=sys.stderr, flush=True)
        self.workers = [Worker(i, self) for i in range(args.clients)]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.main(stop)) for w in self.workers]
        faults = []
        if args.kills:
            faults.append(asyncio.create_task(self.killer(stop)))
        if args.cuts:
            faults.append(asyncio.create_task(self.cutter(stop)))
        if args.bursts:
            faults.append(asyncio.create_task(self.burster(stop)))
        try:
            await asyncio.sleep(args.seconds)
            stop.set()
            await asyncio.gather(*faults)
            # Workers finish what they are doing (bounded: a request is bounded by 20 s).
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            print(f"[{now() - START:7.1f}s] faults stopped; quiet period of {args.quiet} s",
                  file=sys.stderr, flush=True)
            await asyncio.sleep(args.quiet)
            await asyncio.gather(*(w.final() for w in self.workers))
            for w in self.workers:
                if w.session is not None:
                    await w.close_session(w.session, delete=True)
        finally:
            stop.set()
            for t in tasks + faults:
                t.cancel()
            for w in self.workers:
                if w.session and w.session.get_task:
                    w.session.get_task.cancel()
            self.stop_bench()
            await asyncio.gather(*tasks, *faults, return_exceptions=True)
            for w in self.workers:
                await w.client.aclose()


# --------------------------------------------------------------------------- measurement


RESUME_WITHIN = 10.0  # seconds a caller keeps resuming a cut call stream, as SDK clients do
LONG_TOKEN = re.compile(r"[A-Za-z0-9_-]{20,}")


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Tally:
    """What the callers of a measurement saw."""

    def __init__(self):
        self.counts = Counter()
        self.failed_calls = Counter()  # error text -> calls
        self.failed_other = Counter()  # "initialize: text" and the like -> requests
        self.recoveries: list[dict] = []  # {event, session, seconds} per affected session
        self.events: list[dict] = []
        # (from, to): from just before a SIGKILL to the reaping of the killed replica
        self.kills: list[tuple[float, float]] = []
        # (started, ended, error) of each failed call
        self.failures: list[tuple[float, float, str]] = []

    def in_flight_at_a_kill(self, started: float, ended: float) -> bool:
        """Whether a call was under way when a replica was killed: sent before the replica
        was gone, answered (with an error) after the kill began."""
        return any(started < to and ended >= since for since, to in self.kills)

    def failed_not_in_flight(self) -> Counter:
        """Failed calls that no kill can explain: sent after every kill, or ended before."""
        return Counter(error for started, ended, error in self.failures
                       if not self.in_flight_at_a_kill(started, ended))

    def event(self, what: str, **fields):
        entry = {"t": round(now() - START, 2), "what": what, **fields}
        self.events.append(entry)
        print(f"[{entry['t']:7.1f}s] {what}", file=sys.stderr, flush=True)


class Caller:
    """A client with one session that calls tools one after another, each once: a refused or
    failed call is counted by its error and the next one follows (after Retry-After, capped at
    1 s). A call stream cut before its response is resumed with Last-Event-ID, as the SDKs do;
    a call that could not be resumed counts as failed. A 404 ends the session (a new one
    follows)."""

    def __init__(self, index: int, measure: "Measure"):
        self.index = index
        self.measure = measure
        self.tally = measure.tally
        self.rng = random.Random(measure.args.seed * 1000 + index)
        self.sid: str | None = None
        self.next_id = 1
        # (event name, since): a kill or SIGTERM this session waits to recover from
        self.waiting: tuple[str, float] | None = None
        # The last progress call's stream read whole from its POST: (its first event id, the
        # messages after it); and the one kept as a witness before a fault (--kill-redis-master
        # resumes it at the end: what comes back must be what was received).
        self.last_stream: tuple[str, list] | None = None
        self.witness: tuple[str | None, str, list] | None = None
        self.client = httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=4, max_connections=20),
            timeout=httpx.Timeout(connect=2.0, read=15.0, write=5.0, pool=5.0),
        )

    def owner(self) -> int | None:
        """The replica whose name the session id carries (replica-<i>.<random>)."""
        m = re.match(r"replica-(\d+)\.", self.sid or "")
        return int(m.group(1)) if m else None

    def headers(self, **extra) -> dict:
        h = {"mcp-protocol-version": PROTOCOL, "content-type": "application/json",
             "accept": "application/json, text/event-stream"}
        if self.sid:
            h["mcp-session-id"] = self.sid
        h.update(extra)
        return h

    def text(self, message: str) -> str:
        """An error text to count by: no session id or other long token, one line, short."""
        if self.sid:
            message = message.replace(self.sid, "<session>")
        message = LONG_TOKEN.sub("<id>", " ".join(message.split()))
        return message[:240]

    async def describe(self, r) -> str:
        raw = (await r.aread())[:4000].decode("utf-8", "replace")
        try:
            msg = json.loads(raw)
            detail = (msg.get("error") or {}).get("message") or raw
        except ValueError:
            title = re.search(r"<title>(.*?)</title>", raw, re.S)
            detail = title.group(1) if title else re.sub(r"<[^>]*>", " ", raw)
        return f"HTTP {r.status_code}: {self.text(detail)}"

    @staticmethod
    def transport_text(e: BaseException) -> str:
        detail = str(e).strip()
        return f"connection: {type(e).__name__}" + (f" ({detail[:80]})" if detail else "")

    @staticmethod
    def retry_after(r) -> float:
        try:
            return min(float(r.headers.get("retry-after", "")), 1.0)
        except ValueError:
            return 0.1

    # ----------------------------------------------------------------- session

    async def open(self) -> bool:
        rid = self.next_id
        self.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": f"measure-{self.index}", "version": "1"}}}).encode()
        self.sid = None
        try:
            r = await self.client.post(self.measure.url(), headers=self.headers(), content=body)
            if r.status_code != 200 or not r.headers.get("mcp-session-id"):
                self.tally.failed_other[f"initialize: {await self.describe(r)}"] += 1
                await asyncio.sleep(self.retry_after(r))
                return False
            self.sid = r.headers["mcp-session-id"]
        except httpx.TransportError as e:
            self.tally.failed_other[f"initialize: {self.transport_text(e)}"] += 1
            await asyncio.sleep(0.1)
            return False
        self.tally.counts["sessions_opened"] += 1
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        try:
            r = await self.client.post(self.measure.url(), headers=self.headers(), content=note)
            if r.status_code != 202:
                self.tally.failed_other[f"initialized: {await self.describe(r)}"] += 1
        except httpx.TransportError as e:
            self.tally.failed_other[f"initialized: {self.transport_text(e)}"] += 1
        return True

    async def close(self):
        if self.sid:
            try:
                await self.client.delete(self.measure.url(), headers=self.headers(), timeout=5.0)
            except httpx.TransportError:
                pass
        await self.client.aclose()

    # ----------------------------------------------------------------- calls

    def pick(self) -> tuple[str, dict]:
        x = self.rng.random()
        if x < 0.5:
            return "counter", {}
        if x < 0.8:
            return "echo", {"text": f"caller {self.index}"}
        return "progress", {"steps": 5, "delay_ms": 40}

    async def read_stream(self, r, rid: int, state: dict) -> dict | None:
        """Reads a call's SSE stream to its response (None: the stream ended first); keeps the
        last event id and retry interval in `state`."""
        parser = SSEParser()
        async for chunk in r.aiter_bytes():
            for ev in parser.feed(chunk):
                if ev["retry"] is not None:
                    state["retry"] = ev["retry"] / 1000.0
                if ev["id"]:
                    state["last_id"] = ev["id"]
                if ev["data"]:
                    msg = json.loads(ev["data"])
                    if ev["id"]:
                        state.setdefault("first_id", ev["id"])
                        state.setdefault("messages", []).append(msg)
                    if msg.get("id") == rid and "method" not in msg:
                        return msg
        return None

    def judge(self, msg: dict) -> str | None:
        """None for a result, else the error to count."""
        if "error" in msg:
            err = msg["error"] or {}
            return f"JSON-RPC {err.get('code')}: {self.text(str(err.get('message')))}"
        if (msg.get("result") or {}).get("isError"):
            return f"tool error: {self.text(json.dumps(msg['result'].get('content')))}"
        return None

    async def call(self) -> tuple[str | None, float]:
        """One tools/call: (None or the error to count, how long to wait before the next)."""
        tool, arguments = self.pick()
        rid = self.next_id
        self.next_id += 1
        params = {"name": tool, "arguments": arguments}
        if tool == "progress":
            params["_meta"] = {"progressToken": f"m{self.index}-{rid}"}
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                           "params": params}).encode()
        state = {"last_id": None, "retry": 1.0}
        cut = "the stream ended before the response"
        try:
            async with self.client.stream("POST", self.measure.url(), headers=self.headers(),
                                          content=body) as r:
                if r.status_code != 200:
                    error = await self.describe(r)
                    if r.status_code == 404:
                        self.sid = None
                        self.tally.counts["sessions_lost"] += 1
                    return error, self.retry_after(r)
                if r.headers.get("content-type", "").startswith("application/json"):
                    return self.judge(json.loads(await r.aread())), 0.0
                msg = await self.read_stream(r, rid, state)
                if msg is not None:
                    if tool == "progress" and "first_id" in state:
                        self.last_stream = (state["first_id"], state["messages"][1:])
                    return self.judge(msg), 0.0
        except httpx.TransportError as e:
            cut = self.transport_text(e)
            if state["last_id"] is None:
                return cut, 0.1
        if state["last_id"] is None:
            return cut, 0.1
        # The stream was cut before the response: resume it where it broke off.
        deadline = now() + RESUME_WITHIN
        last_error = cut
        while now() < deadline:
            await asyncio.sleep(state["retry"])
            self.tally.counts["resumptions"] += 1
            try:
                async with self.client.stream(
                        "GET", self.measure.url(),
                        headers=self.headers(**{"accept": "text/event-stream",
                                                "last-event-id": state["last_id"]})) as r:
                    if r.status_code != 200:
                        last_error = await self.describe(r)
                        self.tally.failed_other[f"resume: {last_error}"] += 1
                        if r.status_code == 404:
                            break
                        continue
                    msg = await self.read_stream(r, rid, state)
                    if msg is not None:
                        self.tally.counts["calls_resumed"] += 1
                        return self.judge(msg), 0.0
            except httpx.TransportError as e:
                last_error = self.transport_text(e)
                self.tally.failed_other[f"resume: {last_error}"] += 1
        return f"cut and not resumed within {RESUME_WITHIN:g} s ({cut}; last: {last_error})", 0.0

    async def main(self, stop: asyncio.Event):
        # Staggered, so that a round-robin balancer does not hand every initialize to the
        # same replica (each caller's first requests come in threes, as many as replicas).
        await asyncio.sleep(self.rng.uniform(0, 2.0))
        while not stop.is_set():
            try:
                if self.sid is None:
                    if not await self.open():
                        continue
                started = now()
                error, wait = await self.call()
                self.tally.counts["calls"] += 1
                if error is None:
                    self.tally.counts["calls_ok"] += 1
                    if self.waiting and started >= self.waiting[1]:
                        event, since = self.waiting
                        self.tally.recoveries.append({"event": event, "caller": self.index,
                                                      "seconds": round(now() - since, 3)})
                        self.waiting = None
                else:
                    self.tally.failed_calls[error] += 1
                    self.tally.failures.append((started, now(), error))
                await asyncio.sleep(wait + self.rng.uniform(0.05, 0.15))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug in this script: counted, then carry on
                import traceback
                traceback.print_exc()
                self.tally.counts["script_errors"] += 1
                self.tally.failed_other[f"script error: {type(e).__name__}: {e}"[:160]] += 1
                await asyncio.sleep(0.5)


class Measure:
    """--kill-owner and --rolling-restart: N callers (through a balancer, or each request to a
    random replica) while replicas are killed or restarted; counts calls and failed calls by
    error, and the time from each kill or SIGTERM to the next successful call of each session
    the replica owned."""

    def __init__(self, args, cluster: Cluster, balancer: Balancer | None):
        self.args = args
        self.cluster = cluster
        self.balancer = balancer
        self.rng = random.Random(args.seed)
        self.tally = Tally()
        self.callers: list[Caller] = []
        self.scenario = ("kill-owner" if args.kill_owner else
                         "kill-redis-master" if args.kill_redis_master else "rolling-restart")
        # --kill-redis-master: the seconds from each kill to the Sentinels naming a new master.
        self.failovers: list[float] = []

    def url(self) -> str:
        if self.balancer:
            return self.balancer.url()
        return self.cluster.url(self.rng.randrange(len(self.cluster.ports))) + "/mcp"

    def owned_by(self, i: int) -> list[Caller]:
        return [c for c in self.callers if c.sid and c.owner() == i]

    async def recovered(self, callers: list[Caller], event: str, bound: float = 30.0):
        """Waits (bounded) until each of `callers` made a successful call after `event`."""
        deadline = now() + bound
        while now() < deadline and any(c.waiting and c.waiting[0] == event for c in callers):
            await asyncio.sleep(0.05)

    async def kill_owner(self):
        for n in range(self.args.rounds):
            live = [c for c in self.callers if c.sid and c.owner() is not None]
            if not live:
                self.tally.event("no session open: no owner to kill")
                await asyncio.sleep(1.0)
                continue
            i = self.rng.choice(live).owner()
            owned = self.owned_by(i)
            event = f"kill {n + 1}"
            since = now()
            self.cluster.kill9(i)
            self.tally.kills.append((since, now()))
            for c in owned:
                c.waiting = (event, since)
            self.tally.event(f"kill -9 replica-{i}, owner of {len(owned)} sessions; "
                             f"restart in {self.args.down:g} s")
            await asyncio.sleep(self.args.down)
            self.cluster.spawn(i)
            await self.cluster.ready(i)
            self.tally.event(f"replica-{i} ready again, {now() - since:.1f} s after the kill")
            await self.recovered(owned, event)
            await asyncio.sleep(self.args.settle)

    async def kill_redis_master(self):
        """--kill-redis-master: kill -9 of the Redis master, --rounds times; every session is
        waited on (its owner lives), from the kill to its next successful call."""
        sentinels = self.cluster.sentinels
        for n in range(self.args.rounds):
            live = [c for c in self.callers if c.sid]
            event = f"master kill {n + 1}"
            since = now()
            for c in live:
                c.waiting = (event, since)
                if c.last_stream is not None:
                    c.witness = (c.sid, *c.last_stream)
            if self.cluster.redis_cluster is not None:
                key = "{%s}" % self.rng.choice(live).sid
                old, new, took = await self.cluster.redis_cluster.kill_master(key)
                self.tally.event(f"kill -9 of the cluster's master 127.0.0.1:{old}; its replica "
                                 f"127.0.0.1:{new} took its slots {took:.1f} s later; "
                                 f"{len(live)} sessions waited on")
                self.failovers.append(took)
                await self.recovered(live, event)
                await asyncio.sleep(self.args.settle)
                continue
            new, took = await sentinels.kill_master()
            self.tally.event(f"kill -9 of the Redis master; the Sentinels named 127.0.0.1:{new} "
                             f"{took:.1f} s later; {len(live)} sessions waited on")
            self.failovers.append(took)
            await self.recovered(live, event)
            await asyncio.sleep(self.args.settle)

    async def rolling_restart(self):
        for n in range(self.args.passes):
            for i in range(len(self.cluster.ports)):
                await self.restart(i, f"restart {n + 1} of replica-{i}")

    async def restart(self, i: int, event: str):
        """SIGTERM to replica i, started again once it exited; returns once the sessions it
        owned have each made a call since (or the bound passed) and --settle more seconds."""
        owned = self.owned_by(i)
        since = now()
        for c in owned:
            c.waiting = (event, since)
        self.tally.event(f"SIGTERM replica-{i}, owner of {len(owned)} sessions")
        await self.cluster.terminate(i)
        self.tally.event(f"replica-{i} exited after {now() - since:.1f} s; starting it again")
        self.cluster.spawn(i)
        await self.cluster.ready(i)
        self.tally.event(f"replica-{i} ready again, {now() - since:.1f} s after SIGTERM")
        await self.recovered(owned, event)
        await asyncio.sleep(self.args.settle)

    async def main(self):
        await self.cluster.start()
        if self.balancer:
            await self.balancer.start()
        self.tally.event(f"redis on {self.cluster.redis_port}, replicas on {self.cluster.ports}"
                         + (f", {self.balancer.kind} on {self.balancer.port}"
                            if self.balancer else ", no balancer")
                         + f"; logs in {self.cluster.log_dir}")
        self.callers = [Caller(i, self) for i in range(self.args.clients)]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(c.main(stop)) for c in self.callers]
        try:
            await asyncio.sleep(self.args.warmup)
            if self.args.kill_owner:
                await self.kill_owner()
            elif self.args.kill_redis_master:
                await self.kill_redis_master()
            else:
                await self.rolling_restart()
            self.round_trips = await self.round_trips_per_call()
            stop.set()
            if self.args.kill_redis_master:
                await asyncio.wait_for(asyncio.gather(*tasks), 60)
                self.witnessed = await self.check_witnesses()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in self.callers:
                await c.close()

    async def check_witnesses(self) -> dict:
        """Resumes each caller's witness stream (the last it read whole before the last master
        kill) from its first event, through a random replica: every message after it must come
        back as it was received. The events missing or different are lost."""
        streams, lost = 0, 0
        async with httpx.AsyncClient(timeout=10.0) as client:
            for c in self.callers:
                if c.witness is None or c.witness[0] != c.sid:
                    continue  # none kept, or its session ended since
                sid, first_id, expected = c.witness
                streams += 1
                state = {"last_id": None, "retry": 1.0}
                status = None
                try:
                    async with client.stream("GET", self.url(), headers=c.headers(**{
                            "accept": "text/event-stream", "last-event-id": first_id})) as r:
                        status = r.status_code
                        if r.status_code == 200:
                            await c.read_stream(r, expected[-1].get("id"), state)
                except httpx.TransportError:
                    pass
                got = state.get("messages", [])
                missing = sum(1 for n, msg in enumerate(expected)
                              if n >= len(got) or got[n] != msg)
                lost += missing
                if missing:
                    self.tally.event(f"witness of caller {c.index} ({first_id}): {missing} of "
                                     f"{len(expected)} events not resumed (HTTP "
                                     f"{status}; got {json.dumps(got)[:300]})")
        return {"streams": streams, "events_lost": lost}

    async def round_trips_per_call(self) -> float | None:
        """Redis round trips of every replica (mcp_proxy_store_round_trips_total) per call
        made, at the end of the run."""
        total = 0.0
        async with httpx.AsyncClient(timeout=5.0) as client:
            for i in range(len(self.cluster.ports)):
                try:
                    text = (await client.get(self.cluster.url(i) + "/metrics")).text
                except httpx.TransportError:
                    return None
                m = re.search(r"^mcp_proxy_store_round_trips_total (\S+)$", text, re.M)
                total += float(m.group(1)) if m else 0.0
        calls = self.tally.counts["calls"]
        return round(total / calls, 3) if calls else None

    def report(self, error: str | None) -> dict:
        t = self.tally
        seconds = [r["seconds"] for r in t.recoveries]
        waiting = [c for c in self.callers if c.waiting]
        calls = t.counts["calls"]
        failed = sum(t.failed_calls.values())
        unexplained = t.failed_not_in_flight()
        not_in_flight = sum(unexplained.values())
        limit = self.args.max_failed_not_in_flight
        return {
            "ok": error is None and t.counts["script_errors"] == 0 and (
                self.args.max_failed is None or failed <= self.args.max_failed) and (
                limit is None or not_in_flight <= limit),
            "error": error,
            "scenario": self.scenario,
            "through": self.args.through,
            "seed": self.args.seed,
            "replicas": self.args.replicas,
            "clients": self.args.clients,
            "proxy": self.args.proxy,
            "log_dir": self.cluster.log_dir,
            "calls": calls,
            "failed_calls": failed,
            "failed_calls_by_error": dict(t.failed_calls.most_common()),
            # of those, calls that were not under way when a replica was killed
            "failed_calls_not_in_flight": not_in_flight,
            "failed_calls_not_in_flight_by_error": dict(unexplained.most_common()),
            "other_failed_requests_by_error": dict(t.failed_other.most_common()),
            "calls_resumed": t.counts["calls_resumed"],
            "resumptions": t.counts["resumptions"],
            "sessions_opened": t.counts["sessions_opened"],
            "sessions_lost": t.counts["sessions_lost"],
            "script_errors": t.counts["script_errors"],
            # from each kill (or SIGTERM) to the next successful call of each session the
            # replica owned
            "recovery_seconds": {"sessions": len(seconds), "p50": quantile(seconds, 0.5),
                                 "p99": quantile(seconds, 0.99),
                                 "max": max(seconds) if seconds else None,
                                 "not_recovered": len(waiting)},
            "recoveries": t.recoveries,
            "redis_round_trips_per_call": getattr(self, "round_trips", None),
            "failover_seconds": self.failovers,
            "witness_streams": getattr(self, "witnessed", {}).get("streams"),
            "events_lost": getattr(self, "witnessed", {}).get("events_lost"),
            "events": t.events,
        }


def measure_main(args) -> int:
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="mcp-chaos-")
    os.makedirs(log_dir, exist_ok=True)
    cluster = Cluster(args, log_dir, named=True)
    balancer = Balancer(args.through, args.balancer_config, cluster) if args.through else None
    measure = Measure(args, cluster, balancer)
    error = None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(measure.main())
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        error = "interrupted"
    except Exception as e:  # reported, then the exit status says so
        error = f"{type(e).__name__}: {e}"
    finally:
        if balancer is not None:
            balancer.stop()
        cluster.stop_all()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    report = measure.report(error)
    text = json.dumps(report, indent=2, default=str)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    print(text)
    r = report["recovery_seconds"]
    where = f"through {args.through}" if args.through else "direct to the replicas"
    print(f"\n{report['scenario']} {where}: {report['failed_calls']} of {report['calls']} calls "
          f"failed ({report['calls_resumed']} more resumed a cut stream and succeeded)",
          file=sys.stderr)
    if args.kill_owner:
        print(f"  of them in flight at a kill: "
              f"{report['failed_calls'] - report['failed_calls_not_in_flight']}; "
              f"not in flight: {report['failed_calls_not_in_flight']}", file=sys.stderr)
    for text_, n in report["failed_calls_by_error"].items():
        print(f"  {n:6d} × {text_}", file=sys.stderr)
    for text_, n in report["other_failed_requests_by_error"].items():
        print(f"  {n:6d} × (not a call) {text_}", file=sys.stderr)
    fault = ("kill of the Redis master" if args.kill_redis_master else
             "kill" if args.kill_owner else "SIGTERM")
    whose = "every live session" if args.kill_redis_master else "sessions of the replica"
    print(f"recovery after each {fault}, over {r['sessions']} {whose}: p50 {r['p50']} s, "
          f"p99 {r['p99']} s, max {r['max']} s; not recovered: {r['not_recovered']}",
          file=sys.stderr)
    if args.kill_redis_master:
        print(f"  a new master (Sentinels or cluster) after {report['failover_seconds']} s; "
              f"sessions lost (404): {report['sessions_lost']}; events lost: "
              f"{report['events_lost']} of {report['witness_streams']} streams logged before "
              f"the last kill, resumed at the end", file=sys.stderr)
    print(f"Redis round trips per call: {report['redis_round_trips_per_call']}",
          file=sys.stderr)
    print(f"{'OK' if report['ok'] else 'FAIL'}{' (' + error + ')' if error else ''}; logs in "
          f"{log_dir}", file=sys.stderr)
    return 0 if report["ok"] else 1


class Logs:
    """The replicas' JSON logs, read after the run: who owned a session when, node ids."""

    def __init__(self, cluster: Cluster):
        self.lines = []  # (timestamp, file, replica index, record)
        self.nodes = {}  # node id -> "replica-<i>.start-<k>"
        for path in cluster.logs:
            name = os.path.basename(path)
            m = re.match(r"replica-(\d+)\.start-(\d+)\.log", name)
            if not m:
                continue
            try:
                with open(path, errors="replace") as f:
                    for line in f:
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        fields = rec.get("fields") or {}
                        if "node" in fields and "joined" in str(fields.get("message")):
                            self.nodes[fields["node"]] = name[:-4]
                        self.lines.append((rec.get("timestamp", ""), name[:-4], int(m.group(1)),
                                           rec))
            except OSError:
                continue
        self.lines.sort(key=lambda x: x[0])

    @staticmethod
    def session_of(rec) -> str | None:
        for span in rec.get("spans") or []:
            if span.get("name") == "session":
                return span.get("id")
        return (rec.get("span") or {}).get("id")

    def owner_at(self, session: str, at: str):
        """The replica that created or last took over `session` before `at`."""
        owner = None
        for ts, name, index, rec in self.lines:
            if ts > at:
                break
            msg = (rec.get("fields") or {}).get("message")
            if msg in ("session created", "session taken over") and \
                    self.session_of(rec) == session:
                owner = (index, name)
        return owner

    def about(self, session: str, limit: int = 8) -> list[str]:
        out = []
        for ts, name, index, rec in self.lines:
            if session in json.dumps(rec):
                fields = dict(rec.get("fields") or {})
                msg = fields.pop("message", "")
                if "from" in fields and fields["from"] in self.nodes:
                    fields["from"] = f"{fields['from']} ({self.nodes[fields['from']]})"
                extra = " ".join(f"{k}={v}" for k, v in fields.items())
                out.append(f"{ts[11:23]} {name} {rec.get('level', '')} {msg} {extra}".strip())
        return out[-limit:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--proxy", required=True, help="mcp-session-proxy binary")
    p.add_argument("--bench", help="mcp-bench binary (the chaos run's load bursts)")
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--clients", type=int, default=None,
                   help="default: 6 for the chaos run, 8 for a measurement")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--sentinel", action="store_true",
                   help="Redis with a replica and three Sentinels (redis+sentinel://)")
    p.add_argument("--redis-cluster", action="store_true",
                   help="a Redis Cluster of three masters with a replica each (redis+cluster://)")
    p.add_argument("--no-kills", dest="kills", action="store_false")
    p.add_argument("--no-cuts", dest="cuts", action="store_false")
    p.add_argument("--no-bursts", dest="bursts", action="store_false")
    p.add_argument("--kill-every", type=float, default=10.0, help="seconds, jittered ±30%%")
    p.add_argument("--burst-calls", type=int, default=400, help="calls per burst session")
    p.add_argument("--quiet", type=float, default=6.0, help="seconds between the faults' end "
                   "and the final checks (takeovers finish: owner_timeout is 3 s)")
    p.add_argument("--allow-live-coalescing", action="store_true",
                   help="rule (i): excuse an update coalesced into a later one of its URI on an "
                   "attached stream (proxies before 'an attached reader is sent every message')")
    p.add_argument("--log-dir", default=None, help="default: a new temporary folder")
    p.add_argument("--report", default=None, help="also write the JSON report here")
    p.add_argument("--through", choices=sorted(BALANCER_CONFIGS), default=None,
                   help="clients reach the replicas through this balancer, running the shipped "
                   "config/nginx.conf or config/haproxy.cfg (or --balancer-config)")
    p.add_argument("--balancer-config", default=None, help="another configuration for "
                   "--through, with the same '# replicas' and '# listen' blocks")
    m = p.add_argument_group("measurements (instead of the chaos run: counted, not judged)")
    m.add_argument("--kill-owner", action="store_true",
                   help="kill -9 the replica owning a random client's session, start it again "
                   "after --down s; --rounds times")
    m.add_argument("--rolling-restart", action="store_true",
                   help="SIGTERM each replica in turn and start it again once it exited")
    m.add_argument("--kill-redis-master", action="store_true",
                   help="kill -9 of the Redis master (with --sentinel or --redis-cluster), "
                   "--rounds times")
    m.add_argument("--rounds", type=int, default=5,
                   help="kills of --kill-owner or --kill-redis-master")
    m.add_argument("--passes", type=int, default=1,
                   help="times --rolling-restart restarts every replica in turn")
    m.add_argument("--down", type=float, default=1.0,
                   help="seconds a killed replica stays down (owner_timeout is 3 s)")
    m.add_argument("--warmup", type=float, default=3.0, help="seconds before the first fault")
    m.add_argument("--settle", type=float, default=2.0,
                   help="seconds after the affected sessions recovered, before the next fault")
    m.add_argument("--max-failed", type=int, default=None,
                   help="exit 1 when more calls than this failed")
    m.add_argument("--max-failed-not-in-flight", type=int, default=None,
                   help="exit 1 when more calls than this failed that were not under way when "
                   "a replica was killed (sent before it was gone, answered after the kill)")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    measuring = args.kill_owner or args.rolling_restart or args.kill_redis_master
    if args.kill_owner + args.rolling_restart + args.kill_redis_master > 1:
        p.error("one measurement at a time: --kill-owner, --rolling-restart or "
                "--kill-redis-master")
    if args.kill_redis_master and not (args.sentinel or args.redis_cluster):
        p.error("--kill-redis-master needs --sentinel or --redis-cluster (a replica to promote)")
    if args.sentinel and args.redis_cluster:
        p.error("--sentinel or --redis-cluster, not both")
    if args.clients is None:
        args.clients = 8 if measuring else 6
    if measuring:
        return measure_main(args)
    if args.bursts and not args.bench:
        p.error("--bench is needed for the load bursts (or --no-bursts)")
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="mcp-chaos-")
    os.makedirs(log_dir, exist_ok=True)
    cluster = Cluster(args, log_dir)
    balancer = Balancer(args.through, args.balancer_config, cluster) if args.through else None
    run = Run(args, cluster, balancer)
    error = None

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main_task = loop.create_task(run.main())
    interrupted = []

    def on_signal(signame):
        interrupted.append(signame)
        main_task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        error = f"interrupted by {interrupted[0] if interrupted else 'cancellation'}"
    except Exception as e:  # reported, then the exit status says so
        error = f"{type(e).__name__}: {e}"
    finally:
        if balancer is not None:
            balancer.stop()
        cluster.stop_all()
        run.stop_bench()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    counts = STATS.counts
    failures = {name: counts.get(name, 0) for name in FAILURES}
    info_names = ["lost_updates_live", "lost_updates_live_not_superseded",
                  "lost_updates_final", "kills", "bursts", "burst_requests", "burst_errors", "burst_timed_out",
                  "unavailable_503", "interrupted", "state_resets", "takeovers_seen",
                  "sessions_opened", "sessions_lost", "deletes", "progress_calls",
                  "progress_cuts", "progress_resumes", "progress_on_get_stream", "counter_calls",
                  "emit_calls_ok", "updates_received", "untagged_updates", "live_checks",
                  "live_checks_skipped", "live_coalesced", "live_excused_by_gap", "final_checks",
                  "final_excused_by_gap", "get_attachments", "get_cuts", "get_broken",
                  "connection_refused", "connection_lost", "unknown_outcome",
                  "other_notifications"]
    info = {name: counts.get(name, 0) for name in info_names}
    examples = {}
    logs = Logs(cluster)
    for name, items in STATS.examples.items():
        if name not in FAILURES and name != "lost_updates_live_not_superseded":
            continue
        enriched = []
        for j, ex in enumerate(items):
            ex = dict(ex)
            if ex.get("session"):
                owner = logs.owner_at(ex["session"], ex["at"])
                ex["owner_then"] = owner[1] if owner else None
                if j < 3:
                    ex["log_lines"] = logs.about(ex["session"])
            if j >= 5:  # the rest in short
                ex = {k: ex.get(k) for k in ("at", "session", "replica", "get_replica",
                                             "owner_then", "what", "tag", "index", "uri",
                                             "received_live", "received_later",
                                             "session_age_s", "probe") if k in ex}
            enriched.append(ex)
        examples[name] = enriched
    live_split = {}
    for kind, records in STATS.live_records.items():
        tally = Counter()
        for session, replica, at in records:
            owner = logs.owner_at(session, at)
            tally["unknown" if owner is None else
                  ("on_owner" if owner[0] == replica else "on_other_replica")] += 1
        live_split[f"live_{kind}"] = dict(tally)
    # A run that exercised nothing proves nothing: each check must have had something to check.
    unexercised = [what for what, missing in [
        ("no replica was killed", args.kills and info["kills"] < 1),
        ("no live update check was made (all skipped)", info["live_checks"] < 1),
        ("no progress call was made", info["progress_calls"] < 1),
        ("no update was observed", info["updates_received"] < 1),
    ] if missing]
    ok = error is None and not any(failures.values()) and not unexercised
    report = {
        "ok": ok,
        "error": error,
        "unexercised": unexercised,
        "seed": args.seed,
        "seconds": args.seconds,
        "replicas": args.replicas,
        "clients": args.clients,
        "faults": {"kills": args.kills, "cuts": args.cuts, "bursts": args.bursts},
        "through": args.through,
        "allow_live_coalescing": args.allow_live_coalescing,
        "proxy": args.proxy,
        "log_dir": log_dir,
        "replica_logs": cluster.logs,
        "failures": failures,
        "reported": info,
        "live_by_get_stream_replica": live_split,
        "other_notifications_by_method": dict(STATS.methods),
        "get_broken_by": dict(STATS.broken),
        "nodes": logs.nodes,
        "examples": examples,
        "rules": RULES,
    }
    text = json.dumps(report, indent=2, default=str)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    print(text)
    summary = ", ".join(f"{k}={v}" for k, v in failures.items())
    print(f"\nchaos seed={args.seed} {args.seconds:g}s replicas={args.replicas} "
          f"clients={args.clients} kills={info['kills']} bursts={info['bursts']} "
          f"({info['burst_requests']} requests) 503s={info['unavailable_503']} "
          f"interrupted={info['interrupted']} state_resets={info['state_resets']} "
          f"takeovers_seen={info['takeovers_seen']}", file=sys.stderr)
    print(f"failures: {summary}", file=sys.stderr)
    for what in unexercised:
        print(f"not exercised: {what}", file=sys.stderr)
    print(f"{'PASS' if ok else 'FAIL'}{' (' + error + ')' if error else ''}; logs in {log_dir}",
          file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
