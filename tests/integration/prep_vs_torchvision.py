# SPDX-License-Identifier: MIT
"""prep/ against the reference it imitates: PIL decode + torchvision transforms.

Run with /usr/bin/python3 (it has torch, torchvision, PIL, numpy):
    prep_vs_torchvision.py PATH/TO/prep_render_cli

1. centerS / resizeS outputs of prep_render_cli against PIL's
   Image.open().convert("RGB") + torchvision Resize(+CenterCrop), on photo-like
   images (smooth gradients + noise + shapes): JPEGs of several sizes and
   chroma subsamplings, progressive, gray, CMYK, one with the header oddities
   libjpeg only warns about (JFIF 2.01, a baseline scan with Se 62), one with
   junk before EOI (while a scan cut short, junk and EOI after it, fails), and PNGs of every colour
   type (palette ones also with indexes past a short PLTE). PSNR must be >= 30 dB everywhere; PNG (no DCT scaling) must match
   almost exactly (>= 50 dB). PNGs with a broken chunk CRC fail or load as in
   PIL (which checks the CRCs before the image data only). Variant files
   (other formats and layouts, GIFs among them) identical to PIL + torchvision,
   or failing where PIL fails.
2. rrcS: our crop parameters (prep_render_cli --rrc-params) against
   torchvision's RandomResizedCrop.get_params over many draws: mean scale,
   mean log aspect ratio, fallback rate; and rendered rrc samples against
   PIL crop+resize+flip with the same parameters.
Prints one line per check and a closing "N passed, N failed" line.
"""
import io
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision.transforms as T
    from PIL import Image
except ImportError as e:  # the test suite installs them: their absence is a failure
    print(f"FAIL: needs numpy, torch, torchvision and PIL under /usr/bin/python3 ({e})")
    sys.exit(1)

CLI = sys.argv[1] if len(sys.argv) > 1 else "build/tests/helpers/prep_render_cli"
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")


def photo(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / (23.0 + seed)) + 20 * np.cos(y / 11.0)
    g = 128 + 90 * np.cos((x + y) / 53.0)
    b = 60 + 150 * (y / h)
    a = np.stack([r, g, b], -1) + rng.normal(0, 6, (h, w, 3))
    a[h // 4:h // 2, w // 3:w // 2] = [200, 30, 40]
    yy, xx = h * 2 // 3, w * 2 // 3
    rad = min(w, h) // 6
    a[(y - yy) ** 2 + (x - xx) ** 2 < rad * rad] = [20, 220, 90]
    return np.clip(a, 0, 255).astype(np.uint8)


def read_ppm(data):
    assert data[:2] == b"P6", data[:16]
    parts = data.split(b"\n", 3)
    w, h = map(int, parts[1].split())
    assert parts[2] == b"255"
    px = np.frombuffer(parts[3], dtype=np.uint8)
    assert px.size == w * h * 3, (px.size, w, h)
    return px.reshape(h, w, 3)


def run_cli(*args):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"prep_render_cli {args}: {p.stderr.decode().strip()}")
    return p.stdout


def psnr(a, b):
    if a.shape != b.shape:
        return -1.0
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def reference(path, recipe):
    img = Image.open(path).convert("RGB")
    if recipe.startswith("center"):
        s = int(recipe[6:])
        tf = T.Compose([T.Resize(round(s / 0.875)), T.CenterCrop(s)])
    else:
        s = int(recipe[6:])
        tf = T.Resize(s)
    return np.asarray(tf(img))


def make_images(d):
    imgs = []  # (path, kind) kind: jpeg | png

    def add(name, im, **kw):
        p = os.path.join(d, name)
        im.save(p, **kw)
        imgs.append((p, "png" if name.endswith(".png") else "jpeg"))

    for i, (w, h) in enumerate([(500, 375), (375, 500), (640, 427), (1200, 900), (97, 61)]):
        im = Image.fromarray(photo(w, h, i + 1))
        for sub in (0, 1, 2):
            add(f"rgb_{w}x{h}_s{sub}.jpg", im, quality=90, subsampling=sub)
    base = Image.fromarray(photo(500, 375, 7))
    add("progressive.jpg", base, quality=88, progressive=True)
    add("progressive_big.jpg", Image.fromarray(photo(1024, 768, 8)), quality=85, progressive=True)
    add("gray.jpg", base.convert("L"), quality=90)
    add("cmyk.jpg", base.convert("CMYK"), quality=92)
    # header oddities of real encoders that libjpeg only warns about and PIL
    # decodes silently: a JFIF 2.01 version, a baseline scan whose Se is not 63
    add("jfif2.jpg", base, quality=90)
    patch_jpeg_headers(imgs[-1][0])
    # junk between the last scan and EOI, as some cameras write ("240
    # extraneous bytes before marker 0xd9"): PIL loads it; resize reads to
    # the last row, where libjpeg meets it
    add("junk_before_eoi.jpg", base, quality=90)
    junk_before_eoi(imgs[-1][0], imgs[-1][0])
    add("rgb.png", base)
    add("rgba.png", Image.fromarray(np.dstack([photo(300, 200, 9), photo(300, 200, 10)[..., 0]])))
    add("gray.png", base.convert("L"))
    add("la.png", base.convert("LA"))
    add("palette.png", base.convert("P", palette=Image.ADAPTIVE, colors=200))
    pt = base.convert("P", palette=Image.ADAPTIVE, colors=64)
    add("palette_trns.png", pt, transparency=3)
    add("bilevel.png", base.convert("1"))
    add("gray_trns.png", base.convert("L"), transparency=40)
    arr16 = (photo(240, 180, 11).astype(np.uint16) * 257)
    # 16-bit RGB through a raw PNG writer (PIL cannot save RGB;16)
    add_png16(os.path.join(d, "rgb16.png"), arr16)
    imgs.append((os.path.join(d, "rgb16.png"), "png"))
    g16 = (photo(240, 180, 12)[..., 0].astype(np.uint16) * 3)  # values up to 765
    Image.fromarray(g16.astype(np.uint16)).save(os.path.join(d, "gray16.png"))
    imgs.append((os.path.join(d, "gray16.png"), "png"))
    # indexes past a short PLTE (PIL shows them as its default palette's
    # gray, i.e. (i, i, i)), 8- and 4-bit
    for depth, n in ((8, 3), (4, 5)):
        name = f"palette_short{depth}.png"
        idx = (photo(150, 100, 14)[..., 0] >> (8 - depth)).astype(np.uint8)
        add_png_palette(os.path.join(d, name), idx, depth, photo(n, 1, 15)[0])
        imgs.append((os.path.join(d, name), "png"))
    return imgs


