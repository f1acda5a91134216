/* SPDX-License-Identifier: MIT */
/*
 * The prepared view's engine: decodes images (JPEG with DCT-domain
 * downscaling and region-of-interest decoding through libjpeg-turbo; PNG,
 * WebP, TIFF, binary PNM and uncompressed BMP as Pillow reads them),
 * applies torchvision-equivalent transforms (RandomResizedCrop + flip,
 * Resize + CenterCrop, Resize) with PIL's antialiased bilinear resampling,
 * and serves the result as a binary PPM. Around it, a staging object
 * (struct prep_view) runs the decodes on a thread pool, shares one decode
 * among concurrent requests for the same sample (single-flight), keeps random
 * samples until every active job has read them and caches deterministic ones
 * like data. See prep/README.md for the internals.
 *
 * Conventions: every int-returning function returns 0 or a negative errno;
 * results come back through out-parameters, which are left untouched on
 * error unless stated otherwise.
 *
 * Errors of the decode path:
 *   -EINVAL  unknown format (not JPEG, PNG, WebP, TIFF, PNM or BMP), bad recipe/argument
 *   -EIO     a JPEG/PNG that is truncated or corrupt (every libjpeg warning
 *            counts as an error: stricter than PIL, see README), or an
 *            unsupported colour layout
 *   -EFBIG   source over the caps (PREP_MAX_SIDE per side, PREP_MAX_PIXELS),
 *            or an output over PREP_MAX_OUT_PIXELS; in a view, also a decode
 *            whose source or working memory exceeds the whole cfg.mem
 *   -ENOMEM  allocation failure
 */
#ifndef COORDFS_PREP_PREP_H
#define COORDFS_PREP_PREP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Hard caps on anything that comes from an image file. */
#define PREP_MAX_SIDE 32768u		       /* source width or height */
/* source width * height: where Pillow's Image.open raises
 * DecompressionBombError (2 * MAX_IMAGE_PIXELS, 2 * 2^30 / 4 / 3): the
 * 108-megapixel photographs of phones load in PIL, and so in the view. */
#define PREP_MAX_PIXELS 178956970u
#define PREP_MAX_OUT_PIXELS (16u << 20)	       /* output width * height */
#define PREP_MIN_SIZE 16u		       /* recipe S range */
#define PREP_MAX_SIZE 1024u
#define PREP_JOB_NAME_MAX 128u /* job names, with the NUL */

/* ---- recipes ---------------------------------------------------------- */

enum prep_kind { PREP_RRC, PREP_CENTER, PREP_RESIZE };

struct prep_recipe {
	enum prep_kind kind;
	unsigned size; /* S, PREP_MIN_SIZE..PREP_MAX_SIZE */
	/* Decode JPEGs at full scale (8/8) whatever the reduction: samples
	 * byte for byte PIL's, at the cost of the DCT scaling's speed on large
	 * images. Not part of the name; prep_recipe_parse leaves it false, a
	 * view sets it from prep_config.exact. */
	bool exact;
};

/* Parse "rrcS", "centerS" or "resizeS" (S decimal, no sign, no leading zero,
 * 16 <= S <= 1024). 0, or -EINVAL for anything else. Pure, thread-safe. */
int prep_recipe_parse(const char *name, struct prep_recipe *out);

/* The canonical name of r into buf ("rrc224"). 0, -EINVAL, or -ENAMETOOLONG. */
int prep_recipe_name(const struct prep_recipe *r, char *buf, size_t buflen);

/* True for recipes whose output depends on the version (rrc). */
bool prep_recipe_is_random(const struct prep_recipe *r);

/*
 * True when torchvision's ImageFolder would list a file of this name: its
 * extension, compared case-insensitively, is one of IMG_EXTENSIONS (.jpg
 * .jpeg .png .ppm .bmp .pgm .tif .tiff .webp). The prepared view lists
 * exactly these, so ImageFolder sees the same samples there; the decoder
 * sniffs the content, and handles JPEG, PNG, WebP, common TIFF layouts,
 * binary PNM and uncompressed BMP (others give -EINVAL or -EIO).
 */
bool prep_is_image_name(const char *name);

/* ---- stateless decode + transform --------------------------------------- */

/*
 * Width and height from the header alone (JPEG markers up to SOFn, PNG IHDR).
 * -EINVAL: not JPEG/PNG; -ENODATA: the buffer ends before the dimensions
 * (give it more bytes); -EIO: malformed header; -EFBIG: over the caps.
 * Pure, thread-safe, never reads past len.
 */
