#!/usr/bin/env python3
"""The code's shape: how long each module is (its `#[cfg(test)] mod` left out: median, p90,
largest) and which functions are longer than a threshold.

Usage: scripts/sizes.py [SRC_DIR [LINES]]   (defaults: src 60)
"""
import os, re, sys, statistics
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
threshold = int(sys.argv[2]) if len(sys.argv) > 2 else 60
def strip_tests(lines):
    out = []; i = 0
    while i < len(lines):
        if lines[i].strip() == '#[cfg(test)]' and i + 1 < len(lines) and re.match(r'\s*mod \w+\s*\{', lines[i+1]):
            depth = 0; j = i + 1
            while j < len(lines):
                depth += lines[j].count('{') - lines[j].count('}')
                j += 1
                if depth <= 0: break
            i = j; continue
        out.append(lines[i]); i += 1
    return out
# Braces inside string and char literals are not the code's: left out when counting.
LITERAL = re.compile(r'r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
def braces(line):
    code = LITERAL.sub('""', line)
    return code.count('{') - code.count('}'), '{' in code
sizes = {}; fns = []
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f)
        lines = strip_tests(open(p).read().split('\n'))
        while lines and lines[-1] == '': lines.pop()
        sizes[p] = len(lines)
        for i, l in enumerate(lines):
            m = re.match(r'\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)', l)
            if not m: continue
            depth = 0; started = False; j = i
            while j < len(lines):
                s = lines[j]
                change, opens = braces(s)
                if not started and ';' in s and not opens: break
                depth += change
                if opens: started = True
                if started and depth <= 0: break
                j += 1
            if started: fns.append((j - i + 1, p, m.group(6)))
v = sorted(sizes.values())
print(f"modules {len(v)}  median {statistics.median(v)}  p90 {v[int(len(v)*0.9)]}  largest {v[-1]}")
for p, n in sorted(sizes.items(), key=lambda x: -x[1])[:8]: print(f"  {n:5} {p}")
big = sorted([f for f in fns if f[0] > threshold], reverse=True)
print(f"functions over {threshold}: {len(big)}")
for n, p, name in big: print(f"  {n:4} {p}::{name}")
