/* SPDX-License-Identifier: MIT */
/*
 * The command line (coordfs(1), OPTIONS): the options and -o keys parsed
 * with libfuse's fuse_opt into struct fs_options, defaults filled in, then
 * every value and SOURCE and MOUNTPOINT checked while the caller is still
 * attached. Each problem is one line on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <fuse_lowlevel.h>
#include <grp.h>
#include <libmount.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "common/size.h"
#include "common/text.h"
#include "fs/membership.h"
#include "fs/options.h"
#include "fs/source.h"

enum { KEY_HELP, KEY_VERSION, KEY_FOREGROUND, KEY_DEBUG, KEY_IGNORED };

#define OPT2(dash, key, field) {dash, offsetof(struct fs_options, field), 0}, {key, offsetof(struct fs_options, field), 0}

static const struct fuse_opt fs_opt_spec[] = {
	OPT2("--cache-size=%s", "cache_size=%s", cache_size),
	OPT2("--chunk-size=%s", "chunk_size=%s", chunk_size),
	OPT2("--disk-cache=%s", "disk_cache=%s", disk_cache),
	OPT2("--disk-cache-size=%s", "disk_cache_size=%s", disk_cache_size),
	OPT2("--peers=%s", "peers=%s", peers),
	OPT2("--node=%s", "node=%s", node),
	OPT2("--listen=%s", "listen=%s", listen),
	OPT2("--node-name=%s", "node_name=%s", node_name),
	OPT2("--peer-port=%s", "peer_port=%s", peer_port_arg),
	OPT2("--peers-refresh=%s", "peers_refresh=%s", peers_refresh_arg),
	OPT2("--secret-file=%s", "secret_file=%s", secret_file),
	{"--accept-bearer", offsetof(struct fs_options, accept_bearer), 1},
	{"accept_bearer", offsetof(struct fs_options, accept_bearer), 1},
	{"--prepared", offsetof(struct fs_options, prepared), 1},
	{"prepared", offsetof(struct fs_options, prepared), 1},
	{"--prep-exact", offsetof(struct fs_options, prep_exact), 1},
	{"prep_exact", offsetof(struct fs_options, prep_exact), 1},
	OPT2("--prepared-name=%s", "prepared_name=%s", prepared_name),
	OPT2("--prep-threads=%s", "prep_threads=%s", prep_threads_arg),
	OPT2("--prep-ahead=%s", "prep_ahead=%s", prep_ahead_arg),
	OPT2("--prep-ahead-idle=%s", "prep_ahead_idle=%s", prep_ahead_idle_arg),
	OPT2("--prep-mem=%s", "prep_mem=%s", prep_mem),
	OPT2("--prep-decoded-mem=%s", "prep_decoded_mem=%s", prep_decoded_mem),
	OPT2("--seed=%s", "seed=%s", seed),
	OPT2("--log-file=%s", "log_file=%s", log_file),
	{"--no-kernel-cache", offsetof(struct fs_options, no_kernel_cache), 1},
	{"no_kernel_cache", offsetof(struct fs_options, no_kernel_cache), 1},
	/* The kernel cache is on by default; scripts written before may still ask for it. */
	FUSE_OPT_KEY("--kernel-cache", KEY_IGNORED),
	FUSE_OPT_KEY("kernel_cache", KEY_IGNORED),
	{"--prefill", offsetof(struct fs_options, prefill), 1},
	{"prefill", offsetof(struct fs_options, prefill), 1},
	OPT2("--endpoint=%s", "endpoint=%s", endpoint),
	OPT2("--region=%s", "region=%s", region),
	OPT2("--profile=%s", "profile=%s", profile),
	{"--no-sign-request", offsetof(struct fs_options, no_sign_request), 1},
	{"no_sign_request", offsetof(struct fs_options, no_sign_request), 1},
	OPT2("--s3-addressing=%s", "s3_addressing=%s", s3_addressing),
	OPT2("--uid=%s", "uid=%s", uid_arg),
	OPT2("--gid=%s", "gid=%s", gid_arg),
	OPT2("--file-mode=%s", "file_mode=%s", file_mode_arg),
	OPT2("--dir-mode=%s", "dir_mode=%s", dir_mode_arg),
	OPT2("--source-timeout=%s", "source_timeout=%s", source_timeout_arg),
	OPT2("--list-timeout=%s", "list_timeout=%s", list_timeout_arg),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("--foreground", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("--debug", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_END,
};

static const char fs_options_usage[] =
	"usage: coordfs [OPTIONS] SOURCE MOUNTPOINT\n"
	"Mount SOURCE read-only at MOUNTPOINT through a MinIO memory cache.\n"
	"SOURCE is a directory or an S3 bucket, s3://BUCKET[/PREFIX].\n\n"
	"  -f, --foreground         stay in the foreground, log to stderr\n"
	"  -d, --debug              verbose logging (implies -f)\n"
	"  --cache-size=SIZE        cache budget: bytes, K/M/G/T, or N% of RAM (25%)\n"
	"  --chunk-size=SIZE        caching unit for larger files (4M)\n"
	"  --disk-cache=DIR         a second MinIO tier on local disk, kept across mounts\n"
	"  --disk-cache-size=SIZE   its limit: bytes, K/M/G/T, or N% of DIR's file\n"
	"                           system (50%)\n"
	"  --peers=URL,URL,...      every node's peer address, same order everywhere\n"
	"  --peers=slurm            the nodes of this SLURM job (SLURM_NODEID: this one)\n"
	"  --peers=dns:NAME[:PORT]  every address NAME resolves to (this node: its own)\n"
	"  --peers=file:PATH        one URL per line (this node: --listen or --node-name)\n"
	"  --node=K                 this node's index in a --peers list\n"
	"  --node-name=NAME         this node among discovered peers (address or URL)\n"
	"  --peer-port=PORT         peer port for slurm and dns: (7079)\n"
	"  --peers-refresh=SECONDS  re-read dns: and file: sources this often (10);\n"
	"                           file: is also watched for changes\n"
	"  --listen=HOST:PORT       peer server address (from --peers[K])\n"
	"  --secret-file=FILE       shared secret: peer requests are signed with it\n"
	"  --accept-bearer          also take requests carrying the secret itself\n"
	"                           (coordfs 0.1 peers; for one release)\n"
	"  --prepared               enable the prepared view\n"
	"  --prepared-name=NAME     its directory name (prepared)\n"
	"  --prep-exact             JPEGs decoded at full scale: samples byte for byte\n"
	"                           PIL's (slower on large images)\n"
	"  --prep-threads=N         decode threads (cores)\n"
	"  --prep-ahead=N           low-priority threads decoding samples ahead (0: off)\n"
	"  --prep-ahead-idle=CORES  idle cores they wait for (0.5; 0: do not wait)\n"
	"  --prep-mem=SIZE          memory for prepared samples (1G, plus the tier\n"
	"                           beyond half of it)\n"
	"  --prep-decoded-mem=SIZE  of it, for decoded images kept across epochs (auto)\n"
	"  --seed=N                 seed of the prepared view (random, logged)\n"
	"  --log-file=FILE          log here instead of syslog once detached\n"
	"  --no-kernel-cache        keep file data out of the kernel's page cache: every\n"
	"                           read reaches the daemon and is counted (slower)\n"
	"  --kernel-cache           accepted and ignored: the kernel cache is the default\n"
	"  --prefill                after mounting, fill this node's share of the cache\n"
	"                           from SOURCE in the background (readers go first)\n"
	"  --source-timeout=SECONDS the longest a read waits for SOURCE, retries\n"
	"                           included, before EIO (60)\n"
	"S3 sources (credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared\n"
	"credentials and config files, or the container/instance role; never options):\n"
	"  --endpoint=URL           S3-compatible endpoint, http(s)://host[:port] (AWS)\n"
	"  --region=NAME            region (AWS_REGION, the profile's, else us-east-1)\n"
	"  --profile=NAME           profile of the shared files (AWS_PROFILE, else\n"
	"                           default)\n"
	"  --no-sign-request        anonymous requests (public buckets)\n"
	"  --s3-addressing=path|virtual  bucket in the path or the host name (virtual on\n"
	"                           AWS, path with --endpoint)\n"
	"  --uid=N, --gid=N         owner and group of the objects (the mounting user's)\n"
	"  --file-mode=OCTAL        mode of the objects (0444)\n"
	"  --dir-mode=OCTAL         mode of the directories (0555)\n"
	"  --list-timeout=SECONDS   the longest the listing at mount may take (900)\n"
	"  -o OPT[,OPT...]          the same as key=value (cache_size=8G; a comma in a\n"
	"                           value as \\,), and FUSE mount options (-o allow_other:\n"
	"                           let other users in; by default only the user who\n"
	"                           mounted, root included, can use the mount)\n"
	"  -V, --version, -h, --help\n";

/* An id, a mode or -o max_read: digits in base 10 (or 8, modes) up to max,
 * into *out: 0 or -1. */
static int parse_number(const char *arg, int base, unsigned long max, uint32_t *out)
{
	char *end;

	if (!text_is_digits(arg)) /* a tab or newline got past a check of ' ' */
		return -1;
	errno = 0;
	unsigned long n = strtoul(arg, &end, base);
	if (errno || *end || n > max)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

/* Mount options: 1 passed on to libfuse and the kernel, 0 dropped as harmless
 * (mount(8) and fstab put some of them on every command line; the mount is
 * read-only and nodev/nosuid anyway), -1 unknown. */
static int known_mount_option(const char *arg)
{
	static const char *const pass[] = { "allow_other", "allow_root", "auto_unmount",
					    "default_permissions", "max_read=", "context=", "fscontext=",
					    "defcontext=", "rootcontext=" };
	static const char *const drop[] = { "ro", "rw", "dev", "nodev", "suid", "nosuid", "exec",
					    "noexec", "async", "sync", "atime", "noatime",
					    "nodiratime", "relatime", "strictatime", "dirsync",
					    "_netdev", "user", "nouser", "users", "auto", "noauto",
					    "defaults", "nofail", "x-",
					    /* the mount is always named coordfs:SOURCE, type
					     * fuse.coordfs: scripts find coordfs mounts by that */
					    "fsname=", "subtype=" };
	for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
		size_t n = strlen(pass[i]);
		if (pass[i][n - 1] == '=' ? !strncmp(arg, pass[i], n) : !strcmp(arg, pass[i]))
			return 1;
	}
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
		size_t n = strlen(drop[i]);
		if (strchr("-=", drop[i][n - 1]) ? !strncmp(arg, drop[i], n) : !strcmp(arg, drop[i]))
			return 0;
	}
	return -1;
}