def png_chunk(t, data):
    import struct
    import zlib
    c = struct.pack(">I", len(data)) + t + data
    return c + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff)


def add_png_palette(path, idx, depth, pal):
    """A palette PNG of indexes idx (< 2**depth) with the PLTE pal (n x 3)."""
    import struct
    import zlib
    h, w = idx.shape
    rows = []
    for y in range(h):
        bits = "".join(format(int(v), f"0{depth}b") for v in idx[y])
        bits += "0" * (-len(bits) % 8)
        rows.append(b"\x00" + int(bits, 2).to_bytes(len(bits) // 8, "big"))
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 3, 0, 0, 0))
    png += png_chunk(b"PLTE", bytes(np.asarray(pal, dtype=np.uint8).reshape(-1)))
    png += png_chunk(b"IDAT", zlib.compress(b"".join(rows))) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def patch_jpeg_headers(path):
    """Sets the JFIF major version to 2 and the first scan's Se to 62 (both
    libjpeg warnings, neither touches the entropy-coded data)."""
    with open(path, "rb") as f:
        d = bytearray(f.read())
    a = d.index(b"JFIF\0")
    d[a + 5] = 2
    s = d.index(b"\xff\xda")
    d[s + 5 + 2 * d[s + 4] + 1] = 62
    with open(path, "wb") as f:
        f.write(d)


def junk_before_eoi(src, dst, keep=None):
    """Copies the JPEG src to dst with 240 bytes of junk (no FF) before its
    EOI; keep: only that many bytes of what precedes EOI are kept."""
    with open(src, "rb") as f:
        d = f.read()
    e = d.rindex(b"\xff\xd9")
    junk = bytes(np.random.default_rng(5).integers(1, 255, 240, dtype=np.uint8))
    with open(dst, "wb") as f:
        f.write(d[:e if keep is None else keep] + junk + d[e:])


def check_cut_scan_with_eoi(d, imgs):
    """Scan data cut in half, then junk and EOI: still a broken file."""
    src = next(p for p, _ in imgs if p.endswith("rgb_500x375_s2.jpg"))
    dst = os.path.join(d, "cut_junk_eoi.jpg")
    junk_before_eoi(src, dst, keep=os.path.getsize(src) // 2)
    for recipe in ("center224", "resize256"):
        try:
            run_cli(recipe, 1, 0, dst)
            failed = False
        except RuntimeError:
            failed = True
        check(failed, f"cut_junk_eoi.jpg {recipe}: a scan cut short fails, junk and EOI after it or not")


def add_png16(path, arr):
    import struct
    import zlib
    h, w, _ = arr.shape
    raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, data):
        c = struct.pack(">I", len(data)) + t + data
        return c + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def compare_deterministic(imgs):
    for path, kind in imgs:
        for recipe in ("center224", "center64", "resize256", "resize100"):
            ours = read_ppm(run_cli(recipe, 1, 0, path))
            ref = reference(path, recipe)
            p = psnr(ours, ref)
            need = 50.0 if kind == "png" else 30.0
            check(p >= need, f"{os.path.basename(path)} {recipe}: {ours.shape} vs {ref.shape} "
                  f"PSNR {p:.1f} dB (need {need})")