int prep_probe(const void *data, size_t len, unsigned *w, unsigned *h);

/* Output pixel size of recipe r on a src_w x src_h source. 0, -EINVAL, -EFBIG. */
int prep_output_dims(const struct prep_recipe *r, unsigned src_w, unsigned src_h, unsigned *out_w,
		     unsigned *out_h);

/* Exact size in bytes of the PPM that prep_render produces (header + RGB). */
int prep_output_size(const struct prep_recipe *r, unsigned src_w, unsigned src_h, uint64_t *bytes);

/* Bytes of a PPM of w x h ("P6\n<w> <h>\n255\n" + 3*w*h). */
uint64_t prep_ppm_size(unsigned w, unsigned h);

/*
 * Decode data (JPEG or PNG) and apply r. For random recipes the crop and
 * flip are a pure function of (seed, file_key, version). On success *out_ppm
 * is a malloc'd binary PPM of *out_len bytes, owned by the caller (free()).
 * Blocks for the decode (CPU only, no I/O); thread-safe, no shared state.
 */
int prep_render(const struct prep_recipe *r, const void *data, size_t len, uint64_t seed,
		uint64_t file_key, uint32_t version, uint8_t **out_ppm, size_t *out_len);

/*
 * An upper bound of the heap memory prep_render needs on data for recipe r
 * while it runs, besides data itself and the output PPM (row and region
 * buffers, coefficients, the codec's state; the whole image for
 * progressive JPEGs and interlaced PNGs). From the header alone; the errors
 * of prep_probe. Pure, thread-safe.
 */
int prep_decode_mem(const struct prep_recipe *r, const void *data, size_t len, uint64_t *bytes);

/* ---- the staging engine ------------------------------------------------- */

struct prep_source_ops {
	/* Read the whole source file file_index into a malloc'd buffer that the
	 * engine frees. 0 / -errno. Called concurrently from decode threads and
	 * from threads in prep_view_open (which decode inline). */
	int (*read_file)(void *arg, uint32_t file_index, uint8_t **data, size_t *len);
	/* Optional: read at most max bytes from the start of the file (for the
	 * header of resize recipes' stat). NULL: read_file is used instead. */
	int (*read_prefix)(void *arg, uint32_t file_index, size_t max, uint8_t **data, size_t *len);
	/* Optional: the file's name for log lines into buf (len bytes, NUL
	 * terminated); 0 / -errno. Without it, logs name the file index. */
	int (*file_name)(void *arg, uint32_t file_index, char *buf, size_t len);
	/* Optional: the file's size, reserved from cfg.mem before read_file
	 * allocates it. NULL: charged once read_file returned. */
	uint64_t (*file_size)(void *arg, uint32_t file_index);
	/* Optional: the file_key prep_view_open is given for the file (the
	 * seed of its random samples). Decoding ahead needs it: NULL turns
	 * decode-ahead off. Called with the view's lock held: no I/O. */
	uint64_t (*file_key)(void *arg, uint32_t file_index);
};

struct prep_config {
	uint64_t seed;	     /* randomness of every random recipe */
	uint64_t mem_budget; /* bytes of staged + cached samples (--prep-mem) */
	unsigned threads;    /* decode threads, and the bound on concurrent
			      * decodes (pool + inline); 0 = online CPUs */
	uint32_t nfiles;     /* file indexes are 0..nfiles-1 */
	double job_idle_s;   /* a job without a request for this long is inactive;
			      * <= 0 means 30 s */
	/* Optional byte budget shared with the caller (common/budget.h), NULL
	 * for none. Every sample's bytes (staged, cached or held by openers)
	 * and every decode's transient memory (the source file, the
	 * prep_decode_mem estimate) are reserved from it before they are
	 * allocated and returned when freed. When it is full, unreferenced
	 * random samples are dropped, then a request waits up to mem_wait_ms
	 * for room and is refused with -ENOMEM. */
	struct budget *mem;
	unsigned mem_wait_ms; /* 0 means 250 */
	unsigned max_jobs;    /* job table bound; 0 means PREP_MAX_JOBS */
	/* Share of mem_budget for the decoded tier (0: none): images decoded
	 * whole (JPEG at the DCT scale a sample needed) on their first
	 * successful decode while the share has room, never evicted; later
	 * samples of the file at that scale are resampled from them without
	 * reading or decoding the file, bit for bit what the file gives. Its
	 * bytes (a pointer per file of index included) are reserved from mem
	 * for the view's lifetime; deterministic samples then get 3/4 of the
	 * rest of mem_budget. */
	uint64_t decoded_mem;
	/* Decode-ahead threads (0: none). At nice 19 they decode, for each
	 * active job from its second epoch on, the next version of files the
	 * job has not read this epoch (with the random recipe it last opened),
	 * so that its open finds the sample staged, while a core is idle (see
 * ahead_idle); they only take memory that
	 * is free (never dropping another sample, never waiting), and hold at
	 * most a quarter of the staging share (mem_budget - decoded_mem) in
	 * samples not yet read. Versions are never taken ahead: version k is
	 * still a job's k-th open of a file. */
	unsigned ahead_threads;
	/* Cores that must have been idle (over the last 100 ms, counting the
	 * ahead threads' own time as idle) for decoding ahead to go on; < 0
	 * means the default, 0.5; 0: whenever there is work (nice 19 only). */
	double ahead_idle;
	/* Every recipe exact (prep_recipe.exact): no reduced DCT scale. */
	bool exact;
};

