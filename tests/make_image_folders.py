#!/usr/bin/python3
"""Writes image folders for tests/image_folder_test.cc with PIL (Debian's python3-pil), and the
same images as NumPy arrays in the order torchvision's ImageFolder reads them, computed here
from ImageFolder's own rules (sorted class folders; sorted(os.walk(followlinks=True)); each
folder's files sorted; images by extension), so the loader is checked against them.

  make_image_folders.py same OUT    OUT/images: classes b, a, 10, 2 (sorted: 10, 2, a, b) of
                                    5x7 colour PNG and JPEG images, one class with sub-folders
                                    and a notes.txt; OUT/x.npy (n, 3, 7, 5) uint8 as PIL decodes
                                    them, OUT/y.npy int64, OUT/paths.txt the files in row order
  make_image_folders.py grey OUT    OUT/images: 2 classes of 6x4 grey PNGs, and OUT/x.npy, y.npy
  make_image_folders.py bad OUT     one image folder per hostile case, OUT/<case>
  make_image_folders.py heavy OUT   OUT/heavy.png: a 6x4 grey PNG with a 1 MiB text chunk,
                                    about a millisecond to read, as a photo takes to decode,
                                    and 24 samples: a folder of many links to it loads for
                                    seconds in little memory
"""
import os
import sys

import numpy as np
from PIL import Image, PngImagePlugin

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def rng_image(rng, w, h, mode):
    if mode == "L":
        return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


def image_folder_order(root):
    """ImageFolder's find_classes and make_dataset, restated."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    rows = []
    for k, c in enumerate(classes):
        for folder, _, names in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith(IMAGE_EXTENSIONS):
                    rows.append((os.path.join(folder, name), k))
    return classes, rows


def write_arrays(out, root, mode):
    _, rows = image_folder_order(root)
    xs = []
    for path, _ in rows:
        a = np.asarray(Image.open(path).convert(mode))
        xs.append(a[None, :, :] if mode == "L" else a.transpose(2, 0, 1))
    np.save(os.path.join(out, "x.npy"), np.stack(xs).astype(np.uint8))
    np.save(os.path.join(out, "y.npy"), np.array([k for _, k in rows], dtype=np.int64))
    with open(os.path.join(out, "paths.txt"), "w") as f:
        f.write("".join(p + "\n" for p, _ in rows))


def same(out):
    rng = np.random.default_rng(7)
    root = os.path.join(out, "images")
    for c in ("b", "a", "10", "2"):
        os.makedirs(os.path.join(root, c))
    for i, (c, name) in enumerate([("b", "z.png"), ("b", "A.PNG"), ("b", "m.jpg"),
                                   ("a", "1.jpeg"), ("a", "0.png"), ("10", "x.png"),
                                   ("2", "q.jpg"), ("2", "p.png")]):
        img = rng_image(rng, 5, 7, "RGB")
        path = os.path.join(root, c, name)
        if name.lower().endswith((".jpg", ".jpeg")):
            img.save(path, "JPEG", quality=90)
        else:
            img.save(path, "PNG")
    # Folders sorted by path, not walked depth first: a/sub, a/sub-c, a/sub/deep.
    for sub in ("sub", "sub/deep", "sub-c"):
        os.makedirs(os.path.join(root, "a", sub))
        rng_image(rng, 5, 7, "RGB").save(os.path.join(root, "a", sub, "0.png"))
    rng_image(rng, 5, 7, "RGB").save(os.path.join(root, "a", "sub-b.png"))
    with open(os.path.join(root, "a", "notes.txt"), "w") as f:
        f.write("not an image\n")
    with open(os.path.join(root, "README"), "w") as f:
        f.write("a file at the root is not a row\n")
    write_arrays(out, root, "RGB")


def grey(out):
    rng = np.random.default_rng(8)
    root = os.path.join(out, "images")
    for c in ("one", "two"):
        os.makedirs(os.path.join(root, c))
        for i in range(3):
            rng_image(rng, 6, 4, "L").save(os.path.join(root, c, "%d.png" % i))
    write_arrays(out, root, "L")


def bad(out):
    rng = np.random.default_rng(9)

    def folder(case, classes=("a", "b")):
        root = os.path.join(out, case)
        for c in classes:
            os.makedirs(os.path.join(root, c), exist_ok=True)
            rng_image(rng, 4, 4, "RGB").save(os.path.join(root, c, "0.png"))
        return root

    os.makedirs(os.path.join(out, "no_classes"))
    rng_image(rng, 4, 4, "RGB").save(os.path.join(out, "no_classes", "0.png"))
    os.makedirs(os.path.join(folder("empty_class"), "c"))
    rng_image(rng, 5, 4, "RGB").save(os.path.join(folder("other_size"), "b", "1.png"))
    rng_image(rng, 4, 4, "L").save(os.path.join(folder("other_channels"), "b", "1.png"))
    with open(os.path.join(folder("not_an_image"), "b", "1.jpg"), "w") as f:
        f.write("this is text, not a JPEG\n")
    data = open(os.path.join(folder("truncated"), "a", "0.png"), "rb").read()
    with open(os.path.join(out, "truncated", "b", "1.png"), "wb") as f:
        f.write(data[:len(data) // 2])
    rng_image(rng, 4, 4, "RGB").save(os.path.join(folder("bmp"), "b", "1.bmp"))
    os.symlink("..", os.path.join(folder("loop"), "b", "up"))
    os.symlink("missing.png", os.path.join(folder("broken_link"), "b", "1.png"))


def heavy(out):
    info = PngImagePlugin.PngInfo()
    info.add_text("comment", "x" * (1 << 20))
    rng_image(np.random.default_rng(10), 6, 4, "L").save(os.path.join(out, "heavy.png"),
                                                          pnginfo=info)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    {"same": same, "grey": grey, "bad": bad, "heavy": heavy}[mode](out)


if __name__ == "__main__":
    main()
