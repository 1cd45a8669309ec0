"""What every part of the chaos run shares: the protocol it speaks, the failures it counts and the
rules it checks, the clock and the counters."""

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
