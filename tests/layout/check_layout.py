#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the layout rules of include/mpe (docs/architecture.md, "Layers and includes"):

1. every `#include "mpe/..."` names a header that exists;
2. the folder graph has no cycle: a folder (each directory is its own node; a `detail/...`
   room is a node apart from its parent) never includes, directly or through other folders,
   a header of a folder that includes it; the umbrella headers mpe/mpe.hpp and mpe/mpe.cuh
   are the only headers in include/mpe itself, and nothing includes them but mpe.cuh.
   A class's member bodies live in a detail room of their own (detail/embedding,
   detail/io, detail/sharded: .inl files included at the end of the public header, e.g.
   sharded/sharded_embedding.hpp -> detail/sharded/*.inl); a new room needs no entry here,
   every directory is found and checked as a node, and as the public header includes its
   room, the room's files never include the public header's folder (they see its
   declarations through the includer);
3. every header and .inl under include/mpe has a `@file mpe/<its path>` line;
4. no header cites optimisation history (bench results or "rounds");
5. the backend seam (issue #59, "Backends own their paths"): no file under
   include/mpe/detail/kernels (the portable single-source functors) includes a header under
   include/mpe/detail/host (a backend's fast paths, reached through the functors' `Paths`
   parameter and HostBackend's detail/host/dispatch.hpp);
6. files a reader can hold (issue #59): no header or .inl under include/ has more than
   600 lines, except the files of `long_files` below, each named with its reason;
7. an explicit state interface (issue #59): no `friend` declaration (of a class, a
   function or an operator) in the code of include/mpe/embedding and
   include/mpe/detail/embedding (comments and string literals aside): checkpoints,
   importers and containers of several tables reach a table's state and its phased
   backward() through public, documented members (CachedEmbedding::state(),
   restore_state(), prepare_backward(), ...);

and the documentation rules of issue #59 ("Docs that describe the product"):

8. README.md has at most 250 lines and bench/README.md at most 300;
9. README.md, bench/README.md and docs/**/*.md cite no commit hash. A hash-looking token is a
   whole word of 7 to 12 or of 40 lowercase hex digits holding at least one digit and at
   least one letter a-f (so decimal numbers, words such as "defaced", uppercase or
   0x-prefixed constants never are). It is a violation
   - anywhere, when it is 40 digits long, when the word "commit" or "commits" (any case, so
     also MPE_COMMIT=) lies within the 40 characters before it (across a line break), or when
     "at" directly precedes it ("at 7a89e02");
   - in prose (outside fenced code blocks and `code spans`), always: there such a token is a
     hash ("the build before (7e1f9ce)"); a hex constant in prose belongs in a code span.
   So an ordinary hex constant in code is never flagged: it is neither next to "commit" nor
   after "at";
10. every relative Markdown link `[text](path)` in the *.md files at the root and under bench/,
   cmake/, docs/, examples/, include/, python/ and tests/ (not in hidden, build*, _deps,
   node_modules or site-packages folders) names a path that exists
   (the part before any #anchor; http:, https:, mailto: and #anchor links are not checked;
   code spans and fenced code blocks are skipped).

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
# Rule 7: comments and string or character literals (blanked before the search for `friend`).
comment_or_string_re = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
friend_re = re.compile(r"\bfriend\b")
# Rule 6's allow-list: the files still over max_lines, to be split, each as a line
# "path",  # reason; remove a line once its file is under the limit (the check then keeps it
# there). Empty: every file is within the limit.
max_lines = 600
long_files = set()
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
    if name.startswith(("mpe/embedding/", "mpe/detail/embedding/")):
        code = comment_or_string_re.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in friend_re.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            errors.append(f"{name}:{line}: a friend declaration; the tables' state and phases are public, "
                          "documented members (rule 7, issue #59: an explicit state interface)")
    lines = len(text.splitlines())
    if lines > max_lines and name not in long_files:
        errors.append(f"{name}: {lines} lines, more than {max_lines} (issue #59: split it by concern)")
    for target in include_re.findall(text):
        if name.startswith("mpe/detail/kernels/") and target.startswith("mpe/detail/host/"):
            errors.append(f"{name}: includes {target}; the portable functors reach a backend's fast "
                          "paths only through their Paths parameter (detail/kernels/portable_paths.hpp)")
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

