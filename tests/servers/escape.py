"""A stdio MCP server whose tools each try something a confined server must not do, and say what
happened: `connect {port}` (a TCP connection to 127.0.0.1), `ptrace` (attaching to its parent),
`signal` (SIGCONT to its parent: harmless had it arrived), `unix {name}` (a connection to an
abstract Unix socket), `allocate {mib}` (that much memory, touched), `open_files {count}`,
`fork {count}` (that many processes at once, each waiting until it is killed), `unshare` (a
new network namespace), `read {path}`, `write {path}` (a file created there), `write_text {path,
text}` (that file with that text), `list {path}` (a
directory); `env {name}` answers a variable of its environment, `home` its HOME, `whoami` its
user and group ids; `spin` uses CPU until stopped, `grow {mib}` writes a file that large in
its HOME (Python ignores SIGXFSZ: past the limit, its write fails with EFBIG).
Against the proxy and the box: `io_uring` (a ring, which would make and connect sockets past
every other rule), `prlimit`, `setpriority`, `affinity`, `scheduler`, `ioprio` (each setting
process `pid`'s own value again, 0 being itself: harmless had it been allowed), `x32` (a socket
through the x32 entry), `int80` (a socket through the 32-bit entry, machine code run in place),
`unix_path {path}` (a Unix socket by path), `socketpair`, `udp {port}` (a datagram to
127.0.0.1), `capabilities` (its CapEff, CapPrm, CapBnd and CapAmb), `sethostname` (the name it
has), `fd {n}` (whether descriptor n is open), `daemon` (a process double-forked into a session
of its own, its pid answered, left running), `post_as {port, header, user}` (an `initialize`
POSTed to the proxy on 127.0.0.1 naming `user` in `header`: the HTTP status), `tiocsti` (a
character typed into the terminal on stdin), `session` ("leader" when it leads a session of
its own), `unix_dgram {path}` (a datagram from a socketpair of its own to a Unix socket by
path), `shm` (a System V shared memory segment), `chain {count}` (that many processes, each the
child of the one before and each in a session of its own, waiting: their pids answered),
`lock_home` (a folder in its HOME closed to its own user, a file in it), `stderr {text}` (a
line to stderr), `flood_stdout {lines}` (lines that are not messages), `flood_stderr {lines}`
(that many lines to stderr at once), `cat {path}` (what the file holds), `deep {levels}` (a
folder tree that deep in its HOME, made from the bottom up so no path it names is long),
`listen` (a TCP socket listening, unbound), `socketpair_of {family}` (a pair of that family,
`AF_INET6`), `open_create {path, mode}` (a file created with that octal mode), `chmod {path,
mode}`. Each answers "done" or
the error the system gave (as its errno name). Started with `npm_config_cache` set and no
`_npx/fetched.js` in it, it first writes that file, as `npx` fetching a server would. Standard
library only."""

import ctypes
import errno
import json
import mmap
import os
import platform
import resource
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


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def spin():
    while True:
        pass


def grow(mib):
    with open(os.path.join(os.environ["HOME"], "grown"), "wb") as f:
        for _ in range(mib):
            f.write(b"x" * (1 << 20))
    return "done"


def syscall(number, *args):
    result = LIBC.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    if result < 0:
        raise OSError(ctypes.get_errno(), "")
    return result


# x86_64's numbers, and aarch64's.
NUMBERS = {
    "x86_64": {"io_uring_setup": 425, "ioprio_set": 251, "ioprio_get": 252},
    "aarch64": {"io_uring_setup": 425, "ioprio_set": 30, "ioprio_get": 31},
}[platform.machine()]


def io_uring():
    params = ctypes.create_string_buffer(120)
    os.close(syscall(NUMBERS["io_uring_setup"], 8, ctypes.addressof(params)))


def prlimit(pid):
    resource.prlimit(pid, resource.RLIMIT_NOFILE, resource.prlimit(pid, resource.RLIMIT_NOFILE))


def setpriority(pid):
    os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))


def affinity(pid):
    os.sched_setaffinity(pid, os.sched_getaffinity(pid))


def scheduler(pid):
    os.sched_setscheduler(pid, os.sched_getscheduler(pid), os.sched_getparam(pid))


def ioprio(pid):
    who_process = 1
    value = syscall(NUMBERS["ioprio_get"], who_process, pid)
    syscall(NUMBERS["ioprio_set"], who_process, pid, value)


def x32():
    os.close(syscall(0x40000000 | 41, socket.AF_INET, socket.SOCK_STREAM, 0))


def int80():
    """socket(AF_INET, SOCK_STREAM, 0) through `int 0x80`, i386's number 359: push rbx; mov
    eax, 359; mov ebx, 2; mov ecx, 1; xor edx, edx; int 0x80; pop rbx; ret."""
    code = bytes.fromhex("53" "b867010000" "bb02000000" "b901000000" "31d2" "cd80" "5b" "c3")
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    result = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    if result < 0:
        raise OSError(-result, "")


def unix_path(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)


def socketpair():
    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"
    a.close()
    b.close()


def listen():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.listen()


def socketpair_of(family):
    a, b = socket.socketpair(getattr(socket, family))
    a.close()
    b.close()


def create(path, mode):
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, mode))
    os.chmod(path, mode)


def udp(port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"escaped", ("127.0.0.1", port))


