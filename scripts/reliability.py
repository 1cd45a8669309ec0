#!/usr/bin/env python3
"""Regenerates RELIABILITY.md's figures from runs on the code as it is: the chaos harness
(bench/chaos.py, one run per seed), the soak (bench/soak.py) and every fuzz target
(fuzz/run.sh). Each table is rewritten between its markers in RELIABILITY.md
(`<!-- figures:NAME -->` … `<!-- /figures:NAME -->`), headed by the commit the figures are of
(with `+changes` when the tree was not clean), the machine and the exact commands, so the
figures always say what produced them.

    python3 scripts/reliability.py                         # everything, as published
    python3 scripts/reliability.py --only chaos --chaos-seconds 60 --seeds 7

Needs what scripts/test installs (tests/python/.venv, redis-server), and a nightly toolchain
with cargo-fuzz for the fuzz figures (skipped, and said so, without one).
"""

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "tests/python/.venv/bin/python"  # run from ROOT
PROXY = "target/release/mcp-session-proxy"
BENCH = "target/release/mcp-bench"


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$ " + shlex.join(command), file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=ROOT, text=True, **kwargs)


def commit() -> str:
    head = run(["git", "rev-parse", "--short", "HEAD"], capture_output=True).stdout.strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"],
                capture_output=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} vCPUs ({cpu})"


def heading(revision: str, commands: list[str]) -> str:
    today = datetime.date.today().isoformat()
    shown = "\n".join(commands)
    return (f"Code at `{revision}`, {machine()}, {today}; produced by `scripts/reliability.py`, "
            f"which ran:\n\n```sh\n{shown}\n```\n")


def chaos(args, revision: str) -> str:
    rows, commands = [], []
    for seed in args.seeds:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as report_file:
            report_path = report_file.name
        command = [PYTHON, "bench/chaos.py", "--proxy", PROXY, "--bench", BENCH,
                   "--seconds", str(args.chaos_seconds), "--seed", str(seed),
                   "--report", report_path]
        commands.append(shlex.join(command[:-2]))
        run(command, stdout=subprocess.DEVNULL)
        with open(report_path) as f:
            report = json.load(f)
        os.unlink(report_path)
        info, failures = report["reported"], report["failures"]
        rows.append([
            f"{args.chaos_seconds:g} s, seed {seed}",
            "yes" if report["ok"] else f"**no** ({report.get('error') or 'see counts'})",
            info["kills"], f"{info['bursts']} ({info['burst_requests']:,})",
            info["unavailable_503"], info["takeovers_seen"], info["interrupted"],
            f"{info['progress_calls']:,} ({info['progress_cuts']:,})",
            f"{info['updates_received']:,}", f"{info['live_checks']:,}",
            *[failures.get(name, 0) for name in CHAOS_FAILURES],
        ])
    header = ["run", "passed", "kills", "bursts (requests)", "503s", "takeovers", "interrupted",
              "progress calls (cut)", "updates", "live checks", *CHAOS_FAILURES]
    return heading(revision, commands) + "\n" + table(header, rows)


# The counts that must be 0, in the order the table shows them.
CHAOS_FAILURES = ["lost_progress", "lost_updates", "duplicated", "out_of_order", "crossing",
                  "not_found_live", "unusable", "server_errors",
                  "unavailable_without_retry_after", "counter_mismatch"]