/* Whether arg is an option that takes a value, given without one
 * ("--cache-size 1G" as with getopt): fuse_opt matches only
 * "--cache-size=...", and "unknown option" would deny that it exists. */
static bool takes_value(const char *arg)
{
	size_t n = strlen(arg);

	for (const struct fuse_opt *s = fs_opt_spec; s->templ; s++)
		if (!strncmp(s->templ, arg, n) && !strcmp(s->templ + n, "=%s"))
			return true;
	return false;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct fs_options *o = data;

	switch (key) {
	case KEY_HELP:
		o->show_help = true;
		return 0;
	case KEY_VERSION:
		o->show_version = true;
		return 0;
	case KEY_FOREGROUND:
		o->foreground = true;
		return 0;
	case KEY_DEBUG:
		o->debug = true;
		o->foreground = true;
		return 0;
	case KEY_IGNORED:
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (o->npos == 0)
			o->source = strdup(arg);
		else if (o->npos == 1)
			o->mountpoint = strdup(arg);
		else if (!o->parse_error && asprintf(&o->parse_error, "unexpected argument '%s'", arg) < 0)
			o->parse_error = NULL;
		o->npos++;
		return 0;
	default:
		if (arg[0] == '-') {
			int n = o->parse_error ? 0
				: takes_value(arg)
					? asprintf(&o->parse_error,
						   "%s takes its value after '=': %s=VALUE", arg, arg)
					: asprintf(&o->parse_error, "unknown option '%s' (see --help)",
						   arg);
			if (n < 0)
				o->parse_error = NULL;
			return 0;
		}
		int known = known_mount_option(arg);
		if (!strcmp(arg, "allow_other"))
			o->allow_other = true;
		if (!strcmp(arg, "allow_root"))
			o->allow_root = true;
		if (!strncmp(arg, "max_read=", 9)) {
			uint32_t v = 0;

			if ((parse_number(arg + 9, 10, UINT32_MAX, &v) < 0 || v == 0) &&
			    !o->parse_error &&
			    asprintf(&o->parse_error, "bad max_read '%s': a size in bytes, 1 or more",
				     arg + 9) < 0)
				o->parse_error = NULL;
			o->max_read = v;
		}
		if (!strncmp(arg, "blksize=", 8) && !o->parse_error &&
		    asprintf(&o->parse_error, "-o blksize is for FUSE mounts of a block device "
			     "(fuseblk), which coordfs is not") < 0)
			o->parse_error = NULL;
		if (known < 0 && !o->parse_error && takes_value(arg) &&
		    asprintf(&o->parse_error, "-o %s takes its value after '=': %s=VALUE", arg,
			     arg) < 0)
			o->parse_error = NULL;
		if (!arg[0] && !o->parse_error &&
		    asprintf(&o->parse_error, "an empty -o option: a comma too many, or one "
			     "at the end?") < 0)
			o->parse_error = NULL;
		/* -o peers=URL,URL: the comma ended the value, and the next URL
		 * came as an option of its own; libfuse takes "\," as a comma. */
		if (known < 0 && !o->parse_error &&
		    asprintf(&o->parse_error, "unknown mount option '%s' (%s)", arg,
			     strstr(arg, "://") && !strchr(arg, '=')
				     ? "a comma inside a -o value, as in a peers list, is written \\,"
				     : "see --help") < 0)
			o->parse_error = NULL;
		return known > 0; /* an -o option for FUSE itself (allow_other, ...) */
	}
}

