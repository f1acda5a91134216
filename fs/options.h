/* SPDX-License-Identifier: MIT */
/*
 * The command line (coordfs(1), OPTIONS): parsing, defaults and the checks
 * made before anything is mounted. main.c keeps the mount and the daemon.
 */
#ifndef COORDFS_FS_OPTIONS_H
#define COORDFS_FS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

struct fuse_args;

/* Options from the command line / -o (coordfs(1), OPTIONS). */
struct fs_options {
	char *source;
	char *mountpoint;
	bool foreground;
	bool debug;
	char *cache_size;
	char *chunk_size;
	char *peers;
	char *node;
	char *listen;
	char *secret_file;
	bool prepared;
	char *prepared_name;
	char *prep_threads_arg;
	int prep_threads;
	char *prep_mem;
	char *seed;
	char *log_file;
	bool no_kernel_cache; /* --no-kernel-cache: every read reaches the daemon */
	bool prefill;
	/* object-store SOURCE (s3://BUCKET[/PREFIX]) */
	char *endpoint;
	char *region;
	char *profile;
	bool no_sign_request;
	char *s3_addressing;
	bool show_help;
	bool show_version;
	/* set by fs_options_check */
	uint64_t cache_bytes, chunk_bytes, prep_mem_bytes, seed_value;
	int npos;          /* positional arguments seen while parsing */
	char *parse_error; /* first problem found while parsing */
};

/* coordfs --help. */
extern const char fs_usage[];

/* Print "coordfs: LINE" on stderr; returns 1, the exit status. */
int fs_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse args into o (zeroed by the caller); FUSE's own -o options stay in
 * args. 0, or 1 after one line naming the first problem. */
int fs_options_parse(struct fuse_args *args, struct fs_options *o);

/* Fill in the defaults, then check the sizes, the combinations of options,
 * SOURCE and MOUNTPOINT (an existing empty directory not mounted on), and
 * set the parsed numbers. 0, or 1 after one line naming the problem. */
int fs_options_check(struct fs_options *o);

/* Free what parsing allocated. */
void fs_options_free(struct fs_options *o);

#endif
