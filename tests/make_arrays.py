#!/usr/bin/python3
"""Writes array files for tests/arrays_test.cc with numpy itself (Debian's python3-numpy), so
the loaders are checked against the files numpy really writes, not against our idea of them.

  make_arrays.py same OUT N   the first N Fashion-MNIST training images and labels as IDX
                              (plain and gzip), .npy (uint8, float32, float64; int64 labels),
                              .npz (np.savez and np.savez_compressed) and CSV (header, label
                              last): one data set in every form
  make_arrays.py bad OUT      files every loader must refuse, each named for what is wrong;
                              the hostile ones declare far more than they hold
"""
import gzip
import os
import struct
import sys
import warnings
import zipfile
import zlib

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


def npy_header(descr, shape):
    """An NPY 1.0 header as numpy writes it, for any shape (numpy itself cannot make the
    array a hostile header declares)."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    d += " " * (63 - (10 + len(d)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()


def idx_header(code, shape):
    return struct.pack(">BBBB", 0, 0, code, len(shape)) + struct.pack(">" + "I" * len(shape), *shape)


def deflate_zeros(n):
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = bytes(1 << 20)
    parts = [z.compress(block) for _ in range(n >> 20)]
    return b"".join(parts) + z.compress(bytes(n & ((1 << 20) - 1))) + z.flush()


def zip_member(name, method, crc, csize, usize, data):
    """A local header and data, and its central directory entry, stating the sizes given."""
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, csize, usize,
                        len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, csize,
                          usize, len(name), 0, 0, 0, 0, 0, 0) + name
    return local + data, central


def write_zip(path, members):
    body, directory = b"", b""
    for local, central in members:
        directory += central[:42] + struct.pack("<I", len(body)) + central[46:]
        body += local
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(directory),
                      len(body), 0)
    open(path, "wb").write(body + directory + end)


def hostile(out):
    # Declared sizes far beyond the bytes: 192-byte .npy files of (10^8, 4) and (10^9, 4).
    for name, rows in (("declares8.npy", 10**8), ("declares9.npy", 10**9)):
        open(f"{out}/{name}", "wb").write(npy_header("<f4", (rows, 4)) + bytes(64))
    # A 35-byte gzip IDX declaring 10^8 rows of 4 bytes, and not one of them.
    open(f"{out}/declares-idx3-ubyte.gz", "wb").write(gzip.compress(idx_header(0x08, (10**8, 2, 2))))
    # A 1 MiB gzip IDX declaring 10^8 rows of 4 bytes: the bytes that arrive are all it holds.
    with gzip.open(f"{out}/rows-idx3-ubyte.gz", "wb") as f:
        f.write(idx_header(0x08, (10**8, 2, 2)) + os.urandom(1 << 20))
    # A gzip IDX of 10 rows of 8,000,000 features, all there (zeros: 78 KiB compressed).
    with gzip.open(f"{out}/wide-idx2-ubyte.gz", "wb", compresslevel=9) as f:
        f.write(idx_header(0x08, (10, 8_000_000)) + bytes(80_000_000))
    write_idx(f"{out}/y10-idx1-ubyte", np.array([0, 1] * 5, dtype=np.uint8))
    # Shapes whose products overflow 64 bits.
    open(f"{out}/dims62.npy", "wb").write(npy_header("<f4", (2**62, 4)) + bytes(64))
    open(f"{out}/zero62.npy", "wb").write(npy_header("<f4", (0, 2**62, 4)))
    open(f"{out}/dims40.npy", "wb").write(npy_header("<u1", (3, 2**40, 2**40)))
    open(f"{out}/big-idx3-ubyte", "wb").write(idx_header(0x08, (0, 2**32 - 1, 2**32 - 1)))
    # An .npz member that inflates to 64 MiB of zeros while the directory states 1000 bytes;
    # its NPY magic is wrong, so the reader checks the whole member.
    data = deflate_zeros(64 << 20)
    write_zip(f"{out}/inflates.npz", [zip_member(b"x.npy", 8, 0, len(data), 1000, data)])
    # A deflated member whose first block has the reserved type 3: refused where it stands.
    write_zip(f"{out}/blocktype.npz", [zip_member(b"x.npy", 8, 0, 8, 1000, b"\xff" * 8)])


def gzip_cases(out, good):
    gz = open(f"{out}/x4-idx3-ubyte.gz", "rb").read()
    open(f"{out}/garbage-idx3-ubyte.gz", "wb").write(gz + b"garbage")
    # Zero padding after the last member, which gzip ignores; zeros and then anything else
    # are garbage to it.
    open(f"{out}/zeros-idx3-ubyte.gz", "wb").write(gz + bytes(1000))
    open(f"{out}/zerosjunk-idx3-ubyte.gz", "wb").write(gz + bytes(10) + b"x")
    open(f"{out}/two-idx3-ubyte.gz", "wb").write(gzip.compress(good[:10]) + gzip.compress(good[10:]))
    bad = bytearray(gz)
    bad[len(bad) // 2] ^= 0xFF  # inside the deflate data (the header holds the name)
    open(f"{out}/damaged-idx3-ubyte.gz", "wb").write(bytes(bad))


def duplicate_npz(out, x, y):
    warnings.simplefilter("ignore")  # zipfile warns of the duplicate this file is for
    with zipfile.ZipFile(f"{out}/twice.npz", "w") as z:
        for name, a in (("x.npy", x), ("y.npy", y), ("x.npy", x[:2])):
            with z.open(name, "w") as f:
                np.lib.format.write_array(f, a)


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
    # One row of one float32 feature, deflated: its size is only known as it inflates.
    np.savez_compressed(f"{out}/one.npz", x=np.ones((1, 1), dtype=np.float32),
                        y=np.zeros(1, dtype=np.uint8))
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
    gzip_cases(out, good)
    duplicate_npz(out, x, y)
    hostile(out)


if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    if sys.argv[1] == "same":
        same(sys.argv[2], int(sys.argv[3]))
    else:
        bad(sys.argv[2])
