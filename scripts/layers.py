#!/usr/bin/env python3
"""The layer check: no import in src/ runs against the data flow front → session → upstream or
down through the floors below them, the demo server does not reach into the front, and no two
files, and no two folders under one parent, import each other in a circle.

Layers, top to bottom, and what each may use besides itself:

    entry      main.rs, lib.rs, server/, health_probe.rs, config/, demo/    anything but RULES
    front      front/       client transports           session and every floor
    session    session/     sessions, logs, replay      upstream, store and every floor
    upstream   upstream/    server transports           every floor
    store      store/       state beyond a process      every floor
  the floors every layer stands on:
    shared     hop.rs (the replicas' hop), auth/ (tokens verified)   telemetry, tls, wire, base
    telemetry  telemetry/   metrics, spans, logs, trace context     tls, wire, base
    tls        tls/         certificates, keys, TLS configurations  base
    wire       wire/        JSON-RPC, methods, SSE, what is named   base
    base       base/        clock, keys, ids, events, backlog       nothing

A top-level module on no floor fails the check until it is given one here.

Tests are left out: an item under `#[cfg(test)]` (a `mod tests { … }`, or a `mod tests;` whose
file then counts as test code) may reach anywhere.

    python3 scripts/layers.py [--src DIR]       # exits 1 on a new crossing or circle
"""

import argparse
import os
import re
import sys

LAYER_OF_TOP = {
    "main": "entry", "lib": "entry", "server": "entry", "health_probe": "entry",
    "config": "entry", "demo": "entry",
    "front": "front", "session": "session", "upstream": "upstream", "store": "store",
    "hop": "shared", "auth": "shared", "telemetry": "telemetry", "tls": "tls", "wire": "wire", "base": "base",
}
FLOORS = {"shared", "telemetry", "tls", "wire", "base"}
ALLOWED = {
    "entry": {"entry", "front", "session", "upstream", "store"} | FLOORS,
    "front": {"front", "session"} | FLOORS,
    "session": {"session", "upstream", "store"} | FLOORS,
    "upstream": {"upstream"} | FLOORS,
    "store": {"store"} | FLOORS,
    "shared": {"shared", "telemetry", "tls", "wire", "base"},
    "telemetry": {"telemetry", "tls", "wire", "base"},
    "tls": {"tls", "base"},
    "wire": {"wire", "base"},
    "base": {"base"},
}
# Top-level modules that may not use another although their layers would allow it.
RULES = {("demo", "front"): "the demo server is a server: it does not reach into the front"}


# What the restructuring of the layers has yet to remove: reported, not failed on. A new
# crossing or circle fails; so does one of these once it is gone, until it is taken off here.
# Empty: none is known.
KNOWN_CROSSINGS: set = set()
KNOWN_CIRCLES: set = set()


def layer(top: str) -> str | None:
    return LAYER_OF_TOP.get(top)


# ---------------------------------------------------------------- reading Rust, roughly

TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>r(?P<hashes>\#*)"(?:.|\n)*?"(?P=hashes))
  | (?P<string>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\.[^']*|[^\\'])')
""", re.X | re.S)


def code_only(text: str) -> str:
    """The text with comments, strings and character literals blanked (lines kept)."""
    return TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def without_tests(code: str) -> tuple[str, set[str]]:
    """The code without its `#[cfg(test)]` items, and the names of `mod x;` items among them."""
    test_mods = set()
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < at:
            continue
        out.append(code[at:m.start()])
        i, depth = m.end(), 0
        item = re.match(r"(?:\s*#\[[^\]]*\])*\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[i:])
        if item:
            test_mods.add(item.group(1))
            at = i + item.end()
            continue
        while i < len(code):
            c = code[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            elif c == ";" and depth == 0:
                i += 1
                break
            i += 1
        at = i
    out.append(code[at:])
    return "".join(out), test_mods


def split_group(body: str) -> list[str]:
    """a::{b, c::{d, e}, self} → a::b, a::c::d, a::c::e, a."""
    if "{" not in body:
        return [body]
    head, rest = body.split("{", 1)
    inner = rest[: rest.rfind("}")]
    parts, depth, current = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (c == "{") - (c == "}")
        current += c
    parts.append(current)
    paths = []
    for part in (p.strip() for p in parts):
        if part == "self":
            paths.append(head.rstrip(":"))
        elif part:
            paths += split_group(head + part)
    return paths


# ---------------------------------------------------------------- the module tree


class Tree:
    def __init__(self, src: str):
        self.src = src
        self.files = {}  # module path (tuple) → file, relative to src
        for root, _, names in os.walk(src):
            for name in names:
                if name.endswith(".rs"):
                    rel = os.path.relpath(os.path.join(root, name), src)
                    parts = tuple(rel[:-3].split(os.sep))
                    if parts[-1] in ("mod", "lib", "main"):
                        parts = parts[:-1]
                    self.files.setdefault(parts, rel)
        self.module_of = {rel: module for module, rel in self.files.items()}
        self.code, self.tests = {}, set()
        test_children = []
        for module, rel in self.files.items():
            with open(os.path.join(src, rel), encoding="utf-8") as f:
                code, test_mods = without_tests(code_only(f.read()))
            self.code[rel] = code
            test_children += [module + (name,) for name in test_mods]
        # A `#[cfg(test)] mod x;` makes x, and all below it, test code.
        for child in test_children:
            for module, rel in self.files.items():
                if module[: len(child)] == child:
                    self.tests.add(rel)

    def uses(self, module: tuple, rel: str) -> set[str]:
        """The files this one names through `crate::`, `super::`, `self::` and child paths."""
        code = self.code[rel]
        children = {m[-1] for m in self.files if m[:-1] == module and len(m) == len(module) + 1}
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", code, re.S):
            body = re.sub(r"\s+", "", m.group(1)).removeprefix("::")
            for path in split_group(body):
                first = path.split("::")[0]
                if first in ("crate", "super", "self"):
                    paths.append(path)
                elif first in children:  # a child named without `self::`
                    paths.append("self::" + path)
        paths += re.findall(r"\b((?:crate|super)(?:::[A-Za-z_]\w*)+)", code)
        found = set()
        for path in paths:
            steps = path.split("::")
            # `self::` names this module's children, in a.rs as in a/mod.rs; `super::` its parent.
            base = () if steps[0] == "crate" else module
            steps = steps[1:] if steps[0] == "crate" else steps
            while steps and steps[0] in ("self", "super"):
                if steps[0] == "super":
                    base = base[:-1]
                steps = steps[1:]
            target = None
            for i in range(len(steps), -1, -1):
                target = self.files.get(base + tuple(steps[:i]))
                if target:
                    break
            if not target or target == rel or target in self.tests:
                continue
            # A module naming what lies below it (a/mod.rs or a.rs, and a/…) is the tree itself.
            if self.module_of[target][: len(module)] == module:
                continue
            found.add(target)
        return found


# ---------------------------------------------------------------- checks


def top_of(rel: str) -> str:
    return rel.split(os.sep)[0].removesuffix(".rs")


def circles(edges: dict) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    advanced = True
                    break
                if succ in on:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return sorted(out)


def folder_edges(edges: dict) -> dict:
    """Edges between siblings: for a file in a/b/… naming one in a/c/…, b → c (a folder, or a
    file module beside folders). A file naming one in a folder above or below it is the tree."""
    lifted = {}
    for source, targets in edges.items():
        for target in targets:
            s = source[:-3].split(os.sep)
            t = target[:-3].split(os.sep)
            s = s[:-1] if s[-1] == "mod" else s
            t = t[:-1] if t[-1] == "mod" else t
            common = 0
            while common < min(len(s), len(t)) and s[common] == t[common]:
                common += 1
            if common >= len(s) or common >= len(t):
                continue  # one is the other's ancestor
            a = "/".join(s[: common + 1])
            b = "/".join(t[: common + 1])
            lifted.setdefault(a, set()).add(b)
    return lifted


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    args = p.parse_args()
    tree = Tree(os.path.normpath(args.src))

    edges = {}
    for module, rel in sorted(tree.files.items(), key=lambda kv: kv[1]):
        if rel in tree.tests:
            continue
        edges[rel] = tree.uses(module, rel)

    crossings, known, seen_known = [], [], set()
    for top in sorted({top_of(rel) for rel in edges}):
        if layer(top) is None:
            crossings.append(f"src/{top} is on no floor: give it one in scripts/layers.py")
    for source, targets in sorted(edges.items()):
        mine = top_of(source)
        for target in sorted(targets):
            theirs = top_of(target)
            if layer(mine) is None or layer(theirs) is None:
                continue
            if layer(theirs) not in ALLOWED[layer(mine)]:
                line = f"{source} ({layer(mine)}) uses {target} ({layer(theirs)})"
            elif (mine, theirs) in RULES:
                line = f"{source} uses {target}: {RULES[(mine, theirs)]}"
            else:
                continue
            (known if (source, target) in KNOWN_CROSSINGS else crossings).append(line)
            seen_known.add((source, target))
    for line in crossings:
        print(line)
    for line in known:
        print("known, to be removed: " + line)
    print(f"{len(crossings)} imports across the flow ({len(known)} known)")

    file_circles = circles(edges)
    lifted = folder_edges(edges)
    top_circles = circles({a: b for a, b in lifted.items() if "/" not in a})
    folder_circles = circles({a: b for a, b in lifted.items() if "/" in a})
    known_circles = [g for g in folder_circles if tuple(g) in KNOWN_CIRCLES]
    folder_circles = [g for g in folder_circles if tuple(g) not in KNOWN_CIRCLES]
    for kind, found in (("file", file_circles), ("top-level", top_circles),
                        ("folder", folder_circles), ("known, to be removed: folder", known_circles)):
        for group in found:
            print(f"{kind} circle: " + " ⇄ ".join("src/" + g for g in group))
    print(f"{len(file_circles)} file circles, {len(top_circles)} top-level circles, "
          f"{len(folder_circles)} folder circles ({len(known_circles)} known)")

    gone = sorted(KNOWN_CROSSINGS - seen_known)
    gone += sorted(KNOWN_CIRCLES - {tuple(g) for g in known_circles})
    for entry in gone:
        print(f"no longer found, take it off the known list: {entry}")
    failed = crossings or file_circles or top_circles or folder_circles or gone
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
