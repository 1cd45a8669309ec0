"""The Redis topologies a chaos run may share: a master with its replica and three Sentinels,
or a Redis Cluster."""

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

from .common import *  # noqa: F401,F403
from .processes import *  # noqa: F401,F403


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
