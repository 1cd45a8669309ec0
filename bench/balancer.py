"""The balancers the project ships a configuration for (config/nginx.conf, config/haproxy.cfg,
and their owner-aware forms config/nginx-owner.conf, config/haproxy-owner.cfg), rendered for
replicas on loopback ports as tests/it/harness/balancer.rs renders them. Only the
standard library: bench/run.py and bench/chaos.py both use it."""

from __future__ import annotations

import os
import re
import shutil

BALANCER_CONFIGS = {"nginx": "config/nginx.conf", "haproxy": "config/haproxy.cfg",
                    "nginx-owner": "config/nginx-owner.conf",
                    "haproxy-owner": "config/haproxy-owner.cfg"}
NGINX_TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
ADDRESS = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d+")


def program_of(kind: str) -> str:
    """The program a kind of BALANCER_CONFIGS runs: nginx-owner is nginx."""
    return kind.split("-")[0]


def find_balancer(kind: str) -> str:
    """The nginx or haproxy program (Debian puts them in /usr/sbin, off a user's PATH)."""
    kind = program_of(kind)
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
    on, or renamed after `names`: the replicas' --node-id); the first group between
    `# each replica` and `# end each replica` (up to the `}` that closes it) one copy per
    replica, renamed likewise, whose own `# replicas` block takes its first line for that
    replica and its second for each of the others; those between `# listen` and `# end listen`
    their first line on `listen` (with what followed its address: `ssl`, `crt …`); and nginx's
    paths (under /var/log/nginx/, /var/lib/nginx/, /run/, and its temporary files) move to
    `run_dir`, the certificates' (under /etc/mcp-session-proxy/tls/) to `run_dir`/tls."""
    named = list(zip(names or [f"replica-{n}" for n in range(1, len(replicas) + 1)], replicas))
    lines, out, at = text.splitlines(), [], 0
    while at < len(lines):
        line, mark = lines[at], lines[at].strip()
        if mark in ("# replicas", "# listen", "# each replica"):
            block, end = mark[2:], closing(lines, at)
            inside = lines[at + 1:end]
            if block == "replicas":
                rendered = replica_lines(inside, named, None)
            elif block == "listen":
                rendered = [moved(listening(first_line(inside, block), listen), run_dir)]
            else:
                rendered = [moved(copy, run_dir) for copy in each_replica(inside, named)]
            out += [line, *rendered, lines[end]]
            at = end + 1
            continue
        out.append(moved(line, run_dir))
        if program_of(kind) == "nginx" and mark == "http {":
            out.extend(f"    {t}_temp_path {run_dir}/{t};" for t in NGINX_TEMP_PATHS)
        at += 1
    return "\n".join(out) + "\n"


def closing(lines: list[str], at: int) -> int:
    """Where the block opened at `at` ends: its `# end …` line."""
    block = lines[at].strip()[2:]
    for end in range(at + 1, len(lines)):
        if lines[end].strip() == f"# end {block}":
            return end
    raise ValueError(f"'# {block}' without '# end {block}'")


def first_line(lines: list[str], block: str, nth: int = 0) -> str | None:
    """The `nth` line of a block that is neither blank nor a comment."""
    found = [line for line in lines if line.strip() and not line.strip().startswith("#")]
    if not found and nth == 0:
        raise ValueError(f"no line between '# {block}' and '# end {block}'")
    return found[nth] if nth < len(found) else None


def replica_lines(block: list[str], named: list, owner: str | None) -> list[str]:
    """One line per replica: the block's first line (its address and replica-1 changed); in a
    group of `owner`, the second line for the replicas other than `owner`."""
    first = first_line(block, "replicas")
    other = first_line(block, "replicas", 1) if owner is not None else None
    return [ADDRESS.sub(replica, first if owner in (None, name) or other is None else other,
                        count=1).replace("replica-1", name)
            for name, replica in named]


def each_replica(block: list[str], named: list) -> list[str]:
    """The block's first group (its first line up to the `}` that closes it), once per replica,
    replica-1 renamed, its own `# replicas` block rendered for that replica."""
    start = block.index(first_line(block, "each replica"))
    indent = block[start][:len(block[start]) - len(block[start].lstrip())]
    end = next(i for i in range(start, len(block)) if block[i] == f"{indent}}}")
    group, out = block[start:end + 1], []
    for name, _ in named:
        at = 0
        while at < len(group):
            if group[at].strip() == "# replicas":
                stop = closing(group, at)
                out += [group[at], *replica_lines(group[at + 1:stop], named, name), group[stop]]
                at = stop + 1
            else:
                out.append(group[at].replace("replica-1", name))
                at += 1
    return out


def listening(first: str, listen: str) -> str:
    """`listen 80;`, `listen 443 ssl;` or `bind :80`: the same directive on `listen`."""
    indent = first[:len(first) - len(first.lstrip())]
    directive, bound, *rest = first.split()
    if rest:
        return f"{indent}{directive} {listen} {' '.join(rest)}"
    return f"{indent}{directive} {listen}{';' if bound.endswith(';') else ''}"


def moved(line: str, run_dir: str) -> str:
    """`line` with nginx's paths and /run/ in `run_dir`, and the certificates' in its tls/."""
    for prefix in (" /var/log/nginx/", " /var/lib/nginx/", " /run/"):
        line = line.replace(prefix, f" {run_dir}/")
    return line.replace(" /etc/mcp-session-proxy/tls/", f" {run_dir}/tls/")
