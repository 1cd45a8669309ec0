"""A child process of the chaos run, stopped by its own PID."""

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
from .common import _child_setup  # noqa: F401


class Proc:
    """A child started by this script, stopped by its own PID (its process group is its own:
    start_new_session, so the demo servers a replica started go with it)."""

    def __init__(self, name: str, argv: list[str], log_path: str | None,
                 stdout_too: bool = False, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        env = {**os.environ, **(env or {})}
        env.setdefault("RUST_LOG", "info")
        try:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log if stdout_too else subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                preexec_fn=_child_setup,
                env=env,
            )
        finally:
            if log_path:
                log.close()
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _signal_group(self, sig):
        try:
            os.killpg(self.pid, sig)  # the group this child leads (its PID)
        except (ProcessLookupError, PermissionError):
            pass

    def kill9(self):
        """kill -9 of the replica and of the servers it started (as if its host died)."""
        if self.alive():
            self.popen.kill()
        self._signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, grace: float = 5.0):
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                try:
                    self.popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        # Whatever of its group is left (servers it had not released yet).
        self._signal_group(signal.SIGKILL)
