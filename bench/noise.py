#!/usr/bin/env python3
"""Run-to-run noise of bench/run.py, and what changed beyond it. Reads the tables of BENCHMARKS.md
files (Markdown, as run.py writes them): two runs of one build (A, B) give each figure's noise,
|B ÷ A − 1|; a third file (an earlier build's run) is then compared with B, and a figure counts as
worse only when it moved the wrong way by more than its noise (at least the median noise of its
column).

    bench/noise.py RUN_A.md RUN_B.md [EARLIER.md]

Only ratios are compared (absolute figures drift with the machine's load, and differ between
machines): in the latency tables `p50 ÷ direct` (lower is better), `req/s ÷ direct` (higher is
better) and the CPU per call over direct's at the same level (lower is better)."""
import re
import statistics
import sys

COLUMNS = {"p50 ÷ direct": -1, "req/s ÷ direct": +1, "CPU ÷ direct": -1}


def figures(path):
    """{(table, target, sessions, column): value} of every latency table."""
    found, table, header, direct_cpu = {}, None, None, {}
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("### "):
            table, header = line[4:], None
        elif line.startswith("| target | sessions |"):
            header = [cell.strip() for cell in line.strip("|").split("|")]
        elif header and line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if len(cells) != len(header):
                continue
            row = dict(zip(header, cells))
            try:
                cpu = float(row["CPU µs/call"])
                if row["target"] == "direct (no proxy)":
                    direct_cpu[(table, row["sessions"])] = cpu
                row["CPU ÷ direct"] = cpu / direct_cpu[(table, row["sessions"])]
            except (KeyError, ValueError, ZeroDivisionError):
                pass
            for column in COLUMNS:
                try:
                    found[(table, row["target"], row["sessions"], column)] = float(row[column])
                except (KeyError, ValueError):
                    pass
        elif not line.startswith("|"):
            header = None if line.strip() else header
    return found


def main():
    a, b = figures(sys.argv[1]), figures(sys.argv[2])
    noise = {key: abs(b[key] / a[key] - 1) for key in a.keys() & b.keys() if a[key] > 0}
    print("## Run-to-run noise (the same build, two runs)\n")
    print("| column | figures | median | 90th percentile | largest |")
    print("|---|---:|---:|---:|---:|")
    typical = {}
    for column in COLUMNS:
        values = sorted(v for k, v in noise.items() if k[3] == column)
        if not values:
            continue
        typical[column] = statistics.median(values)
        print(f"| {column} | {len(values)} | {typical[column]:.1%} | "
              f"{values[int(0.9 * (len(values) - 1))]:.1%} | {values[-1]:.1%} |")
    if len(sys.argv) < 4:
        return
    earlier = figures(sys.argv[3])
    print("\n## Worse than the earlier run by more than the noise\n")
    print("| table | target | sessions | column | earlier | now | change | noise |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    worse = 0
    for key in sorted(earlier.keys() & b.keys()):
        column = key[3]
        if earlier[key] <= 0 or column not in typical:
            continue
        change = b[key] / earlier[key] - 1
        allowed = max(noise.get(key, 0), typical[column])
        if COLUMNS[column] * change < -allowed:
            worse += 1
            print(f"| {key[0]} | {key[1]} | {key[2]} | {column} | {earlier[key]:.2f} | {b[key]:.2f} | "
                  f"{change:+.0%} | {allowed:.0%} |")
    if not worse:
        print("| (none) | | | | | | | |")


if __name__ == "__main__":
    main()
