"""The chaos run: workers calling while replicas are killed and restarted."""

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
from .cluster import *  # noqa: F401,F403
from .front import *  # noqa: F401,F403
from .session import *  # noqa: F401,F403
from .worker_wire import *  # noqa: F401,F403
from .worker_streams import *  # noqa: F401,F403
from .worker import *  # noqa: F401,F403
from .common import _child_setup  # noqa: F401


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
