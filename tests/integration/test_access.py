# SPDX-License-Identifier: MIT
"""Integration test: who may use a mount (coordfs(1): SECURITY, OPTIONS).

A root mount is usable by root alone unless -o allow_other is given: a
bucket mounted by root with root's credentials must not be readable by
every local user. Two system users are made for the test (removed at the
end). Checks:
  - a local directory mounted by root without allow_other: the other
    user can neither list the mount nor read a 0644 file, in the raw tree
    or in the prepared view; root can;
  - the same with -o allow_other: the user reads the 0644 file (raw and
    prepared) and still not a 0600 one (the source's modes hold);
  - an object store (a fake S3 endpoint) mounted by root: without
    allow_other the user gets nothing; with allow_other and --uid, --gid,
    --file-mode=0440, --dir-mode=0550 the objects show that owner and
    mode (write bits never), the owning user reads them and the other
    user does not;
  - bad values (--file-mode=999, --uid=-1) and owner options with a local
    SOURCE fail with one line and leave nothing mounted.
"""

import errno
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordfs_test as ct	# noqa: E402
import s3_fixture as s3f	# noqa: E402


def populate(src):
	# the users must reach the mount point: mkdtemp makes 0700
	os.chmod(os.path.dirname(src), 0o755)
	os.chmod(src, 0o755)
	ct.gendata(src, classes=1, per_class=2, seed=5)
	files = sorted(os.path.relpath(os.path.join(d, f), src)
		       for d, _, fs in os.walk(src) for f in fs)
	os.chmod(os.path.join(src, files[1]), 0o600)
	return files


def probe_ops(mnt, files):
	return [['list', mnt], ['open', os.path.join(mnt, files[0])],
		['open', os.path.join(mnt, 'prepared/center64', files[0])],
		['open', os.path.join(mnt, files[1])]]


def test_local(c, user):
	with ct.TempDirs(prefix='coordfs-access-') as td:
		os.chmod(td.mnt, 0o755)
		files = populate(td.src)
		for opts, shared in (([], False), (['-o', 'allow_other'], True)):
			label = ' '.join(opts) or 'no allow_other'
			rc, _, err = ct.run_coordfs(['--prepared', '--cache-size=8M'] + opts
						    + [td.src, td.mnt])
			if not c.eq(f'{label}: root mounts', rc, 0):
				print(err)
				continue
			try:
				got = user.run(probe_ops(td.mnt, files))
				root = ct.read_bytes(os.path.join(td.mnt, 'prepared/center64',
								  files[0]))
				c.check(f'{label}: root reads the prepared view', len(root) > 0)
				want_ok = ['ok', 'ok', 'ok', 'errno'] if shared else ['errno'] * 4
				c.eq(f'{label}: the other user: list, 0644 file, its sample, '
				     '0600 file', [r[0] for r in got], want_ok)
				c.check(f'{label}: refusals are EACCES',
					all(r[1] == errno.EACCES for r in got if r[0] == 'errno'),
					str(got))
				if shared:
					c.eq('allow_other: the user reads the bytes root reads',
					     got[1][2], os.path.getsize(os.path.join(td.src, files[0])))
			finally:
				ct.force_unmount(td.mnt)


def test_object_store(c, owner, other):
	objs = {'a/x.bin': b'x' * 1000, 'a/b/y.bin': b'y' * 10}
	with s3f.FakeS3(objs) as fake, ct.TempDirs(prefix='coordfs-access-s3-') as td:
		os.chmod(td.root, 0o755)
		os.chmod(td.mnt, 0o755)
		env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
		env.update(AWS_ACCESS_KEY_ID='fake', AWS_SECRET_ACCESS_KEY='fake-secret',
			   AWS_EC2_METADATA_DISABLED='true')
		base = [f'--endpoint={fake.endpoint}', '--cache-size=8M']
		ops = [['list', td.mnt], ['open', os.path.join(td.mnt, 'a/x.bin')]]
		rc, _, err = ct.run_coordfs(base + ['s3://fake', td.mnt], env=env)
		if c.eq('s3, no options: root mounts', rc, 0):
			try:
				st = os.stat(os.path.join(td.mnt, 'a/x.bin'))
				c.eq('s3 defaults: 0444, owned by the mounting user',
				     (stat.S_IMODE(st.st_mode), st.st_uid), (0o444, os.getuid()))
				got = owner.run(ops)
				c.eq('s3 without allow_other: another user reads nothing',
				     got, [['errno', errno.EACCES]] * 2)
			finally:
				ct.force_unmount(td.mnt)
		else:
			print(err)
		rc, _, err = ct.run_coordfs(base + [f'--uid={owner.uid}', f'--gid={owner.gid}',
						    '--file-mode=0640', '-o', 'dir_mode=0750,allow_other',
						    's3://fake', td.mnt], env=env)
		if not c.eq('s3 with --uid/--gid/--file-mode/dir_mode/allow_other mounts', rc, 0):
			print(err)
			return
		try:
			st = os.stat(os.path.join(td.mnt, 'a/x.bin'))
			dt = os.stat(os.path.join(td.mnt, 'a/b'))
			c.eq('objects: the given owner, write bits cleared',
			     (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid),
			     (0o440, owner.uid, owner.gid))
			c.eq('directories: the given mode, write bits cleared',
			     (stat.S_IMODE(dt.st_mode), dt.st_uid), (0o550, owner.uid))
			got = owner.run(ops)
			c.eq('the owning user lists and reads', [r[0] for r in got], ['ok', 'ok'])
			c.eq('  all 1000 bytes', got[1][2] if got[1][0] == 'ok' else None, 1000)
			c.eq('another user: EACCES', other.run(ops), [['errno', errno.EACCES]] * 2)
		finally:
			ct.force_unmount(td.mnt)


def test_bad_values(c):
	with ct.TempDirs(prefix='coordfs-access-bad-') as td:
		for args, want in ((['--file-mode=999', 's3://b'], '--file-mode'),
				   (['--dir-mode=01777', 's3://b'], '--dir-mode'),
				   (['--uid=-1', 's3://b'], '--uid'),
				   (['--gid=4294967295', 's3://b'], '--gid'),
				   # strtoul skips a tab: it got past a check of ' '
				   (['--uid=\t5', 's3://b'], '--uid'),
				   (['--file-mode=\t644', 's3://b'], '--file-mode'),
				   # empty: taken as not given (the default region, profile)
				   (['--region=', 's3://b'], '--region'),
				   (['-o', 'profile=', 's3://b'], '--profile'),
				   (['--uid=0', td.src], 's3://')):
			rc, _, err = ct.run_coordfs(['--endpoint=http://127.0.0.1:9'] * (td.src not in args)
						    + args + [td.mnt])
			lines = err.strip().splitlines()
			c.check(f'{" ".join(a for a in args if a != td.src)}: one line naming {want}',
				rc not in (0, None) and len(lines) == 1 and want in lines[0], f'rc {rc}: {err}')
			c.check('  nothing mounted', not ct.is_mounted(td.mnt))


def main():
	c = ct.Checker('test_access', timeout=170)
	with ct.TestUser('cfsown') as owner, ct.TestUser('cfsoth') as other:
		c.group(test_local, c, other)
		c.group(test_object_store, c, owner, other)
		c.group(test_bad_values, c)
	c.finish()


if __name__ == '__main__':
	main()