def soak(args, revision: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as report_file:
        report_path = report_file.name
    command = [PYTHON, "bench/soak.py", "--proxy", PROXY, "--bench", BENCH,
               "--sessions", str(args.soak_sessions), "--cycles", str(args.soak_cycles),
               "--report", report_path]
    run(command, stdout=subprocess.DEVNULL)
    with open(report_path) as f:
        report = json.load(f)
    os.unlink(report_path)
    mib = lambda kib: f"{kib / 1024:.1f} MiB"
    cycles = report["cycles"]
    rows = [["before any session", mib(report["baseline_kib"])]]
    rows.append([f"{args.soak_sessions:,} sessions held (cycle " +
                 " / ".join(str(n + 1) for n in range(len(cycles))) + ")",
                 " / ".join(mib(c["plateau_kib"]) for c in cycles)])
    rows.append(["per session", " / ".join(f"{c['per_session_kib']} KiB" for c in cycles)])
    rows.append(["after idle expiry", " / ".join(mib(c["after_expiry_kib"]) for c in cycles)])
    verdict = ("Nothing accumulates: every plateau and RSS after expiry within 10 % of the first "
               "plateau, and the RSS after expiry steady across cycles."
               if report["within_first_plateau"] and report["after_expiry_steady"]
               else "**Something accumulates**: see the report.")
    given = ", ".join(f"{p} %" for p in report["given_back_percent"])
    return (heading(revision, [shlex.join(command[:-2])]) + "\n" + table(["", "RSS"], rows) +
            f"\nOf what the sessions took, {given} went back after each expiry. {verdict}\n")


FUZZ_LINE = re.compile(r"^fuzz (\S+)\s+(ok|FAILED)\s*(?:\(exit \S+\))?\s*(?:after )?(\S+) "
                       r"executions(?:\s+(\S+) exec/s\s+cov: (\d+) ft: (\d+))?")


def fuzz(args, revision: str) -> str:
    if run(["cargo", "+nightly", "fuzz", "--version"], capture_output=True).returncode != 0:
        return ("Not regenerated: no nightly toolchain with cargo-fuzz where "
                "`scripts/reliability.py` ran.\n")
    command = ["fuzz/run.sh", str(args.fuzz_seconds)]
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target/fuzz"))
    out = run(["nice", "-n", "19", *command], capture_output=True, env=env)
    sys.stderr.write(out.stderr)
    rows = []
    for line in out.stdout.splitlines():
        found = FUZZ_LINE.match(line)
        if not found:
            continue
        target, status, runs, rate, cov, ft = found.groups()
        grouped = lambda text: f"{int(text):,}" if text and text.isdigit() else (text or "–")
        rows.append([f"`{target}`", grouped(runs), grouped(rate),
                     f"{grouped(cov)} / {grouped(ft)}" if cov else "–",
                     "0" if status == "ok" else "**1**"])
    if not rows:
        return f"Not regenerated: `fuzz/run.sh` printed no figures:\n\n```\n{out.stdout}\n```\n"
    note = (f"Each target for {args.fuzz_seconds} s from its committed corpus, optimized, "
            "with AddressSanitizer (cargo-fuzz's default), at `nice 19`.\n\n")
    return (heading(revision, [shlex.join(["nice", "-n", "19", *command])]) + "\n" + note +
            table(["target", "executions", "exec/s", "coverage (cov / features)", "crashes"],
                  rows))


def table(header: list[str], rows: list[list]) -> str:
    numeric = lambda v: isinstance(v, int)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if rows and numeric(rows[0][i]) else "---"
                            for i in range(len(header))) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(f"{v:,}" if numeric(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def replace(document: str, name: str, text: str) -> str:
    begin, end = f"<!-- figures:{name} -->", f"<!-- /figures:{name} -->"
    if begin not in document or end not in document:
        sys.exit(f"RELIABILITY.md has no {begin} … {end} markers")
    head, rest = document.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{text}{end}{tail}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", choices=["chaos", "soak", "fuzz"],
                   help="regenerate only these (repeatable; default: all)")
    p.add_argument("--chaos-seconds", type=float, default=300)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[7, 2026])
    p.add_argument("--soak-sessions", type=int, default=10_000)
    p.add_argument("--soak-cycles", type=int, default=3)
    p.add_argument("--fuzz-seconds", type=int, default=600)
    p.add_argument("--no-build", action="store_true", help="use the release build as it is")
    args = p.parse_args()
    wanted = args.only or ["chaos", "soak", "fuzz"]
    revision = commit()
    if not args.no_build and {"chaos", "soak"} & set(wanted):
        if run(["cargo", "build", "--release", "--bins"]).returncode != 0:
            return 1
    path = os.path.join(ROOT, "RELIABILITY.md")
    for name in wanted:
        text = {"chaos": chaos, "soak": soak, "fuzz": fuzz}[name](args, revision)
        with open(path) as f:
            document = f.read()
        with open(path, "w") as f:
            f.write(replace(document, name, text))
        print(f"RELIABILITY.md: {name} figures of {revision}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
