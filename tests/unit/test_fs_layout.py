#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""fs/ keeps its include graph acyclic and its headers honest:

- every function or variable an fs/ header declares is defined (not
  static) by an fs/*.c that includes that header;
- each fs/*.c defines what at most one fs/ header declares, which makes it
  part of that header's module (x.h with x.c, or with x_*.c: ns.h with
  ns_list.c, source.h with source_local.c, ...);
- the modules' #include "fs/..." arrows have no cycle;
- fs/README.md draws those arrows as they are (its indented
  "module -> modules" lines).

Declarations and definitions come from universal-ctags. A self-test first
runs the same checks on a made-up tree with a cycle and a header whose
function nothing defines, and expects both reported.

usage: test_fs_layout.py CTAGS SRCDIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"fs/([^"]+)"', re.M)


def tags(ctags, paths):
	"""ctags JSON records of the C files paths (prototypes, functions,
	extern and defined variables)."""
	out = subprocess.run([ctags, '--output-format=json', '--fields=+f', '--kinds-C=fpxv',
			      '--language-force=C', '-f', '-'] + paths, check=True,
			     stdout=subprocess.PIPE, timeout=60).stdout.decode()
	return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


def layout(ctags, fsdir):
	"""(problems, modules, edges) of the fs/ tree at fsdir."""
	files = sorted(f for f in os.listdir(fsdir) if f.endswith(('.c', '.h')))
	includes = {}
	for f in files:
		with open(os.path.join(fsdir, f), encoding='utf-8') as fh:
			includes[f] = [h for h in INCLUDE.findall(fh.read()) if h != f]
	declared = {}  # name -> header
	defined = {}  # name -> [c files]
	for t in tags(ctags, [os.path.join(fsdir, f) for f in files]):
		f = os.path.basename(t['path'])
		if f.endswith('.h') and t['kind'] in ('prototype', 'externvar'):
			declared[t['name']] = f
		elif f.endswith('.c') and t['kind'] in ('function', 'variable') and not t.get('file'):
			defined.setdefault(t['name'], []).append(f)
	problems = []
	for name, h in sorted(declared.items()):
		by = [c for c in defined.get(name, []) if h in includes[c]]
		if not by:
			problems.append(f'{h} declares {name}, which no fs/*.c including {h} defines')
	module = {}
	for f in files:
		if f.endswith('.h'):
			module[f] = f[:-2]
			continue
		owners = sorted({declared[n] for n, cs in defined.items() if f in cs and n in declared})
		if len(owners) > 1:
			problems.append(f'{f} defines what {" and ".join(owners)} declare: split it')
		module[f] = owners[0][:-2] if owners else f[:-2]
	edges = {}
	for f in files:
		for h in includes[f]:
			if h not in module:
				problems.append(f'{f} includes fs/{h}, which does not exist')
			elif module[h] != module[f]:
				edges.setdefault(module[f], set()).add(module[h])
	# Depth-first search; a grey node reached again closes a cycle.
	state, stack = {}, []

	def visit(m):
		state[m] = 'grey'
		stack.append(m)
		for n in sorted(edges.get(m, ())):
			if state.get(n) == 'grey':
				cyc = stack[stack.index(n):] + [n]
				problems.append('include cycle: ' + ' -> '.join(cyc))
			elif n not in state:
				visit(n)
		stack.pop()
		state[m] = 'black'

	for m in sorted(set(module.values())):
		if m not in state:
			visit(m)
	return problems, sorted(set(module.values())), edges


SELFTEST = {
	'a.h': 'void a_run(void);\nvoid a_gone(void);\n',
	'a.c': '#include "fs/a.h"\n#include "fs/b.h"\nvoid a_run(void) { b_run(); }\n',
	'b.h': 'void b_run(void);\n',
	'b.c': '#include "fs/b.h"\n#include "fs/a.h"\nvoid b_run(void) { a_run(); }\n',
}


README_EDGE = re.compile(r'^    ([a-z_, ]+?) +-> (.*)$', re.M)


def readme_edges(path):
	"""The "module -> modules" lines of fs/README.md as {module: set}."""
	with open(path, encoding='utf-8') as fh:
		text = fh.read()
	drawn = {}
	for lhs, rhs in README_EDGE.findall(text):
		targets = set() if rhs.strip() == 'nothing in fs/' else set(rhs.split())
		for m in lhs.split(','):
			drawn[m.strip()] = targets
	return drawn


def main():
	ctags, srcdir = sys.argv[1], sys.argv[2]
	n = 0
	with tempfile.TemporaryDirectory(prefix='test_fs_layout.') as tmp:
		for name, text in SELFTEST.items():
			with open(os.path.join(tmp, name), 'w', encoding='utf-8') as fh:
				fh.write(text)
		problems, _, _ = layout(ctags, tmp)
	n += 1
	want = ['a.h declares a_gone, which no fs/*.c including a.h defines',
		'include cycle: a -> b -> a']
	if problems == want:
		print(f'ok {n} - the checks find a made-up cycle and a declaration nothing defines')
	else:
		print(f'not ok {n} - on the made-up tree: {problems}, expected {want}')
	problems, modules, edges = layout(ctags, os.path.join(srcdir, 'fs'))
	n += 1
	if len(modules) < 10:
		print(f'not ok {n} - only {len(modules)} modules found in fs/: {modules}')
	else:
		print(f'ok {n} - {len(modules)} modules in fs/')
	for m in modules:
		print(f'# {m} -> {" ".join(sorted(edges.get(m, ()))) or "(nothing in fs/)"}')
	n += 1
	if problems:
		print(f'not ok {n} - fs/ layout:\n# ' + '\n# '.join(problems))
	else:
		print(f'ok {n} - fs/ headers declare only what their module defines; no include cycle')
	n += 1
	drawn = readme_edges(os.path.join(srcdir, 'fs', 'README.md'))
	actual = {m: set(edges.get(m, ())) for m in modules}
	wrong = [f'{m}: README {sorted(drawn.get(m, ["(missing)"]))}, '
		 f'code {sorted(actual.get(m, ["(no such module)"]))}'
		 for m in sorted(set(drawn) | set(actual)) if drawn.get(m) != actual.get(m)]
	if wrong:
		print(f'not ok {n} - fs/README.md draws other includes than the code has:\n# ' +
		      '\n# '.join(wrong))
	else:
		print(f'ok {n} - fs/README.md draws the {len(actual)} modules\' includes as they are')
	print(f'1..{n}')


if __name__ == '__main__':
	main()
