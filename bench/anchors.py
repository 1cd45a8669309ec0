"""The anchors an HTTP path is priced against, each a process of its own on 127.0.0.1: nginx as
an HTTP reverse proxy (one process, keep-alive to the server, responses passed as they come, its
access log off or on) and the do-nothing TCP relay (the floor of any user-space hop)."""

import tempfile
from pathlib import Path

from balancer import NGINX_TEMP_PATHS, find_balancer
from processes import BENCH, Target

NGINX = "nginx (HTTP reverse proxy)"
NGINX_LOGGED = "nginx (HTTP reverse proxy, access log)"
RELAY = "TCP relay (floor of any hop)"


def nginx_config(port: int, server: str, run_dir: str, access_log: bool) -> str:
    """One nginx process (no master, one worker's work) proxying every request to `server`
    (host:port) over kept-alive HTTP/1.1 connections, unbuffered as MCP's streams need; its
    access log in nginx's default format when `access_log`."""
    log = f"access_log {run_dir}/access.log;" if access_log else "access_log off;"
    temp = "\n".join(f"    {t}_temp_path {run_dir}/{t};" for t in NGINX_TEMP_PATHS)
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {run_dir}/nginx.pid;
error_log {run_dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
{temp}
    {log}
    upstream server {{
        server {server};
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port} reuseport;
        location / {{
            proxy_pass http://server;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1h;
        }}
    }}
}}
"""


def nginx_installed() -> bool:
    try:
        find_balancer("nginx")
        return True
    except RuntimeError:
        return False


def nginx(port: int, server: str, access_log: bool = False) -> Target:
    """nginx in front of `server` (host:port) on `port`, its files in a folder of its own."""
    run_dir = tempfile.mkdtemp(prefix="bench-nginx-")
    config = Path(run_dir) / "nginx.conf"
    config.write_text(nginx_config(port, server, run_dir, access_log))
    return Target("nginx", [find_balancer("nginx"), "-e", f"{run_dir}/error.log", "-c", str(config)], port)


def relay(port: int, server: str) -> Target:
    """The load generator's TCP relay in front of `server` (host:port) on `port`."""
    return Target("relay", [str(BENCH), "relay", "--listen", f"127.0.0.1:{port}", "--to", server], port)
