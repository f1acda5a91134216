#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""fs/ and prep/ keep their include graphs acyclic and their headers honest.
In each of those folders (X/ below):

- every function or variable an X/ header declares is defined (not
  static) by an X/*.c that includes that header;
- each X/*.c defines what at most one X/ header declares, which makes it
  part of that header's module (x.h with x.c, or with x_*.c: ns.h with
  ns_list.c, source.h with source_local.c, codec.h with codec_jpeg.c, ...);
  the folder's public header (prep/prep.h, which every part of prep/
  implements) makes nobody a member;
- the modules' #include "X/..." arrows have no cycle;
- X/README.md draws those arrows as they are (its indented
  "module -> modules" lines).

And across the whole tree (common/ cache/ prep/ remote/ fs/ tools/), where a
module is a .c with its .h of the same name: no two modules include each
other, directly or round a longer loop.

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

# folder -> (its public headers, the fewest modules it must have)
FOLDERS = {'fs': ((), 10), 'prep': (('prep.h',), 10)}


def tags(ctags, paths):
	"""ctags JSON records of the C files paths (prototypes, functions,
	extern and defined variables)."""
	out = subprocess.run([ctags, '--output-format=json', '--fields=+f', '--kinds-C=fpxv',
			      '--language-force=C', '-f', '-'] + paths, check=True,
			     stdout=subprocess.PIPE, timeout=60).stdout.decode()
	return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


def layout(ctags, fsdir, folder='fs', public=()):
	"""(problems, modules, edges) of the tree at fsdir, whose includes name
	it as folder/."""
	include = re.compile(r'^\s*#\s*include\s+"' + folder + r'/([^"]+)"', re.M)
	files = sorted(f for f in os.listdir(fsdir) if f.endswith(('.c', '.h')))
	includes = {}
	for f in files:
		with open(os.path.join(fsdir, f), encoding='utf-8') as fh:
			includes[f] = [h for h in include.findall(fh.read()) if h != f]
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
			problems.append(f'{h} declares {name}, which no {folder}/*.c including {h} '
					'defines')
	module = {}
	for f in files:
		if f.endswith('.h'):
			module[f] = f[:-2]
			continue
		owners = sorted({declared[n] for n, cs in defined.items()
				 if f in cs and n in declared and declared[n] not in public})
		if len(owners) > 1:
			problems.append(f'{f} defines what {" and ".join(owners)} declare: split it')
		module[f] = owners[0][:-2] if owners else f[:-2]
	edges = {}
	for f in files:
		for h in includes[f]:
			if h not in module:
				problems.append(f'{f} includes {folder}/{h}, which does not exist')
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


def readme_edges(path, folder='fs'):
	"""The "module -> modules" lines of X/README.md as {module: set}."""
	with open(path, encoding='utf-8') as fh:
		text = fh.read()
	drawn = {}
	for lhs, rhs in README_EDGE.findall(text):
		targets = set() if rhs.strip() == f'nothing in {folder}/' else set(rhs.split())
		for m in lhs.split(','):
			drawn[m.strip()] = targets
	return drawn


def check_folder(ctags, srcdir, folder, public, least, n):
	"""The TAP lines of one folder's checks, numbered from n + 1; the last
	number."""
	problems, modules, edges = layout(ctags, os.path.join(srcdir, folder), folder, public)
	n += 1
	if len(modules) < least:
		print(f'not ok {n} - only {len(modules)} modules found in {folder}/: {modules}')
	else:
		print(f'ok {n} - {len(modules)} modules in {folder}/')
	for m in modules:
		print(f'# {m} -> {" ".join(sorted(edges.get(m, ()))) or f"(nothing in {folder}/)"}')
	n += 1
	if problems:
		print(f'not ok {n} - {folder}/ layout:\n# ' + '\n# '.join(problems))
	else:
		print(f'ok {n} - {folder}/ headers declare only what their module defines; '
		      'no include cycle')
	n += 1
	drawn = readme_edges(os.path.join(srcdir, folder, 'README.md'), folder)
	actual = {m: set(edges.get(m, ())) for m in modules}
	wrong = [f'{m}: README {sorted(drawn.get(m, ["(missing)"]))}, '
		 f'code {sorted(actual.get(m, ["(no such module)"]))}'
		 for m in sorted(set(drawn) | set(actual)) if drawn.get(m) != actual.get(m)]
	if wrong:
		print(f'not ok {n} - {folder}/README.md draws other includes than the code has:\n# ' +
		      '\n# '.join(wrong))
	else:
		print(f'ok {n} - {folder}/README.md draws the {len(actual)} modules\' includes as '
		      'they are')
	return n


TREE = ('common', 'cache', 'prep', 'remote', 'fs', 'tools')


def tree_cycles(srcdir):
	"""Include loops between modules (path without extension) of TREE."""
	include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
	edges = {}
	for top in TREE:
		for d, _, files in os.walk(os.path.join(srcdir, top)):
			for f in files:
				if not f.endswith(('.c', '.h')):
					continue
				path = os.path.join(d, f)
				mod = os.path.splitext(os.path.relpath(path, srcdir))[0]
				with open(path, encoding='utf-8', errors='replace') as fh:
					text = fh.read()
				for h in include.findall(text):
					if os.path.exists(os.path.join(srcdir, h)):
						hm = os.path.splitext(h)[0]
						if hm != mod:
							edges.setdefault(mod, set()).add(hm)
	cycles, state, stack = [], {}, []

	def visit(u):
		state[u] = 1
		stack.append(u)
		for v in sorted(edges.get(u, ())):
			if state.get(v) == 1:
				cycles.append(' -> '.join(stack[stack.index(v):] + [v]))
			elif not state.get(v):
				visit(v)
		stack.pop()
		state[u] = 2
	for u in sorted(edges):
		if not state.get(u):
			visit(u)
	return len(edges), cycles


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
	for folder, (public, least) in FOLDERS.items():
		n = check_folder(ctags, srcdir, folder, public, least, n)
	n += 1
	count, cycles = tree_cycles(srcdir)
	if cycles or count < 40:
		print(f'not ok {n} - include loops between the tree\'s {count} modules:\n# ' +
		      '\n# '.join(cycles))
	else:
		print(f'ok {n} - no include loop between the tree\'s {count} modules')
	print(f'1..{n}')


if __name__ == '__main__':
	main()
