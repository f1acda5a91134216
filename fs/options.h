/* SPDX-License-Identifier: MIT */
/*
 * The command line (coordfs(1), OPTIONS): parsed into struct fs_options and
 * checked before anything is mounted, each problem told in one line.
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
	char *node_name;     /* --node-name: this node among discovered peers */
	char *peer_port_arg; /* --peer-port */
	unsigned peer_port;  /* for --peers=slurm and dns: (fs/membership.h's default) */
	char *peers_refresh_arg;  /* --peers-refresh */
	unsigned peers_refresh_s; /* re-read of dns: and file: sources, seconds */
	char *secret_file;
	bool prepared;
	bool prep_exact; /* --prep-exact: JPEGs decoded at full scale */
	char *prepared_name;
	char *prep_threads_arg;
	int prep_threads;
	char *prep_ahead_arg;
	int prep_ahead; /* decode-ahead threads (fs_options_check sets the default) */
	char *prep_ahead_idle_arg;
	double prep_ahead_idle; /* idle cores decode-ahead waits for; 0.5 by default */
	char *prep_mem;
	char *prep_decoded_mem;
	char *seed;
	char *log_file;
	bool no_kernel_cache; /* --no-kernel-cache: every read reaches the daemon */
	bool prefill;
	char *disk_cache;      /* --disk-cache=DIR: the disk tier (cache/disk.h) */
	char *disk_cache_size; /* its limit (50% of DIR's file system) */
	/* object-store SOURCE (s3://BUCKET[/PREFIX]) */
	char *endpoint;
	char *region;
	char *profile;
	bool no_sign_request;
	char *s3_addressing;
	/* object-store files' owner and modes (--uid, --gid, --file-mode, --dir-mode) */
	char *uid_arg, *gid_arg, *file_mode_arg, *dir_mode_arg;
	/* -o allow_other / allow_root: who besides the mounting user may use
	 * the mount (the prepared view's own mount gets the same) */
	bool allow_other;
	bool accept_bearer; /* --accept-bearer: the peer server also takes "Bearer SECRET" */
	bool allow_root;
	/* -o max_read=N, 0 when not given: libfuse wants init() to ask for
	 * the same largest read as the mount option, or it ends the session */
	unsigned max_read;
	char *source_timeout_arg;
	unsigned source_timeout_s; /* --source-timeout: a read's longest wait on SOURCE */
	char *list_timeout_arg;
	unsigned list_timeout_s; /* --list-timeout: the listing at mount */
	bool show_help;
	bool show_version;
	/* parsed and checked by fs_options_check */
	uint64_t cache_bytes;
	uint64_t chunk_bytes;
	uint64_t prep_mem_bytes;
	uint64_t prep_decoded_bytes; /* of prep_mem_bytes, the decoded tier's share */
	bool prep_mem_default;	     /* no --prep-mem: fs_prep_size may raise it */
	/* The first option of the prepared view given without --prepared
	 * (e.g. "--prep-mem"): taken, checked, and without effect; NULL if none. */
	const char *prep_unused;
	bool prep_decoded_auto;	     /* no --prep-decoded-mem: fs_prep_size sizes it */
	uint64_t seed_value; /* --seed, else random */
	uint32_t obj_uid, obj_gid;	     /* the mounting user's unless --uid/--gid */
	uint32_t obj_file_mode, obj_dir_mode; /* 0444 and 0555 unless --file-mode/--dir-mode */
	uint64_t disk_cache_bytes; /* --disk-cache-size, when --disk-cache */
	int npos;          /* positional arguments seen while parsing */
	char *parse_error; /* first problem found while parsing */
};

/* Parse args into o (args keeps the FUSE mount options). 0 to go on, 1
 * when --help or --version was printed, -1 after one line on stderr. */
int fs_options_parse(struct fuse_args *args, struct fs_options *o);
/* Sizes, the seed, combinations of options, SOURCE and MOUNTPOINT: 0, or
 * -1 after one line on stderr. */
int fs_options_check(struct fs_options *o);
void fs_options_free(struct fs_options *o);

/* "coordfs: LINE" on stderr; returns 1 (the exit status of a failure). */
int fs_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
