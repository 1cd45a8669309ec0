"""A measuring client: one session calling tools one after another, its failures counted."""

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