/* Jobs the view tracks at once (the table grows up to this); one uid may
 * hold at most a quarter of them. */
#define PREP_MAX_JOBS 1024u

struct prep_view;
struct prep_sample;
struct budget;

/*
 * The default shares when the user names none (coordfs(1): --prep-mem,
 * --prep-decoded-mem). need: what the tier would take to hold the whole
 * dataset, estimated as PREP_DECODED_PER_BYTE bytes of pixels per byte of
 * its files plus the index (8 bytes a file); dataset_bytes 0 means
 * unknown (sizes not listed), and the old default, half of mem, stands;
 * a need below PREP_TIER_HUGE_MIN counts as that much.
 *  - mem_given (the user's --prep-mem, a hard bound: *mem_out = mem):
 *    the tier takes need when it fits in three quarters of mem (staging
 *    keeps at least a quarter), else half of mem, as before.
 *  - otherwise (mem is the default): the tier takes need, up to half of
 *    avail (the memory the machine has for it: MemAvailable less the
 *    cache), and at least half of mem; *mem_out grows to the tier plus
 *    half of mem for staging, never below mem.
 * *decoded_out <= *mem_out always. Returns 0, or -EINVAL for a NULL out.
 */
#define PREP_DECODED_PER_BYTE 8
/* The smallest tier share whose images live in huge pages (prep/tier.c):
 * a default share is never sized below it where memory allows, since a
 * smaller one faults its images in 4 KiB at a time (137 faults for a
 * 500x375 image, measured 10.8 -> 152 daemon page faults per first-epoch
 * sample with the share sized to the dataset's 31 MB). */
#define PREP_TIER_HUGE_MIN (64ull << 20)
int prep_default_shares(uint64_t mem, bool mem_given, uint64_t dataset_bytes, uint64_t nfiles,
			uint64_t avail, uint64_t *mem_out, uint64_t *decoded_out);

/* A view with its thread pool started. NULL on failure (errno set). ops and
 * arg must outlive the view. */
struct prep_view *prep_view_create(const struct prep_config *cfg, const struct prep_source_ops *ops,
				   void *arg);

/* Stop the threads and free everything. Every sample must have been put
 * before. Accepts NULL. */
void prep_view_destroy(struct prep_view *v);

/*
 * One open of a prepared file: identify the job of pid (prep_job_of_pid,
 * cached per pid for a few seconds; jobs are keyed by uid and name, so
 * users never share one), take that job's next version of
 * file_index (its k-th open gets version k; deterministic recipes always use
 * version 0) and get the sample, decoding it (on the calling thread when a
 * decode slot is free, else on the pool) unless an identical one is staged
 * or in flight. Blocks until the sample is ready (only on its
 * own sample, never on another job). On success *out holds a reference that
 * the caller must give back with prep_sample_put; the job counts as
 * having an open file (its slot is never reused) until then. Errors: the
 * decode errors above (the failure is counted in stats.errors and logged
 * with the file's name), the source's errno, -EINVAL (bad
 * file_index/recipe), -ENOMEM (no room in cfg.mem within mem_wait_ms, or
 * allocation failure; counted in stats.refused; the version is not
 * consumed, so a retry gets the same sample), -EAGAIN (the job table is
 * full of jobs that are active or hold open files). Thread-safe.
 * file_key identifies the file's content for the randomness (e.g. a hash of
 * its relative path), so versions are stable across mounts.
 * Versions count a job's opens of file_index under any random recipe.
 * For fs/: the content of a random recipe's file changes from one open to
 * the next (same size), so such files must not keep the page cache across
 * opens (no keep_cache; direct_io or invalidate on open).
 */
