#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/bench/plots.py draws what the tables say: the table reader picks
the right rows and numbers out of benchmark markdown, every plot of the
recorded results (tools/bench/RESULTS*.md, the README's figures) can still
be drawn, and a markdown without the table draws nothing.

usage: test_plots.py TOP_SOURCE_DIR
"""
import os
import sys
import tempfile

top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
sys.path.insert(0, os.path.join(top, 'tools', 'bench'))
import plots  # noqa: E402

n = 0
failed = 0


def check(label, cond, detail=''):
	global n, failed
	n += 1
	if cond:
		print(f'ok {n} - {label}')
	else:
		failed += 1
		print(f'not ok {n} - {label}' + (f'\n# {detail}' if detail else ''))


def is_png(path):
	with open(path, 'rb') as f:
		return f.read(8) == b'\x89PNG\r\n\x1a\n'


STORAGE = '''### Storage MiB read per epoch

| cache | reader | epoch 1 | epoch 2 | mean 2-2 | optimum |
| --- | --- | --- | --- | --- | --- |
| 50% | page cache | 100 | 80 | 80 | 50 |
| 50% | coordfs | 101 | 51 | 51 | 50 |
| 50% | optimum | 100 | 50 | 50 | 50 |
'''

print('TAP version 13')
hdr, rows = plots.find_table(STORAGE, 'cache', 'reader', 'epoch 1')
check('find_table: header', hdr[:4] == ['cache', 'reader', 'epoch 1', 'epoch 2'], hdr)
check('find_table: rows', [r[1] for r in rows] == ['page cache', 'coordfs', 'optimum'], rows)
check('number: leading number of a cell', plots.number('1.26x') == 1.26 and plots.number('-') is None)
check('no table: None', plots.find_table('no table here\n| a |\n', 'cache') is None)
prep = '''| repeat | path | epoch 1 | whole run | CPU ms/image: loader / daemon / total |
|---|---|---|---|---|
| 1 | PIL | 1 | 100 | 5 / 0 / 6 |
| 2 | PIL | 1 | 300 | 5 / 0 / 8 |
| 1 | prepared | 1 | 200 | 2 / 2 / 4 |
'''
_, prow = plots.find_table(prep, 'repeat', 'path', 'epoch 1')
m = plots.medians(prow, 1, [lambda r: plots.number(r[3]), lambda r: plots.number(r[4].split('/')[-1])])
check('medians per path', m == {'PIL': [200, 7], 'prepared': [200, 4]}, m)

with tempfile.TemporaryDirectory() as out:
	p = plots.plot_storage(STORAGE, os.path.join(out, 's.png'))
	check('storage plot from a table', p is not None and is_png(p), p)
	check('no warm-read table, no plot', plots.plot_warm(STORAGE, os.path.join(out, 'w.png')) is None)
	check('no file for a missing plot', not os.path.exists(os.path.join(out, 'w.png')))
	results = ''
	for name in ('RESULTS.md', 'RESULTS-prepared.md'):
		with open(os.path.join(top, 'tools', 'bench', name)) as f:
			results += f.read() + '\n'
	for kind, fn in (('storage-per-epoch', plots.plot_storage), ('warm-read', plots.plot_warm),
			 ('prepared', plots.plot_prepared)):
		p = fn(results, os.path.join(out, kind + '.png'))
		check(f'recorded results still draw {kind}.png', p is not None and is_png(p), p)
	s3 = ('| tool | mount s | epoch 1 s (from mount) | epoch 2 s | epoch 1 GETs / MiB | epoch 2 GETs / MiB |\n'
	      '| --- | --- | --- | --- | --- | --- |\n'
	      '| coordfs | 0.5 | 10.0 | 4.0 | 100 / 10.0 | 50 / 5.0 |\n'
	      '| rclone | failed: no rclone |  |  |  |  |\n')
	p = plots.plot_s3(s3, os.path.join(out, 's3.png'))
	check('s3 plot from a table with a failed row', p is not None and is_png(p), p)
	check('no s3 table, no plot', plots.plot_s3(STORAGE, os.path.join(out, 'x.png')) is None)
	disk = ('| reader | phase | epoch | MiB read | optimum MiB | x optimum | seconds |\n'
		'| --- | --- | --- | --- | --- | --- | --- |\n'
		'| coordfs | first mount | 1 | 1024 | 1024 | 1.000 | 9.0 |\n'
		'| coordfs | first mount | 2 | 512 | 512 | 1.000 | 5.0 |\n'
		'| coordfs | remount | 3 | 513 | 512 | 1.002 | 5.1 |\n'
		'| rclone vfs full | first mount | 1 | 2048 | 1024 | 2.000 | 20.0 |\n')
	p = plots.plot_disk_tier(disk, os.path.join(out, 'disk.png'))
	check('disk tier plot from a table', p is not None and is_png(p), p)
	# the bench's paired direct epochs, which have no epoch number
	direct = disk + '| the dataset\'s file system directly | after coordfs epoch 2 | - | 1045 | 1024 | 1.021 | 1.6 |\n'
	p = plots.plot_disk_tier(direct, os.path.join(out, 'disk2.png'))
	check('disk tier plot with direct epochs (epoch "-")', p is not None and is_png(p), p)
	check('no disk tier table, no plot', plots.plot_disk_tier(STORAGE, os.path.join(out, 'y.png')) is None)
	# What benchlib.save does after a run.
	got = plots.plot_markdown('cache_efficiency', STORAGE, out, 'ce-1')
	check('plot_markdown names its plot after the run',
	      got == [os.path.join(out, 'ce-1-storage-per-epoch.png')], got)
print(f'1..{n}')
sys.exit(1 if failed else 0)
