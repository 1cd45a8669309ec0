"""Measurements instead of the chaos run: kills of an owner or of the Redis master, rolling
restarts, counted rather than judged."""

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
from .run import *  # noqa: F401,F403
from .caller import *  # noqa: F401,F403


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
