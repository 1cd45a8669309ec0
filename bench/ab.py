#!/usr/bin/env python3
"""Two (or more) builds of the proxy side by side: each up at once in front of the same kind of
server, measured in interleaved rounds (so drift of the machine hits them alike), medians.

Usage: bench/ab.py BIN[+ARGS][,BIN[+ARGS]...] [--sessions 1,8,32] [--rounds 5] [--http [--anchors]]
                   [--demo BIN] [--otlp-sink] [-- ARGS]

Each BIN serves the demo over stdio (a child of its own per BIN; `--demo` picks the binary that
runs `demo-server`, to tell the proxy's side from the child's), or with `--http` one demo over
HTTP that every BIN fronts; `--anchors` measures beside them, in the same rounds, the demo
called directly, the TCP relay, and nginx as an HTTP reverse proxy with its access log off and
on (bench/anchors.py), and gives each BIN's CPU per call and added p50 over direct as ratios to
nginx's (against nginx with its access log for a BIN that logs at info). ARGS go to every BIN (e.g. `-- --isolation shared`); `BIN+ARGS`
gives one BIN more of its own, so one build can be measured with and without an option; a
`NAME=value` among them is that BIN's environment instead (every BIN runs with RUST_LOG=warn
and its logs going to /dev/null unless told otherwise: `BIN,BIN+RUST_LOG=info` measures what
the access lines cost, and a BIN in double quotes may hold commas:
`'BIN,"BIN+RUST_LOG=info,access=off"'`; `--logs DIR` appends each BIN's logs to a file there instead, as a log
collector would take them).
`--otlp-sink` runs an OTLP/HTTP collector that takes every export and keeps nothing: `{otlp}`
in ARGS names it (`BIN,BIN+--otlp-endpoint={otlp}` measures what tracing costs).
`--auth-server` runs the tests' OAuth authorization server (oidc-provider, tests/node): every
call carries one access token for the audience `{audience}`, and `{issuer}` in ARGS names the
issuer (`BIN,BIN+--auth-issuer={issuer} --auth-audience={audience}` measures what verifying
tokens costs; the token is the same throughout, as a client reuses it until it expires).
"""

import argparse
import base64
import json
import re
import shlex
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from processes import PROXY, ROOT, Target, bench, free_port  # noqa: E402
import anchors  # noqa: E402

AUDIENCE = "http://bench.example/mcp"


