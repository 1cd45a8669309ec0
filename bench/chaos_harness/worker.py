"""A chaos client: its session, the calls it makes and what it checks of them."""

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


class Worker(WorkerWire, WorkerStreams):
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
