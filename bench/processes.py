"""What the benchmark scripts share: where the binaries are, the processes they start on
127.0.0.1 (each stopped by its own PID), their CPU and memory, the load generator, Redis."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / "target" / "release"
PROXY = RELEASE / "mcp-session-proxy"
BENCH = RELEASE / "mcp-bench"

# The replicas' shared secret in the runs with Redis (at least 32 bytes, as the proxy requires).
CLUSTER_SECRET = "bench-" + "0" * 58


def log(*parts):
    print("[bench]", *parts, file=sys.stderr, flush=True)


def run(command, **kwargs):
    log("$", " ".join(map(str, command)))
    subprocess.run(command, check=True, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {seconds}s")


class Target:
    """A process serving MCP over HTTP on 127.0.0.1, stopped by its PID."""

    def __init__(self, name, command, port, path="/mcp", env=None, stderr=None):
        """`stderr`: a file its logs are appended to (else they are dropped)."""
        self.name, self.port, self.path = name, port, path
        logs = open(stderr, "ab") if stderr else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env={**os.environ, **(env or {})},
                stdout=subprocess.DEVNULL, stderr=logs, start_new_session=True)
        finally:
            if stderr:
                logs.close()
        wait_for_port(port, self.process)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}{self.path}"

    def rss_kib(self, with_children=False):
        pids = [self.process.pid] + (descendants(self.process.pid) if with_children else [])
        return sum(rss_of(pid) for pid in pids)

    def cpu_seconds(self):
        """User + system CPU time used so far by the target itself."""
        return cpu_of(self.process.pid)

    def stop(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 15)  # the target and the children it started
            except ProcessLookupError:
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


def cpu_of(pid):
    """User + system CPU seconds of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_of(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                children.append(int(entry.name))
                children.extend(descendants(int(entry.name)))
    return children


def median(values):
    """The middle of `values` (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def medians(samples, fields):
    """Per key of `samples` (a list of runs each), the median of each of `fields`."""
    return {key: {k: median([r[k] for r in runs]) for k in fields} for key, runs in samples.items()}


def bench(*args):
    out = subprocess.run([str(BENCH), *map(str, args)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def ensure_redis():
    """redis-server from Debian's packages, installed if absent (as the test command does)."""
    if shutil.which("redis-server"):
        return True
    try:
        run(["apt-get", "install", "-y", "-qq", "redis-server"], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except (subprocess.CalledProcessError, FileNotFoundError):
        log("redis-server is not available: the replica figures are left out")
    return shutil.which("redis-server") is not None


def start_redis(port):
    """A redis-server on 127.0.0.1:`port`, keeping nothing on disk (stopped by its PID)."""
    return subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
