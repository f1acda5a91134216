#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The man pages agree with the commands: every option that `coordfs --help`
and `fsstat --help` print is documented in coordfs(1) and fsstat(1), and both
pages render without a groff warning. An option added to a command without a
word in its man page fails here.

usage: test_man.py COORDFS_BIN COORDFS_1 FSSTAT_BIN FSSTAT_1
"""
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
	print(f'1..{n}')
	return 1 if failed else 0


if __name__ == '__main__':
	sys.exit(main())
