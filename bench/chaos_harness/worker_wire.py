"""A worker's requests and its session's opening and closing."""

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


class WorkerWire:
    """A worker's requests: sent, checked, and its session opened and closed."""

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