class Sink(BaseHTTPRequestHandler):
    """Takes an OTLP/HTTP export and answers 200 with an empty ExportTraceServiceResponse."""
    exports = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Sink.exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def start_sink():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def start_auth_server():
    """The tests' authorization server and a one-hour token for AUDIENCE: (process, issuer, token)."""
    node_dir = ROOT / "tests" / "node"
    process = subprocess.Popen([str(node_dir / "node_modules/.bin/node"), "auth_server.mjs"],
                               cwd=node_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    issuer = json.loads(process.stdout.readline())["issuer"]
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "resource": AUDIENCE,
                                   "scope": "mcp:tools", "ttl": "3600"}).encode()
    request = urllib.request.Request(f"{issuer}/token", data=form, headers={
        "Authorization": "Basic " + base64.b64encode(b"alice:alice-secret").decode(),
        "Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        token = json.load(answer)["access_token"]
    return process, issuer, token


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bins")
    parser.add_argument("--sessions", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--anchors", action="store_true",
                        help="with --http: direct, the TCP relay and nginx measured beside")
    parser.add_argument("--demo", default=None, help="the binary that runs demo-server")
    parser.add_argument("--otlp-sink", action="store_true", help="a collector for {otlp} in ARGS")
    parser.add_argument("--auth-server", action="store_true",
                        help="an authorization server for {issuer} and {audience} in ARGS")
    parser.add_argument("--logs", type=Path, default=None,
                        help="a folder each BIN's logs are written to (BIN's position.log)")
    parser.add_argument("args", nargs="*")
    options = parser.parse_intermixed_args()
    otlp = start_sink() if options.otlp_sink else ""
    auth, issuer, authorization = None, "", []
    if options.auth_server:
        auth, issuer, token = start_auth_server()
        authorization = ["--authorization", f"Bearer {token}"]
    names = {"otlp": otlp, "issuer": issuer, "audience": AUDIENCE}
    # Commas part the BINs, except inside quotes: '"BIN+RUST_LOG=info,access=off"'.
    splitter = shlex.shlex(options.bins, posix=True)
    splitter.whitespace, splitter.whitespace_split = ",", True
    bins = list(splitter)
    levels = [int(level) for level in options.sessions.split(",")]
    demo_bin = options.demo or str(PROXY)
    started, targets = [], []
    try:
        if options.http:
            port = free_port()
            demo = Target("demo", [demo_bin, "demo-server", "--http", f"127.0.0.1:{port}"], port)
            started.append(demo)
        if options.logs:
            options.logs.mkdir(parents=True, exist_ok=True)
        for position, build in enumerate(bins):
            binary, _, own = build.partition("+")
            own_args, env = [], {"RUST_LOG": "warn"}
            for arg in shlex.split(own):
                name, is_env, value = arg.partition("=")
                if is_env and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
                    env[name] = value
                else:
                    own_args.append(arg.format(**names))
            port = free_port()
            upstream = (["--http", demo.url] if options.http
                        else ["--stdio", f"{shlex.quote(options.demo or binary)} demo-server"])
            args = [arg.format(**names) for arg in options.args]
            target = Target("ab", [binary, "--listen", f"127.0.0.1:{port}", *upstream, *args, *own_args],
                            port, env=env,
                            stderr=options.logs / f"{position}.log" if options.logs else None)
            started.append(target)
            targets.append((build, target))
        if options.anchors:
            if not options.http:
                sys.exit("--anchors needs --http")
            server = f"127.0.0.1:{demo.port}"
            started.extend(anchor for anchor in (
                anchors.relay(free_port(), server), anchors.nginx(free_port(), server),
                anchors.nginx(free_port(), server, access_log=True)))
            targets[:0] = [("direct", demo), (anchors.RELAY, started[-3]),
                           (anchors.NGINX, started[-2]), (anchors.NGINX_LOGGED, started[-1])]
        samples = {(binary, level): [] for binary, _ in targets for level in levels}
        for _ in range(options.rounds):
            for level in levels:
                for binary, target in targets:
                    cpu = target.cpu_seconds()
                    r = bench("calls", "--url", target.url, "--sessions", level,
                              "--calls", max(options.calls // level, 20), "--warmup", 20,
                              *authorization)
                    r["cpu_us_per_call"] = (target.cpu_seconds() - cpu) * 1e6 / (r["calls"] + 20 * level)
                    samples[(binary, level)].append(r)
        print("| build | sessions | req/s | p50 µs | p99 µs | proxy CPU µs/call |")
        print("|---|---:|---:|---:|---:|---:|")
        for level in levels:
            for binary, _ in targets:
                runs = samples[(binary, level)]
                median = lambda key: sorted(r[key] for r in runs)[len(runs) // 2]
                print(f"| {binary} | {level} | {median('throughput_rps'):.0f} | {median('p50_us'):.0f} "
                      f"| {median('p99_us'):.0f} | {median('cpu_us_per_call'):.0f} |")
        if options.anchors:
            print_ratios(samples, [b for b, _ in targets[4:]], levels)
        if options.otlp_sink:
            print(f"\nThe OTLP sink took {Sink.exports} exports.")
    finally:
        for target in reversed(started):
            target.stop()
        if auth is not None:
            auth.kill()
            auth.wait()


def print_ratios(samples, bins, levels):
    """Each BIN against nginx: CPU per call and added p50 over direct (against nginx with its
    access log for a BIN run with RUST_LOG=info)."""
    def median(key, field):
        runs = samples[key]
        return sorted(r[field] for r in runs)[len(runs) // 2]
    print("\n| build | sessions | against | CPU ÷ nginx's | added p50 ÷ nginx's | CPU ÷ relay's |")
    print("|---|---:|---|---:|---:|---:|")
    for level in levels:
        direct = median(("direct", level), "p50_us")
        for binary in bins:
            logs = "RUST_LOG=info" in binary
            nginx = anchors.NGINX_LOGGED if logs else anchors.NGINX
            cpu = median((binary, level), "cpu_us_per_call")
            added = median((binary, level), "p50_us") - direct
            nginx_added = median((nginx, level), "p50_us") - direct
            # Under load nginx's p50 may come out below direct's: no ratio then.
            added_ratio = f"{added / nginx_added:.2f}" if nginx_added > 10 else "–"
            print(f"| {binary} | {level} | {'nginx, access log' if logs else 'nginx'} "
                  f"| {cpu / median((nginx, level), 'cpu_us_per_call'):.2f} "
                  f"| {added_ratio} "
                  f"| {cpu / median((anchors.RELAY, level), 'cpu_us_per_call'):.2f} |")


if __name__ == "__main__":
    main()
