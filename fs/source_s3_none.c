/* SPDX-License-Identifier: MIT */
/*
 * fs_source_s3_create for a build without the S3 client (remote/s3/,
 * meson -Ds3=disabled, or auto without expat): an s3:// SOURCE is refused
 * with one clear line. fs/meson.build picks this file or fs/source_s3.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fs/source.h"

int fs_source_s3_create(const struct fs_source_s3_options *o, struct fs_source **out, char *err,
			size_t errlen)
{
	char *bucket, *prefix;
	int rc = fs_source_s3_parse_url(o->url, &bucket, &prefix, err, errlen);

	if (rc < 0)
		return rc;
	free(bucket);
	free(prefix);
	snprintf(err, errlen,
		 "source '%s': this coordfs was built without S3 support (meson option s3)", o->url);
	return -ENOTSUP;
}

void fs_source_stop_all(void)
{
	/* no object-store requests in this build */
}
