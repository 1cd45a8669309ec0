"""A worker's GET stream and what comes on it."""

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


class WorkerStreams:
    """A worker's GET stream: attached, read, cut, and the liveness rule checked."""

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
