"""What a virtual server costs (bench/run.py --sections virtual): one proxy serving the demo
(stdio) at its own path and as the only member of a virtual server, and a virtual server of
three members (the demo, server-everything over stdio, the demo over HTTP).

- calls: `tools/call` echo at /servers/demo/mcp (`echo`) and through the virtual servers
  (`demo__echo`), in interleaved rounds at 1 and 8 sessions: p50, p99, req/s and the proxy's
  own CPU per call (its children apart);
- initialize: the time to open a session (initialize, then notifications/initialized) at each
  member's own path and at the three-member virtual server, one session at a time: the virtual
  server opens its members at once, so it should take the slowest member's time, not the sum;
- instructions: where valgrind is installed, the proxy's own instructions per call (callgrind:
  user space only, the same on every run, unlike CPU time on a busy machine) at the demo's own
  path and through the virtual server of the demo alone: two runs of each, 50 and 250 calls per
  session, and the difference per call, so that starting and stopping stay out of it.
"""

import json
import re
import shutil
import signal
import tempfile
from pathlib import Path

from processes import PROXY, ROOT, Target, bench, free_port, median, medians

EVERYTHING = ROOT / "tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LEVELS = (1, 8)
CALL_PATHS = [
    ("the demo at its own path", "/servers/demo/mcp", "echo"),
    ("a virtual server of the demo alone", "/servers/one/mcp", "demo__echo"),
    ("a virtual server of three members", "/servers/three/mcp", "demo__echo"),
]
TARGET_RATIO = 1.05


