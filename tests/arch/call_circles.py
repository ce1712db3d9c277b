#!/usr/bin/env python3
"""Fails when source files of the libraries and front ends call each other in a circle.

Reads the object files of a CMake build tree with `nm`: file A uses file B when A's object
references a global symbol that B's object defines. A strongly connected set of two or more files
in that graph is a circle (A reaches B and B reaches A through calls or data). Tests are not
scanned. Usage: call_circles.py BUILD_DIR
"""
import os
import subprocess
import sys

SOURCE_ROOTS = ("core/", "overrides/", "providers/", "recipes/", "kernels/", "runtime/",
                "scripts/")


def circles(graph):
    """Strongly connected sets of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def objects(build):
    """(source path relative to the repository, object path) for every scanned object file; an
    object whose source is gone (a stale one in an incremental build) is skipped."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = []
    cmake_files = os.path.join(build, "CMakeFiles")
    for target in sorted(os.listdir(cmake_files)):
        if not target.endswith(".dir"):
            continue
        top = os.path.join(cmake_files, target)
        for dirpath, _, files in os.walk(top):
            for f in files:
                if not f.endswith(".o"):
                    continue
                obj = os.path.join(dirpath, f)
                src = os.path.relpath(obj, top)[:-2]
                if src.startswith(SOURCE_ROOTS) and os.path.isfile(os.path.join(repo, src)):
                    out.append((src, obj))
    return out


def main():
    # The finder must find what it is meant to find, or a pass means nothing.
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    if circles(toy) != [["a", "b", "c"]]:
        print("call_circles: self-check failed", circles(toy))
        return 1
    build = sys.argv[1]
    defs, uses = {}, {}
    for src, obj in objects(build):
        text = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRCGSV":
                defs.setdefault(parts[2], set()).add(src)
            elif len(parts) == 2 and parts[0] == "U":
                uses.setdefault(src, set()).add(parts[1])
    graph, why = {src: set() for src in uses}, {}
    for src, symbols in uses.items():
        for sym in symbols:
            owners = defs.get(sym, set())
            if len(owners) != 1:  # undefined here (libc, MPI) or defined twice (main)
                continue
            owner = next(iter(owners))
            if owner != src:
                graph[src].add(owner)
                why.setdefault((src, owner), set()).add(sym)
    edges = sum(len(v) for v in graph.values())
    found = circles(graph)
    print(f"{len(graph)} source files, {edges} uses between them, {len(found)} circles")
    for group in found:
        print("circle:", " ".join(group))
        for a in group:
            for b in sorted(graph[a] & set(group)):
                print(f"  {a} -> {b}: {' '.join(sorted(why[(a, b)]))}")
    return 1 if found or len(graph) < 100 else 0


if __name__ == "__main__":
    sys.exit(main())
