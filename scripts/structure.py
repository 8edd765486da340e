#!/usr/bin/env python3
"""The crate's structure, measured: the import graph between folders of
`src/` (circles, arrows from a lower layer to a higher one) and the length
of every production Rust file in the workspace.

Usage: python3 scripts/structure.py [--check] [--check-lengths]

With --check it exits 1 when a circle spans folders, an arrow runs from a
lower layer to a higher one, or a folder is in no layer (CI runs it so);
with --check-lengths also when a production file is over the limit.
Function length is clippy's `too_many_lines` (threshold in clippy.toml),
not this script's.

A file's imports are the `crate::`, `super::` and `self::` paths it names
(in `use` trees or inline), resolved to the longest module prefix that is a
file, and through `pub use` re-exports to the item's own module. A folder
is a directory of `src/` with its module root (`x.rs` beside `x/`, or
`x/mod.rs`) counted in it; `mod x;` declarations and a module's own
re-exports are not imports. A circle counts when its files span folders;
layers are checked between folders.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
CRATES = ["src", "api-types/src", "client/src", "learn/src"]
MAX_FILE_LINES = 600

# Lowest first: a folder may import from its own layer or lower ones.
LAYERS = [
    ["dp", "mutants"],
    ["domain"],
    ["store", "ingest"],
    ["engine", "snapshots"],
    ["ledger", "releases", "audit", "export", "uploads"],
    ["api"],
    ["config", "error", "app", "commands", "main", "lib"],
]


def module_of(path):
    """`src/a/b.rs` → ('a', 'b'); `src/a/mod.rs` and `src/a.rs` → ('a',)."""
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def folder_of(path):
    """The folder a file belongs to: its directory, or for a module root
    (`x.rs` beside `x/`, `x/mod.rs`) the module's own folder; a file at
    `src/`'s root counts as a folder of its own."""
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        return "/".join(rel[:-1])
    if os.path.isdir(os.path.join(SRC, *rel)):
        return "/".join(rel)
    # A file at the crate's root is a module of its own, not a folder's.
    return "/".join(rel[:-1]) or rel[0]


def rust_files(base):
    for dirpath, _, names in os.walk(base):
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(dirpath, name)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+as\s+", "@", tree)
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner = tree[:start], tree[start + 1 : i]
                parts, level, last = [], 0, 0
                for j, c in enumerate(inner):
                    level += c == "{"
                    level -= c == "}"
                    if c == "," and level == 0:
                        parts.append(inner[last:j])
                        last = j + 1
                parts.append(inner[last:])
                out = []
                for part in filter(None, parts):
                    out += expand_use_tree(prefix + part)
                return out
    return [re.sub(r"::self$", "", tree)]


def imported_name(path):
    """The name a `use` path brings in: its alias (`a::b as c`) or last part."""
    return path.split("@")[-1] if "@" in path else path.split("::")[-1]


def unaliased(path):
    return path.split("@")[0]


def paths_in(text, children):
    """The module paths `text` names. `use` paths may start at a child
    module (`children`); a `pub use` is a re-export, counted only when the
    file itself also names what it re-exports."""
    text = strip_comments(text)
    outside_use = re.sub(r"\b(?:pub(?:\([a-z]+\))?\s+)?use\s+[^;]*;", "", text)
    paths = []
    for m in re.finditer(r"\b(pub(?:\([a-z]+\))?\s+)?use\s+([^;]*);", text):
        for path in expand_use_tree(m.group(2)):
            head = path.split("::")[0]
            if head in children:
                path = "self::" + path
            elif head not in ("crate", "super", "self"):
                continue
            name = imported_name(path)
            if m.group(1) and not re.search(r"\b%s\b" % re.escape(name), outside_use):
                continue
            paths.append(unaliased(path))
    paths += re.findall(r"\b((?:crate|super|self)(?:::(?:super|[A-Za-z_]\w*))+)", outside_use)
    return paths


def reexports(files):
    """(module, name) → the module a `pub use` there takes `name` from."""
    found = {}
    for f in files:
        here = module_of(f)
        text = strip_comments(open(f, encoding="utf-8").read())
        for m in re.finditer(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]*);", text):
            for path in expand_use_tree(m.group(1)):
                head = path.split("::")[0]
                if head not in ("crate", "super", "self"):
                    path = "self::" + path
                found[(here, imported_name(path))] = unaliased(path)
    return found


