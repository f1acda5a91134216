/* SPDX-License-Identifier: MIT */
/*
 * The namespace from an object listing (ns.h, ns_build). Keys are sorted
 * component by component ('/' below every other byte), so every key below
 * "a/" directly follows "a" and each directory's keys are one run; a walk
 * with a stack of open directories then builds a tree, which is laid out
 * breadth-first into the arrays ns_lookup searches.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "fs/ns.h"

#define NAME_MAX_BYTES 255
#define ETAG_MD5_KIND 1	 /* pool: kind byte + 16 binary bytes */
#define ETAG_TEXT_KIND 2 /* pool: kind byte + text + NUL */

struct listing_rec {
	uint64_t size;
	int64_t mtime_ns;
	size_t key_off; /* into arena; key then etag, each NUL-terminated */
	uint32_t key_len;
	uint16_t etag_len;
	const char *bad_why; /* skip it: why (static), or NULL */
};

struct ns_listing {
	struct listing_rec *recs;
	size_t n, cap;
	char *arena;
	size_t arena_len, arena_cap;
};

int ns_listing_create(struct ns_listing **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void ns_listing_destroy(struct ns_listing *l)
{
	if (!l)
		return;
	free(l->recs);
	free(l->arena);
	free(l);
}

size_t ns_listing_count(const struct ns_listing *l)
{
	return l->n;
}

static int arena_reserve(struct ns_listing *l, size_t more)
{
	if (l->arena_len + more <= l->arena_cap)
		return 0;
	size_t ncap = l->arena_cap ? l->arena_cap : 1 << 20;
	while (ncap < l->arena_len + more)
		ncap *= 2;
	char *na = realloc(l->arena, ncap);
	if (!na)
		return -ENOMEM;
	l->arena = na;
	l->arena_cap = ncap;
	return 0;
}

int ns_listing_add(struct ns_listing *l, const char *key, size_t key_len, uint64_t size,
		   const char *etag, int64_t mtime_ns)
{
	size_t etag_len = etag ? strlen(etag) : 0;
	const char *bad_why = etag_len > NS_MAX_ETAG ? "ETag over 128 bytes" : NULL;

	if (key_len > UINT32_MAX)
		return -EOVERFLOW;
	if (bad_why)
		etag_len = 0;
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 4096;
		struct listing_rec *nr = realloc(l->recs, ncap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		l->recs = nr;
		l->cap = ncap;
	}
	if (arena_reserve(l, key_len + etag_len + 2) < 0)
		return -ENOMEM;
	struct listing_rec *r = &l->recs[l->n++];
	r->size = size;
	r->mtime_ns = mtime_ns;
	r->key_off = l->arena_len;
	r->key_len = (uint32_t)key_len;
	r->etag_len = (uint16_t)etag_len;
	r->bad_why = bad_why;
	memcpy(l->arena + l->arena_len, key, key_len);
	l->arena[l->arena_len + key_len] = '\0';
	memcpy(l->arena + l->arena_len + key_len + 1, etag ? etag : "", etag_len);
	l->arena[l->arena_len + key_len + 1 + etag_len] = '\0';
	l->arena_len += key_len + etag_len + 2;
	return 0;
}

int ns_listing_add_unusable(struct ns_listing *l, const char *key, size_t key_len,
			    const char *why)
{
	int rc = ns_listing_add(l, key, key_len, 0, NULL, 0);

	if (rc == 0)
		l->recs[l->n - 1].bad_why = why;
	return rc;
}

/* ---- sorting ---- */

static int cmp_keys(const char *a, size_t la, const char *b, size_t lb)
{
	size_t m = la < lb ? la : lb, i = 0;

	while (i < m && a[i] == b[i])
		i++;
	if (i < m) {
		int ca = a[i] == '/' ? 0 : (unsigned char)a[i] + 1;
		int cb = b[i] == '/' ? 0 : (unsigned char)b[i] + 1;
		return ca - cb;
	}
	return (la > lb) - (la < lb);
}

static int cmp_recs(const void *x, const void *y, void *arg)
{
	const struct listing_rec *a = x, *b = y;
	const char *arena = arg;

	return cmp_keys(arena + a->key_off, a->key_len, arena + b->key_off, b->key_len);
}

/* ---- validation ---- */

/* Why key cannot be a path, or NULL when it can. */
static const char *bad_key(const char *key, size_t len)
{
	if (len == 0)
		return "empty key";
	if (memchr(key, '\0', len))
		return "NUL byte in the key";
	const char *p = key, *end = key + len;
	while (p <= end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		size_t c = slash ? (size_t)(slash - p) : (size_t)(end - p);
		if (c == 0)
			return "empty path component";
		if ((c == 1 && p[0] == '.') || (c == 2 && p[0] == '.' && p[1] == '.'))
			return "'.' or '..' component";
		if (c > NAME_MAX_BYTES)
			return "component over 255 bytes";
		if (!slash)
			break;
		p = slash + 1;
	}
	return NULL;
}

/* A key ending in '/' ("train/cat/"): the directory marker that the S3
 * console's "Create folder", s3fs and others store, empty or not. It names a
 * directory, even one with no other keys under it, and no file. */
static bool is_marker(const struct ns_listing *l, const struct listing_rec *r)
{
	return r->key_len > 1 && l->arena[r->key_off + r->key_len - 1] == '/';
}

/* Log a skipped key once, control characters and backslashes escaped. */
static void log_skipped(const char *key, size_t len, const char *why)
{
	size_t shown = len < 1024 ? len : 1024;
	char *esc = malloc(shown * 4 + 1);

	if (!esc) {
		log_warn("skipping an object key (%s)", why);
		return;
	}
	size_t j = 0;
	for (size_t i = 0; i < shown; i++) {
		unsigned char c = (unsigned char)key[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			j += (size_t)sprintf(esc + j, "\\x%02x", c);
		else
			esc[j++] = (char)c;
	}
	esc[j] = '\0';
	log_warn("skipping object '%s%s': %s", esc, shown < len ? "..." : "", why);
	free(esc);
}

/* ---- the tree ---- */

#define NONE UINT32_MAX

struct tnode {
	const char *name;
	uint32_t name_len;
	uint32_t parent;
	uint32_t first_child, last_child, next_sibling;
	uint32_t rec;	/* NONE for a directory */
	uint32_t final; /* index in ns->nodes */
};

struct tree {
	struct tnode *v;
	size_t n, cap;
};

static int tree_add(struct tree *t, uint32_t parent, const char *name, size_t len, uint32_t rec,
		    uint32_t *idx)
{
	if (t->n >= UINT32_MAX - 2)
		return -EOVERFLOW;
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 4096;
		struct tnode *nv = realloc(t->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		t->v = nv;
		t->cap = ncap;
	}
	uint32_t i = (uint32_t)t->n++;
	t->v[i] = (struct tnode){name, (uint32_t)len, parent, NONE, NONE, NONE, rec, 0};
	if (parent != NONE) {
		struct tnode *p = &t->v[parent];
		if (p->last_child == NONE)
			p->first_child = i;
		else
			t->v[p->last_child].next_sibling = i;
		p->last_child = i;
	}
	*idx = i;
	return 0;
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hexval(char c)
{
	return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* Whether etag is the quoted 32-hex-digit form that packs into 16 bytes.
 * Upper-case digits do not pack: ns_etag writes lower case. */
static bool etag_packs(const char *etag, size_t len)
{
	if (len != 34 || etag[0] != '"' || etag[33] != '"')
		return false;
	for (int i = 1; i < 33; i++)
		if (!is_hex(etag[i]) || (etag[i] >= 'A' && etag[i] <= 'F'))
			return false;
	return true;
}

static int pool_put_etag(struct ns_text *p, const char *etag, size_t len, uint32_t *off)
{
	uint8_t packed[1 + NS_MAX_ETAG + 1];
	size_t n;

	if (etag_packs(etag, len)) {
		packed[0] = ETAG_MD5_KIND;
		for (int i = 0; i < 16; i++)
			packed[1 + i] =
			    (uint8_t)(hexval(etag[1 + 2 * i]) << 4 | hexval(etag[2 + 2 * i]));
		n = 17;
	} else {
		packed[0] = ETAG_TEXT_KIND;
		memcpy(packed + 1, etag, len);
		packed[1 + len] = '\0';
		n = len + 2;
	}
	return ns_text_put(p, packed, n, false, off);
}

int ns_etag(const struct ns *ns, uint32_t i, char *buf, size_t buflen)
{
	static const char hex[] = "0123456789abcdef";
	uint32_t off = ns->nodes[i].etag_off;

	if (off == 0)
		return -ENOENT;
	const uint8_t *e = (const uint8_t *)ns->pool + off;
	if (e[0] == ETAG_MD5_KIND) {
		if (buflen < 35)
			return -ENAMETOOLONG;
		buf[0] = '"';
		for (int k = 0; k < 16; k++) {
			buf[1 + 2 * k] = hex[e[1 + k] >> 4];
			buf[2 + 2 * k] = hex[e[1 + k] & 15];
		}
		buf[33] = '"';
		buf[34] = '\0';
		return 34;
	}
	size_t len = strlen((const char *)e + 1);
	if (len + 1 > buflen)
		return -ENAMETOOLONG;
	memcpy(buf, e + 1, len + 1);
	return (int)len;
}

/* Lay the tree out breadth-first into ns. */
static int layout(struct ns *ns, struct tree *t, const struct ns_listing *l, uint64_t chunk_size,
		  const struct ns_owner *owner)
{
	struct ns_text pool = {0};
	uint32_t off;
	int rc;

	ns->nodes = calloc(t->n, sizeof(*ns->nodes));
	if (!ns->nodes)
		return -ENOMEM;
	/* Offset 0 is the root's empty name, so no ETag ever has offset 0. */
	if ((rc = ns_text_put(&pool, "", 1, false, &off)) < 0)
		goto fail;
	/* order[i]: the tree node at final index i (the queue of the walk). */
	uint32_t *order = malloc(t->n * sizeof(*order));
	if (!order) {
		rc = -ENOMEM;
		goto fail;
	}
	size_t tail = 1;
	order[0] = 0;
	t->v[0].final = 0;
	for (size_t i = 0; i < tail && rc == 0; i++) {
		struct tnode *tn = &t->v[order[i]];
		struct ns_node *n = &ns->nodes[i];
		n->parent = tn->parent == NONE ? 0 : t->v[tn->parent].final;
		n->uid = owner->uid;
		n->gid = owner->gid;
		n->name_len = (uint16_t)tn->name_len;
		if (i > 0) {
			if ((rc = ns_text_put(&pool, tn->name, tn->name_len, true, &n->name_off)) < 0)
				break;
		}
		if (tn->rec == NONE) {
			n->mode = S_IFDIR | (owner->dir_mode & 07777);
			n->first = (uint32_t)tail;
			for (uint32_t c = tn->first_child; c != NONE; c = t->v[c].next_sibling) {
				t->v[c].final = (uint32_t)tail;
				order[tail++] = c;
				n->count++;
			}
			continue;
		}
		const struct listing_rec *r = &l->recs[tn->rec];
		n->mode = S_IFREG | (owner->file_mode & 07777);
		n->size = r->size;
		n->mtime_ns = r->mtime_ns;
		if (r->etag_len &&
		    (rc = pool_put_etag(&pool, l->arena + r->key_off + r->key_len + 1, r->etag_len,
					&n->etag_off)) < 0)
			break;
		/* ns_build skipped sizes over ns_max_file_size: no wrap here */
		uint64_t units = ns_units_of(n->size, chunk_size);
		if (units > UINT32_MAX || ns->nunits + units > UINT32_MAX) {
			rc = -EOVERFLOW;
			break;
		}
		n->first = (uint32_t)ns->nunits;
		n->count = (uint32_t)units;
		ns->nunits += units;
		ns->nfiles++;
		ns->total_bytes += n->size;
	}
	free(order);
	if (rc < 0)
		goto fail;
	ns->nnodes = (uint32_t)t->n;
	/* A directory's mtime is its newest object's. */
	for (uint32_t i = ns->nnodes; i-- > 1;) {
		struct ns_node *p = &ns->nodes[ns->nodes[i].parent];
		if (ns->nodes[i].mtime_ns > p->mtime_ns)
			p->mtime_ns = ns->nodes[i].mtime_ns;
	}
	char *shrunk = realloc(pool.buf, pool.len);
	ns->pool = shrunk ? shrunk : pool.buf;
	ns->pool_len = pool.len;
	return 0;
fail:
	free(pool.buf);
	return rc;
}

int ns_build(struct ns *ns, struct ns_listing *l, uint64_t chunk_size, const struct ns_owner *owner,
	     uint64_t *skipped, char *err, size_t errlen)
{
	struct tree t = {0};
	uint32_t *stack = NULL; /* open directories: stack[d] is the tree node at depth d */
	size_t depth = 0;	/* entries in stack; stack[0] is the root */
	uint32_t idx;
	int rc;

	ns_reset(ns, chunk_size);
	*skipped = 0;
	if (l->n > 1)
		qsort_r(l->recs, l->n, sizeof(*l->recs), cmp_recs, l->arena);
	/* A key has at most 1 + len/2 components. */
	size_t max_depth = 2;
	for (size_t i = 0; i < l->n; i++)
		if (l->recs[i].key_len / 2 + 2 > max_depth)
			max_depth = l->recs[i].key_len / 2 + 2;
	bool *ok = malloc((l->n ? l->n : 1) * sizeof(*ok));
	stack = malloc(max_depth * sizeof(*stack));
	if (!ok || !stack) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->n; i++) {
		const struct listing_rec *r = &l->recs[i];
		const char *why = r->bad_why ? r->bad_why
				  : is_marker(l, r) ? bad_key(l->arena + r->key_off, r->key_len - 1)
				  : r->size > ns_max_file_size(chunk_size)
				      ? "listed size beyond what a file can be"
				      : bad_key(l->arena + r->key_off, r->key_len);
		ok[i] = !why;
		if (why) {
			log_skipped(l->arena + r->key_off, r->key_len, why);
			(*skipped)++;
		}
	}
	if ((rc = tree_add(&t, NONE, "", 0, NONE, &idx)) < 0)
		goto out;
	stack[depth++] = 0;
	size_t next = 0; /* the next valid record after i */
	for (size_t i = 0; i < l->n; i = next) {
		for (next = i + 1; next < l->n && !ok[next]; next++)
			;
		if (!ok[i])
			continue;
		const struct listing_rec *r = &l->recs[i];
		const char *key = l->arena + r->key_off;
		if (next < l->n) {
			const struct listing_rec *nr = &l->recs[next];
			const char *nkey = l->arena + nr->key_off;
			if (nr->key_len == r->key_len && !memcmp(nkey, key, r->key_len)) {
				/* Keep the last of equal keys' records: skip this one. */
				log_skipped(key, r->key_len, "listed twice");
				(*skipped)++;
				continue;
			}
			if (nr->key_len > r->key_len && nkey[r->key_len] == '/' &&
			    !memcmp(nkey, key, r->key_len)) {
				log_skipped(key, r->key_len, "also a directory of other keys");
				(*skipped)++;
				continue;
			}
		}
		/* Walk the key's directories: keep the open ones it shares, open the rest. */
		const char *p = key, *end = key + r->key_len;
		size_t d = 1;
		for (const char *slash; (slash = memchr(p, '/', (size_t)(end - p))) != NULL;
		     p = slash + 1, d++) {
			size_t c = (size_t)(slash - p);
			if (d < depth) {
				const struct tnode *open = &t.v[stack[d]];
				if (open->name_len == c && !memcmp(open->name, p, c))
					continue;
				depth = d; /* diverged: close the deeper ones */
			}
			if ((rc = tree_add(&t, stack[d - 1], p, c, NONE, &idx)) < 0)
				goto out;
			stack[d] = idx;
			depth = d + 1;
		}
		if (d < depth)
			depth = d;
		if (p == end) /* a directory marker: the walk made its directory */
			continue;
		if ((rc = tree_add(&t, stack[d - 1], p, (size_t)(end - p), (uint32_t)i, &idx)) < 0)
			goto out;
	}
	rc = layout(ns, &t, l, chunk_size, owner);
	if (rc == 0)
		rc = ns_set_known(ns, true);
out:
	if (rc < 0) {
		snprintf(err, errlen, "cannot index the listing (%zu keys)", l->n);
		ns_fini(ns);
	}
	free(ok);
	free(stack);
	free(t.v);
	return rc;
}
