"""A client session of the chaos run, and the ways a request fails it."""

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
