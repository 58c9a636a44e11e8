#!/usr/bin/env python3
"""Checks that the top-level modules of src/ import only from layers below their own.

Reads every `crate::<module>` path (use lines, `crate::{a, b}` groups, inline paths) on
non-comment lines outside `#[cfg(test)] mod tests` blocks and `tests.rs` files, maps it to
the importing file's top-level module, and fails when an import points to the same layer
or a higher one, or when a module is missing from LAYERS. A strictly descending import
graph cannot have a cycle. Run from the repository root: python3 .ci/import-layers.py
"""
import collections
import os
import re
import sys

# Lowest first. A module may import only from modules of lower layers.
LAYERS = [
    ["bounded", "logging", "rng", "secret", "sse"],  # leaves
    ["http"],  # the wire: routes, errors, bodies, guards
    ["chat", "grpc", "parsers", "mcp", "history"],  # language work for token-id engines; gRPC messages and clients; output parsers; the MCP client; the history store
    ["resilience", "server"],  # breakers and retries; one connection, generic over Handler
    ["runtime"],  # threads and accept loops, generic over ThreadSetup
    ["fleet"],  # what the hot path reads about workers
    ["admission", "auth", "routing"],  # decisions on one request
    ["metrics"],  # families and scrape-time collectors
    ["control", "pipeline"],  # background tasks; the data path
    ["admin", "conversations"],  # administration handlers; the Conversations API
    ["app", "config"],  # the request side of the wiring; the flags, composing settings
    ["startup"],  # builds everything from the Config
]

ROOT = sys.argv[1] if len(sys.argv) > 1 else "src"
LEVEL = {m: i for i, layer in enumerate(LAYERS) for m in layer}
PATH = re.compile(r"\bcrate::([a-z_0-9]+)")
GROUP = re.compile(r"use crate::\{([^;]*)\};", re.S)


def module_of(path):
    parts = os.path.relpath(path, ROOT).split(os.sep)
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


edges = collections.defaultdict(set)
for folder, _, files in os.walk(ROOT):
    for name in files:
        path = os.path.join(folder, name)
        if not name.endswith(".rs") or name == "tests.rs":
            continue
        src = module_of(path)
        if src in ("lib", "main"):
            continue
        with open(path, encoding="utf-8") as f:
            for dst in imports(f.read()):
                if dst not in (src, "self"):
                    edges[src, dst].add(os.path.relpath(path, ROOT))

problems = []
for module in sorted({m for pair in edges for m in pair}):
    if module not in LEVEL:
        problems.append(f"{module}: not in LAYERS (add it to .ci/import-layers.py)")
for (src, dst), files in sorted(edges.items()):
    if src in LEVEL and dst in LEVEL and LEVEL[dst] >= LEVEL[src]:
        problems.append(f"{src} -> {dst} points up or sideways: {', '.join(sorted(files))}")
for line in problems:
    print(line)
if problems:
    sys.exit(1)
print(f"import layers ok: {len(edges)} imports between {len(LEVEL)} modules, all downward")