int fs_fail(const char *fmt, ...)
{
	va_list ap;
	char line[1024];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "coordfs: %s\n", line);
	return 1;
}

/* Whether path is a mount point, by the kernel's mount table read with libmount. */
static bool is_mounted(const char *path)
{
	char real[PATH_MAX];
	struct libmnt_table *tb;
	bool found;

	if (!realpath(path, real))
		return false;
	tb = mnt_new_table_from_file("/proc/self/mountinfo");
	if (!tb)
		return false;
	found = mnt_table_find_target(tb, real, MNT_ITER_BACKWARD) != NULL;
	mnt_unref_table(tb);
	return found;
}

static int check_paths(struct fs_options *o)
{
	struct stat st;

	if (!o->source || !o->mountpoint)
		return -fs_fail("need SOURCE and MOUNTPOINT (see --help)");
	/* An s3:// SOURCE is checked by listing it, still before the mount. */
	if (!fs_source_is_s3(o->source)) {
		if (stat(o->source, &st) < 0)
			return -fs_fail("source '%s': %s", o->source, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			return -fs_fail("source '%s' is not a directory", o->source);
	}
	if (stat(o->mountpoint, &st) < 0)
		return -fs_fail("mount point '%s': %s", o->mountpoint, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return -fs_fail("mount point '%s' is not a directory", o->mountpoint);
	if (is_mounted(o->mountpoint))
		return -fs_fail("mount point '%s' is already mounted", o->mountpoint);
	DIR *d = opendir(o->mountpoint);
	if (!d)
		return -fs_fail("mount point '%s': %s", o->mountpoint, strerror(errno));
	struct dirent *de;
	bool empty = true;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	closedir(d);
	if (!empty)
		return -fs_fail("mount point '%s' is not empty", o->mountpoint);
	return 0;
}

/* A decimal count in [lo, hi] (lo >= 0) into *out: 0, or -1. */
static int parse_count(const char *arg, long lo, long hi, int *out)
{
	char *end;

	if (!text_is_digits(arg))
		return -1;
	errno = 0;
	long n = strtol(arg, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return -1;
	*out = (int)n;
	return 0;
}

/* Object-store files have no owner or mode of their own: the mounting
 * user's and 0444/0555, unless given (as mountpoint-s3 offers). */
static int parse_owner(struct fs_options *o)
{
	o->obj_uid = getuid();
	o->obj_gid = getgid();
	o->obj_file_mode = 0444;
	o->obj_dir_mode = 0555;
	/* (uid_t)-1 means "unchanged" to chown(2) and the kernel: never an owner. */
	if (o->uid_arg && parse_number(o->uid_arg, 10, 0xfffffffeUL, &o->obj_uid) < 0)
		return -fs_fail("bad --uid '%s': want a numeric user id", o->uid_arg);
	if (o->gid_arg && parse_number(o->gid_arg, 10, 0xfffffffeUL, &o->obj_gid) < 0)
		return -fs_fail("bad --gid '%s': want a numeric group id", o->gid_arg);
	/* Permission bits only: the mount is read-only, and set-id or sticky
	 * bits on objects would only mislead. Write bits are cleared, as for
	 * every file of the mount. */
	if (o->file_mode_arg && parse_number(o->file_mode_arg, 8, 0777, &o->obj_file_mode) < 0)
		return -fs_fail("bad --file-mode '%s': want octal permission bits, 0 to 0777",
				o->file_mode_arg);
	if (o->dir_mode_arg && parse_number(o->dir_mode_arg, 8, 0777, &o->obj_dir_mode) < 0)
		return -fs_fail("bad --dir-mode '%s': want octal permission bits, 0 to 0777",
				o->dir_mode_arg);
	o->obj_file_mode &= 0555;
	o->obj_dir_mode &= 0555;
	return 0;
}

/* The smallest --disk-cache-size: less holds fewer than a few small
 * units (the default chunk is 4M), and 0 or a few bytes hold nothing. */
#define DISK_CACHE_MIN ((uint64_t)1 << 20)

/* What foreign_part finds on a path. */
enum { PATH_TRUSTED, PATH_FOREIGN, PATH_OPEN, PATH_GROUP, PATH_GONE };

/*
 * Whether a user other than this one and root may be in group gid: a
 * listed member, or a user whose primary group it is. A group nobody else
 * is in (a user-private group, root's, Debian's empty staff) writes for
 * this user alone. Unknown groups count as shared.
 */
static bool group_shared(gid_t gid)
{
	struct group *gr = getgrgid(gid);
	struct passwd *me = getpwuid(geteuid()), *pw;
	bool shared = !gr;

	for (char **m = gr ? gr->gr_mem : NULL; m && *m && !shared; m++)
		shared = strcmp(*m, "root") && (!me || strcmp(*m, me->pw_name));
	if (shared)
		return true;
	setpwent();
	while (!shared && (pw = getpwent()) != NULL)
		shared = pw->pw_gid == gid && pw->pw_uid != 0 && pw->pw_uid != geteuid();
	endpwent();
	return shared;
}

/*
 * Whether a prefix of path (up to each '/', and the whole) belongs to a
 * user other than this one and root (PATH_FOREIGN), copied into bad with
 * its owner: the daemon, often root, makes and writes its tier where the
 * path leads, and another user's symbolic link leads it anywhere, as does
 * another user's directory, whose entries they may swap for links at any
 * time before the mount (fs.protected_symlinks covers sticky directories
 * only, and may be off); so does any user in a directory any user may
 * write without the sticky bit (PATH_OPEN), and any member of a group
 * other users are in that may write it without the sticky bit
 * (PATH_GROUP, *owner then the group). With exist, a prefix that is not
 * there is PATH_GONE: it was, a moment ago.
 */
static int foreign_part(const char *path, bool exist, char *bad, size_t badlen, uid_t *owner)
{
	char buf[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return PATH_TRUSTED; /* realpath refuses it next */
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		int found = PATH_TRUSTED;
		if (lstat(buf, &st) < 0)
			found = exist ? PATH_GONE : PATH_TRUSTED;
		else if (st.st_uid != geteuid() && st.st_uid != 0)
			found = PATH_FOREIGN;
		else if (S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
			found = PATH_OPEN;
		else if (S_ISDIR(st.st_mode) && (st.st_mode & S_IWGRP) && !(st.st_mode & S_ISVTX) &&
			 group_shared(st.st_gid))
			found = PATH_GROUP;
		if (found != PATH_TRUSTED) {
			snprintf(bad, badlen, "%s", buf);
			*owner = found == PATH_GROUP ? (uid_t)st.st_gid : st.st_uid;
			return found;
		}
		buf[i] = c;
	}
	return PATH_TRUSTED;
}

/* foreign_part on path, named by its option opt in the one line: 0, or
 * -1 after that line. */
static int check_owners(const char *opt, const char *path, bool exist)
{
	char bad[PATH_MAX];
	uid_t owner = 0;

	switch (foreign_part(path, exist, bad, sizeof(bad), &owner)) {
	case PATH_FOREIGN:
		return -fs_fail("%s '%s': '%s' belongs to another user (uid %u)", opt, path, bad,
				(unsigned)owner);
	case PATH_OPEN:
		return -fs_fail("%s '%s': any user may change '%s' (writable by all, not sticky)",
				opt, path, bad);
	case PATH_GROUP:
		return -fs_fail("%s '%s': other users in group %u may change '%s' (writable by "
				"the group, not sticky)", opt, path, (unsigned)owner, bad);
	case PATH_GONE:
		return -fs_fail("%s '%s': '%s' went away while being checked", opt, path, bad);
	}
	return 0;
}

/*
 * MOUNTPOINT of a root daemon: libfuse mounts by path with mount(2)
 * itself (a user's mount goes through fusermount3, which guards against
 * this), long after the checks above, once SOURCE is scanned. A directory
 * on the way that another user owns, or may write without the sticky bit,
 * lets them swap the path for a symbolic link in between, and mount the
 * dataset over /etc/profile.d or anywhere else; so does a mount point of
 * theirs in a sticky directory, which they may rename away. 0, or -1 after
 * one line.
 */
static int check_mountpoint_owners(const char *mnt)
{
	char *abs = geteuid() == 0 ? realpath(mnt, NULL) : NULL;
	char *slash = abs ? strrchr(abs, '/') : NULL;
	char bad[PATH_MAX];
	uid_t owner = 0;
	struct stat st;
	int rc = 0;

	if (!slash || slash == abs) { /* not root, or a top-level directory: / is root's */
		free(abs);
		return 0;
	}
	*slash = '\0'; /* abs: the parent */
	switch (foreign_part(abs, true, bad, sizeof(bad), &owner)) {
	case PATH_FOREIGN:
		rc = -fs_fail("mount point '%s/%s': '%s' belongs to another user (uid %u)", abs,
			      slash + 1, bad, (unsigned)owner);
		break;
	case PATH_OPEN:
		rc = -fs_fail("mount point '%s/%s': any user may change '%s' (writable by all, "
			      "not sticky)", abs, slash + 1, bad);
		break;
	case PATH_GROUP:
		rc = -fs_fail("mount point '%s/%s': other users in group %u may change '%s' "
			      "(writable by the group, not sticky)", abs, slash + 1,
			      (unsigned)owner, bad);
		break;
	case PATH_GONE:
		rc = -fs_fail("mount point '%s/%s': '%s' went away while being checked", abs,
			      slash + 1, bad);
		break;
	default: /* a sticky directory open to all: is the mount point theirs? */
		if (lstat(abs, &st) == 0 && (st.st_mode & S_IWOTH)) {
			*slash = '/';
			if (lstat(abs, &st) == 0 && st.st_uid != 0)
				rc = -fs_fail("mount point '%s' belongs to another user (uid %u), "
					      "who may swap it", abs, (unsigned)st.st_uid);
		}
	}
	free(abs);
	return rc;
}

/* --log-file: the daemon, often root, creates and appends to it, so no
 * directory on its way may be another user's or writable by all without
 * the sticky bit (see foreign_part), the ones above the current directory
 * of a relative path included; the file itself is checked when it is
 * opened (main.c). 0, or -1 after one line. */
static int check_log_file(const char *path)
{
	if (!path)
		return 0;
	char *abs = file_path_absolute(path);
	if (!abs)
		return -fs_fail("--log-file '%s': %s", path, strerror(errno));
	int rc = check_owners("--log-file", abs, false);
	free(abs);
	return rc;
}

/* Whether absolute, resolved path is root or below it. */
static bool path_within(const char *path, const char *root)
{
	size_t n = strlen(root);

	if (n == 1)
		return true; /* "/" */
	return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Why DIR (resolved) cannot go where it is, or NULL: inside the mount
 * point the daemon's own mount hides it (and the next mount finds the
 * mount point not empty); inside a directory SOURCE its files become part
 * of the dataset, changing under the readers. */
static const char *disk_cache_misplaced(const struct fs_options *o, const char *abs)
{
	char *mnt = realpath(o->mountpoint, NULL);
	char *src = fs_source_is_s3(o->source) ? NULL : realpath(o->source, NULL);
	const char *why = NULL;

	if (mnt && path_within(abs, mnt))
		why = "is the mount point or inside it";
	else if (src && path_within(abs, src))
		why = "is SOURCE or inside it";
	free(mnt);
	free(src);
	return why;
}

/* --disk-cache: DIR made (0700) and absolute (the daemon changes to "/"),
 * its limit parsed against DIR's file system. 0, or -1 after one line
 * (and DIR removed again if made here). */
static int check_disk_cache(struct fs_options *o)
{
	struct statvfs vfs;
	char have[32];

	if (!o->disk_cache) {
		if (o->disk_cache_size)
			return -fs_fail("--disk-cache-size needs --disk-cache=DIR");
		return 0;
	}
	if (!*o->disk_cache)
		return -fs_fail("bad --disk-cache '': want a directory");
	if (check_owners("--disk-cache", o->disk_cache, false) < 0)
		return -1;
	bool made = mkdir(o->disk_cache, 0700) == 0;
	if (!made && errno != EEXIST)
		return -fs_fail("cannot create --disk-cache '%s': %s", o->disk_cache,
				strerror(errno));
	/* Again, DIR made: an entry another user put in between (in a sticky
	 * /tmp, where the name was free) is caught now, and none can be
	 * swapped after it: every directory on the way is this user's or
	 * root's, and in a sticky one an entry is its owner's alone. */
	if (check_owners("--disk-cache", o->disk_cache, true) < 0)
		return -1;
	char *abs = realpath(o->disk_cache, NULL);
	if (!abs || statvfs(abs, &vfs) < 0) {
		int err = errno;
		free(abs);
		return -fs_fail("cannot use --disk-cache '%s': %s", o->disk_cache, strerror(err));
	}
	const char *size = o->disk_cache_size ? o->disk_cache_size : "50%";
	const char *why = disk_cache_misplaced(o, abs);
	int rc = 0;
	if (why)
		rc = -fs_fail("--disk-cache '%s' %s", o->disk_cache, why);
	else if (size_parse(size, (uint64_t)vfs.f_blocks * vfs.f_frsize, &o->disk_cache_bytes) < 0)
		rc = -fs_fail("bad --disk-cache-size '%s': want bytes, K/M/G/T, or N%% "
			      "(0 < N <= 100)",
			      size);
	else if (o->disk_cache_bytes < DISK_CACHE_MIN && !strchr(size, '%'))
		rc = -fs_fail("bad --disk-cache-size '%s': want at least 1M", size);
	else if (o->disk_cache_bytes < DISK_CACHE_MIN)
		/* Of a file system reporting no size (ramfs), N% is 0. */
		rc = -fs_fail("bad --disk-cache-size '%s'%s: %s of the file system of '%s', "
			      "want at least 1M",
			      size, o->disk_cache_size ? "" : " (the default)",
			      size_format(o->disk_cache_bytes, have, sizeof(have)), abs);
	if (rc < 0 && made)
		(void)rmdir(abs);
	free(o->disk_cache);
	o->disk_cache = abs;
	return rc;
}

static int parse_sizes(struct fs_options *o)
{
	uint64_t phys = size_phys_mem();

	if (size_parse(o->cache_size, phys, &o->cache_bytes) < 0)
		return -fs_fail("bad --cache-size '%s': want bytes, K/M/G/T, or N%% (0 < N <= 100)",
			    o->cache_size);
	/* The cache never evicts: a budget over the machine's memory would end
	 * in the OOM killer, not in a full cache. */
	if (phys && o->cache_bytes > phys) {
		char want[32], have[32];
		return -fs_fail("--cache-size '%s' (%s) is larger than this machine's memory (%s)",
			    o->cache_size, size_format(o->cache_bytes, want, sizeof(want)),
			    size_format(phys, have, sizeof(have)));
	}
	if (o->cache_bytes == 0)
		fprintf(stderr,
			"coordfs: warning: --cache-size is 0: nothing will be cached%s, "
			"every read goes to %sSOURCE%s\n",
			o->disk_cache ? " in memory" : "", o->disk_cache ? "the disk tier or " : "",
			o->peers ? " or a peer" : "");
	if (size_parse(o->chunk_size, phys, &o->chunk_bytes) < 0 || o->chunk_bytes < 4096 ||
	    o->chunk_bytes > (1ULL << 30) || strchr(o->chunk_size, '%'))
		return -fs_fail("bad --chunk-size '%s': want 4K to 1G", o->chunk_size);
	/* Under 1M no sample fits: every open of the prepared view would
	 * fail with ENOMEM, on a mount that came up as if serving. */
	if (size_parse(o->prep_mem, phys, &o->prep_mem_bytes) < 0 ||
	    o->prep_mem_bytes < ((uint64_t)1 << 20))
		return -fs_fail("bad --prep-mem '%s': want 1M or more: bytes, K/M/G/T, or N%%",
				o->prep_mem);
	/* fs_prep_size sizes the tier from the dataset and the machine */
	o->prep_decoded_bytes = o->prep_mem_bytes / 2;
	o->prep_decoded_auto = !o->prep_decoded_mem;
	if (o->prep_decoded_mem) {
		if (size_parse(o->prep_decoded_mem, phys, &o->prep_decoded_bytes) < 0)
			return -fs_fail("bad --prep-decoded-mem '%s': want bytes, K/M/G/T, or N%%",
					o->prep_decoded_mem);
		/* coordfs(1): without --prep-mem, it is 1G plus what the tier
		 * takes beyond half of that; only a --prep-mem given bounds it */
		if (o->prep_mem_default && o->prep_decoded_bytes > o->prep_mem_bytes / 2)
			o->prep_mem_bytes += o->prep_decoded_bytes - o->prep_mem_bytes / 2;
		if (o->prep_decoded_bytes > o->prep_mem_bytes)
			return -fs_fail("--prep-decoded-mem '%s' is more than --prep-mem '%s'",
					o->prep_decoded_mem, o->prep_mem);
	}
	if (o->prep_threads_arg &&
	    parse_count(o->prep_threads_arg, 1, 256, &o->prep_threads) < 0)
		return -fs_fail("bad --prep-threads '%s': want 1 to 256", o->prep_threads_arg);
	/* Off by default: measured on 2 cores with the decoded tier, it cost
	 * images/s (tools/bench/RESULTS-prepared.md, "Decode-ahead"). */
	o->prep_ahead = 0;
	if (o->prep_ahead_arg && parse_count(o->prep_ahead_arg, 0, 256, &o->prep_ahead) < 0) {
		return -fs_fail("bad --prep-ahead '%s': want 0 to 256", o->prep_ahead_arg);
	}
	o->prep_ahead_idle = 0.5;
	if (o->prep_ahead_idle_arg) {
		char *end;
		errno = 0;
		o->prep_ahead_idle = strtod(o->prep_ahead_idle_arg, &end);
		if (!text_is_plain_decimal(o->prep_ahead_idle_arg) || errno || *end ||
		    !(o->prep_ahead_idle >= 0) || o->prep_ahead_idle > 4096)
			return -fs_fail("bad --prep-ahead-idle '%s': want a number of cores, 0 to 4096",
					o->prep_ahead_idle_arg);
	}
	if (o->seed) {
		const char *p = o->seed;

		if (text_parse_u64(&p, &o->seed_value) < 0 || *p)
			return -fs_fail("bad --seed '%s': want a decimal integer, 0 or more", o->seed);
	} else if (getrandom(&o->seed_value, sizeof(o->seed_value), 0) != sizeof(o->seed_value)) {
		o->seed_value = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	}
	int secs = 60;
	if (o->source_timeout_arg && parse_count(o->source_timeout_arg, 1, 3600, &secs) < 0)
		return -fs_fail("bad --source-timeout '%s': want 1 to 3600 seconds",
				o->source_timeout_arg);
	o->source_timeout_s = (unsigned)secs;
	secs = 900;
	if (o->list_timeout_arg && parse_count(o->list_timeout_arg, 1, 86400, &secs) < 0)
		return -fs_fail("bad --list-timeout '%s': want 1 to 86400 seconds",
				o->list_timeout_arg);
	o->list_timeout_s = (unsigned)secs;
	bool discovered = o->peers && strcmp(fs_membership_source(o->peers), "static") != 0;

	if (o->peers && !o->node && !discovered)
		return -fs_fail("--peers needs --node=K (this node's index in the list)");
	if (discovered && o->node)
		return -fs_fail("--node applies to a --peers list; with --peers=%s this node is "
				"found by itself (or named by --node-name)",
				fs_membership_source(o->peers));
	if (!o->peers && o->node)
		return -fs_fail("--node needs --peers");
	if ((o->node_name || o->peer_port_arg) && !discovered)
		return -fs_fail("%s", o->node_name ? "--node-name applies to --peers=dns:NAME or "
							"file:PATH"
						 : "--peer-port applies to --peers=slurm and dns:NAME");
	/* with slurm, SLURM_NODEID names this node: a --node-name was ignored */
	if (o->node_name && discovered && !strcmp(fs_membership_source(o->peers), "slurm"))
		return -fs_fail("--node-name applies to --peers=dns:NAME or file:PATH; with "
				"--peers=slurm, SLURM_NODEID names this node");
	/* a peers file holds whole URLs, ports included: it was ignored */
	if (o->peer_port_arg && discovered && !strcmp(fs_membership_source(o->peers), "file"))
		return -fs_fail("--peer-port applies to --peers=slurm and dns:NAME; the URLs of "
				"--peers=file:PATH carry their ports");
	if (o->peer_port_arg) {
		int port;
		if (parse_count(o->peer_port_arg, 1, 65535, &port) < 0)
			return -fs_fail("bad --peer-port '%s': want 1 to 65535", o->peer_port_arg);
		o->peer_port = (unsigned)port;
	}
	secs = FS_PEERS_REFRESH_DEFAULT;
	if (o->peers_refresh_arg) {
		const char *src = o->peers ? fs_membership_source(o->peers) : "none";

		if (strcmp(src, "dns") != 0 && strcmp(src, "file") != 0)
			return -fs_fail("--peers-refresh applies to --peers=dns:NAME or file:PATH");
		if (parse_count(o->peers_refresh_arg, 1, 86400, &secs) < 0)
			return -fs_fail("bad --peers-refresh '%s': want 1 to 86400 seconds",
					o->peers_refresh_arg);
	}
	o->peers_refresh_s = (unsigned)secs;
	if (!o->peers && o->secret_file)
		return -fs_fail("--secret-file needs --peers (it authenticates peer requests)");
	if (!o->secret_file && o->accept_bearer)
		return -fs_fail("--accept-bearer needs --secret-file (the secret it accepts)");
	if (!o->peers && o->listen)
		return -fs_fail("--listen needs --peers");
	/* port 0 binds one the kernel picks, which no other node knows */
	const char *lport = o->listen ? strrchr(o->listen, ':') : NULL;
	if (lport && text_is_digits(lport + 1) && strtoul(lport + 1, NULL, 10) == 0)
		return -fs_fail("bad --listen '%s': port 0 is one no other node could reach; "
				"want 1 to 65535", o->listen);
	/* Empty, each was taken as not given: AWS_REGION or us-east-1, and
	 * AWS_PROFILE or default, credentials the command did not name. */
	if (o->region && !*o->region)
		return -fs_fail("bad --region '': want a region name (us-east-1, ...)");
	if (o->profile && !*o->profile)
		return -fs_fail("bad --profile '': want a profile name of the shared files");
	if (o->s3_addressing && strcmp(o->s3_addressing, "path") && strcmp(o->s3_addressing, "virtual"))
		return -fs_fail("bad --s3-addressing '%s': want path or virtual", o->s3_addressing);
	if (!fs_source_is_s3(o->source)) {
		const char *s3_only = o->endpoint	    ? "--endpoint"
				      : o->region	    ? "--region"
				      : o->profile	    ? "--profile"
				      : o->no_sign_request ? "--no-sign-request"
				      : o->s3_addressing   ? "--s3-addressing"
				      : o->uid_arg	    ? "--uid"
				      : o->gid_arg	    ? "--gid"
				      : o->file_mode_arg   ? "--file-mode"
				      : o->dir_mode_arg    ? "--dir-mode"
				      : o->list_timeout_arg ? "--list-timeout"
							    : NULL;
		if (s3_only)
			return -fs_fail("%s applies only to an s3://BUCKET[/PREFIX] SOURCE%s", s3_only,
					o->uid_arg || o->gid_arg || o->file_mode_arg || o->dir_mode_arg
						? " (a directory's files keep their own owners and modes)"
						: "");
	}
	if (parse_owner(o) < 0)
		return -1;
	if (o->prepared_name && (!*o->prepared_name || strchr(o->prepared_name, '/') ||
				 !strcmp(o->prepared_name, ".") || !strcmp(o->prepared_name, "..")))
		return -fs_fail("bad --prepared-name '%s': want a plain file name", o->prepared_name);
	return 0;
}

int fs_options_parse(struct fuse_args *args, struct fs_options *o)
{
	if (fuse_opt_parse(args, o, fs_opt_spec, opt_proc) < 0)
		return -fs_fail("cannot parse the command line (see --help)");
	if (o->parse_error)
		return -fs_fail("%s", o->parse_error);
	if (o->show_help) {
		fputs(fs_options_usage, stdout);
		return 1;
	}
	if (o->show_version) {
		printf("coordfs %s (libfuse %d)\n", COORDFS_VERSION, fuse_version());
		return 1;
	}
	if (!o->prepared)
		o->prep_unused = o->prepared_name	  ? "--prepared-name"
				 : o->prep_exact	  ? "--prep-exact"
				 : o->prep_threads_arg	  ? "--prep-threads"
				 : o->prep_ahead_arg	  ? "--prep-ahead"
				 : o->prep_ahead_idle_arg ? "--prep-ahead-idle"
				 : o->prep_mem		  ? "--prep-mem"
				 : o->prep_decoded_mem	  ? "--prep-decoded-mem"
				 : o->seed		  ? "--seed"
							  : NULL;
	if (!o->cache_size)
		o->cache_size = strdup("25%");
	if (!o->chunk_size)
		o->chunk_size = strdup("4M");
	if (!o->prep_mem) {
		o->prep_mem = strdup("1G");
		o->prep_mem_default = true;
	}
	if (!o->prepared_name)
		o->prepared_name = strdup("prepared");
	if (o->prep_threads == 0)
		o->prep_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (o->prep_threads <= 0)
		o->prep_threads = 1;
	return 0;
}

/*
 * --peers=file:PATH made absolute: the daemon changes to "/" when it
 * detaches, and re-reads the file (and watches its directory) from then
 * on, so a relative PATH read at mount would fail every re-read, or read
 * another file of that name under "/". Not through realpath: a
 * ConfigMap's file is a symbolic link that an update swaps, to be
 * followed at each read. 0, or -1 after one line.
 */
static int absolute_peers_file(struct fs_options *o)
{
	char *path, *abs;

	if (!o->peers || strncmp(o->peers, "file:", 5) != 0 || o->peers[5] == '/' ||
	    !o->peers[5])
		return 0;
	if (!(path = file_path_absolute(o->peers + 5)))
		return -fs_fail("--peers=%s: cannot tell the current directory: %s", o->peers,
				strerror(errno));
	if (asprintf(&abs, "file:%s", path) < 0) {
		free(path);
		return -fs_fail("out of memory");
	}
	free(path);
	free(o->peers);
	o->peers = abs;
	return 0;
}

int fs_options_check(struct fs_options *o)
{
	return parse_sizes(o) || check_paths(o) || check_mountpoint_owners(o->mountpoint) ||
		       check_log_file(o->log_file) || check_disk_cache(o) ||
		       absolute_peers_file(o)
		       ? -1
		       : 0;
}

void fs_options_free(struct fs_options *o)
{
	free(o->source);
	free(o->mountpoint);
	free(o->cache_size);
	free(o->chunk_size);
	free(o->disk_cache);
	free(o->disk_cache_size);
	free(o->peers);
	free(o->node);
	free(o->prep_threads_arg);
	free(o->listen);
	free(o->node_name);
	free(o->peer_port_arg);
	free(o->peers_refresh_arg);
	free(o->secret_file);
	free(o->prepared_name);
	free(o->prep_mem);
	free(o->prep_decoded_mem);
	free(o->prep_ahead_arg);
	free(o->prep_ahead_idle_arg);
	free(o->seed);
	free(o->log_file);
	free(o->endpoint);
	free(o->region);
	free(o->profile);
	free(o->s3_addressing);
	free(o->uid_arg);
	free(o->gid_arg);
	free(o->file_mode_arg);
	free(o->dir_mode_arg);
	free(o->source_timeout_arg);
	free(o->list_timeout_arg);
	free(o->parse_error);
}