def png_crc_cases(d):
    """A PNG with a chunk's CRC broken before the image data (PIL checks
    every such CRC: the file fails), after it, or in an IDAT of two (PIL
    checks none from the first IDAT on: it loads): (path, PIL loads it)."""
    import struct
    import zlib
    base = os.path.join(d, "crc_base.png")
    Image.fromarray(photo(120, 90, 13)).save(base)
    with open(base, "rb") as f:
        png = f.read()

    def chunk(t, data, bad=False):
        crc = zlib.crc32(t + data) ^ (1 if bad else 0)
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", crc & 0xffffffff)
    i = png.index(b"IDAT") - 4
    n = struct.unpack(">I", png[i:i + 4])[0]
    idat, head, tail = png[i + 8:i + 8 + n], png[:i], png[i + 12 + n:]
    text = b"Comment\0hello"
    cases = {
        "crc_text_before_idat.png": (head + chunk(b"tEXt", text, True) + png[i:], False),
        "crc_text_after_idat.png": (png[:i + 12 + n] + chunk(b"tEXt", text, True) + tail, True),
        "crc_first_of_two_idat.png": (head + chunk(b"IDAT", idat[:n // 2], True) +
                                      chunk(b"IDAT", idat[n // 2:]) + tail, True),
    }
    out = []
    for name, (data, loads) in cases.items():
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(data)
        out.append((path, loads))
    return out


def compare_png_crcs(d):
    for path, loads in png_crc_cases(d):
        name = os.path.basename(path)
        try:
            ref = reference(path, "center64")
        except Exception:  # noqa: BLE001 - PIL's failure is what is compared
            ref = None
        check((ref is not None) == loads, f"{name}: PIL {'loads' if loads else 'fails'} it")
        try:
            ours = read_ppm(run_cli("center64", 1, 0, path))
        except RuntimeError:
            ours = None
        if ref is None:
            check(ours is None, f"{name}: prep fails it too")
        else:
            check(ours is not None and psnr(ours, ref) >= 50.0,
                  f"{name}: prep loads it as PIL does")


def write_tiff(path, w, h, bps, spp, photometric, samples, tile=None, extra=(), colormap=None,
               planar=False):
    """An uncompressed little-endian TIFF of the sample values given (an
    (h, w, spp) array), in one strip (one per sample if planar) or in tiles
    of tile = (tw, th)."""
    import struct
    samples = np.asarray(samples).reshape(h, w, spp)

    def pack(rows):  # rows of samples -> bytes, each row padded to a byte
        if bps == 16:
            return b"".join(r.astype("<u2").tobytes() for r in rows)
        if bps == 8:
            return b"".join(r.astype(np.uint8).tobytes() for r in rows)
        return b"".join(np.packbits(np.unpackbits(r.astype(np.uint8).reshape(-1, 1), axis=1)
                                    [:, 8 - bps:].ravel()).tobytes() for r in rows)
    blocks = []
    if tile:
        tw, th = tile
        for ty in range(0, h, th):
            for tx in range(0, w, tw):
                t = np.zeros((th, tw, spp), samples.dtype)
                part = samples[ty:ty + th, tx:tx + tw]
                t[:part.shape[0], :part.shape[1]] = part
                blocks.append(pack(list(t)))
    elif planar:
        blocks += [pack(list(samples[..., c:c + 1])) for c in range(spp)]
    else:
        blocks.append(pack(list(samples)))
    entries = [(256, 4, [w]), (257, 4, [h]), (258, 3, [bps] * spp), (259, 3, [1]),
               (262, 3, [photometric]), (277, 3, [spp]), (284, 3, [2 if planar else 1])]
    if colormap is not None:
        entries.append((320, 3, list(colormap)))
    if extra:
        entries.append((338, 3, list(extra)))
    offs_tag, counts_tag = (324, 325) if tile else (273, 279)
    if tile:
        entries += [(322, 3, [tile[0]]), (323, 3, [tile[1]])]
    else:
        entries.append((278, 4, [h]))
    data_at = 8
    offsets, pos = [], data_at
    for b in blocks:
        offsets.append(pos)
        pos += len(b)
    entries += [(offs_tag, 4, offsets), (counts_tag, 4, [len(b) for b in blocks])]
    entries.sort()
    ifd_at = pos + (pos & 1)
    n = len(entries)
    ext = ifd_at + 2 + 12 * n + 4  # where values too long for an entry go
    ifd, extdata = b"", b""
    for tag, typ, vals in entries:
        fmt = "<H" if typ == 3 else "<I"
        raw = b"".join(struct.pack(fmt, v) for v in vals)
        if len(raw) <= 4:
            ifd += struct.pack("<HHI", tag, typ, len(vals)) + raw.ljust(4, b"\0")
        else:
            ifd += struct.pack("<HHII", tag, typ, len(vals), ext + len(extdata))
            extdata += raw + (b"\0" if len(raw) & 1 else b"")
    with open(path, "wb") as f:
        f.write(b"II*\0" + struct.pack("<I", ifd_at) + b"".join(blocks) +
                b"\0" * (ifd_at - pos) + struct.pack("<H", n) + ifd + b"\0" * 4 + extdata)


def variant_cases(d):
    """Files of the other formats and layouts a real dataset holds, each
    (path, whether PIL loads it): every one must be served exactly as PIL +
    torchvision make it, or fail where PIL fails."""
    out = []

    def add(name, loads, write):
        path = os.path.join(d, name)
        write(path)
        out.append((path, loads))
    base = Image.fromarray(photo(301, 203, 21))
    other = Image.fromarray(photo(301, 203, 22))
    rgba = base.copy()
    rgba.putalpha(Image.fromarray(photo(301, 203, 23)[..., 1]))
    # animated WebP: PIL shows the first frame (libwebp's animation
    # decoder: a transparent black canvas, the frame drawn on it)
    add("anim.webp", True, lambda p: base.save(p, "WEBP", save_all=True, append_images=[other],
                                               duration=100))
    add("anim_lossless.webp", True, lambda p: base.save(p, "WEBP", save_all=True, lossless=True,
                                                        append_images=[other], duration=100))
    add("anim_alpha.webp", True, lambda p: rgba.save(p, "WEBP", save_all=True,
                                                     append_images=[rgba.rotate(10)], duration=100))
    framed = Image.new("RGBA", base.size, (0, 0, 0, 0))
    framed.paste(base.crop((40, 30, 200, 150)), (40, 30))
    add("anim_subframe.webp", True, lambda p: framed.save(p, "WEBP", save_all=True, lossless=True,
                                                          append_images=[rgba], duration=100))
    # a PNG cut inside its zlib checksum (PIL stops inflating at the last
    # row: it loads) or before it, in the image data (it fails)
    buf = io.BytesIO()
    base.save(buf, "PNG")
    png = buf.getvalue()
    end = png.index(b"IEND") - 4 - 4 - 4  # the last IDAT's checksum starts here
    for k in (0, 1, 3):
        add(f"cut_adler{k}.png", True, lambda p, k=k: open(p, "wb").write(png[:end + k]))
    add("cut_image_data.png", False, lambda p: open(p, "wb").write(png[:end - 40]))
    # TIFF layouts of Pillow's OPEN_INFO table beyond 8-bit gray/RGB/palette
    arr = np.asarray(base)
    rng = np.random.default_rng(24)
    h, w = arr.shape[:2]
    add("cmyk.tif", True, lambda p: base.convert("CMYK").save(p))
    add("jpeg_rgb.tif", True, lambda p: base.save(p, compression="jpeg"))
    add("jpeg_ycbcr.tif", True, lambda p: base.convert("YCbCr").save(p, compression="jpeg"))
    add("la.tif", True, lambda p: base.convert("LA").save(p))
    g16 = arr[..., 1].astype(np.int64) * 257 // rng.integers(1, 4, (h, w))
    g16[:, :20] = np.arange(20) * 30  # values around 255, where I;16 -> RGB clips
    add("gray16.tif", True, lambda p: write_tiff(p, w, h, 16, 1, 1, g16))
    add("gray16_miniswhite.tif", True, lambda p: write_tiff(p, w, h, 16, 1, 0, g16))
    rgb16 = arr.astype(np.int64) * 257 + rng.integers(0, 257, arr.shape)
    add("rgb16.tif", True, lambda p: write_tiff(p, w, h, 16, 3, 2, rgb16))
    rgba16 = np.concatenate([rgb16, rgb16[..., :1]], -1)
    add("rgba16.tif", True, lambda p: write_tiff(p, w, h, 16, 4, 2, rgba16, extra=[2]))
    add("gray4.tif", True, lambda p: write_tiff(p, w, h, 4, 1, 1, arr[..., 0] >> 4))
    add("gray2_miniswhite.tif", True, lambda p: write_tiff(p, w, h, 2, 1, 0, arr[..., 0] >> 6))
    cmap = list(rng.integers(0, 65536, 48))
    add("palette4.tif", True, lambda p: write_tiff(p, w, h, 4, 1, 3, arr[..., 2] >> 4,
                                                  colormap=cmap))
    cmyk = np.concatenate([arr, 255 - arr[..., :1], arr[..., 1:2]], -1)
    add("cmyk_extra.tif", True, lambda p: write_tiff(p, w, h, 8, 5, 5, cmyk, extra=[0]))
    add("rgbx_extra2.tif", True, lambda p: write_tiff(p, w, h, 8, 5, 2, cmyk, extra=[0, 0]))
    add("tiled_rgb.tif", True, lambda p: write_tiff(p, w, h, 8, 3, 2, arr, tile=(64, 48)))
    add("tiled_gray16.tif", True, lambda p: write_tiff(p, w, h, 16, 1, 1, g16, tile=(32, 32)))
    add("planar_rgb.tif", True, lambda p: write_tiff(p, w, h, 8, 3, 2, arr, planar=True))
    add("planar_rgba.tif", True, lambda p: write_tiff(p, w, h, 8, 4, 2, cmyk[..., :4], extra=[2],
                                                      planar=True))
    premul = cmyk[..., :4].copy()
    premul[..., 3] = rng.integers(0, 256, (h, w))
    premul[:, :8, 3] = 0  # no alpha: black; and colour over alpha: clipped at 255
    add("premultiplied.tif", True, lambda p: write_tiff(p, w, h, 8, 4, 2, premul, extra=[1]))
    # Pillow has no layout for these: it fails them, and so must we
    add("la_associated.tif", False, lambda p: write_tiff(p, w, h, 8, 2, 1, cmyk[..., :2],
                                                         extra=[1]))
    # BMP: 16-bit (BI_RGB 5-5-5, BI_BITFIELDS 5-6-5 and 5-5-5), RLE8/RLE4
    # (in rle_cases too), an index past the palette (PIL's default: gray)
    a16 = ((arr[..., 0].astype(np.uint16) >> 3) << 10 | (arr[..., 1].astype(np.uint16) >> 3) << 5 |
           arr[..., 2] >> 3)
    a565 = ((arr[..., 0].astype(np.uint16) >> 3) << 11 | (arr[..., 1].astype(np.uint16) >> 2) << 5 |
            arr[..., 2] >> 3)
    add("rgb555.bmp", True, lambda p: write_bmp(p, a16, 16, 0))
    add("rgb565_bitfields.bmp", True, lambda p: write_bmp(p, a565, 16, 3, masks=(0xf800, 0x7e0, 0x1f)))
    add("rgb555_bitfields.bmp", True, lambda p: write_bmp(p, a16, 16, 3, masks=(0x7c00, 0x3e0, 0x1f)))
    add("rgb444_bitfields.bmp", False, lambda p: write_bmp(p, a16, 16, 3, masks=(0xf00, 0xf0, 0xf)))
    pal = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(40)]
    add("index_past_palette.bmp", True, lambda p: write_bmp(p, arr[..., 0], 8, 0, palette=pal))
    # binary PGM/PPM of other maxvals (Pillow's PpmDecoder: round(v / maxval
    # * 255), half to even; PGM past 255 is mode I, clipped by convert)
    def pnm(magic, maxval, vals):
        big = maxval > 255
        head = f"{magic}\n{w} {h}\n{maxval}\n".encode()
        return lambda p: open(p, "wb").write(head + vals.astype(">u2" if big else np.uint8).tobytes())
    g = arr[..., 0].astype(np.int64)
    for maxval in (1, 2, 100, 254, 256, 510, 1023, 65535):
        v = g * maxval // 255
        v[0, :4] = [0, maxval, maxval // 2, maxval + 1 if maxval < (65535 if maxval > 255 else 255) else 0]
        add(f"p5_max{maxval}.pgm", True, pnm("P5", maxval, v))
        add(f"p6_max{maxval}.ppm", True, pnm("P6", maxval, arr.astype(np.int64) * maxval // 255))
    add("p5_max0.pgm", False, pnm("P5", 0, g))
    add("p6_max1023_cut.ppm", False, lambda p: pnm("P6", 1023, arr.astype(np.int64) * 4)(p) and
        open(p, "r+b").truncate(os.path.getsize(p) - 7))
    # plain PBM/PGM/PPM, read as Pillow's PpmPlainDecoder does, its quirks
    # included: a comment joins the tokens around it, a file short of samples
    # that ends inside a token repeats it, a token cut by a 1 MiB block's end
    # is put again before every block after one ending in a space
    def plain(magic, maxval, vals, sep=" ", tail="\n"):
        head = f"{magic}\n# a comment\n{w} {h}\n" + ("" if magic == "P1" else f"{maxval}\n")
        body = ("" if magic == "P1" else sep).join(str(int(v)) for v in np.asarray(vals).ravel())
        return lambda p: open(p, "w", newline="").write(head + body + tail)
    bits = (arr[..., 0] > 128).astype(int)
    add("p1.pbm", True, plain("P1", 1, bits))
    add("p1_junk_after.pbm", False, plain("P1", 1, bits, tail=" x"))
    add("p2_max15.pgm", True, plain("P2", 15, arr[..., 0] >> 4, sep="\n"))
    add("p2_max4000.pgm", True, plain("P2", 4000, g * 4000 // 255, sep=" #c\r"))
    add("p2_joined.pgm", False, plain("P2", 255, g, sep="#c\n"))  # 12#c\n34 is 1234
    add("p3.ppm", True, plain("P3", 255, arr, sep="\t"))
    add("p3_max1000.ppm", True, plain("P3", 1000, arr.astype(np.int64) * 1000 // 255))
    add("p3_over_maxval.ppm", False, plain("P3", 100, arr))
    add("p2_short_repeats.pgm", True, plain("P2", 255, g.ravel()[:-5], tail=""))
    add("p2_short.pgm", False, plain("P2", 255, g.ravel()[:-5]))

    def shifted(p):  # block 1 ends inside a token, block 2 in a space
        blk = 1 << 20
        hw = (1000, 850)
        head = f"P2\n{hw[0]} {hw[1]}\n255\n"
        toks = iter(str(v % 200 + 10) for v in range(hw[0] * hw[1] + 10))
        body = []
        size = 0

        def fill(limit):
            nonlocal size
            while size + 4 < limit:
                t = next(toks) + " "
                body.append(t)
                size += len(t)
        fill(blk - 10)
        body.append(" " * (blk - 2 - size) + "11" + "1 ")
        size = blk + 2
        fill(2 * blk - 10)
        body.append(" " * (2 * blk - size) + "  ")
        body.extend(t + " " for t in toks)
        with open(p, "w") as f:
            f.write(head + "".join(body))
    add("p2_block_quirk.pgm", True, shifted)
    gif_cases(d, add)
    return out


def gif_lzw(idx, min_bits):
    """idx (bytes) LZW-coded as GIF does: a clear code first, and again
    whenever the 4096-code table fills."""
    clear = 1 << min_bits
    acc = nbits = 0
    out = bytearray()

    def emit(code):
        nonlocal acc, nbits
        acc |= code << nbits
        nbits += cs
        while nbits >= 8:
            out.append(acc & 255)
            acc >>= 8
            nbits -= 8
    table, nxt, cs = {bytes([i]): i for i in range(clear)}, clear + 2, min_bits + 1
    emit(clear)
    w = b""
    for k in idx:
        if w + bytes([k]) in table:
            w += bytes([k])
            continue
        emit(table[w])
        cs += nxt == 1 << cs and cs < 12  # the decoder widens one code later
        if nxt < 4096:
            table[w + bytes([k])] = nxt
            nxt += 1
        else:
            emit(clear)
            table, nxt, cs = {bytes([i]): i for i in range(clear)}, clear + 2, min_bits + 1
        w = bytes([k])
    if w:
        emit(table[w])
        cs += nxt == 1 << cs and cs < 12
    emit(clear + 1)
    return bytes(out) + (bytes([acc]) if nbits else b"")


def gif_palette(pal):  # (flag bits, bytes padded to a power of two)
    bits = max(1, (len(pal) - 1).bit_length())
    flat = bytes(np.asarray(pal, dtype=np.uint8).ravel())
    return bits - 1, flat + bytes(3 * ((1 << bits) - len(pal)))


def gif_frame(idx, x=0, y=0, lct=None, interlace=False, trans=None, min_bits=None, pre=b""):
    """One image (after pre, e.g. extensions): its graphic control extension
    when trans is set, descriptor, local palette, LZW data in sub-blocks."""
    idx = np.asarray(idx, dtype=np.uint8)
    fh, fw = idx.shape
    out = bytearray(pre)
    if trans is not None:
        out += b"!\xf9\x04\x01\x00\x00" + bytes([trans]) + b"\x00"
    flags, lctb = 0x40 if interlace else 0, b""
    if lct is not None:
        bits, lctb = gif_palette(lct)
        flags |= 0x80 | bits
    out += b"," + struct.pack("<4HB", x, y, fw, fh, flags) + lctb
    rows = ([r for r0, step in ((0, 8), (4, 8), (2, 4), (1, 2)) for r in range(r0, fh, step)]
            if interlace else range(fh))
    min_bits = min_bits or max(2, int(idx.max()).bit_length())
    data = gif_lzw(b"".join(idx[r].tobytes() for r in rows), min_bits)
    out.append(min_bits)
    for i in range(0, len(data), 255):
        out += bytes([len(data[i:i + 255])]) + data[i:i + 255]
    return bytes(out) + b"\x00"


def write_gif(path, w, h, frames, gct=None, pre=b""):
    flags, gctb = 0, b""
    if gct is not None:
        bits, gctb = gif_palette(gct)
        flags = 0xf0 | bits
    with open(path, "wb") as f:
        f.write(b"GIF89a" + struct.pack("<2H3B", w, h, flags, 0, 0) + gctb + pre +
                b"".join(frames) + b";")


def gif_cases(d, add):
    """GIFs as Pillow opens them (the first frame, convert("RGB")), in the
    layouts the decoder must get right; named .jpg as ImageFolder lists
    them (PIL reads the content)."""
    q = Image.fromarray(photo(211, 157, 31)).quantize(256)
    idx = np.asarray(q)
    pal = np.asarray(q.getpalette(), dtype=np.uint8).reshape(-1, 3)[:256]
    ramp = [(i, i, i) for i in range(256)]
    small = idx[20:120, 30:190] % 64
    add("gif_global.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(idx)], gct=pal))
    add("gif_pillow_saved.jpg", True, lambda p: q.save(p, "GIF", interlace=False))
    add("gif_pillow_interlaced.jpg", True, lambda p: q.convert("RGB").save(p, "GIF",
                                                                           interlace=True))
    # local palette over the global one; a local gray ramp, which Pillow
    # takes for no palette: the global one colours the pixels
    add("gif_local.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(idx, lct=pal[::-1])],
                                                   gct=pal))
    add("gif_local_ramp.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(idx, lct=ramp)],
                                                        gct=pal))
    # gray: a ramp palette is mode L (the index is the gray), another
    # gray palette stays P; no palette at all is L too
    add("gif_gray_ramp.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(idx)], gct=ramp))
    add("gif_pillow_gray.jpg", True, lambda p: q.convert("L").save(p, "GIF"))  # P: not a ramp
    add("gif_no_palette.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(idx)]))
    # a small frame at an offset: index 0 around it, or the transparency
    # index (its colour: convert("RGB") drops transparency), interlaced too
    add("gif_offset.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(small, 25, 31)],
                                                    gct=pal[:64]))
    add("gif_offset_trans.jpg", True, lambda p: write_gif(
        p, 211, 157, [gif_frame(small, 25, 31, trans=7)], gct=pal[:64]))
    add("gif_offset_interlaced.jpg", True, lambda p: write_gif(
        p, 211, 157, [gif_frame(small[:37], 3, 90, interlace=True, trans=200)], gct=pal))
    # a frame past the logical screen grows the image; a palette shorter
    # than the code size's indexes: Pillow's default gray past it
    add("gif_past_screen.jpg", True, lambda p: write_gif(p, 120, 80, [gif_frame(small, 60, 40)],
                                                         gct=pal[:64]))
    add("gif_short_palette.jpg", True, lambda p: write_gif(p, 211, 157, [gif_frame(small)],
                                                           gct=pal[:8]))
    # animated: the first frame only; a stray byte before the image, which
    # Pillow skips; extensions (comment, NETSCAPE loop)
    frames = [gif_frame(small, 10, 10, trans=3), gif_frame(idx, lct=pal[::-1]),
              gif_frame(small[::-1], 50, 20)]
    ext = b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00!\xfe\x05hello\x00\x07"
    add("gif_animated.jpg", True, lambda p: write_gif(p, 211, 157, frames, gct=pal, pre=ext))
    add("gif_pillow_animated.jpg", True, lambda p: q.save(
        p, "GIF", save_all=True, append_images=[q.rotate(30), q.transpose(0)], duration=50))
    # cut after the sub-block with the last pixel (Pillow stops there: it
    # loads), or before it (it fails)
    def cut(p, keep):
        write_gif(p, 211, 157, [gif_frame(idx)], gct=pal)
        with open(p, "r+b") as f:
            f.truncate(keep(os.path.getsize(p)))
    add("gif_cut_trailer.jpg", True, lambda p: cut(p, lambda n: n - 2))
    add("gif_cut.jpg", False, lambda p: cut(p, lambda n: n - 3))
    add("gif_cut_half.jpg", False, lambda p: cut(p, lambda n: n // 2))
    # Pillow fails these: a graphic control extension too short for its
    # transparency index, a frame of no pixels
    add("gif_short_gce.jpg", False, lambda p: write_gif(
        p, 211, 157, [gif_frame(idx, pre=b"!\xf9\x03\x01\x00\x00\x00")], gct=pal))
    add("gif_empty_frame.jpg", False, lambda p: write_gif(
        p, 211, 157, [gif_frame(np.zeros((0, 4)), min_bits=2)], gct=pal))

    # codes Pillow's decoder refuses (giflib would decode them): one past
    # the next free entry (6), a first code after the clear (4) that is
    # not a pixel value; and the same past the frame's last pixel, unread
    def raw(codes, tail=()):  # 3-bit codes (too few to widen), then 4-bit ones
        v = sum(c << (3 * i) for i, c in enumerate(codes))
        v |= sum(c << (3 * len(codes) + 4 * i) for i, c in enumerate(tail))
        data = v.to_bytes((3 * len(codes) + 4 * len(tail) + 7) // 8, "little")
        return b"," + struct.pack("<4HB", 0, 0, 4, 1, 0) + b"\x02" + bytes([len(data)]) + data + b"\x00"
    add("gif_code_past_table.jpg", False, lambda p: write_gif(p, 4, 1, [raw([4, 1, 7, 5])],
                                                              gct=pal[:4]))
    add("gif_first_code_entry.jpg", False, lambda p: write_gif(p, 4, 1, [raw([4, 6, 1, 5])],
                                                               gct=pal[:4]))
    add("gif_bad_code_after.jpg", True, lambda p: write_gif(p, 4, 1, [raw([4, 1, 2, 6], [15, 5])],
                                                            gct=pal[:4]))


def write_bmp(path, px, bits, compression, masks=None, palette=None, data=None, topdown=False):
    """A BMP (40-byte header) of px (h x w values of 8 or 16 bits), or of
    the pixel data given (RLE)."""
    import struct
    h, w = px.shape[:2]
    if data is None:
        stride = (w * bits + 31) // 32 * 4
        rows = px if topdown else px[::-1]
        data = b"".join(r.astype("<u2" if bits == 16 else np.uint8).tobytes().ljust(stride, b"\0")
                        for r in rows)
    pal = b"".join(bytes([b, g, r, 0]) for r, g, b in (palette or []))
    extra = struct.pack("<III", *masks) if masks else b""
    hdr = struct.pack("<IiiHHIIiiII", 40, w, -h if topdown else h, 1, bits, compression, len(data),
                      2835, 2835, len(palette or []), 0)
    off = 14 + len(hdr) + len(extra) + len(pal)
    with open(path, "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + hdr + extra + pal + data)


def rle_cases(d, n=120):
    """Random RLE8/RLE4 streams (runs, literals odd and even, ends of line,
    deltas, early ends) over small images: PIL's BmpRleDecoder decides which
    load and what they show."""
    import random
    r = random.Random(11)
    out = []
    for k in range(n):
        rle4 = k % 2 == 1
        w, h = r.randint(1, 19), r.randint(1, 9)
        ncol = 16 if rle4 else r.choice([16, 200, 256])
        gray = k % 7 == 0
        pal = [(i, i, i) if gray else tuple(r.randrange(256) for _ in range(3)) for i in range(ncol)]
        data = b""
        for _ in range(r.randint(1, 40)):
            c = r.random()
            if c < 0.45:
                data += bytes([r.randint(1, 12), r.randrange(256)])
            elif c < 0.6:
                data += b"\0\0"
            elif c < 0.65:
                data += b"\0\2" + bytes(r.randint(0, 3) for _ in range(4))
            elif c < 0.9:
                m = r.randint(3, 12)
                data += bytes([0, m]) + bytes(r.randrange(256 if rle4 else ncol)
                                              for _ in range((m // 2 if rle4 else m) + r.randint(0, 1)))
            else:
                data += b"\0\1"
        if r.random() < 0.5:
            data += b"\0\0" * h + b"\0\1"
        path = os.path.join(d, f"rle{k:03d}.bmp")
        write_bmp(path, np.zeros((h, w)), 4 if rle4 else 8, 2 if rle4 else 1, palette=pal, data=data,
                  topdown=k % 11 == 0)
        out.append(path)
    return out


def compare_rle(d):
    loaded = 0
    for path in rle_cases(d):
        try:
            ref = reference(path, "resize64")
            loaded += 1
        except Exception:  # noqa: BLE001 - PIL's failure is what is compared
            ref = None
        try:
            ours = read_ppm(run_cli("resize64", 1, 0, path))
        except RuntimeError:
            ours = None
        name = os.path.basename(path)
        if ref is None:
            check(ours is None, f"{name}: PIL fails it, so does prep")
        else:
            check(ours is not None and ours.shape == ref.shape and bool((ours == ref).all()),
                  f"{name}: identical to PIL + torchvision")
    check(loaded >= 30, f"RLE BMPs: PIL loads {loaded} of them")


def compare_variants(d):
    for path, loads in variant_cases(d):
        name = os.path.basename(path)
        for recipe in ("center224", "resize64"):
            try:
                ref = reference(path, recipe)
            except Exception:  # noqa: BLE001 - PIL's failure is what is compared
                ref = None
            try:
                ours = read_ppm(run_cli("--scale", 8, recipe, path))
            except RuntimeError:
                ours = None
            if not loads:
                check(ref is None and ours is None, f"{name} {recipe}: PIL fails it, so does prep")
                continue
            check(ref is not None and ours is not None and ours.shape == ref.shape and
                  bool((ours == ref).all()), f"{name} {recipe}: identical to PIL + torchvision")


def compare_rrc_params():
    for (w, h) in [(500, 375), (100, 1000), (1000, 60)]:
        n = 4000
        lines = run_cli("--rrc-params", w, h, 42, n).decode().split("\n")
        ours = np.array([list(map(int, l.split())) for l in lines if l], dtype=np.float64)
        torch.manual_seed(0)
        img = torch.empty(3, h, w)
        ref = np.array([T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
                        for _ in range(n)], dtype=np.float64)  # i, j, h, w

        def stats(a):
            scale = a[:, 2] * a[:, 3] / (w * h)
            logr = np.log(a[:, 3] / a[:, 2])
            return scale.mean(), logr.mean(), logr.std()
        s_o, l_o, sd_o = stats(ours)
        s_r, l_r, sd_r = stats(ref)
        check(abs(s_o - s_r) < 0.02, f"rrc {w}x{h}: mean scale ours {s_o:.4f} torchvision {s_r:.4f}")
        check(abs(l_o - l_r) < 0.02, f"rrc {w}x{h}: mean log-ratio ours {l_o:.4f} torchvision {l_r:.4f}")
        check(abs(sd_o - sd_r) < 0.02, f"rrc {w}x{h}: std log-ratio ours {sd_o:.4f} torchvision {sd_r:.4f}")
        fb_o = ours[:, 4].mean()
        # torchvision's fallback shows as the deterministic center crop
        if w / h < 3 / 4:
            fw, fh = w, int(round(w / (3 / 4)))
        elif w / h > 4 / 3:
            fw, fh = int(round(h * 4 / 3)), h
        else:
            fw, fh = w, h
        fb_r = np.mean((ref[:, 2] == fh) & (ref[:, 3] == fw) & (ref[:, 0] == (h - fh) // 2)
                       & (ref[:, 1] == (w - fw) // 2))
        check(abs(fb_o - fb_r) < 0.03, f"rrc {w}x{h}: fallback rate ours {fb_o:.3f} torchvision {fb_r:.3f}")
        inside = np.all((ours[:, 0] + ours[:, 2] <= h) & (ours[:, 1] + ours[:, 3] <= w) & (ours[:, 2] > 0))
        check(bool(inside), f"rrc {w}x{h}: every crop inside the image")
        # the plan's flips against RandomHorizontalFlip()'s over as many draws
        # (torch's generator is seeded above: the same rates every run; 0.05
        # is 4.5 standard deviations of the difference at 4000 draws)
        flip_tv = T.RandomHorizontalFlip()
        probe = torch.zeros(1, 1, 2)
        probe[0, 0, 0] = 1
        fl_r = np.mean([float(flip_tv(probe)[0, 0, 1]) for _ in range(n)])
        fl_o = ours[:, 5].mean()
        check(abs(fl_o - fl_r) < 0.05, f"rrc {w}x{h}: flip rate ours {fl_o:.3f} torchvision {fl_r:.3f}")


def compare_rrc_render(imgs):
    for path, kind in imgs[:3] + [i for i in imgs if i[0].endswith(("cmyk.jpg", "rgba.png"))]:
        img = Image.open(path).convert("RGB")
        w, h = img.size
        for key in range(4):
            top, left, ch, cw, _fb, flip = map(int, run_cli("--rrc-params", w, h, 5, key + 1)
                                                .decode().split("\n")[key].split())
            ref = img.crop((left, top, left + cw, top + ch)).resize((224, 224), Image.BILINEAR)
            if flip:
                ref = ref.transpose(Image.FLIP_LEFT_RIGHT)
            ours = read_ppm(run_cli("rrc224", 5, 0, path, key))
            p = psnr(ours, np.asarray(ref))
            check(p >= 30.0, f"{os.path.basename(path)} rrc224 key {key}: PSNR {p:.1f} dB")


def main():
    if not os.access(CLI, os.X_OK):
        print(f"FAIL prep_render_cli not found at {CLI}")
        return 1
    with tempfile.TemporaryDirectory() as d:
        imgs = make_images(d)
        compare_deterministic(imgs)
        check_cut_scan_with_eoi(d, imgs)
        compare_png_crcs(d)
        compare_variants(d)
        compare_rle(d)
        compare_rrc_params()
        compare_rrc_render(imgs)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