def measure_virtual(calls, rounds=7, opened=5):
    """The calls and the session openings above, in `rounds` interleaved rounds; `opened`
    sessions per path and round for the openings."""
    folder = Path(tempfile.mkdtemp(prefix="mcp-bench-virtual-"))
    started = []
    try:
        http_port = free_port()
        started.append(Target("demo-http", [str(PROXY), "demo-server", "--http",
                                            f"127.0.0.1:{http_port}"], http_port))
        demo = f"{PROXY} demo-server"
        members = ["demo", "remote"]
        servers = (f'[servers.demo.upstream]\nstdio = "{demo}"\n'
                   f'[servers.remote.upstream]\nhttp = "http://127.0.0.1:{http_port}/mcp"\n')
        if EVERYTHING.exists() and shutil.which("node"):
            servers += f'[servers.everything.upstream]\nstdio = "node {EVERYTHING} stdio"\n'
            members.insert(1, "everything")
        config = folder / "virtual.toml"
        # Sessions opened for the openings go idle at once: let them go soon, though not before
        # a calls run has opened all of its own (a three-member session takes the slowest
        # member's start, about a third of a second).
        config.write_text('[session]\nidle_ttl = "20s"\n' + servers
                          + '[virtual.one]\nservers = ["demo"]\n'
                          + f'[virtual.three]\nservers = {json.dumps(members)}\n')
        port = free_port()
        proxy = Target("virtual", [str(PROXY), "--listen", f"127.0.0.1:{port}", "--config", str(config)],
                       port, env={"RUST_LOG": "warn"})
        started.append(proxy)
        base = f"http://127.0.0.1:{port}"
        calls_seen = {(name, s): [] for name, _, _ in CALL_PATHS for s in LEVELS}
        opening_paths = [(m, f"/servers/{m}/mcp") for m in members] + [("three members", "/servers/three/mcp")]
        openings = {name: [] for name, _ in opening_paths}
        for round_ in range(rounds):
            order = CALL_PATHS[round_ % len(CALL_PATHS):] + CALL_PATHS[:round_ % len(CALL_PATHS)]
            for sessions in LEVELS:
                for name, path, tool in order:
                    # The proxy's CPU from the sessions' opening to the last answer: a
                    # three-member session's opening starts three children, not a call's cost.
                    r = bench("calls", "--url", base + path, "--sessions", sessions,
                              "--calls", max(calls // sessions, 50), "--warmup", 20, "--tool", tool,
                              "--cpu-pid", proxy.process.pid)
                    calls_seen[(name, sessions)].append(r)
            for name, path in opening_paths:
                r = bench("idle", "--url", base + path, "--sessions", opened)
                openings[name].append(r["seconds"] * 1000 / opened)
    finally:
        for target in started:
            target.stop()
        shutil.rmtree(folder, ignore_errors=True)
    figures = medians(calls_seen, ("p50_us", "p99_us", "throughput_rps", "cpu_us_per_call"))
    return {"calls": figures, "openings": {name: median(ms) for name, ms in openings.items()},
            "instructions": measure_instructions()}


def callgrind(out):
    """The command line prefix that runs a program under callgrind, its counts written to `out`
    when it exits."""
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def stop_counted(target):
    """A graceful stop of a program under callgrind, so that it writes its counts."""
    if target.process.poll() is None:
        target.process.send_signal(signal.SIGTERM)
    target.process.wait(300)


def instructions_in(out):
    """The instructions a callgrind output file counted (user space, every thread)."""
    return int(re.search(r"^summary: (\d+)", Path(out).read_text(), re.M).group(1))


def measure_instructions(sessions=8, few=50, many=250):
    """User-space instructions per call of the proxy, by path (`None` without valgrind)."""
    if not shutil.which("valgrind"):
        return None
    folder = Path(tempfile.mkdtemp(prefix="mcp-bench-instructions-"))
    config = folder / "virtual.toml"
    config.write_text(f'[servers.demo.upstream]\nstdio = "{PROXY} demo-server"\n'
                      '[virtual.one]\nservers = ["demo"]\n')

    def counted(path, tool, calls):
        port, out = free_port(), folder / f"callgrind-{calls}.out"
        proxy = Target("callgrind", [*callgrind(out), str(PROXY), "--listen", f"127.0.0.1:{port}",
                                     "--config", str(config)], port, env={"RUST_LOG": "warn"})
        try:
            bench("calls", "--url", f"http://127.0.0.1:{port}{path}", "--sessions", sessions,
                  "--calls", calls, "--warmup", 0, "--tool", tool)
        finally:
            stop_counted(proxy)
        return instructions_in(out)

    try:
        return {name: (counted(path, tool, many) - counted(path, tool, few)) / (sessions * (many - few))
                for name, path, tool in CALL_PATHS[:2]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def virtual_table(figures, rounds=7):
    calls, openings = figures["calls"], figures["openings"]
    lines = ["### A virtual server's cost", "",
             "`tools/call` echo on the demo (stdio) through one proxy: at the demo's own path, through a",
             "virtual server whose only member it is, and through one of three members (the demo,",
             "server-everything over stdio, the demo over HTTP). All three paths of one proxy, "
             f"{rounds} interleaved",
             "rounds, medians; CPU µs/call is the proxy's own (its children apart), from the sessions'",
             "opening to the last answer (opening and ending sessions apart). Target: the virtual",
             f"server within {TARGET_RATIO}× the member's own path.", "",
             "| path | sessions | p50 µs | p99 µs | req/s | CPU µs/call | p50 ÷ own path | CPU ÷ own path |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    own = CALL_PATHS[0][0]
    for sessions in LEVELS:
        base = calls[(own, sessions)]
        for name, _, _ in CALL_PATHS:
            f = calls[(name, sessions)]
            ratios = "| | " if name == own else (
                f"| {f['p50_us'] / base['p50_us']:.2f} | {f['cpu_us_per_call'] / base['cpu_us_per_call']:.2f} ")
            lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} "
                         f"| {f['throughput_rps']:.0f} | {f['cpu_us_per_call']:.0f} {ratios}|")
    slowest = max(v for k, v in openings.items() if k != "three members")
    lines += ["", "Opening a session (initialize, then notifications/initialized; `mcp-bench idle`, one at a",
              "time, medians of the rounds' means): each member at its own path, and the virtual server of",
              "all three, which opens its members at once.", "",
              "| path | ms per session | ÷ slowest member |", "|---|---:|---:|"]
    for name, ms in openings.items():
        lines.append(f"| {name} | {ms:.1f} | {ms / slowest:.2f} |")
    instructions = figures.get("instructions")
    if instructions:
        own = instructions[CALL_PATHS[0][0]]
        lines += ["", "The proxy's own instructions per call (callgrind, user space: the same on every run, where",
                  "CPU time on this machine moves by several per cent between runs), 8 sessions, the",
                  "difference between runs of 250 and of 50 calls per session:", "",
                  "| path | instructions per call | ÷ own path |", "|---|---:|---:|"]
        for name, count in instructions.items():
            lines.append(f"| {name} | {count:,.0f} | {count / own:.3f} |")
    return lines + [""]


def virtual_json(figures):
    return {"calls": {f"{name} / {sessions}": f for (name, sessions), f in figures["calls"].items()},
            "openings": figures["openings"], "instructions": figures.get("instructions")}


if __name__ == "__main__":
    print("\n".join(virtual_table(measure_virtual(400, rounds=1), rounds=1)))
