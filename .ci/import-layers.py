#!/usr/bin/env python3
"""Checks the import graph of src/: top-level layers, and (optionally) cycles at any depth.

Layers: reads every `crate::<module>` path (use lines, `crate::{a, b}` groups, inline paths)
on non-comment lines outside `#[cfg(test)] mod tests` blocks and `tests.rs` files, maps it
to the importing file's top-level module, and fails when an import points to the same layer
or a higher one, or when a module is missing from LAYERS. A strictly descending import
graph cannot have a cycle between top-level modules.

Cycles: the layers say nothing about the modules inside one top-level module, so the cycle
check builds the graph of every module file (`src/a/b.rs` and `src/a/b/mod.rs` are both
`a::b`; lib.rs, main.rs, tests.rs and test-only modules are left out). Each path written in
a file (`crate::`, `super::`, `self::`, nested `use` groups, and bare names bound by `mod`
or `use` in the same file) is resolved to the longest prefix that names a module file, and
becomes an edge unless it points at the importing module itself or one of its ancestors (a
folder's `mod.rs` declaring the types its files share is ownership, not a circle). A parent
using `child::Item` is an edge, and so is a module using a sibling or a cousin: data
between them should flow one way. Strongly connected components of more
than one module are printed with, for each edge inside them, one path that created it.
Code under `#[cfg(test)]`, comments and string literals are ignored. Paths produced by
macro expansion are not seen, and a glob import (`use super::*`) is an edge to the module
it names only, not to wherever the names it brings in lead.

Run from the repository root:
    python3 .ci/import-layers.py                  layers only (what CI runs)
    python3 .ci/import-layers.py --cycles         layers, then cycles; fails on a cycle
    python3 .ci/import-layers.py --cycles-report  layers, then cycles; a cycle does not fail
Without a flag, cycles are checked when the environment sets CHECK_CYCLES=1 (fail) or
CHECK_CYCLES=report, or, unless it sets CHECK_CYCLES=0, when the constant CHECK_CYCLES below
is True. An optional positional argument replaces the source folder (default: src).
"""
import argparse
import collections
import os
import re
import sys

# On: CI fails on an import cycle between module files (CHECK_CYCLES=0 turns it off).
CHECK_CYCLES = True

# Lowest first. A module may import only from modules of lower layers.
LAYERS = [
    ["bounded", "boxed", "fxhash", "logging", "rng", "secret", "sse"],  # leaves
    ["http"],  # the wire: routes, errors, bodies, guards
    ["chat", "engine", "parsers", "mcp", "history"],  # language work for token-id engines; the token-engine seam and its gRPC engines; output parsers; the MCP client; the history store
    ["generation"],  # engine-agnostic generation: the ask, prompt ids, decoding, parsing, deltas
    ["resilience", "server"],  # breakers and retries; one connection, generic over Handler
    ["runtime"],  # threads and accept loops, generic over ThreadSetup
    ["fleet"],  # what the hot path reads about workers
    ["admission", "auth", "routing"],  # decisions on one request
    ["metrics"],  # families and scrape-time collectors
    ["transport"],  # carriers that relay a request as it is: HTTP, HTTP prefill/decode pairs, a provider's Messages API
    ["api"],  # front-ends the gateway answers itself: OpenAI and Messages on token engines, Responses, the MCP tool loops
    ["control", "pipeline"],  # background tasks; the data path
    ["admin", "conversations"],  # administration handlers; the Conversations API
    ["app", "config"],  # the request side of the wiring; the flags, composing settings
    ["startup"],  # builds everything from the Config
]

LEVEL = {m: i for i, layer in enumerate(LAYERS) for m in layer}
PATH = re.compile(r"\bcrate::([a-z_0-9]+)")
GROUP = re.compile(r"use crate::\{([^;]*)\};", re.S)


# --- Layers ---------------------------------------------------------------------------
# Line-based on purpose: it is the check CI has always run, and its output must not move.


def module_of(root, path):
    parts = os.path.relpath(path, root).split(os.sep)
    return parts[0][:-3] if len(parts) == 1 else parts[0]


def imports(text):
    cut = text.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        text = text[:cut]
    text = "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("//"))
    names = PATH.findall(text)
    for group in GROUP.finditer(text):
        for item in re.split(r",\s*(?![^{]*\})", group.group(1)):
            item = item.strip()
            if item:
                names.append(re.split(r"::|\s", item)[0])
    return names


