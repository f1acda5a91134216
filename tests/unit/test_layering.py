#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fs/'s layering, from its sources (TAP).

1. The #include "fs/..." lines of fs/*.c and fs/*.h, as a graph between
   modules (X.c and X.h are module X), have no cycle: the dependencies of
   fs/ files point one way.
2. Every function or variable a header fs/X.h declares is defined in
   fs/X.c or fs/X_*.c (source.h: source.c, source_local.c, ...), so a
   header speaks only for its own module.

Declarations and definitions are read with Universal Ctags.
Usage: test_layering.py SOURCE_ROOT
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"fs/([A-Za-z0-9_]+)\.h"', re.M)


def module(path):
    return os.path.splitext(os.path.basename(path))[0]


def include_graph(fsdir):
    graph = {}
    for name in sorted(os.listdir(fsdir)):
        if not name.endswith(('.c', '.h')):
            continue
        with open(os.path.join(fsdir, name), encoding='utf-8') as f:
            text = f.read()
        src = module(name)
        deps = graph.setdefault(src, set())
        for dst in INCLUDE.findall(text):
            if dst != src:
                deps.add(dst)
                graph.setdefault(dst, set())
    return graph


def find_cycle(graph):
    """One cycle as a list of modules (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {m: WHITE for m in graph}
    stack = []

    def visit(m):
        color[m] = GREY
        stack.append(m)
        for d in sorted(graph[m]):
            if color[d] == GREY:
                return stack[stack.index(d):] + [d]
            if color[d] == WHITE:
                c = visit(d)
                if c:
                    return c
        stack.pop()
        color[m] = BLACK
        return None

    for m in sorted(graph):
        if color[m] == WHITE:
            c = visit(m)
            if c:
                return c
    return None


def ctags(paths, kinds):
    out = subprocess.run(['ctags', '-x', '--_xformat=%K %N %F', '--language-force=C',
                          '--kinds-C=' + kinds] + paths,
                         check=True, capture_output=True, text=True).stdout
    return [line.split(' ', 2) for line in out.splitlines() if line.strip()]


def undefined_declarations(fsdir):
    """(header, name) for each declaration no matching .c defines."""
    bad = []
    cfiles = sorted(n for n in os.listdir(fsdir) if n.endswith('.c'))
    defs = {}
    for kind, name, path in ctags([os.path.join(fsdir, n) for n in cfiles], 'fv'):
        defs.setdefault(module(path), set()).add(name)
    headers = sorted(n for n in os.listdir(fsdir) if n.endswith('.h'))
    for kind, name, path in ctags([os.path.join(fsdir, n) for n in headers], 'px'):
        m = module(path)
        owners = [c for c in defs if c == m or c.startswith(m + '_')]
        if not any(name in defs[c] for c in owners):
            bad.append((os.path.basename(path), name))
    return bad


def main():
    root = sys.argv[1]
    fsdir = os.path.join(root, 'fs')
    print('1..3')
    graph = include_graph(fsdir)
    edges = sum(len(d) for d in graph.values())
    # The check must have something to check: fs/ has many includes.
    if edges >= 10:
        print(f'ok 1 - {len(graph)} modules, {edges} include arrows read')
    else:
        print(f'not ok 1 - only {edges} include arrows read from {fsdir}')
    cycle = find_cycle(graph)
    if cycle:
        print('not ok 2 - include cycle between fs/ files: ' + ' -> '.join(cycle))
    else:
        print('ok 2 - no include cycle in fs/')
    bad = undefined_declarations(fsdir)
    if bad:
        print('not ok 3 - headers declaring what their module does not define:')
        for h, n in bad:
            print(f'#   fs/{h}: {n}')
    else:
        print('ok 3 - every fs/ header declares only what its own .c files define')


if __name__ == '__main__':
    main()
