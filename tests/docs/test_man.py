#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The man pages agree with the commands: every option that `coordfs --help`
and `fsstat --help` print is documented in coordfs(1) and fsstat(1), and both
pages render without a groff warning. An option added to a command without a
word in its man page fails here. So does an environment variable that the
daemon reads (getenv, or a "NAME=" looked for in another process's
environment) and coordfs(1) does not name.

usage: test_man.py COORDFS_BIN COORDFS_1 FSSTAT_BIN FSSTAT_1
"""
import os
import re
import subprocess
import sys

OPTION = re.compile(r'(?<![\w-])(--?[A-Za-z][A-Za-z0-9-]*)')


def help_options(binary):
	"""Options named in the option lines of `binary --help`."""
	out = subprocess.run([binary, '--help'], check=True, stdout=subprocess.PIPE,
			     stderr=subprocess.STDOUT, timeout=30).stdout.decode()
	opts = set()
	for line in out.splitlines():
		if line.lstrip().startswith('-'):
			opts.update(OPTION.findall(line))
	return out, opts


def man_text(page):
	"""The page's roff source with escapes that split option names undone."""
	with open(page, encoding='utf-8') as f:
		src = f.read()
	src = src.replace('\\-', '-').replace('\\%', '')
	return re.sub(r'\\f[BIRP]', '', src)


def documented(text, opt):
	return re.search(r'(?<![\w-])' + re.escape(opt) + r'(?![\w-])', text) is not None


# A variable read by name: getenv("X"), secure_getenv("X"), or through a
# small wrapper text_env("X"); or matched as "X=" in another process's environ.
ENV_READ = re.compile(r'\b(?:secure_getenv|getenv|text_env)\("([A-Z][A-Z0-9_]*)"\)'
		      r'|"([A-Z][A-Z0-9_]{2,})="')
DAEMON_DIRS = ('fs', 'cache', 'prep', 'remote', 'common')


def env_reads(root):
	"""{variable: first file reading it} over the daemon's sources."""
	found = {}
	for d in DAEMON_DIRS:
		for dirpath, _, names in os.walk(os.path.join(root, d)):
			for name in sorted(names):
				if not name.endswith('.c'):
					continue
				path = os.path.join(dirpath, name)
				with open(path, encoding='utf-8') as f:
					for m in ENV_READ.finditer(f.read()):
						found.setdefault(m.group(1) or m.group(2),
								 os.path.relpath(path, root))
	return found


def render_warnings(page):
	r = subprocess.run(['groff', '-man', '-Tutf8', '-ww', '-z', page], stdout=subprocess.PIPE,
			   stderr=subprocess.PIPE, timeout=60)
	return r.returncode, r.stderr.decode()


def main():
	if len(sys.argv) != 5:
		print(__doc__, file=sys.stderr)
		return 2
	pairs = [(sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])]
	failed = 0
	n = 0
	print('TAP version 13')
	for binary, page in pairs:
		out, opts = help_options(binary)
		text = man_text(page)
		n += 1
		# A help text this parser cannot read would make the check vacuous.
		if len(opts) >= 3:
			print(f'ok {n} - {binary} --help names {len(opts)} options')
		else:
			failed += 1
			print(f'not ok {n} - only {sorted(opts)} found in {binary} --help:\n# ' +
			      out.replace('\n', '\n# '))
		missing = sorted(o for o in opts if not documented(text, o))
		n += 1
		if missing:
			failed += 1
			print(f'not ok {n} - {page} does not document {", ".join(missing)} '
			      f'(printed by {binary} --help)')
		else:
			print(f'ok {n} - {page} documents every option of --help: {" ".join(sorted(opts))}')
		rc, warnings = render_warnings(page)
		n += 1
		if rc == 0 and not warnings:
			print(f'ok {n} - {page} renders without warnings')
		else:
			failed += 1
			print(f'not ok {n} - groff on {page}: exit {rc}\n# ' + warnings.replace('\n', '\n# '))
	# every variable the daemon reads is named in coordfs(1)
	root = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[2])))
	reads = env_reads(root)
	text = man_text(sys.argv[2])
	missing = sorted(f'{v} ({f})' for v, f in reads.items() if not documented(text, v))
	n += 1
	if len(reads) < 10:
		failed += 1
		print(f'not ok {n} - only {sorted(reads)} found read in {root}: the scan is broken')
	elif missing:
		failed += 1
		print(f'not ok {n} - coordfs(1) does not name {", ".join(missing)}')
	else:
		print(f'ok {n} - coordfs(1) names all {len(reads)} variables the daemon reads')
	print(f'1..{n}')
	return 1 if failed else 0


if __name__ == '__main__':
	sys.exit(main())
