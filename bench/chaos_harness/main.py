"""The command line: the chaos run or a measurement, its report and its logs."""

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
from .session import *  # noqa: F401,F403
from .worker_wire import *  # noqa: F401,F403
from .worker_streams import *  # noqa: F401,F403
from .worker import *  # noqa: F401,F403
from .run import *  # noqa: F401,F403
from .caller import *  # noqa: F401,F403
from .measure import *  # noqa: F401,F403


class Logs:
    """The replicas' JSON logs, read after the run: who owned a session when, node ids."""

    def __init__(self, cluster: Cluster):
        self.lines = []  # (timestamp, file, replica index, record)
        self.nodes = {}  # node id -> "replica-<i>.start-<k>"
        for path in cluster.logs:
            name = os.path.basename(path)
            m = re.match(r"replica-(\d+)\.start-(\d+)\.log", name)
            if not m:
                continue
            try:
                with open(path, errors="replace") as f:
                    for line in f:
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        fields = rec.get("fields") or {}
                        if "node" in fields and "joined" in str(fields.get("message")):
                            self.nodes[fields["node"]] = name[:-4]
                        self.lines.append((rec.get("timestamp", ""), name[:-4], int(m.group(1)),
                                           rec))
            except OSError:
                continue
        self.lines.sort(key=lambda x: x[0])

    @staticmethod
    def session_of(rec) -> str | None:
        for span in rec.get("spans") or []:
            if span.get("name") == "session":
                return span.get("id")
        return (rec.get("span") or {}).get("id")

    def owner_at(self, session: str, at: str):
        """The replica that created or last took over `session` before `at`."""
        owner = None
        for ts, name, index, rec in self.lines:
            if ts > at:
                break
            msg = (rec.get("fields") or {}).get("message")
            if msg in ("session created", "session taken over") and \
                    self.session_of(rec) == session:
                owner = (index, name)
        return owner

    def about(self, session: str, limit: int = 8) -> list[str]:
        out = []
        for ts, name, index, rec in self.lines:
            if session in json.dumps(rec):
                fields = dict(rec.get("fields") or {})
                msg = fields.pop("message", "")
                if "from" in fields and fields["from"] in self.nodes:
                    fields["from"] = f"{fields['from']} ({self.nodes[fields['from']]})"
                extra = " ".join(f"{k}={v}" for k, v in fields.items())
                out.append(f"{ts[11:23]} {name} {rec.get('level', '')} {msg} {extra}".strip())
        return out[-limit:]


