#!/usr/bin/python3
"""Writes image files for tests/image_test.cc with PIL itself (Debian's python3-pil), and
beside each the samples PIL decodes from it, so the decoders are held to PIL's output.

  make_images.py OUT   writes OUT/<name>.png|.jpg, OUT/<name>.raw (PIL's samples, rows of
                       width x channels bytes) and OUT/manifest.txt ("<file> <w> <h> <c>" a line),
                       and OUT/refused/ (16-bit PNG, CMYK JPEG) for the refusals
"""
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

OUT = sys.argv[1]
rng = np.random.RandomState(7)


def picture(w, h, channels):
    """Smooth gradients with noise on top: both what JPEG compresses well and what it does not."""
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * 255 // max(w - 1, 1) + c * 60 + y * 3) % 256 for c in range(channels)]
    a = np.stack(planes, axis=-1).astype(np.int32) + rng.randint(-40, 41, size=(h, w, channels))
    a = np.clip(a, 0, 255).astype(np.uint8)
    return a[:, :, 0] if channels == 1 else a


manifest = []


def save(img, name, **kw):
    path = os.path.join(OUT, name)
    img.save(path, **kw)
    ref = Image.open(path)
    mode = "L" if ref.mode in ("L", "LA", "1") else "RGB"
    a = np.asarray(ref.convert(mode))
    c = 1 if mode == "L" else 3
    with open(path + ".raw", "wb") as f:
        f.write(a.tobytes())
    manifest.append(f"{name} {a.shape[1]} {a.shape[0]} {c}")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def interlaced_png(a):
    """An Adam7 PNG of the RGB array a, by hand: PIL reads interlaced files but does not write them."""
    h, w, _ = a.shape
    raw = b""
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)]:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\0" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


os.makedirs(os.path.join(OUT, "refused"), exist_ok=True)
# PNG: every colour type at 8 bits, a palette with transparency and one of 4 bits, 1-bit grey,
# odd sizes, and an interlaced file.
save(Image.fromarray(picture(37, 23, 1), "L"), "grey.png")
save(Image.fromarray(picture(33, 17, 3), "RGB"), "rgb.png")
save(Image.fromarray(picture(64, 48, 3), "RGB").convert("P", palette=Image.ADAPTIVE, colors=200),
     "palette.png")
pt = Image.fromarray(picture(31, 9, 3), "RGB").convert("P", palette=Image.ADAPTIVE, colors=12)
pt.info["transparency"] = 3
save(pt, "palette_trns.png", transparency=3)
save(Image.fromarray(picture(20, 20, 3), "RGB").convert("P", palette=Image.ADAPTIVE, colors=16),
     "palette4.png", bits=4)
save(Image.fromarray(picture(29, 31, 4), "RGBA"), "rgba.png")
save(Image.fromarray(picture(19, 7, 2), "LA"), "la.png")
save(Image.fromarray(picture(45, 13, 1), "L").convert("1"), "bits1.png")
save(Image.fromarray(picture(1, 1, 3), "RGB"), "one.png")
with open(os.path.join(OUT, "interlaced.png"), "wb") as f:
    f.write(interlaced_png(picture(35, 21, 3)))
ref = np.asarray(Image.open(os.path.join(OUT, "interlaced.png")).convert("RGB"))
with open(os.path.join(OUT, "interlaced.png.raw"), "wb") as f:
    f.write(ref.tobytes())
manifest.append(f"interlaced.png {ref.shape[1]} {ref.shape[0]} 3")
# JPEG: grey and colour, qualities from 10 to 95, odd sizes, 4:4:4, 4:2:2 and 4:2:0, progressive.
for q in (10, 50, 95):
    save(Image.fromarray(picture(33, 17, 1), "L"), f"grey_q{q}.jpg", quality=q)
for (w, h) in ((33, 17), (64, 48), (1, 1), (201, 131)):
    for sub in (0, 1, 2):
        save(Image.fromarray(picture(w, h, 3), "RGB"), f"rgb_{w}x{h}_s{sub}.jpg", quality=75,
             subsampling=sub)
save(Image.fromarray(picture(57, 41, 3), "RGB"), "rgb_q10.jpg", quality=10)
save(Image.fromarray(picture(57, 41, 3), "RGB"), "rgb_q95_prog.jpg", quality=95, progressive=True)
save(Image.fromarray(picture(57, 41, 1), "L"), "grey_prog.jpg", quality=80, progressive=True)
save(Image.fromarray(picture(57, 41, 3), "RGB"), "rgb_opt.jpg", quality=60, optimize=True)
# Refused: 16-bit grey PNG, CMYK JPEG.
Image.fromarray(picture(16, 16, 1).astype(np.uint16) * 257, "I;16").save(
    os.path.join(OUT, "refused", "grey16.png"))
Image.fromarray(picture(16, 16, 3), "RGB").convert("CMYK").save(
    os.path.join(OUT, "refused", "cmyk.jpg"), quality=90)
with open(os.path.join(OUT, "manifest.txt"), "w") as f:
    f.write("\n".join(manifest) + "\n")
