#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the layout rules of include/mpe (docs/architecture.md, "Layers and includes"):

1. every `#include "mpe/..."` names a header that exists;
2. the folder graph has no cycle: a folder (each directory is its own node; a `detail/...`
   room is a node apart from its parent) never includes, directly or through other folders,
   a header of a folder that includes it; the umbrella headers mpe/mpe.hpp and mpe/mpe.cuh
   are the only headers in include/mpe itself, and nothing includes them but mpe.cuh;
3. every header and .inl under include/mpe has a `@file mpe/<its path>` line;
4. no header cites optimisation history (bench results or "rounds").

    python3 tests/layout/check_layout.py [REPO_ROOT]

Prints each violation and exits 1, or prints the folder order and exits 0.
"""
import collections
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
inc = root / "include"
headers = sorted(p for p in (inc / "mpe").rglob("*") if p.is_file())
rel = {p.relative_to(inc).as_posix(): p for p in headers}
include_re = re.compile(r'^\s*#\s*include\s*[<"](mpe/[^>"]+)[>"]', re.M)
history_re = re.compile(r"RESULTS\.md|round [0-9]|[0-9]+(st|nd|rd|th) round|bench/", re.I)
errors = []
edges = collections.defaultdict(set)  # folder -> folders it includes (other than itself)
why = {}
for name, path in rel.items():
    text = path.read_text(encoding="utf-8")
    folder = str(pathlib.PurePosixPath(name).parent)
    if not re.search(r"@file\s+" + re.escape(name) + r"\b", text):
        errors.append(f"{name}: no '@file {name}' line")
    for m in history_re.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        errors.append(f"{name}:{line}: cites optimisation history ('{m.group(0)}')")
    for target in include_re.findall(text):
        if target not in rel:
            errors.append(f"{name}: includes {target}, which does not exist")
            continue
        tfolder = str(pathlib.PurePosixPath(target).parent)
        if tfolder == "mpe" and name != "mpe/mpe.cuh":
            errors.append(f"{name}: includes the umbrella header {target}")
        if tfolder != folder:
            edges[folder].add(tfolder)
            why.setdefault((folder, tfolder), f"{name} -> {target}")
for name in rel:
    if str(pathlib.PurePosixPath(name).parent) == "mpe" and name not in ("mpe/mpe.hpp", "mpe/mpe.cuh"):
        errors.append(f"{name}: only the umbrella headers live in include/mpe itself")

# Cycle search (Tarjan's strongly connected components over folders).
index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})


def strong(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(edges.get(v, ())):
        if w not in index:
            strong(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        comps.append(comp)


for v in nodes:
    if v not in index:
        strong(v)
for comp in comps:
    if len(comp) > 1:
        members = set(comp)
        links = [why[(a, b)] for a in sorted(members) for b in sorted(edges.get(a, ())) if b in members]
        errors.append("folders include each other: " + ", ".join(sorted(comp)) + " (" + "; ".join(links) + ")")

if errors:
    print("\n".join(errors))
    print(f"check_layout: {len(errors)} violation(s)")
    sys.exit(1)
order = [c[0] for c in comps]  # Tarjan emits components in reverse topological order
print("folders, lowest layer first: " + ", ".join(order))
print(f"check_layout: {len(rel)} headers, {sum(len(v) for v in edges.values())} folder edges, no cycle")