def main() -> int:
    p = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.split("\n\n")[0])
    p.add_argument("--proxy", required=True, help="mcp-session-proxy binary")
    p.add_argument("--bench", help="mcp-bench binary (the chaos run's load bursts)")
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--clients", type=int, default=None,
                   help="default: 6 for the chaos run, 8 for a measurement")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--sentinel", action="store_true",
                   help="Redis with a replica and three Sentinels (redis+sentinel://)")
    p.add_argument("--redis-cluster", action="store_true",
                   help="a Redis Cluster of three masters with a replica each (redis+cluster://)")
    p.add_argument("--no-kills", dest="kills", action="store_false")
    p.add_argument("--no-cuts", dest="cuts", action="store_false")
    p.add_argument("--no-bursts", dest="bursts", action="store_false")
    p.add_argument("--kill-every", type=float, default=10.0, help="seconds, jittered ±30%%")
    p.add_argument("--burst-calls", type=int, default=400, help="calls per burst session")
    p.add_argument("--quiet", type=float, default=6.0, help="seconds between the faults' end "
                   "and the final checks (takeovers finish: owner_timeout is 3 s)")
    p.add_argument("--allow-live-coalescing", action="store_true",
                   help="rule (i): excuse an update coalesced into a later one of its URI on an "
                   "attached stream (proxies before 'an attached reader is sent every message')")
    p.add_argument("--log-dir", default=None, help="default: a new temporary folder")
    p.add_argument("--report", default=None, help="also write the JSON report here")
    p.add_argument("--through", choices=sorted(BALANCER_CONFIGS), default=None,
                   help="clients reach the replicas through this balancer, running the shipped "
                   "config/nginx.conf or config/haproxy.cfg, or their owner-aware forms "
                   "config/nginx-owner.conf and config/haproxy-owner.cfg (or --balancer-config)")
    p.add_argument("--balancer-config", default=None, help="another configuration for "
                   "--through, with the same '# replicas' and '# listen' blocks")
    m = p.add_argument_group("measurements (instead of the chaos run: counted, not judged)")
    m.add_argument("--kill-owner", action="store_true",
                   help="kill -9 the replica owning a random client's session, start it again "
                   "after --down s; --rounds times")
    m.add_argument("--rolling-restart", action="store_true",
                   help="SIGTERM each replica in turn and start it again once it exited")
    m.add_argument("--kill-redis-master", action="store_true",
                   help="kill -9 of the Redis master (with --sentinel or --redis-cluster), "
                   "--rounds times")
    m.add_argument("--rounds", type=int, default=5,
                   help="kills of --kill-owner or --kill-redis-master")
    m.add_argument("--passes", type=int, default=1,
                   help="times --rolling-restart restarts every replica in turn")
    m.add_argument("--down", type=float, default=1.0,
                   help="seconds a killed replica stays down (owner_timeout is 3 s)")
    m.add_argument("--warmup", type=float, default=3.0, help="seconds before the first fault")
    m.add_argument("--settle", type=float, default=2.0,
                   help="seconds after the affected sessions recovered, before the next fault")
    m.add_argument("--max-failed", type=int, default=None,
                   help="exit 1 when more calls than this failed")
    m.add_argument("--max-failed-not-in-flight", type=int, default=None,
                   help="exit 1 when more calls than this failed that were not under way when "
                   "a replica was killed (sent before it was gone, answered after the kill)")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    measuring = args.kill_owner or args.rolling_restart or args.kill_redis_master
    if args.kill_owner + args.rolling_restart + args.kill_redis_master > 1:
        p.error("one measurement at a time: --kill-owner, --rolling-restart or "
                "--kill-redis-master")
    if args.kill_redis_master and not (args.sentinel or args.redis_cluster):
        p.error("--kill-redis-master needs --sentinel or --redis-cluster (a replica to promote)")
    if args.sentinel and args.redis_cluster:
        p.error("--sentinel or --redis-cluster, not both")
    if args.clients is None:
        args.clients = 8 if measuring else 6
    if measuring:
        return measure_main(args)
    if args.bursts and not args.bench:
        p.error("--bench is needed for the load bursts (or --no-bursts)")
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="mcp-chaos-")
    os.makedirs(log_dir, exist_ok=True)
    cluster = Cluster(args, log_dir)
    balancer = Balancer(args.through, args.balancer_config, cluster) if args.through else None
    run = Run(args, cluster, balancer)
    error = None

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main_task = loop.create_task(run.main())
    interrupted = []

    def on_signal(signame):
        interrupted.append(signame)
        main_task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        error = f"interrupted by {interrupted[0] if interrupted else 'cancellation'}"
    except Exception as e:  # reported, then the exit status says so
        error = f"{type(e).__name__}: {e}"
    finally:
        if balancer is not None:
            balancer.stop()
        cluster.stop_all()
        run.stop_bench()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    counts = STATS.counts
    failures = {name: counts.get(name, 0) for name in FAILURES}
    info_names = ["lost_updates_live", "lost_updates_live_not_superseded",
                  "lost_updates_final", "kills", "bursts", "burst_requests", "burst_errors", "burst_timed_out",
                  "unavailable_503", "interrupted", "state_resets", "takeovers_seen",
                  "sessions_opened", "sessions_lost", "deletes", "progress_calls",
                  "progress_cuts", "progress_resumes", "progress_on_get_stream", "counter_calls",
                  "emit_calls_ok", "updates_received", "untagged_updates", "live_checks",
                  "live_checks_skipped", "live_coalesced", "live_excused_by_gap", "final_checks",
                  "final_excused_by_gap", "get_attachments", "get_cuts", "get_broken",
                  "connection_refused", "connection_lost", "unknown_outcome",
                  "other_notifications"]
    info = {name: counts.get(name, 0) for name in info_names}
    examples = {}
    logs = Logs(cluster)
    for name, items in STATS.examples.items():
        if name not in FAILURES and name != "lost_updates_live_not_superseded":
            continue
        enriched = []
        for j, ex in enumerate(items):
            ex = dict(ex)
            if ex.get("session"):
                owner = logs.owner_at(ex["session"], ex["at"])
                ex["owner_then"] = owner[1] if owner else None
                if j < 3:
                    ex["log_lines"] = logs.about(ex["session"])
            if j >= 5:  # the rest in short
                ex = {k: ex.get(k) for k in ("at", "session", "replica", "get_replica",
                                             "owner_then", "what", "tag", "index", "uri",
                                             "received_live", "received_later",
                                             "session_age_s", "probe") if k in ex}
            enriched.append(ex)
        examples[name] = enriched
    live_split = {}
    for kind, records in STATS.live_records.items():
        tally = Counter()
        for session, replica, at in records:
            owner = logs.owner_at(session, at)
            tally["unknown" if owner is None else
                  ("on_owner" if owner[0] == replica else "on_other_replica")] += 1
        live_split[f"live_{kind}"] = dict(tally)
    # A run that exercised nothing proves nothing: each check must have had something to check.
    unexercised = [what for what, missing in [
        ("no replica was killed", args.kills and info["kills"] < 1),
        ("no live update check was made (all skipped)", info["live_checks"] < 1),
        ("no progress call was made", info["progress_calls"] < 1),
        ("no update was observed", info["updates_received"] < 1),
    ] if missing]
    ok = error is None and not any(failures.values()) and not unexercised
    report = {
        "ok": ok,
        "error": error,
        "unexercised": unexercised,
        "seed": args.seed,
        "seconds": args.seconds,
        "replicas": args.replicas,
        "clients": args.clients,
        "faults": {"kills": args.kills, "cuts": args.cuts, "bursts": args.bursts},
        "through": args.through,
        "allow_live_coalescing": args.allow_live_coalescing,
        "proxy": args.proxy,
        "log_dir": log_dir,
        "replica_logs": cluster.logs,
        "failures": failures,
        "reported": info,
        "live_by_get_stream_replica": live_split,
        "other_notifications_by_method": dict(STATS.methods),
        "get_broken_by": dict(STATS.broken),
        "nodes": logs.nodes,
        "examples": examples,
        "rules": RULES,
    }
    text = json.dumps(report, indent=2, default=str)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    print(text)
    summary = ", ".join(f"{k}={v}" for k, v in failures.items())
    print(f"\nchaos seed={args.seed} {args.seconds:g}s replicas={args.replicas} "
          f"clients={args.clients} kills={info['kills']} bursts={info['bursts']} "
          f"({info['burst_requests']} requests) 503s={info['unavailable_503']} "
          f"interrupted={info['interrupted']} state_resets={info['state_resets']} "
          f"takeovers_seen={info['takeovers_seen']}", file=sys.stderr)
    print(f"failures: {summary}", file=sys.stderr)
    for what in unexercised:
        print(f"not exercised: {what}", file=sys.stderr)
    print(f"{'PASS' if ok else 'FAIL'}{' (' + error + ')' if error else ''}; logs in {log_dir}",
          file=sys.stderr)
    return 0 if ok else 1