def check_layers(root):
    """Prints the layer violations, or one line saying there are none; returns True if none."""
    edges = collections.defaultdict(set)
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            src = module_of(root, path)
            if src in ("lib", "main"):
                continue
            with open(path, encoding="utf-8") as f:
                for dst in imports(f.read()):
                    if dst not in (src, "self"):
                        edges[src, dst].add(os.path.relpath(path, root))

    problems = []
    for module in sorted({m for pair in edges for m in pair}):
        if module not in LEVEL:
            problems.append(f"{module}: not in LAYERS (add it to .ci/import-layers.py)")
    for (src, dst), files in sorted(edges.items()):
        if src in LEVEL and dst in LEVEL and LEVEL[dst] >= LEVEL[src]:
            problems.append(f"{src} -> {dst} points up or sideways: {', '.join(sorted(files))}")
    for line in problems:
        print(line)
    if not problems:
        print(f"import layers ok: {len(edges)} imports between {len(LEVEL)} modules, all downward")
    return not problems


# --- Cycles ---------------------------------------------------------------------------
# Token-based rather than line-based: `use` groups nest and span lines, `super` depends on
# the inline module a path sits in, and a `crate::` inside a string or a trailing comment
# must not count.

# Comments, string and char literals and lifetimes are matched so that they can be dropped
# whole (a brace or a `crate::` inside one must not count); raw strings first, since `r"`
# would otherwise lex as the identifier `r` and a string.
TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>//[^\n]*)
    | (?P<block>/\*)
    | (?P<raw>[bc]?r(?P<hashes>\#*)")
    | (?P<string>[bc]?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])')
    | (?P<lifetime>'[A-Za-z_][A-Za-z0-9_]*)
    | (?P<ident>(?:r\#)?[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>[0-9][0-9A-Za-z_]*)
    | (?P<path>::)
    | (?P<punct>.)
    """,
    re.X | re.S,
)
DROPPED = {"space", "comment", "string", "char", "lifetime", "number"}
OPEN, CLOSE = "([{", ")]}"


def tokens(text):
    """(text, line) pairs for identifiers, `::` and punctuation; the rest is dropped."""
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = TOKEN.match(text, pos)
        kind, end = m.lastgroup, m.end()
        if kind == "block":
            # Rust block comments nest.
            depth, end = 1, m.end()
            while depth and end < len(text):
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw":
            close = text.find('"' + m.group("hashes"), end)
            end = len(text) if close < 0 else close + 1 + len(m.group("hashes"))
        elif kind not in DROPPED:
            value = m.group()
            out.append((value[2:] if value.startswith("r#") else value, line))
        line += text.count("\n", pos, end)
        pos = end
    return out


def skip_group(toks, i):
    """Index just past the bracket group that opens at toks[i]."""
    depth = 0
    while i < len(toks):
        t = toks[i][0]
        depth += (t in OPEN) - (t in CLOSE)
        i += 1
        if depth == 0:
            return i
    return i


def skip_item(toks, i):
    """Index just past the item (or field, or statement) starting at toks[i]."""
    depth = 0
    while i < len(toks):
        t = toks[i][0]
        if t in OPEN:
            depth += 1
        elif t in CLOSE:
            depth -= 1
            if depth < 0:  # the end of the enclosing list: the item was its last element
                return i
            if depth == 0 and t == "}":  # a body: `mod m { }`, `fn f() { }`
                return i + 1
        elif t in (";", ",") and depth == 0:
            return i + 1
        i += 1
    return i


def is_cfg_test(toks, i):
    return [t for t, _ in toks[i : i + 7]] == ["#", "[", "cfg", "(", "test", ")", "]"]


def strip_cfg_test(toks):
    """Drops every item gated by `#[cfg(test)]`; returns the kept tokens and the names of
    test-only `mod name;` declarations, whose files are test code too."""
    kept, test_mods, i = [], set(), 0
    while i < len(toks):
        if not is_cfg_test(toks, i):
            kept.append(toks[i])
            i += 1
            continue
        start = i + 7
        while start < len(toks) and toks[start][0] == "#":  # further attributes
            start = skip_group(toks, start + 1)
        end = skip_item(toks, start)
        words = [t for t, _ in toks[start:end]]
        if "mod" in words and words[-1] == ";":
            test_mods.add(words[words.index("mod") + 1])
        i = end
    return kept, test_mods


def module_name(root, path):
    """`a::b` for src/a/b.rs and src/a/b/mod.rs, as a tuple of names; () for the crate root."""
    parts = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts[:-1] if parts[-1] == "mod" else parts)


class Use:
    """One leaf of a path tree: `use a::{b, c::d as e}` has the leaves a::b and a::c::d."""

    def __init__(self, segments, line, alias=None, glob=False, scope=()):
        self.segments, self.line, self.alias, self.glob = segments, line, alias, glob
        self.scope = scope  # the (inline) module the path is written in

    def text(self):
        return "::".join(self.segments) + ("::*" if self.glob else "")


def parse_tree(toks, i, prefix, line, scope):
    """Parses a path (or `use` tree) from toks[i]; returns its leaves and the next index."""
    segments = list(prefix)
    while i < len(toks):
        t = toks[i][0]
        if t == "$" and i + 1 < len(toks) and toks[i + 1][0] == "crate":
            i += 1  # `$crate` in a macro body is this crate
            continue
        if t == "{":
            leaves, i = [], i + 1
            while i < len(toks) and toks[i][0] != "}":
                if toks[i][0] == ",":
                    i += 1
                    continue
                more, i = parse_tree(toks, i, segments, line, scope)
                leaves += more
            return leaves, i + 1
        if t == "*":
            return [Use(segments, line, glob=True, scope=scope)], i + 1
        if not re.match(r"[A-Za-z_]", t):
            break
        segments.append(t)
        i += 1
        if i < len(toks) and toks[i][0] == "::":
            i += 1
            continue
        break
    alias = None
    if i + 1 < len(toks) and toks[i][0] == "as":
        alias, i = toks[i + 1][0], i + 2
    if len(segments) == len(prefix):
        return [], i
    # `a::{self}` names `a` itself.
    if len(segments) > 1 and segments[-1] == "self":
        segments.pop()
    return [Use(segments, line, alias=alias, scope=scope)], i


def paths_of(toks, module):
    """The leaves of a file's `use` trees (they bind names), its other paths, and the child
    modules each (inline) module of the file declares. Every leaf knows its inline module."""
    uses, others = [], []
    children = collections.defaultdict(set)
    stack = []  # for each open brace: the inline module name it opens, or None
    i = 0
    while i < len(toks):
        t, line = toks[i]
        scope = module + tuple(name for name in stack if name)
        prev = toks[i - 1][0] if i else ""
        if t == "{":
            is_mod = i >= 2 and toks[i - 2][0] == "mod"
            stack.append(toks[i - 1][0] if is_mod else None)
        elif t == "}":
            if stack:
                stack.pop()
        elif t == "mod" and i + 1 < len(toks):
            children[scope].add(toks[i + 1][0])
        elif t == "use":
            if i + 1 < len(toks) and toks[i + 1][0] == "::":  # `use ::name`: an extern crate
                i += 1
                continue
            leaves, i = parse_tree(toks, i + 1, (), line, scope)
            uses += leaves
            continue
        elif (
            t == "in" and prev == "(" and i >= 2 and toks[i - 2][0] == "pub"
        ):  # `pub(in crate::a)` names a visibility, not a dependency
            while i < len(toks) and toks[i][0] != ")":
                i += 1
            continue
        elif (
            re.match(r"[A-Za-z_$]", t)
            and prev != "::"
            and i + 1 < len(toks)
            and (toks[i + 1][0] == "::" or t == "$")
        ):
            leaves, end = parse_tree(toks, i, (), line, scope)
            others += [leaf for leaf in leaves if len(leaf.segments) > 1]
            i = max(end, i + 1)
            continue
        i += 1
    return uses, others, children


class File:
    def __init__(self, root, path):
        self.path = os.path.normpath(path)
        self.module = module_name(root, path)
        with open(path, encoding="utf-8") as f:
            toks, self.test_mods = strip_cfg_test(tokens(f.read()))
        self.uses, self.others, self.children = paths_of(toks, self.module)


def resolve(leaf, bindings, seen=()):
    """The absolute path a leaf names (a tuple of names under the crate root), or None when
    it starts with something outside this crate (an extern crate, a type, a local item)."""
    head, rest = leaf.segments[0], leaf.segments[1:]
    if head == "crate":
        return tuple(rest)
    if head in ("self", "super"):
        base = list(leaf.scope)
        segments = leaf.segments[1:] if head == "self" else leaf.segments
        while segments and segments[0] == "super":
            if not base:
                return None
            base.pop()
            segments = segments[1:]
        return tuple(base) + tuple(segments)
    bound = bindings.get((leaf.scope, head))
    if bound is None or bound in seen:
        return None
    if isinstance(bound, Use):  # a `use` binding: resolve it in turn (they may chain)
        target = resolve(bound, bindings, seen + (bound,))
        return None if target is None else target + tuple(rest)
    return bound + tuple(rest)  # a child module declared with `mod`


def longest_module(path, modules):
    for n in range(len(path), 0, -1):
        if path[:n] in modules:
            return path[:n]
    return None


def build_graph(root):
    """The module files, and {(importer, imported): [(file, line, path as written)]}."""
    files = []
    for folder, folders, names in os.walk(root):
        folders.sort()  # the first example of each edge should not depend on the disk
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.endswith(".rs") and name != "tests.rs":
                files.append(File(root, path))

    # A file whose module is declared `#[cfg(test)] mod name;` is test code, and so is
    # every module under it.
    test_only = {f.module + (name,) for f in files for name in f.test_mods}
    files = [
        f
        for f in files
        if f.module != ()
        and not any(f.module[: len(t)] == t for t in test_only)
    ]
    modules = {f.module for f in files}

    edges = collections.defaultdict(list)
    unresolved = collections.Counter()
    for f in files:
        # Names are visible throughout their module whatever the order, so bind them all
        # before resolving anything. A `use` inside a function body is taken as binding
        # in its module: close enough for names that are modules.
        bindings = {}
        for scope, names in f.children.items():
            for name in names:
                bindings[scope, name] = scope + (name,)
        for leaf in f.uses:
            if not leaf.glob:
                bindings[leaf.scope, leaf.alias or leaf.segments[-1]] = leaf
        for leaf in f.uses + f.others:
            target = resolve(leaf, bindings)
            if target is None:
                continue
            dst = longest_module(target, modules)
            if dst is None:
                # `crate::NAME` is an item of lib.rs, which is no node; anything longer
                # should have named a module file.
                if len(target) > 1:
                    unresolved[f"{f.path}:{leaf.line} {leaf.text()}"] += 1
                continue
            if dst != f.module:
                edges[f.module, dst].append((f.path, leaf.line, leaf.text()))
    return modules, edges, unresolved


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative (recursion would run out of stack on deep chains)."""
    succ = collections.defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found


def check_cycles(root):
    """Prints every import cycle between module files; returns True if there is none."""
    modules, edges, unresolved = build_graph(root)
    # A module reading what its own ancestors declare (`super::Item`, `crate::a::Item` from
    # inside `a`) is how a Rust folder shares its types with its files: the folder is the
    # owner and its files the parts. Those edges are left out, so a cycle is one between
    # modules neither of which contains the other: siblings and cousins, the circles
    # whose data flows both ways.
    edges = {(a, b): v for (a, b), v in edges.items() if a[: len(b)] != b}
    name = "::".join
    cycles = sorted(
        (c for c in strongly_connected(modules, edges) if len(c) > 1),
        key=lambda c: (-len(c), c),
    )
    for n, component in enumerate(cycles, 1):
        members = set(component)
        inside = sorted((a, b) for a, b in edges if a in members and b in members)
        print(f"cycle {n}: {len(component)} modules, {len(inside)} edges")
        print(f"  {', '.join(name(m) for m in component)}")
        for a, b in inside:
            path, line, text = edges[a, b][0]
            more = len(edges[a, b]) - 1
            extra = f" (+{more} more)" if more else ""
            print(f"  {name(a)} -> {name(b)}: {path}:{line} {text}{extra}")
    for where, _ in sorted(unresolved.items()):
        print(f"unresolved: {where} names no module file")
    if cycles:
        in_cycles = sum(len(c) for c in cycles)
        print(
            f"import cycles: {len(cycles)} cycles over {in_cycles} modules"
            f" ({len(modules)} modules, {len(edges)} imports in all)"
        )
    else:
        print(f"import cycles ok: {len(edges)} imports between {len(modules)} modules, no cycle")
    return not cycles


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default="src", help="the source folder (default: src)")
    flags = parser.add_mutually_exclusive_group()
    flags.add_argument("--cycles", action="store_true", help="also fail on an import cycle")
    flags.add_argument(
        "--cycles-report", action="store_true", help="also print import cycles, without failing"
    )
    args = parser.parse_args()

    # A flag wins over the environment, which wins over the constant.
    env = os.environ.get("CHECK_CYCLES", "").strip().lower()
    if args.cycles or args.cycles_report:
        cycles = "report" if args.cycles_report else "fail"
    elif env in ("1", "true", "report"):
        cycles = "report" if env == "report" else "fail"
    elif env in ("0", "false"):
        cycles = None
    else:
        cycles = "fail" if CHECK_CYCLES else None

    ok = check_layers(args.root)
    if cycles:
        acyclic = check_cycles(args.root)
        ok = ok and (acyclic or cycles == "report")
    sys.exit(0 if ok else 1)

if __name__ == "__main__":
    main()
