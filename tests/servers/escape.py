"""A stdio MCP server whose tools each try something a confined server must not do, and say what
happened: `connect {port}` (a TCP connection to 127.0.0.1), `ptrace` (attaching to its parent),
`signal` (SIGCONT to its parent: harmless had it arrived), `unix {name}` (a connection to an
abstract Unix socket), `allocate {mib}` (that much memory, touched), `open_files {count}`,
`fork {count}` (that many processes at once, each waiting until it is killed), `unshare` (a
new network namespace), `read {path}`, `write {path}` (a file created there), `list {path}` (a
directory); `env {name}` answers a variable of its environment, `home` its HOME, `whoami` its
user and group ids; `spin` uses CPU until stopped, `grow {mib}` writes a file that large in
its HOME (Python ignores SIGXFSZ: past the limit, its write fails with EFBIG). Each answers "done" or the error the system gave (as its
errno name). Standard library only."""

import ctypes
import errno
import json
import os
import signal
import socket
import sys

LIBC = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
CLONE_NEWNET = 0x40000000


def failed(code):
    return errno.errorcode.get(code, str(code))


def connect(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "done"
    except OSError as e:
        return failed(e.errno)


def ptrace():
    if LIBC.ptrace(PTRACE_ATTACH, os.getppid(), None, None) == 0:
        return "done"
    return failed(ctypes.get_errno())


def abstract_unix(name):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0" + name)


def allocate(mib):
    try:
        block = bytearray(mib << 20)
        block[::4096] = b"x" * len(block[::4096])
        return "done"
    except MemoryError:
        return "ENOMEM"


def fork(count):
    children = []
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                signal.pause()
                os._exit(0)
            children.append(pid)
        return "done"
    except OSError as e:
        return failed(e.errno)
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def open_files(count):
    opened = []
    try:
        for _ in range(count):
            opened.append(open("/dev/null"))
        return "done"
    except OSError as e:
        return failed(e.errno)
    finally:
        for f in opened:
            f.close()


def unshare():
    if LIBC.unshare(CLONE_NEWNET) == 0:
        return "done"
    return failed(ctypes.get_errno())


def attempt(action):
    try:
        action()
        return "done"
    except OSError as e:
        return failed(e.errno)


def read(path):
    with open(path, "rb") as f:
        f.read(1)


def write(path):
    with open(path, "w") as f:
        f.write("escaped")


def spin():
    while True:
        pass


def grow(mib):
    with open(os.path.join(os.environ["HOME"], "grown"), "wb") as f:
        for _ in range(mib):
            f.write(b"x" * (1 << 20))
    return "done"


TOOLS = {
    "spin": lambda a: spin(),
    "grow": lambda a: attempt(lambda: grow(int(a["mib"]))),
    "read": lambda a: attempt(lambda: read(a["path"])),
    "write": lambda a: attempt(lambda: write(a["path"])),
    "list": lambda a: attempt(lambda: os.listdir(a["path"])),
    "home": lambda a: os.environ.get("HOME", ""),
    "env": lambda a: os.environ.get(a["name"], ""),
    "whoami": lambda a: f"{os.getuid()} {os.getgid()}",
    "fork": lambda a: fork(int(a["count"])),
    "connect": lambda a: connect(int(a["port"])),
    "ptrace": lambda a: ptrace(),
    "signal": lambda a: attempt(lambda: os.kill(os.getppid(), signal.SIGCONT)),
    "unix": lambda a: attempt(lambda: abstract_unix(a["name"])),
    "allocate": lambda a: allocate(int(a["mib"])),
    "open_files": lambda a: open_files(int(a["count"])),
    "unshare": lambda a: unshare(),
}


def answer(request):
    method = request["method"]
    if method == "initialize":
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "escape", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
    if method == "tools/call":
        name = request["params"]["name"]
        text = TOOLS[name](request["params"].get("arguments") or {})
        return {"content": [{"type": "text", "text": text}]}
    return {}


for line in sys.stdin:
    request = json.loads(line)
    if "id" in request and "method" in request:
        result = answer(request)
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
        sys.stdout.flush()
