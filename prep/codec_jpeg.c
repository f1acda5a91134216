/* SPDX-License-Identifier: MIT */
/*
 * JPEG through the libjpeg API of libjpeg-turbo with DCT-domain downscaling
 * (scale_num/8), horizontal cropping (jpeg_crop_scanline) and row skipping
 * (jpeg_skip_scanlines), so only the pixels the resampler reads are
 * reconstructed. CMYK is converted as PIL does (Adobe polarity). Every
 * error, and every libjpeg warning, unwinds through a setjmp/longjmp error
 * manager: nothing here exits or prints.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "prep/codec.h"
#include "prep/sink.h"

static bool sniff_jpeg(const uint8_t *p, size_t len)
{
	return len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff;
}

/* The next marker from p[*i] on that is not standalone (SOI, TEM, RSTn and
 * stuffed 0x00 are passed over), *i just after it; -1 when the data ends
 * first. Fill bytes are skipped, and, leniently, garbage between segments,
 * as libjpeg does with a warning. */
static int next_marker(const uint8_t *p, size_t len, size_t *i)
{
	for (;;) {
		while (*i < len && p[*i] != 0xff)
			(*i)++;
		while (*i < len && p[*i] == 0xff)
			(*i)++;
		if (*i >= len)
			return -1;
		uint8_t m = p[(*i)++];
		if (!(m == 0x00 || m == 0x01 || m == 0xd8 || (m >= 0xd0 && m <= 0xd7)))
			return m;
	}
}

/* A start-of-frame marker (SOF0..SOF15 but DHT, JPG and DAC). */
static bool is_sof(int m)
{
	return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
}

static int probe_jpeg(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	size_t i = 2;

	for (;;) {
		int m = next_marker(p, len, &i);

		if (m < 0)
			return -ENODATA;
		if (m == 0xd9 || m == 0xda)
			return -EIO; /* EOI or SOS before any frame header */
		if (i + 2 > len)
			return -ENODATA;
		size_t seglen = (size_t)p[i] << 8 | p[i + 1];
		if (seglen < 2)
			return -EIO;
		if (is_sof(m)) {
			if (seglen < 8)
				return -EIO;
			if (i + 7 > len)
				return -ENODATA;
			unsigned hh = (unsigned)p[i + 3] << 8 | p[i + 4];
			unsigned ww = (unsigned)p[i + 5] << 8 | p[i + 6];
			int rc = prep__check_caps(ww, hh);
			if (rc < 0)
				return rc;
			*w = ww;
			*h = hh;
			return 0;
		}
		i += seglen;
	}
}

/* Does libjpeg need its whole-image coefficient buffer for this file
 * (progressive, or a first scan without every component)? When the data
 * ends before the first scan, assume it does. */
static bool jpeg_buffers_whole(const uint8_t *p, size_t len)
{
	size_t i = 2;
	unsigned ncomp = 0;
	bool progressive = false;

	for (;;) {
		int m = next_marker(p, len, &i);

		if (m < 0 || m == 0xd9 || i + 3 > len)
			return true;
		size_t seglen = (size_t)p[i] << 8 | p[i + 1];
		if (is_sof(m)) {
			progressive = m == 0xc2 || m == 0xc6 || m == 0xca || m == 0xce;
			if (i + 8 > len)
				return true;
			ncomp = p[i + 7];
		} else if (m == 0xda) {
			return progressive || p[i + 2] < ncomp;
		}
		if (seglen < 2)
			return true;
		i += seglen;
	}
}

static uint64_t work_jpeg(const uint8_t *p, size_t len, unsigned W, unsigned H)
{
	return jpeg_buffers_whole(p, len) ? (uint64_t)W * H * 8 : (uint64_t)W * 64 * 2;
}

/* PIL: CMYK JPEGs are read as "CMYK;I" (Adobe polarity), then cmyk2rgb. */
static void cmyk_to_rgb(uint8_t *px, size_t n)
{
	const uint8_t *in = px;
	uint8_t *out = px;

	for (size_t i = 0; i < n; i++, in += 4, out += 3) {
		const uint8_t ink[4] = {(uint8_t)(255 - in[0]), (uint8_t)(255 - in[1]),
					(uint8_t)(255 - in[2]), (uint8_t)(255 - in[3])};

		prep__cmyk_to_rgb(ink, out);
	}
}

/* ---- JPEG ---- */

struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int code;
};

static void jerr_exit(j_common_ptr ci)
{
	struct jerr *e = (struct jerr *)ci->err;

	if (!e->code)
		e->code = ci->err->msg_code == JERR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	longjmp(e->jb, 1);
}

