"""The balancer in front of the replicas, and the SSE the clients read."""

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


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from balancer import BALANCER_CONFIGS, find_balancer, program_of, render_balancer_config  # noqa: E402


class Balancer:
    """nginx or HAProxy running a shipped configuration in front of the replicas (round-robin,
    or the owner-aware nginx-owner and haproxy-owner, whose servers are the replicas' names), on
    a loopback port of its own; its configuration, logs and temporary files in a folder of the
    run's logs."""

    def __init__(self, kind: str, config: str | None, cluster: Cluster):
        self.kind = kind
        self.config = config or os.path.join(ROOT, BALANCER_CONFIGS[kind])
        self.cluster = cluster
        self.dir = os.path.join(cluster.log_dir, kind)
        self.port = 0
        self.proc: Proc | None = None
        self.program = find_balancer(kind)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self):
        os.makedirs(self.dir, exist_ok=True)
        # nginx's workers run as www-data when this runs as root: they must reach the folder.
        for folder in (self.cluster.log_dir, self.dir):
            os.chmod(folder, 0o755)
        with open(self.config) as f:
            shipped = f.read()
        for _ in range(3):  # a port taken between our look and its bind: another one
            self.port = free_port()
            conf = os.path.join(self.dir, f"{self.kind}.conf")
            with open(conf, "w") as f:
                f.write(render_balancer_config(
                    self.kind, shipped, f"127.0.0.1:{self.port}",
                    [f"127.0.0.1:{p}" for p in self.cluster.ports], self.dir,
                    # HAProxy's log names replicas as this script does, the owner-aware
                    # configurations route on these names (the replicas' --node-id when named)
                    [f"replica-{i}" for i in range(len(self.cluster.ports))]))
            if program_of(self.kind) == "nginx":
                argv = [self.program, "-c", conf, "-p", self.dir + "/", "-e", "stderr",
                        "-g", "daemon off;"]
            else:
                argv = [self.program, "-f", conf, "-db"]
            self.proc = Proc(self.kind, argv, os.path.join(self.dir, "output.log"),
                             stdout_too=True)
            deadline = now() + 20
            while self.proc.alive() and now() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    await asyncio.sleep(0.05)
            self.proc.stop()
        raise RuntimeError(f"{self.kind} did not start; see {self.dir}/output.log")

    def stop(self):
        if self.proc is not None:
            self.proc.stop()  # SIGTERM: nginx's master stops its workers first


# --------------------------------------------------------------------------- SSE


class SSEParser:
    """Incremental SSE parser (WHATWG): CR, LF or CRLF line ends, comments, retry, multi-line
    data. Yields one dict per block that set anything: {id, data (None: no data field), retry}."""

    def __init__(self):
        self.buf = b""
        self._reset()

    def _reset(self):
        self.id = None
        self.data: list[str] | None = None
        self.retry = None
        self.any = False

    def feed(self, chunk: bytes) -> list[dict]:
        self.buf += chunk
        out = []
        while True:
            i_n = self.buf.find(b"\n")
            i_r = self.buf.find(b"\r")
            if i_n < 0 and i_r < 0:
                break
            if i_r >= 0 and (i_n < 0 or i_r < i_n):
                if i_r + 1 == len(self.buf):
                    break  # a CR at the end: wait to see whether LF follows
                line = self.buf[:i_r]
                skip = 2 if self.buf[i_r + 1:i_r + 2] == b"\n" else 1
                self.buf = self.buf[i_r + skip:]
            else:
                line = self.buf[:i_n]
                self.buf = self.buf[i_n + 1:]
            text = line.decode("utf-8", errors="replace")
            if text == "":
                if self.any:
                    out.append({
                        "id": self.id,
                        "data": None if self.data is None else "\n".join(self.data),
                        "retry": self.retry,
                    })
                self._reset()
                continue
            if text.startswith(":"):
                continue
            field, sep, value = text.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if field == "data":
                self.data = (self.data or []) + [value]
                self.any = True
            elif field == "id":
                if "\0" not in value:
                    self.id = value
                    self.any = True
            elif field == "retry":
                if value.isdigit():
                    self.retry = int(value)
                    self.any = True
            # "event" and unknown fields: nothing to keep
        return out
