#!/usr/bin/env python3
"""Chaos run: replicas of mcp-session-proxy sharing one redis-server, in front of the bundled
demo server, with clients that check the proxy's promises while replicas are killed and
restarted, client streams are cut and load bursts come and go.

    bench/chaos.py --proxy target/release/mcp-session-proxy --bench target/release/mcp-bench \\
        --seconds 120 --seed 7 --report chaos.json

With --through nginx or --through haproxy the clients reach the replicas through that balancer,
running the shipped config/nginx.conf or config/haproxy.cfg (rendered for the loopback ports as
tests/it/harness/balancer.rs does), instead of each request going to a random replica. A
request in flight on a killed replica then comes back from the balancer as a 502 (a server error
here) or a closed connection: the balancers rightly send no POST that reached a replica again.

Measurements instead of the chaos run, counted rather than judged (exit status 0 unless the run
broke, or --max-failed or --max-failed-not-in-flight was passed and exceeded):

    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --through nginx --kill-owner
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --through haproxy --rolling-restart
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \\
        --sentinel --kill-redis-master
    tests/python/.venv/bin/python bench/chaos.py --proxy target/release/mcp-session-proxy \
        --redis-cluster --kill-redis-master

--kill-redis-master (with --sentinel: the Redis master has a replica and three Sentinels; with
--redis-cluster: a cluster of three masters with a replica each, made by redis-cli --cluster
create): kill -9 of the master (of the cluster: the master serving the slot of a random
client's session), --rounds times, the killed one back as the new master's replica each time;
every session is waited on, from the kill to its next successful call, and the report gives the
time the Sentinels or the cluster took to promote a replica and the Redis round trips per call.
--kill-owner: kill -9 of the replica owning a random client's session, started again after
--down seconds, --rounds times; --rolling-restart: SIGTERM to each replica in turn, started again
once it has exited (--passes times over all of them). Under --clients (8) clients, each with a
session calling tools one after another (counter, echo, progress over SSE), each call once: the report counts calls and failed
calls by error text, and the time from each kill or SIGTERM to the next successful call of each
session the replica owned (p50, p99, max). A failed call is "in flight at a kill" when it was
sent before the killed replica was reaped and answered after the SIGKILL; the others are counted
apart (--max-failed-not-in-flight bounds them). Replicas are named replica-<i> (kept across restarts),
so a session id tells its owner.

Everything it starts (redis-server, the replicas, the balancer, mcp-bench) listens on 127.0.0.1
only and is stopped by its own handle, also on an exception, Ctrl-C or SIGTERM; if this script
itself is killed, its children get SIGKILL from the kernel (PR_SET_PDEATHSIG). The report (JSON,
on stdout and in --report) names the folder holding each replica's log; the exit status is 1 when
a failure counter is non-zero. Only the standard library and httpx are used.
"""

import sys

from chaos_harness.main import main

if __name__ == "__main__":
    sys.exit(main())