for name in sorted(long_files):
    if name in rel and len(rel[name].read_text(encoding="utf-8").splitlines()) <= max_lines:
        errors.append(f"{name}: within {max_lines} lines now; remove it from long_files")

# Documentation rules (7-9 above).
line_limits = {"README.md": 250, "bench/README.md": 300}
for name, limit in line_limits.items():
    path = root / name
    if path.is_file():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            errors.append(f"{name}: {n} lines, more than {limit} (issue #59: describe the product, "
                          "move details to bench/README.md or docs/)")

hash_token_re = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])([0-9a-f]{40}|[0-9a-f]{7,12})(?![0-9A-Za-z_])")
commit_word_re = re.compile(r"commits?\b", re.I)
at_word_re = re.compile(r"(?:^|[^0-9A-Za-z_])at\s+$", re.I)
hash_docs = [p for p in [root / "README.md", root / "bench" / "README.md"] if p.is_file()]
hash_docs += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []


def code_mask(text):
    """Per character: True inside a fenced code block (its fence lines included) or a code span."""
    mask = [False] * len(text)
    pos, in_fence = 0, False
    for line in text.splitlines(keepends=True):
        fence = bool(re.match(r"\s*(```|~~~)", line))
        if fence or in_fence:
            mask[pos:pos + len(line)] = [True] * len(line)
        else:
            for m in re.finditer(r"`[^`\n]*`", line):
                mask[pos + m.start():pos + m.end()] = [True] * (m.end() - m.start())
        if fence:
            in_fence = not in_fence
        pos += len(line)
    return mask


for path in hash_docs:
    name = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    in_code = code_mask(text)
    for m in hash_token_re.finditer(text):
        before = text[max(0, m.start() - 40):m.start()]
        line_start = text.rfind("\n", 0, m.start()) + 1
        if (len(m.group(1)) == 40 or commit_word_re.search(before)
                or at_word_re.search(text[line_start:m.start()]) or not in_code[m.start()]):
            number = text.count("\n", 0, m.start()) + 1
            errors.append(f"{name}:{number}: cites a commit hash ('{m.group(1)}'); "
                          "state the design, not its history")

md_files = sorted(root.glob("*.md"))
for folder in ("bench", "cmake", "docs", "examples", "include", "python", "tests"):
    md_files += [p for p in sorted((root / folder).rglob("*.md"))
                 if not any(part.startswith((".", "build", "_deps")) or part in ("node_modules", "site-packages")
                            for part in p.relative_to(root).parts[:-1])]
fence_re = re.compile(r"^\s*(```|~~~)")
link_re = re.compile(r"\]\(([^)\s]+)\)")
for path in sorted(md_files):
    name = path.relative_to(root).as_posix()
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if fence_re.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for target in link_re.findall(prose):
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#", 1)[0]).exists():
                errors.append(f"{name}:{number}: link to {target}, which does not exist")

if errors:
    print("\n".join(errors))
    print(f"check_layout: {len(errors)} violation(s)")
    sys.exit(1)
order = [c[0] for c in comps]  # Tarjan emits components in reverse topological order
print("folders, lowest layer first: " + ", ".join(order))
print(f"check_layout: {len(rel)} headers, {sum(len(v) for v in edges.values())} folder edges, no cycle, "
      f"no detail/kernels -> detail/host include, none over {max_lines} lines but the {len(long_files)} allowed, "
      "no friend in embedding/")
print(f"check_layout: README.md and bench/README.md within their line limits, no commit hash in "
      f"{len(hash_docs)} docs, every relative link of {len(md_files)} Markdown files exists")
