#!/usr/bin/python3
"""Writes array files for tests/arrays_test.cc with numpy itself (Debian's python3-numpy), so
the loaders are checked against the files numpy really writes, not against our idea of them.

  make_arrays.py same OUT N   the first N Fashion-MNIST training images and labels as IDX
                              (plain and gzip), .npy (uint8, float32, float64; int64 labels),
                              .npz (np.savez and np.savez_compressed) and CSV (header, label
                              last): one data set in every form
  make_arrays.py bad OUT      files every loader must refuse, each named for what is wrong
"""
import gzip
import os
import struct
import sys

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, _, code, ndim = struct.unpack(">BBBB", data[:4])
    assert code == 0x08, path
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def write_idx(path, a, compress=False):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(">f4"): 0x0D, np.dtype(">i4"): 0x0C}
    head = struct.pack(">BBBB", 0, 0, codes[a.dtype], a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(head + a.tobytes())


def same(out, n):
    x = read_idx(f"{FASHION}/train-images-idx3-ubyte.gz")[:n]
    y = read_idx(f"{FASHION}/train-labels-idx1-ubyte.gz")[:n]
    write_idx(f"{out}/x-idx3-ubyte", x)
    write_idx(f"{out}/y-idx1-ubyte", y)
    write_idx(f"{out}/x-idx3-ubyte.gz", x, compress=True)
    write_idx(f"{out}/xf32.idx", x.astype(">f4"))
    np.save(f"{out}/x.npy", x)
    np.save(f"{out}/y.npy", y)
    np.save(f"{out}/xf32.npy", x.reshape(n, -1).astype(np.float32))
    np.save(f"{out}/xf64.npy", x.astype(np.float64))
    np.save(f"{out}/yi64.npy", y.astype(np.int64).reshape(n, 1))
    np.savez(f"{out}/xy.npz", x=x, y=y)
    np.savez_compressed(f"{out}/xyc.npz", images=x, labels=y)
    with open(f"{out}/xy.csv", "w") as f:
        f.write(",".join(f"pixel{j + 1}" for j in range(784)) + ",label\n")
        for row, label in zip(x.reshape(n, -1), y):
            f.write(",".join(map(str, row)) + f",{label}\n")


def bad(out):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.array([0, 1, 0, 1], dtype=np.uint8)
    np.save(f"{out}/y4.npy", y)
    np.save(f"{out}/fortran.npy", np.asfortranarray(x))
    np.save(f"{out}/bigendian.npy", x.astype(">f4"))
    np.save(f"{out}/object.npy", np.array([[1, "a"], [2, "b"]], dtype=object), allow_pickle=True)
    np.save(f"{out}/text.npy", np.array(["a", "b", "c", "d"]))
    np.save(f"{out}/complex.npy", x.astype(np.complex64))
    np.save(f"{out}/structured.npy", np.zeros(4, dtype=[("a", "<f4"), ("b", "<i4")]))
    np.save(f"{out}/nan.npy", np.array([[1, 2], [3, np.nan], [5, 6], [7, 8]], dtype=np.float64))
    np.save(f"{out}/y3.npy", y[:3])
    np.save(f"{out}/y2d.npy", np.zeros((4, 2), dtype=np.uint8))
    np.save(f"{out}/x4.npy", x)
    raw = open(f"{out}/x4.npy", "rb").read()
    open(f"{out}/truncated.npy", "wb").write(raw[:-5])
    open(f"{out}/longer.npy", "wb").write(raw + b"\0\0\0\0")
    open(f"{out}/notnpy.npy", "wb").write(b"\x93NUMPZ" + raw[6:])
    np.savez(f"{out}/noy.npz", x=x, labels=y)
    np.savez_compressed(f"{out}/damaged.npz", x=x, y=y)
    z = bytearray(open(f"{out}/damaged.npz", "rb").read())
    z[60] ^= 0xFF  # inside the first member's deflated bytes
    open(f"{out}/damaged.npz", "wb").write(bytes(z))
    np.savez(f"{out}/cut.npz", x=x, y=y)
    c = open(f"{out}/cut.npz", "rb").read()
    open(f"{out}/cut.npz", "wb").write(c[: len(c) // 2])
    imgs = np.arange(4 * 2 * 2, dtype=np.uint8).reshape(4, 2, 2)
    write_idx(f"{out}/x4-idx3-ubyte", imgs)
    write_idx(f"{out}/y4-idx1-ubyte", y)
    write_idx(f"{out}/y3-idx1-ubyte", y[:3])
    good = open(f"{out}/x4-idx3-ubyte", "rb").read()
    open(f"{out}/magic-idx3-ubyte", "wb").write(b"\x00\x00\x07\x03" + good[4:])
    open(f"{out}/short-idx3-ubyte", "wb").write(good[:-3])
    with gzip.open(f"{out}/x4-idx3-ubyte.gz", "wb") as f:
        f.write(good)
    gz = open(f"{out}/x4-idx3-ubyte.gz", "rb").read()
    open(f"{out}/cut-idx3-ubyte.gz", "wb").write(gz[: len(gz) - 12])


if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    if sys.argv[1] == "same":
        same(sys.argv[2], int(sys.argv[3]))
    else:
        bad(sys.argv[2])
