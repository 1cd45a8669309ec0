"""The replicas of a chaos run and the Redis they share."""

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
from .redis_topologies import *  # noqa: F401,F403


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