int prep_view_open(struct prep_view *v, pid_t pid, uid_t uid, uint32_t file_index,
		   uint64_t file_key, const struct prep_recipe *r, struct prep_sample **out);

/* The same with the job named by the caller (non-empty, < PREP_JOB_NAME_MAX). */
int prep_view_open_job(struct prep_view *v, uid_t uid, const char *job, uint32_t file_index,
		       uint64_t file_key, const struct prep_recipe *r, struct prep_sample **out);

/* Take job (uid, name)'s next version of file_index without decoding:
 * 0-based, one per call, saturating at 65535. -EAGAIN when the job table
 * is full. Thread-safe. */
int prep_view_next_version(struct prep_view *v, uid_t uid, const char *job, uint32_t file_index,
			   uint32_t *version);

/* The PPM bytes of a sample; valid until its reference is put. */
const uint8_t *prep_sample_data(const struct prep_sample *s, size_t *len);

/* Give a reference back. Accepts NULL. Thread-safe, never blocks on a decode. */
void prep_sample_put(struct prep_view *v, struct prep_sample *s);

/*
 * Size of file_index's prepared file for stat(): fixed for rrc/center; for
 * resize the header is read through ops (read_prefix, else read_file) and
 * the dimensions are remembered per file. -EIO/-EINVAL for a file whose
 * header cannot be read (the caller may show it with any size; reading it
 * fails with the same error), -ENOMEM when the budget has no room for the
 * header read. Blocks on source I/O for resize only.
 */
int prep_view_size(struct prep_view *v, uint32_t file_index, const struct prep_recipe *r,
		   uint64_t *bytes);

struct prep_stats {
	uint64_t decodes;      /* samples rendered, successful or not (decoded_hits of
				* them from the decoded tier, the rest from the file) */
	uint64_t shared;       /* opens served by a staged or in-flight decode */
	uint64_t errors;       /* decodes that failed */
	uint64_t staged_bytes; /* bytes of samples held by the staging area/cache */
	uint64_t refused;      /* opens refused for memory (-ENOMEM) or jobs (-EAGAIN) */
	uint64_t jobs;	       /* jobs in the table */
	uint64_t jobs_reclaimed; /* inactive jobs whose counters were freed for memory */
	uint64_t decoded_bytes;	  /* bytes held by the decoded tier (index included) */
	uint64_t decoded_hits;	  /* samples rendered from the tier (no file read) */
	uint64_t decoded_files;	  /* images in the tier (a file once per DCT scale) */
	uint64_t decoded_refused; /* decodes not admitted: the tier's share was full */
	uint64_t ahead;		  /* samples decoded ahead and then opened */
	uint64_t ahead_wasted;	  /* samples decoded ahead and dropped unread */
	uint64_t ahead_bytes;	  /* bytes of samples decoded ahead, not yet opened */
};

/* Snapshot of the counters (relaxed reads). Thread-safe. */
void prep_view_stats(struct prep_view *v, struct prep_stats *out);

/* ---- job identity ------------------------------------------------------- */

/*
 * Name of the job that process pid belongs to, into out (outlen bytes):
 * the value of COORDFS_JOB in /proc/PID/environ when set and non-empty
 * (truncated to fit); else the job process is pid itself, or, when pid is
 * a PyTorch DataLoader worker (its own handlers for SIGBUS, SIGFPE,
 * SIGSEGV and SIGTERM), its parent (past a multiprocessing forkserver),
 * named by that process's COORDFS_JOB, else "ddp:ADDR:PORT" for a rank of
 * a distributed run (RANK, WORLD_SIZE, MASTER_PORT set), else
 * "pid:<pid>:<starttime>" (field 22 of /proc/PID/stat guards against pid
 * reuse). prep/README.md says why. 0, -ESRCH (no such
 * process), -EINVAL (outlen too small), other -errno from /proc.
 * pid may be a thread id (FUSE reports the calling thread): it is mapped to
 * its process (Tgid in /proc/PID/status) first, so threads share a job.
 * Blocks on /proc reads only; thread-safe.
 */
int prep_job_of_pid(pid_t pid, char *out, size_t outlen);

#endif