def capabilities():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith("Cap"))
    return " ".join(fields[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb"))


def sethostname():
    name = socket.gethostname().encode()
    if LIBC.sethostname(name, len(name)) != 0:
        raise OSError(ctypes.get_errno(), "")


def daemon():
    """A process that forks, starts a session of its own and forks again, the grandchild
    waiting forever: its pid comes back through a pipe."""
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            while True:
                signal.pause()
        os._exit(0)
    os.close(write_end)
    os.waitpid(first, 0)
    pid = os.read(read_end, 32).decode()
    os.close(read_end)
    return pid


def post_as(port, header, user):
    import http.client
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "child", "version": "1"}}})
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("POST", "/mcp", body, {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream", header: user})
        return str(connection.getresponse().status)
    except OSError as e:
        return failed(e.errno)


def tiocsti():
    import fcntl
    import termios
    fcntl.ioctl(0, termios.TIOCSTI, b"x")


def unix_dgram(path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        a.sendto(b"escaped", path)
    finally:
        a.close()
        b.close()


def shm():
    LIBC.shmget.restype = ctypes.c_int
    segment = LIBC.shmget(0, 4096, 0o1600)
    if segment < 0:
        raise OSError(ctypes.get_errno(), "")
    LIBC.shmctl(segment, 0, None)


def chain(count):
    """Each process forks the next in a session of its own, then waits; the pids come back
    through a pipe."""
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read_end)
        for _ in range(count):
            os.setsid()
            os.write(write_end, f"{os.getpid()} ".encode())
            if os.fork() != 0:
                os.close(write_end)
                while True:
                    signal.pause()
        os.close(write_end)
        while True:
            signal.pause()
    os.close(write_end)
    pids = b""
    while True:
        more = os.read(read_end, 4096)
        if not more:
            break
        pids += more
    os.close(read_end)
    return pids.decode().strip()


def lock_home():
    inner = os.path.join(os.environ["HOME"], "locked", "inner")
    os.makedirs(inner)
    with open(os.path.join(inner, "left-behind"), "w") as f:
        f.write("x")
    os.chmod(inner, 0)


TOOLS = {
    "spin": lambda a: spin(),
    "grow": lambda a: attempt(lambda: grow(int(a["mib"]))),
    "read": lambda a: attempt(lambda: read(a["path"])),
    "write": lambda a: attempt(lambda: write(a["path"])),
    "write_text": lambda a: attempt(lambda: write_text(a["path"], a["text"])),
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
    "io_uring": lambda a: attempt(io_uring),
    "prlimit": lambda a: attempt(lambda: prlimit(int(a["pid"]))),
    "setpriority": lambda a: attempt(lambda: setpriority(int(a["pid"]))),
    "affinity": lambda a: attempt(lambda: affinity(int(a["pid"]))),
    "scheduler": lambda a: attempt(lambda: scheduler(int(a["pid"]))),
    "ioprio": lambda a: attempt(lambda: ioprio(int(a["pid"]))),
    "x32": lambda a: attempt(x32),
    "int80": lambda a: attempt(int80),
    "unix_path": lambda a: attempt(lambda: unix_path(a["path"])),
    "socketpair": lambda a: attempt(socketpair),
    "udp": lambda a: attempt(lambda: udp(int(a["port"]))),
    "capabilities": lambda a: capabilities(),
    "sethostname": lambda a: attempt(sethostname),
    "fd": lambda a: attempt(lambda: os.fstat(int(a["n"]))),
    "daemon": lambda a: daemon(),
    "post_as": lambda a: post_as(int(a["port"]), a["header"], a["user"]),
    "tiocsti": lambda a: attempt(tiocsti),
    "session": lambda a: "leader" if os.getsid(0) == os.getpid() else "member",
    "unix_dgram": lambda a: attempt(lambda: unix_dgram(a["path"])),
    "shm": lambda a: attempt(shm),
    "chain": lambda a: chain(int(a["count"])),
    "lock_home": lambda a: attempt(lock_home),
    "flood_stderr": lambda a: attempt(lambda: sys.stderr.write("flood\n" * int(a["lines"]))),
    "flood_stdout": lambda a: attempt(lambda: sys.stdout.write("not a message\n" * int(a["lines"]))),
    "stderr": lambda a: attempt(lambda: (sys.stderr.write(a["text"] + "\n"), sys.stderr.flush())),
    "cat": lambda a: cat(a["path"]),
    "listen": lambda a: attempt(listen),
    "socketpair_of": lambda a: attempt(lambda: socketpair_of(a["family"])),
    "create": lambda a: attempt(lambda: create(a["path"], int(a["mode"], 8))),
    "open_create": lambda a: attempt(lambda: os.close(os.open(a["path"], os.O_CREAT | os.O_WRONLY, int(a["mode"], 8)))),
    "chmod": lambda a: attempt(lambda: os.chmod(a["path"], int(a["mode"], 8))),
    "deep": lambda a: attempt(lambda: deep(int(a["levels"]))),
}


def cat(path):
    try:
        with open(path) as f:
            return f.read(200)
    except OSError as e:
        return failed(e.errno)


def deep(levels):
    home = os.environ["HOME"]
    tree, moving = os.path.join(home, "deep"), os.path.join(home, "moving")
    os.makedirs(os.path.join(tree, "d"))
    for _ in range(levels):
        os.rename(os.path.join(tree, "d"), moving)
        os.mkdir(os.path.join(tree, "d"))
        os.rename(moving, os.path.join(tree, "d", "d"))


def fetch_into_the_cache():
    cache = os.environ.get("npm_config_cache")
    if not cache or os.path.lexists(os.path.join(cache, "_npx", "fetched.js")):
        return
    try:
        os.makedirs(os.path.join(cache, "_npx"), exist_ok=True)
        with open(os.path.join(cache, "_npx", "fetched.js"), "w") as f:
            f.write("fetched by %d" % os.getpid())
    except OSError as e:
        sys.stderr.write("cannot fetch into the cache: %s\n" % e)


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


fetch_into_the_cache()
for line in sys.stdin:
    request = json.loads(line)
    if "id" in request and "method" in request:
        result = answer(request)
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
        sys.stdout.flush()
