"""What `bench/run.py` measures: the servers, the proxies and the peers in front of them, each
started its way."""

import argparse
import base64
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tls_cost import measure_tls, tls_json, tls_table  # noqa: E402
from virtual_cost import measure_virtual, virtual_json, virtual_table  # noqa: E402
import anchors  # noqa: E402
from processes import (  # noqa: E402
    BENCH, CLUSTER_SECRET, PROXY, RELEASE, ROOT, Target, bench, cpu_of, descendants, ensure_redis, free_port, log, medians, rss_of, run, start_redis, wait_for_port)


NODE_TESTS = ROOT / "tests" / "node"
NODE_BENCH = ROOT / "bench" / "node"
LOOPBACK = NODE_TESTS / "loopback.cjs"
EVERYTHING = NODE_TESTS / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CRATES_ROOT = ROOT / "bench" / ".cargo"
CRATES_PROXY = CRATES_ROOT / "bin" / "mcp-proxy"
# Concurrency levels of the latency and throughput tables (`--sessions`: 1,16,64,256 on a
# many-core machine). The first is the single-session latency, the last the one the plot shows.
CONCURRENCY = [1, 8, 32]
# A do-nothing TCP relay between the load generator and the HTTP server: the least any
# user-space hop adds on this machine.
RELAY = "TCP relay (floor of any hop)"
# Interleaved rounds of the latency and throughput tables.
ROUNDS = 3
# nginx as an HTTP reverse proxy (one process, keep-alive to the server): what an HTTP endpoint
# on both sides costs when it does nothing else.
NGINX = anchors.NGINX
HOPS = ["mcp-session-proxy (HTTP)", "mcp-session-proxy (HTTP, 1 worker)", NGINX, RELAY]


CONTEXTFORGE = "ContextForge 1.1.0 (translate)"
# Why ContextForge is not in this run, when it is not.
CONTEXTFORGE_MISSING = []


def contextforge_python():
    """The python of bench/.contextforge (bench/contextforge.sh installs it), or None."""
    python = ROOT / "bench" / ".contextforge" / "venv" / "bin" / "python"
    return python if python.exists() else None


# The parts of a run (`--sections`), in the order they are run.
SECTIONS = ["tables", "idle", "log", "replicas", "cut", "eras", "bridge", "balanced", "owner", "fleet",
            "tls", "virtual"]
# Whether the Node peers and server-everything are in this run (`--without-node`).
WITH_NODE = [True]


def prepare(with_crates, with_contextforge=True, build=True):
    if not build:
        for binary in (PROXY, BENCH):
            if not binary.exists():
                sys.exit(f"{binary} is missing: build it (cargo build --release) or leave out --no-build")
        if not with_contextforge:
            CONTEXTFORGE_MISSING.append("left out with --without-contextforge")
        elif not contextforge_python():
            CONTEXTFORGE_MISSING.append("not installed (bench/contextforge.sh) and left out with --no-build")
        return
    run(["cargo", "build", "--release", "--bins"], cwd=ROOT)
    if with_contextforge:
        try:
            run([str(ROOT / "bench" / "contextforge.sh")], stdout=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            CONTEXTFORGE_MISSING.append(f"bench/contextforge.sh failed ({error}): it needs Python >= 3.12, "
                                        "taken from Debian 13's packages")
            log("ContextForge could not be installed; it is left out of this run")
    else:
        CONTEXTFORGE_MISSING.append("left out with --without-contextforge")
    if WITH_NODE[0]:
        run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_TESTS)
        run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_BENCH)
    if with_crates and not CRATES_PROXY.exists():
        try:
            run(["cargo", "install", "mcp-proxy", "--version", "0.6.0", "--locked",
                 "--no-default-features", "--root", str(CRATES_ROOT)])
        except subprocess.CalledProcessError:
            log("crates.io mcp-proxy 0.6.0 did not build; it is left out of this run")