/* Warnings that say nothing against the pixels: libjpeg decodes the image
 * as usual, and so does PIL, silently. Failing on them would fail
 * photographs that PIL reads whole. Odd header fields (a JFIF 2.x version,
 * an Adobe transform code it does not know, a baseline scan with
 * progressive-looking parameters, all written by real encoders), and junk
 * between the last scan and EOI ("N extraneous bytes before marker 0xd9",
 * as some cameras write): every MCU has been decoded by then. It is met
 * only by a decode that reads to the end, so failing on it made such a file
 * fail or not by where its crop lay (resize: always, rrc: now and then). */
static bool jwarn_benign(const struct jpeg_error_mgr *err)
{
	switch (err->msg_code) {
	case JWRN_JFIF_MAJOR:
	case JWRN_ADOBE_XFORM:
	case JWRN_NOT_SEQUENTIAL:
		return true;
	case JWRN_EXTRANEOUS_DATA:
		return err->msg_parm.i[1] == 0xd9; /* the marker it stopped at: EOI */
	default:
		return false;
	}
}

static void jerr_emit(j_common_ptr ci, int level)
{
	struct jerr *e = (struct jerr *)ci->err;

	/* any other warning: corrupt or truncated data */
	if (level < 0 && !jwarn_benign(ci->err)) {
		e->code = -EIO;
		longjmp(e->jb, 1);
	}
}

static void jerr_output(j_common_ptr ci)
{
}

/* ci's error manager: errors longjmp to err->jb (the caller's setjmp),
 * messages go to emit, nothing is printed. */
static void jerr_setup(struct jpeg_decompress_struct *ci, struct jerr *err,
		       void (*emit)(j_common_ptr, int))
{
	ci->err = jpeg_std_error(&err->pub);
	err->pub.error_exit = jerr_exit;
	err->pub.emit_message = emit;
	err->pub.output_message = jerr_output;
	err->code = 0;
}

static void jprogress(j_common_ptr ci)
{
	j_decompress_ptr di = (j_decompress_ptr)ci;

	if (ci->is_decompressor && di->input_scan_number > PREP__JPEG_MAX_SCANS) {
		struct jerr *e = (struct jerr *)ci->err;

		e->code = -EIO;
		longjmp(e->jb, 1);
	}
}

#if JPEG_LIB_VERSION >= 70
#define COMP_IDCT_SIZE(p) ((p)->DCT_h_scaled_size)
#define MIN_IDCT_SIZE(ci) ((ci)->min_DCT_h_scaled_size)
#else
#define COMP_IDCT_SIZE(p) ((p)->DCT_scaled_size)
#define MIN_IDCT_SIZE(ci) ((ci)->min_DCT_scaled_size)
#endif

/* Can jpeg_crop_scanline crop this decode? It gives each component a
 * downsampled width of output_width * h_samp / max_h_samp, i.e. assumes
 * the component's IDCT is at the image's scale. When DCT-scaled, libjpeg
 * runs a subsampled component's IDCT at a larger scale (fewer upsampling
 * steps); where that component still needs upsampling (4:1:0 and its
 * transpose at 2/8 and 4/8: chroma upsampled 2x one way) the upsampler is
 * told half its real width and leaves the right half of the crop garbage
 * (libjpeg-turbo 2.1; PSNR 13-20 dB). A component at 1:1 after its IDCT
 * (4:2:0 at 4/8) is passed through whole and is fine. */
static bool crop_ok(const struct jpeg_decompress_struct *ci)
{
	int m = MIN_IDCT_SIZE(ci);

	for (int c = 0; c < ci->num_components; c++) {
		const jpeg_component_info *p = &ci->comp_info[c];
		int s = COMP_IDCT_SIZE(p);

		if (s != m && (p->h_samp_factor * s != ci->max_h_samp_factor * m ||
			       p->v_samp_factor * s != ci->max_v_samp_factor * m))
			return false;
	}
	return true;
}

/* Does an EOI marker (FF D9) start within the last PREP__EOI_WINDOW bytes?
 * Entropy-coded data cannot contain FF D9 (an FF there is stuffed as
 * FF 00), so in a file cut inside its scan data these bytes never form one. */
static bool jpeg_has_eoi(const uint8_t *data, size_t len)
{
	if (len < 2)
		return false;
	size_t stop = len > PREP__EOI_WINDOW ? len - PREP__EOI_WINDOW : 0;

	for (size_t i = len - 2;; i--) {
		if (data[i] == 0xff && data[i + 1] == 0xd9)
			return true;
		if (i == stop)
			return false;
	}
}

/* ---- PIL's reading of an arithmetic-coded JPEG ---- */