def resolve(path, here, modules, reexported=None, depth=0):
    parts = path.split("::")
    base = list(here)
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    elif parts[0] in ("super", "self"):
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
    full = base + parts
    for n in range(len(full), -1, -1):
        module = tuple(full[:n])
        if module in modules:
            # An item a module re-exports is its origin's: follow `pub use`.
            if reexported and n < len(full) and depth < 8 and (module, full[n]) in reexported:
                origin = resolve(reexported[(module, full[n])], module, modules, reexported, depth + 1)
                if origin not in (None, module):
                    return origin
            return module
    return None


def top(folder):
    return folder.split("/")[0]


def layer(folder):
    name = top(folder)
    for i, names in enumerate(LAYERS):
        if name in names:
            return i
    return None


def strongly_connected(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def is_test_file(path):
    name = os.path.basename(path)
    return name.endswith("_tests.rs") or name == "tests.rs"


def production_lines(path):
    """Lines of a file before its inline `#[cfg(test)] mod tests`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            after = i + 1
            while after < len(lines) and lines[after].startswith("#["):
                after += 1
            inline = after < len(lines) and re.match(r"(pub(\([a-z]+\))? )?mod \w+ \{", lines[after])
            last = after < len(lines) and re.match(r"(pub(\([a-z]+\))? )?mod \w+;", lines[after])
            if inline or (last and not any(line.strip() for line in lines[after + 1 :])):
                return i
    return len(lines) - (lines[-1] == "")


def main():
    check = "--check" in sys.argv
    check_lengths = "--check-lengths" in sys.argv
    files = [f for f in rust_files(SRC) if not is_test_file(f)]
    modules = {module_of(f): f for f in files}
    reexported = reexports(files)
    edges = defaultdict(set)
    witnesses = defaultdict(set)
    file_edges = defaultdict(set)
    for f in files:
        here, mine = module_of(f), folder_of(f)
        text = open(f, encoding="utf-8").read().split("\n")[: production_lines(f)]
        children = {m[-1] for m in modules if m[:-1] == here and len(m) == len(here) + 1}
        for p in paths_in("\n".join(text), children):
            target = resolve(p, here, modules, reexported)
            if target in (None, (), here):
                continue
            file_edges[f].add(modules[target])
            theirs = folder_of(modules[target])
            if theirs != mine:
                edges[mine].add(theirs)
                witnesses[(mine, theirs)].add(os.path.relpath(f, ROOT))

    folders = {folder_of(f) for f in files}
    # A circle between files of different folders: a strongly connected
    # set of files that spans folders (circles inside a folder are its own).
    circles = [
        [os.path.relpath(f, ROOT) for f in c]
        for c in strongly_connected(set(files), file_edges)
        if len({folder_of(f) for f in c}) > 1
    ]
    upward = sorted(
        (a, b)
        for a in edges
        for b in edges[a]
        if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)
    )
    unlayered = sorted({top(f) for f in folders if layer(f) is None})

    long_files = []
    for crate in CRATES:
        for f in rust_files(os.path.join(ROOT, crate)):
            if is_test_file(f) or "/tests/" in f:
                continue
            n = production_lines(f)
            if n > MAX_FILE_LINES:
                long_files.append((n, os.path.relpath(f, ROOT)))

    print(f"folders: {len(folders)}, arrows between them: {sum(len(v) for v in edges.values())}")
    print(f"circles between files of different folders: {len(circles)}")
    for c in circles:
        print("  " + " <-> ".join(c))
        members = {os.path.join(ROOT, f) for f in c}
        for a in sorted(members):
            inside = sorted(os.path.relpath(b, ROOT) for b in file_edges[a] if b in members)
            print(f"    {os.path.relpath(a, ROOT)} -> {', '.join(inside)}")
    print(f"arrows from a lower layer to a higher one: {len(upward)}")
    for a, b in upward:
        print(f"  {a} -> {b}: {', '.join(sorted(witnesses[(a, b)]))}")
    if unlayered:
        print(f"folders in no layer: {', '.join(unlayered)}")
    print(f"production files over {MAX_FILE_LINES} lines: {len(long_files)}")
    for n, f in sorted(long_files, reverse=True):
        print(f"  {n:5d} {f}")
    if (check and (circles or upward or unlayered)) or (check_lengths and long_files):
        sys.exit(1)


if __name__ == "__main__":
    main()