def upstreams():
    """The upstreams every proxy fronts: (name, stdio command, tool, arguments, direct-HTTP launcher)."""
    demo = [str(PROXY), "demo-server"]
    everything = ["node", str(EVERYTHING), "stdio"]

    def direct_demo(port):
        return Target("direct", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{port}"], port)

    def direct_everything(port):
        return Target("direct", ["node", "--require", str(LOOPBACK), str(EVERYTHING), "streamableHttp"],
                      port, env={"PORT": str(port)})

    return [
        ("demo", demo, "echo", {"text": "hello"}, direct_demo),
        ("server-everything", everything, "echo", {"message": "hello"}, direct_everything),
    ][:2 if WITH_NODE[0] else 1]


def targets_for(stdio, direct_url, with_crates):
    """Every proxy in front of the same server: (name, launcher, tool prefix)."""
    quoted = " ".join(shlex.quote(part) for part in stdio)
    mcp_proxy_npm = NODE_BENCH / "node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs"
    supergateway = NODE_BENCH / "node_modules/supergateway/dist/index.js"
    launchers = [
        ("mcp-session-proxy (stdio)", lambda p: Target(
            "ours", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--stdio", quoted, "--warm", "2"], p,
            env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (stdio, shared)", lambda p: Target(
            "ours-shared", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--stdio", quoted,
                            "--isolation", "shared"], p, env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (HTTP)", lambda p: Target(
            "ours-http", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--http", direct_url], p,
            env={"RUST_LOG": "warn"}), ""),
        ("mcp-session-proxy (HTTP, 1 worker)", lambda p: Target(
            "ours-http-1", [str(PROXY), "--listen", f"127.0.0.1:{p}", "--http", direct_url,
                            "--workers", "1"], p, env={"RUST_LOG": "warn"}), ""),
        (RELAY, lambda p: Target(
            "relay", [str(BENCH), "relay", "--listen", f"127.0.0.1:{p}",
                      "--to", direct_url.split("/")[2]], p), ""),
    ]
    if anchors.nginx_installed():
        launchers.insert(-1, (NGINX, lambda p: anchors.nginx(p, direct_url.split("/")[2]), ""))
    else:
        log("nginx is not installed: the HTTP tables go without it (scripts/test installs it)")
    node_peers = [
        ("supergateway 4.0.0", lambda p: Target(
            "supergateway", ["node", "--require", str(LOOPBACK), str(supergateway), "--stdio", quoted,
                             "--outputTransport", "streamableHttp", "--stateful", "--port", str(p),
                             "--logLevel", "none"], p), ""),
        ("npm mcp-proxy 6.7.19", lambda p: Target(
            "mcp-proxy-npm", ["node", str(mcp_proxy_npm), "--host", "127.0.0.1", "--port", str(p),
                              "--server", "stream", "--", *stdio], p), ""),
    ]
    if WITH_NODE[0]:
        launchers += node_peers
    if contextforge_python() and not CONTEXTFORGE_MISSING:
        launchers.append((CONTEXTFORGE, lambda p: contextforge(p, quoted), ""))
    if with_crates and CRATES_PROXY.exists():
        def crates(p):
            config = ROOT / "target" / f"bench-crates-{p}.toml"
            config.write_text(
                f'[proxy]\nname = "bench"\nseparator = "/"\n[proxy.listen]\nhost = "127.0.0.1"\nport = {p}\n'
                f'[[backends]]\nname = "up"\ntransport = "stdio"\ncommand = {json.dumps(stdio[0])}\n'
                f'args = {json.dumps(stdio[1:])}\n')
            return Target("mcp-proxy-crates", [str(CRATES_PROXY), "--config", str(config)], p, path="/",
                          env={"RUST_LOG": "warn"})
        launchers.append(("crates.io mcp-proxy 0.6.0", crates, "up/"))
    return launchers


def contextforge(port, command):
    """ContextForge's stdio → Streamable HTTP bridge in front of `command` (one child for every
    client; it keeps no sessions). Its settings, which it checks even for the bridge, want
    secrets: throwaway ones."""
    secret = lambda: base64.b64encode(os.urandom(48)).decode().translate(str.maketrans("", "", "+/="))
    return Target("contextforge", [str(contextforge_python()), "-m", "mcpgateway.translate", "--stdio", command,
                                   "--expose-streamable-http", "--host", "127.0.0.1", "--port", str(port),
                                   "--logLevel", "warning"], port,
                  env={"JWT_SECRET_KEY": secret(), "AUTH_ENCRYPTION_SECRET": secret(), "EMAIL_AUTH_ENABLED": "false"})