/*
 * PIL hands libjpeg its file in 64 KiB reads (ImageFile.load, MAXBLOCK)
 * through a suspending source: every fill_input_buffer suspends, the
 * decoder returns, and PIL calls it again with what is left of the bytes
 * read so far plus the next 64 KiB. libjpeg's Huffman decoder resumes; its
 * arithmetic decoder cannot (JERR_CANT_SUSPEND), so PIL fails ("broken data
 * stream") every arithmetic-coded file whose entropy data runs past the
 * bytes read when its scan is decoded: any such file over 64 KiB, give or
 * take its tail. Which ones, only a decode fed the same way tells; this is
 * that decode, run before ours on arithmetic-coded files only (rare), so
 * that a file PIL refuses is refused here too, not served.
 */
#define PIL_READ 65536 /* PIL's ImageFile.MAXBLOCK */

struct pil_src {
	struct jpeg_source_mgr pub;
	size_t skip; /* bytes still to skip past the buffer, as PIL's source */
};

static void pil_src_init(j_decompress_ptr ci)
{
}

static boolean pil_src_fill(j_decompress_ptr ci)
{
	return FALSE; /* suspend: the caller gives the next read */
}

static void pil_src_skip(j_decompress_ptr ci, long n)
{
	struct pil_src *s = (struct pil_src *)ci->src;

	if (n <= 0)
		return;
	if ((size_t)n > s->pub.bytes_in_buffer) {
		s->skip = (size_t)n - s->pub.bytes_in_buffer;
		s->pub.next_input_byte += s->pub.bytes_in_buffer;
		s->pub.bytes_in_buffer = 0;
	} else {
		s->pub.next_input_byte += n;
		s->pub.bytes_in_buffer -= (size_t)n;
		s->skip = 0;
	}
}

static void pil_src_term(j_decompress_ptr ci)
{
}

static void jerr_quiet(j_common_ptr ci, int level)
{
}

/* Does PIL fail this file, fed as ImageFile.load feeds its JPEG decoder
 * (JpegDecode.c's states: header, start, rows, finish)? Any libjpeg error
 * fails it, as in PIL; warnings do not; running out of bytes to read is
 * PIL's "image file is truncated". The rows are decoded at 1/8: the
 * entropy data, which alone decides, is read whole at any scale. */
static bool pil_fails_arith(const uint8_t *data, size_t len)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_progress_mgr prog = {.progress_monitor = jprogress};
	struct pil_src src;
	struct jerr err;
	uint8_t *volatile row = NULL;
	volatile bool fails = true;
	volatile int state = 1;
	volatile size_t end = 0;

	memset(&ci, 0, sizeof(ci));
	memset(&src, 0, sizeof(src));
	jerr_setup(&ci, &err, jerr_quiet);
	if (setjmp(err.jb))
		goto out;
	jpeg_create_decompress(&ci);
	ci.progress = &prog;
	ci.mem->max_memory_to_use = PREP__JPEG_MAX_MEM;
	src.pub.init_source = pil_src_init;
	src.pub.fill_input_buffer = pil_src_fill;
	src.pub.skip_input_data = pil_src_skip;
	src.pub.resync_to_restart = jpeg_resync_to_restart;
	src.pub.term_source = pil_src_term;
	src.pub.next_input_byte = data;
	ci.src = &src.pub;
	for (;;) {
		/* one call of PIL's decoder: the bytes read and not consumed */
		if (end >= len)
			goto out; /* the read is empty: "image file is truncated" */
		end = len - end > PIL_READ ? end + PIL_READ : len;
		src.pub.bytes_in_buffer = end - (size_t)(src.pub.next_input_byte - data);
		if (src.skip) {
			pil_src_skip(&ci, (long)src.skip);
			if (src.skip)
				continue;
		}
		if (state == 1) {
			int ok;
			while ((ok = jpeg_read_header(&ci, FALSE)) == JPEG_HEADER_TABLES_ONLY)
				;
			if (ok == JPEG_SUSPENDED)
				continue;
			ci.scale_num = 1;
			ci.scale_denom = 8;
			state = 2;
		}
		if (state == 2) {
			if (!jpeg_start_decompress(&ci))
				continue;
			row = malloc((size_t)ci.output_width * ci.output_components);
			if (!row)
				goto out;
			state = 3;
		}
		JSAMPROW r = row;
		while (ci.output_scanline < ci.output_height && jpeg_read_scanlines(&ci, &r, 1) == 1)
			;
		if (ci.output_scanline < ci.output_height)
			continue;
		/* every row is out: PIL is done even if finishing suspends */
		jpeg_finish_decompress(&ci);
		fails = false;
		goto out;
	}
