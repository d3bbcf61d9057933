#!/usr/bin/env python3
"""Reads a `shmtrain export` .npz with the standard library alone, as numpy.load would.

  npz_forward.py describe NPZ       one line per array, in archive order:
                                    name TAB descr TAB shape TAB values
                                    (shape "8,5", "" for 0-d; values comma-separated when
                                    there are at most 64, else "-"; floats as %.9g)
  npz_forward.py forward NPZ CSV    the model applied to the CSV's rows (the first F cells of
                                    each; a first line with a non-number is a header): per row
                                    the class label TAB each class's probability (%.9g), or
                                    the value (regression)

Every archive is checked strictly first: a zip archive (numpy.load recognises one by its
first bytes) of stored "<name>.npy" members with good CRCs, each an NPY 1.0 file whose header
is the dict literal numpy writes (ast.literal_eval), padded so the data starts at a multiple
of 64, C order, with as many bytes as its shape and type need. `forward` also checks what
PyTorch's load_state_dict would: exactly the keys of nn.Sequential(Linear, act, ..., Linear),
each with nn.Linear's shape. Problems are printed to stderr with exit code 1.
"""
import ast
import csv
import math
import re
import struct
import sys
import zipfile

ITEM = {"<f4": ("f", 4), "<f8": ("d", 8), "<i8": ("q", 8)}


def fail(msg):
    sys.stderr.write("npz_forward: " + msg + "\n")
    sys.exit(1)


def parse_npy(name, b):
    if b[:6] != b"\x93NUMPY":
        fail(f"{name}: bad magic {b[:6]!r}")
    if b[6:8] != b"\x01\x00":
        fail(f"{name}: NPY version {b[6]}.{b[7]}, expected 1.0")
    (hlen,) = struct.unpack("<H", b[8:10])
    if (10 + hlen) % 64 != 0:
        fail(f"{name}: data starts at byte {10 + hlen}, not a multiple of 64")
    header = b[10 : 10 + hlen].decode("latin1")
    if not header.endswith("\n"):
        fail(f"{name}: header does not end with a newline: {header!r}")
    d = ast.literal_eval(header)
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        fail(f"{name}: header is not numpy's dict: {header!r}")
    descr, shape = d["descr"], d["shape"]
    if d["fortran_order"] is not False:
        fail(f"{name}: fortran_order is {d['fortran_order']!r}")
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        fail(f"{name}: bad shape {shape!r}")
    canonical = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (descr, shape)
    if header.rstrip(" \n") != canonical:
        fail(f"{name}: header {header!r} is not numpy's form {canonical!r}")
    count = math.prod(shape)
    data = b[10 + hlen :]
    m = re.fullmatch(r"<U(\d+)", descr)
    if m:
        width = int(m.group(1))
        if len(data) != count * 4 * width:
            fail(f"{name}: {len(data)} data bytes for {count} x {descr}")
        values = [data[i * 4 * width : (i + 1) * 4 * width].decode("utf-32-le").rstrip("\0")
                  for i in range(count)]
    elif descr in ITEM:
        code, size = ITEM[descr]
        if len(data) != count * size:
            fail(f"{name}: {len(data)} data bytes for {count} x {descr}")
        values = list(struct.unpack("<%d%s" % (count, code), data))
    else:
        fail(f"{name}: unsupported descr {descr!r}")
    return descr, shape, values


def read_npz(path):
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            fail(f"{path}: does not start with a zip local header (numpy.load would not see a zip)")
    arrays = {}
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            fail(f"{path}: member {bad} has a bad CRC")
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                fail(f"{info.filename}: compressed (method {info.compress_type}), expected stored")
            if not info.filename.endswith(".npy"):
                fail(f"{info.filename}: not a .npy member")
            key = info.filename[: -len(".npy")]
            if key in arrays:
                fail(f"{key}: twice in the archive")
            arrays[key] = parse_npy(info.filename, z.read(info))
    return arrays


def fmt(v):
    return "%.9g" % v if isinstance(v, float) else str(v)


def describe(path):
    out = []
    for name, (descr, shape, values) in read_npz(path).items():
        vals = ",".join(fmt(v) for v in values) if len(values) <= 64 else "-"
        out.append("\t".join([name, descr, ",".join(str(n) for n in shape), vals]))
    sys.stdout.buffer.write(("\n".join(out) + "\n").encode("utf-8"))


ACT = {
    "relu": lambda v: max(v, 0.0),
    "tanh": math.tanh,
    "sigmoid": lambda v: 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v)),
    "identity": lambda v: v,
}


def network(arrays):
    """The Linear layers as (rows of W, b), checked as load_state_dict(strict=True) would."""
    sizes = arrays["layers"][2]
    layers = []
    want = set()
    for l in range(len(sizes) - 1):
        n_in, n_out = sizes[l], sizes[l + 1]
        w, b = "%d.weight" % (2 * l), "%d.bias" % (2 * l)
        want |= {w, b}
        for key, shape in ((w, (n_out, n_in)), (b, (n_out,))):
            if key not in arrays:
                fail(f"no array {key} (nn.Sequential's Linear {l} would miss it)")
            if arrays[key][0] != "<f4" or arrays[key][1] != shape:
                fail(f"{key}: {arrays[key][0]} {arrays[key][1]}, nn.Linear({n_in}, {n_out}) "
                     f"needs <f4 {shape}")
        wv = arrays[w][2]
        layers.append(([wv[i * n_in : (i + 1) * n_in] for i in range(n_out)], arrays[b][2]))
    extra = {k for k in arrays if re.fullmatch(r"\d+\.(weight|bias)", k)} - want
    if extra:
        fail(f"unexpected parameter arrays {sorted(extra)}")
    return layers


def forward(arrays, layers, row):
    act = ACT[arrays["activation"][2][0]]
    off, scale = arrays["input.offset"][2], arrays["input.scale"][2]
    a = [(x - o) * s for x, o, s in zip(row, off, scale)]
    for l, (w, b) in enumerate(layers):
        z = [sum(wi * ai for wi, ai in zip(wr, a)) + bi for wr, bi in zip(w, b)]
        a = z if l == len(layers) - 1 else [act(v) for v in z]
    return a


def rows_of(csv_path, features):
    with open(csv_path, newline="", encoding="utf-8") as f:
        lines = list(csv.reader(f))
    try:
        float(lines[0][0])
    except ValueError:
        lines = lines[1:]
    return [[float(c) for c in line[:features]] for line in lines if line]


def run_forward(npz, csv_path):
    arrays = read_npz(npz)
    layers = network(arrays)
    xent = arrays["loss"][2][0] == "xent"
    if xent != ("classes" in arrays):
        fail("classes must be there exactly for an xent model")
    out = []
    for row in rows_of(csv_path, arrays["layers"][2][0]):
        z = forward(arrays, layers, row)
        if not xent:
            out.append("%.9g" % z[0])
            continue
        m = max(z)
        e = [math.exp(v - m) for v in z]
        p = [v / sum(e) for v in e]
        best = max(range(len(p)), key=lambda k: (p[k], -k))  # ties: the first, as predict
        out.append("\t".join([fmt(arrays["classes"][2][best])] + ["%.9g" % v for v in p]))
    sys.stdout.buffer.write(("\n".join(out) + "\n").encode("utf-8"))


def main(argv):
    if len(argv) == 3 and argv[1] == "describe":
        describe(argv[2])
    elif len(argv) == 4 and argv[1] == "forward":
        run_forward(argv[2], argv[3])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv)
