"""The balancers the project ships a configuration for (config/nginx.conf, config/haproxy.cfg),
rendered for replicas on loopback ports as tests/it/harness/balancer.rs renders them. Only the
standard library: bench/run.py and bench/chaos.py both use it."""

from __future__ import annotations

import os
import re
import shutil

BALANCER_CONFIGS = {"nginx": "config/nginx.conf", "haproxy": "config/haproxy.cfg"}
NGINX_TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def find_balancer(kind: str) -> str:
    """The nginx or haproxy program (Debian puts them in /usr/sbin, off a user's PATH)."""
    program = shutil.which(kind) or next(
        (p for p in (f"/usr/sbin/{kind}", f"/usr/local/sbin/{kind}") if os.path.isfile(p)), None)
    if program is None:
        raise RuntimeError(f"{kind} is not installed: run scripts/test (it installs nginx "
                           "and haproxy) or apt-get install nginx haproxy")
    return program


def render_balancer_config(kind: str, text: str, listen: str, replicas: list[str],
                           run_dir: str, names: list[str] | None = None) -> str:
    """A shipped balancer configuration for replicas on loopback, rendered as
    tests/it/harness/balancer.rs does: the lines between `# replicas` and `# end replicas`
    become one copy of their first line per replica (its address changed, replica-1 numbered
    on, or renamed after `names`), those between `# listen` and `# end listen` their first line on
    `listen` (with what followed its address: `ssl`, `crt …`), and nginx's paths (under
    /var/log/nginx/, /var/lib/nginx/, /run/, and its temporary files) move to `run_dir`, the
    certificates' (under /etc/mcp-session-proxy/tls/) to `run_dir`/tls."""
    address = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d+")
    out, block, first = [], None, None
    for line in text.splitlines():
        mark = line.strip()
        if block is None and mark in ("# replicas", "# listen"):
            block, first = mark[2:], None
            out.append(line)
        elif block is not None and mark == f"# end {block}":
            if first is None:
                raise ValueError(f"no line between '# {block}' and '# end {block}'")
            if block == "replicas":
                for n, replica in enumerate(replicas, 1):
                    name = names[n - 1] if names else f"replica-{n}"
                    out.append(address.sub(replica, first, count=1).replace("replica-1", name))
            else:
                indent = first[:len(first) - len(first.lstrip())]
                directive, bound, *rest = first.split()
                if rest:
                    rendered = f"{indent}{directive} {listen} {' '.join(rest)}"
                else:
                    rendered = f"{indent}{directive} {listen}{';' if bound.endswith(';') else ''}"
                out.append(moved(rendered, run_dir))
            out.append(line)
            block = None
        elif block is not None:
            if first is None and mark and not mark.startswith("#"):
                first = line
        else:
            out.append(moved(line, run_dir))
            if kind == "nginx" and mark == "http {":
                out.extend(f"    {t}_temp_path {run_dir}/{t};" for t in NGINX_TEMP_PATHS)
    if block is not None:
        raise ValueError(f"'# {block}' without '# end {block}'")
    return "\n".join(out) + "\n"


def moved(line: str, run_dir: str) -> str:
    """`line` with nginx's paths and /run/ in `run_dir`, and the certificates' in its tls/."""
    for prefix in (" /var/log/nginx/", " /var/lib/nginx/", " /run/"):
        line = line.replace(prefix, f" {run_dir}/")
    return line.replace(" /etc/mcp-session-proxy/tls/", f" {run_dir}/tls/")