out:
	jpeg_destroy_decompress(&ci);
	free(row);
	return fails;
}

static int decode_jpeg(const uint8_t *data, size_t len, struct prep__sink *d)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_progress_mgr prog = {.progress_monitor = jprogress};
	struct jerr err;
	uint8_t *volatile scratch = NULL;
	volatile int rc = 0;

	memset(&ci, 0, sizeof(ci));
	jerr_setup(&ci, &err, jerr_emit);
	if (setjmp(err.jb)) {
		rc = err.code ? err.code : -EIO;
		goto out;
	}
	jpeg_create_decompress(&ci);
	ci.progress = &prog;
	ci.mem->max_memory_to_use = PREP__JPEG_MAX_MEM;
	jpeg_mem_src(&ci, data, (unsigned long)len);
	if (jpeg_read_header(&ci, TRUE) != JPEG_HEADER_OK) {
		rc = -EIO;
		goto out;
	}
	bool cmyk = false;
	switch (ci.jpeg_color_space) {
	case JCS_GRAYSCALE:
	case JCS_YCbCr:
	case JCS_RGB:
		ci.out_color_space = JCS_RGB;
		break;
	case JCS_CMYK:
	case JCS_YCCK:
		ci.out_color_space = JCS_CMYK;
		cmyk = true;
		break;
	default:
		rc = -EIO;
		goto out;
	}
	if (ci.arith_code && pil_fails_arith(data, len)) {
		rc = -EIO;
		goto out;
	}
	if ((rc = prep__sink_scale(d, ci.image_width, ci.image_height, true)) < 0)
		goto out;
	ci.scale_num = d->M;
	ci.scale_denom = 8;
	ci.dct_method = JDCT_ISLOW;
	ci.do_fancy_upsampling = TRUE;
	jpeg_calc_output_dimensions(&ci);
	if ((rc = prep__sink_region(d, ci.output_width, ci.output_height)) < 0)
		goto out;
	jpeg_start_decompress(&ci);

	unsigned sh = ci.output_height;
	/* One spare column each side: fancy upsampling is approximate at the
	 * edges of a cropped row, so the edges are kept out of the region. */
	JDIMENSION xoff = d->rx0 > 0 ? d->rx0 - 1 : 0;
	JDIMENSION cw = (d->rx1 < ci.output_width ? d->rx1 + 1 : ci.output_width) - xoff;
	if (cw < ci.output_width && crop_ok(&ci)) {
		jpeg_crop_scanline(&ci, &xoff, &cw);
	} else { /* whole rows; the region is taken from them */
		xoff = 0;
		cw = ci.output_width;
	}
	if ((rc = prep__sink_alloc(d, ci.output_width, cmyk ? 4 : 3)) < 0)
		goto out;
	d->bx0 = xoff;
	if (d->ry0 > 0 && jpeg_skip_scanlines(&ci, d->ry0) != d->ry0) {
		rc = -EIO;
		goto out;
	}
	while (ci.output_scanline < d->ry1) {
		JSAMPROW row = prep__sink_row(d);

		if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
			rc = -EIO;
			goto out;
		}
		if (cmyk)
			cmyk_to_rgb(row, cw);
		prep__sink_push(d);
	}
	prep__sink_flush(d);
	/* A truncated file must fail whatever the crop. When the data ends in
	 * an EOI marker (a cut file does not) the rows below the region are not
	 * decoded: jpeg_destroy_decompress aborts the decode. Otherwise the
	 * rest is consumed: skipped rows are entropy-decoded only. Skipping to
	 * the very bottom would decode nothing (libjpeg-turbo just declares
	 * EOI), so the last row is read for real. Progressive and multi-scan
	 * files have been read whole by jpeg_start_decompress already. */
	if (ci.output_scanline < sh && jpeg_has_eoi(data, len))
		goto out;
	if (ci.output_scanline < sh) {
		if (ci.output_scanline < sh - 1)
			jpeg_skip_scanlines(&ci, sh - 1 - ci.output_scanline);
		scratch = malloc(d->stride);
		if (!scratch) {
			rc = -ENOMEM;
			goto out;
		}
		JSAMPROW row = scratch;
		if (jpeg_read_scanlines(&ci, &row, 1) != 1) {
			rc = -EIO;
			goto out;
		}
	}
	jpeg_finish_decompress(&ci);
out:
	jpeg_destroy_decompress(&ci);
	free(scratch);
	return rc;
}

const struct prep__codec prep__codec_jpeg = {
	.format = PREP__JPEG,
	.sniff = sniff_jpeg,
	.probe = probe_jpeg,
	.work_mem = work_jpeg,
	.decode = decode_jpeg,
};
