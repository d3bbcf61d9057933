#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/ (python3's standard
library only, byte for byte the same on every run): a few small valid files per format and
the edge cases a parser must take or refuse cleanly. The files are committed; run this again
after a format changes.

  fuzz/make_corpus.py [OUT]   (default: fuzz/corpus beside this script)
"""
import gzip
import io
import os
import struct
import sys
import zipfile
import zlib

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy(descr, shape, body, version=(1, 0), order="False"):
    shape_text = "(" + "".join(f"{s}, " if len(shape) > 1 else f"{s}," for s in shape).rstrip(" ") + ")"
    if len(shape) > 1:
        shape_text = "(" + ", ".join(str(s) for s in shape) + ")"
    head = f"{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape_text}, }}"
    lenfmt = "<H" if version[0] == 1 else "<I"
    pre = 6 + 2 + struct.calcsize(lenfmt)
    pad = (64 - (pre + len(head) + 1) % 64) % 64
    head = head + " " * pad + "\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(lenfmt, len(head)) + head.encode() + body


def gz(data):
    # A fixed mtime keeps the bytes the same on every run.
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def npz(members, compress):
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return buf.getvalue()


def idx(code, shape, body):
    return struct.pack(">BBBB", 0, 0, code, len(shape)) + struct.pack(">" + "I" * len(shape), *shape) + body


def f32(values):
    return struct.pack("<" + "f" * len(values), *values)


# .npy: float32 rows, uint8 images, int64 labels as a column, float64, bool, big-endian
# one-byte types, version 2 and 3 headers, a 0-d array, an empty one, and refusals (Fortran
# order, an object dtype, a structured dtype).
x43 = f32([float(i) / 4 for i in range(12)])
put("npy", "f4_4x3.npy", npy("<f4", (4, 3), x43))
put("npy", "u1_2x2x2.npy", npy("|u1", (2, 2, 2), bytes(range(8))))
put("npy", "i8_col.npy", npy("<i8", (4, 1), struct.pack("<4q", 0, 1, 0, 1)))
put("npy", "f8_vec.npy", npy("<f8", (3,), struct.pack("<3d", 1.5, -2.0, 1.5)))
put("npy", "b1_vec.npy", npy("|b1", (4,), bytes([0, 1, 1, 0])))
put("npy", "u2_v2.npy", npy("<u2", (2, 2), struct.pack("<4H", 1, 2, 3, 4), version=(2, 0)))
put("npy", "i4_v3.npy", npy("<i4", (2,), struct.pack("<2i", -7, 7), version=(3, 0)))
put("npy", "scalar.npy", npy("<f4", (), f32([1.0])))
put("npy", "empty.npy", npy("<f4", (0, 3), b""))
put("npy", "fortran.npy", npy("<f4", (2, 2), f32([1, 2, 3, 4]), order="True"))
put("npy", "object.npy", npy("|O", (1,), b"\0" * 8))
put("npy", "big_f4.npy", npy(">f4", (2,), struct.pack(">2f", 1, 2)))

# .npz: numpy.savez (stored) and savez_compressed (deflate), the x/y pair the loader wants,
# other names, a damaged CRC, an empty archive.
y4 = npy("|u1", (4,), bytes([0, 1, 0, 1]))
put("npz", "xy_stored.npz", npz([("x", npy("<f4", (4, 3), x43)), ("y", y4)], False))
put("npz", "xy_deflate.npz", npz([("x", npy("<f4", (4, 3), x43)), ("y", y4)], True))
put("npz", "images_labels.npz", npz([("images", npy("|u1", (2, 2, 2), bytes(range(8)))),
                                    ("labels", npy("|u1", (2,), bytes([3, 4])))], True))
put("npz", "x_only.npz", npz([("x", npy("<f8", (2, 1), struct.pack("<2d", 1, 2)))], False))
bad_crc = bytearray(npz([("x", npy("<f4", (1, 1), f32([1]))), ("y", npy("|u1", (1,), b"\1"))], False))
bad_crc[-30] ^= 0xFF  # inside the central directory's last entry: its name or CRC
put("npz", "damaged.npz", bytes(bad_crc))
put("npz", "empty.npz", npz([], False))

# --init-from archives (master/files/init_from.h) for fuzz/init_from.cc's model on 1x4x4:
# conv2d(2,3,padding=1,bias=false),batchnorm2d,relu,residual(conv2d(2,3,padding=1)),flatten,
# linear(3): every tensor by its export name, stored and deflated, with the export's other
# arrays beside them, and with one tensor misshapen.
def init_from(extra=(), shape_of_5=(3, 32)):
    def f4(name, shape):
        n = 1
        for d in shape:
            n *= d
        return (name, npy("<f4", shape, f32([((i * 7) % 11 - 5) / 8 for i in range(n)])))
    return [f4("0.weight", (2, 1, 3, 3)), f4("1.weight", (2,)), f4("1.bias", (2,)),
            f4("1.running_mean", (2,)), ("1.running_var", npy("<f4", (2,), f32([1, 0.5]))),
            ("1.num_batches_tracked", npy("<i8", (), struct.pack("<q", 7))),
            f4("3.body.0.weight", (2, 2, 3, 3)), f4("3.body.0.bias", (2,)),
            f4("5.weight", shape_of_5), f4("5.bias", (3,))] + list(extra)


put("init_from", "stored.npz", npz(init_from(), False))
put("init_from", "deflated.npz", npz(init_from(), True))
put("init_from", "export_extras.npz",
    npz(init_from([("input.offset", npy("<f4", (16,), f32([0] * 16))),
                   ("loss", npy("<U4", (), "xent".encode("utf-32-le")))]), False))
put("init_from", "misshapen.npz", npz(init_from(shape_of_5=(32, 3)), False))

# IDX: uint8 images and labels, int8, int16, int32, float32, float64, gzip, and refusals
# (a dimension of 0, an unknown type).
put("idx", "u8_images-idx3-ubyte", idx(0x08, (2, 2, 2), bytes(range(8))))
put("idx", "u8_labels-idx1-ubyte", idx(0x08, (4,), bytes([0, 1, 0, 1])))
put("idx", "i8-idx2", idx(0x09, (2, 2), bytes([0xFF, 1, 2, 0x80])))
put("idx", "i16-idx2", idx(0x0B, (2, 1), struct.pack(">2h", -300, 300)))
put("idx", "i32-idx1", idx(0x0C, (3,), struct.pack(">3i", 1, 2, 3)))
put("idx", "f32-idx2", idx(0x0D, (2, 2), struct.pack(">4f", 0.5, 1.5, -2.5, 3)))
put("idx", "f64-idx1", idx(0x0E, (2,), struct.pack(">2d", 0, 1)))
put("idx", "u8_images.gz", gz(idx(0x08, (2, 2, 2), bytes(range(8)))))
put("idx", "u8_labels.gz", gz(idx(0x08, (4,), bytes([0, 1, 0, 1]))))
put("idx", "zero_dim-idx2", idx(0x08, (0, 3), b""))
put("idx", "bad_type-idx1", idx(0x0A, (1,), b"\0"))
# Regressions: zero padding after the last gzip member, which gzip ignores and the reader once
# refused; and zeros followed by another member, which both call trailing garbage.
put("idx", "regress-gzip_zero_padding.gz", gz(idx(0x08, (4,), bytes([0, 1, 0, 1]))) + bytes(1000))
put("idx", "regress-gzip_zeros_then_member.gz",
    gz(idx(0x08, (4,), bytes([0, 1, 0, 1]))) + bytes(3) + gz(idx(0x08, (1,), b"\1")))
# idx_gz compresses its input itself: the same files, uncompressed.
for name, data in [("u8_images", idx(0x08, (2, 2, 2), bytes(range(8)))),
                   ("u8_labels", idx(0x08, (4,), bytes([0, 1, 0, 1]))),
                   ("f32", idx(0x0D, (2, 2), struct.pack(">4f", 0.5, 1.5, -2.5, 3))),
                   ("i16", idx(0x0B, (2, 1), struct.pack(">2h", -300, 300)))]:
    put("idx_gz", name, data)

# CSV: header and label last, no header, ';' and tab, quotes, CRLF and a byte order mark,
# text class labels, blank lines, a ragged row, a non-number.
put("csv", "header.csv", "a,b,label\n1,2,0\n3,4,1\n5,6,0\n")
put("csv", "plain.csv", "0.5,1e-3,1\n-2,3.25,0\n")
put("csv", "semicolon.csv", "x;y\n1,5;2\n3,5;4\n")
put("csv", "tab.csv", "1\t2\t3\n4\t5\t6\n")
put("csv", "quoted.csv", '"a,1","b"\n"1","2"\n"3",""""\n')
put("csv", "crlf_bom.csv", "\ufeffa,b\r\n1,2\r\n\r\n3,4\r\n")
put("csv", "text_labels.csv", "f1,f2,kind\n1,2,cat\n2,1,dog\n0,0,cat\n")
put("csv", "ragged.csv", "1,2,3\n4,5\n")
put("csv", "nan.csv", "1,nan\n2,inf\n")
# Regression: gzipped text, once taken for an IDX file by its gzip magic.
put("csv", "regress-gzip.csv", gz(b"a,b,label\n1,2,0\n3,4,1\n"))
# A bad cell, then a gzip stream cut short: the error once depended on the block size.
put("csv", "regress-gzip_cut_after_bad_cell.csv", gz(b"1,2,0\n3,x,1\n" + b"5,6,0\n" * 50)[:-12])

# LIBSVM: labels and index:value pairs, comments, qid, a gap in the indices, refusals
# (descending indices, index 0).
put("libsvm", "basic.svm", "1 1:0.5 3:2\n0 2:1\n1 1:1 2:1 3:1\n")
put("libsvm", "comments.svm", "# a comment\n-1 qid:3 1:1 # trailing\n+1 qid:3 2:-1e3\n")
put("libsvm", "float_labels.svm", "2.5 1:1\n-0.5 4:2\n")
put("libsvm", "descending.svm", "1 3:1 1:1\n")
put("libsvm", "index0.svm", "1 0:1\n")
put("libsvm", "empty_row.svm", "1\n0 1:1\n")
put("libsvm", "regress-gzip.svm", gz(b"1 1:0.5 3:2\n0 2:1\n"))


# Model files (master/files/model_file.h, format version 2) and checkpoints
# (master/files/checkpoint.h, version 2), with their CRC-32.
def crc(b):
    return b + struct.pack("<I", zlib.crc32(b) & 0xFFFFFFFF)


def model(task, layers, act, loss, norm, classes, numeric):
    b = b"SHMTMODL" + struct.pack("<III", 2, task, len(layers))
    b += struct.pack("<" + "i" * len(layers), *layers) + struct.pack("<III", act, loss, norm)
    nf = layers[0] if norm else 0
    b += struct.pack("<I", nf) + f32([0.0] * nf) + f32([1.0] * nf)
    b += struct.pack("<II", len(classes), numeric)
    for c in classes:
        b += struct.pack("<I", len(c)) + c.encode()
    n = sum(layers[i + 1] * (layers[i] + 1) for i in range(len(layers) - 1))
    return crc(b + struct.pack("<Q", n) + f32([0.25] * n))


put("model", "regression", model(0, [1, 5, 1], 0, 0, 0, [], 1))
put("model", "classes_numeric", model(1, [2, 3, 2], 1, 1, 2, ["0", "1"], 1))
put("model", "classes_text", model(1, [2, 3], 3, 1, 1, ["cat", "dog", "emu"], 0))
put("model", "deep", model(0, [3, 2, 2, 2, 1], 2, 0, 0, [], 0))
put("model", "truncated", model(0, [1, 5, 1], 0, 0, 0, [], 1)[:40])


def model3(task, shape, text, n, loss, classes):
    """Format version 3: the input shape and the model text, no normalisation."""
    b = b"SHMTMODL" + struct.pack("<IIIIII", 3, task, *shape, len(text)) + text.encode()
    b += struct.pack("<IIII", loss, 0, 0, len(classes)) + struct.pack("<I", 0)
    for c in classes:
        b += struct.pack("<I", len(c)) + c.encode()
    return crc(b + struct.pack("<Q", n) + f32([0.25] * n))


put("model", "cnn", model3(1, (1, 6, 6), "conv2d(2,3,padding=1),relu,maxpool2d(2),flatten,linear(3)",
                           2 * 9 + 2 + 18 * 3 + 3, 1, ["a", "b", "c"]))
put("model", "mlp_v3", model3(0, (3, 1, 1), "linear(4),tanh,linear(1)", 4 * 4 + 5, 0, []))
# Regressions: files of about 100 bytes that declare 2^24 inputs and 2^40 parameters, cut short
# (without scaling, after its F; with, after two of its 2^24 offsets). The decoder once
# allocated their scaling, 2 x 64 MiB, before it found them cut short.
big = "flatten,linear(65536),relu,linear(65536),relu,linear(2)"
big_head = b"SHMTMODL" + struct.pack("<IIIIII", 3, 1, 1, 4096, 4096, len(big)) + big.encode()
put("model", "regress-declares_2e24_inputs", big_head + struct.pack("<III", 1, 0, 0))
put("model", "regress-declares_2e24_features", big_head + struct.pack("<III", 1, 2, 1 << 24) + bytes(8))
# Regressions: model texts that --model reads but shmtrain never writes (it writes the canonical
# text). A file once decoded them, and re-encoded to other bytes than its own.
put("model", "regress-noncanonical_spaces", model3(0, (3, 1, 1), "linear( 4 ),tanh,linear(1)", 21, 0, []))
put("model", "regress-noncanonical_default",
    model3(0, (3, 1, 1), "linear(out=4),dropout(p=0.5),tanh(),linear(+1)", 21, 0, []))


def checkpoint(mode, step, n, k, optimizer):
    b = b"SHMTCKPT" + struct.pack("<IIqQQII", 2, mode, step, 0x1234, n, k, len(optimizer))
    return crc(b + optimizer.encode() + f32([0.5] * (n * (1 + k))))


put("checkpoint", "sgd", checkpoint(0, 10, 4, 0, "sgd lr 0.1"))
put("checkpoint", "momentum", checkpoint(0, 3, 3, 1, "sgd lr 0.1 momentum 0.9"))
put("checkpoint", "adam_async", checkpoint(1, 7, 2, 2, "adam lr 0.001"))
put("checkpoint", "no_states", checkpoint(0, 0, 1, 0, ""))
# A header declaring 2^28 parameters and a state vector in a file that holds 3 of each.
put("checkpoint", "regress-declares_2e28_params",
    checkpoint(0, 1, 3, 1, "adam")[:32] + struct.pack("<Q", 1 << 28) + checkpoint(0, 1, 3, 1, "adam")[40:])


# Async stop states (master/hosts/async_state.h, version 1): one host's parts, each with its
# settled versions, a push out or not, and its checkpoint (the parameters) inside; their CRC-32.
def async_part(version, pending_at, base, settled, snap=None):
    snap = snap or []
    b = struct.pack("<QQQQ", version, pending_at, len(base), len(snap))
    b += struct.pack("<" + "Q" * len(settled), *settled)
    return b + f32(base) + f32(snap)


def async_state(hosts, host, n, pending):
    share = [(n * (j + 1)) // hosts - (n * j) // hosts for j in range(hosts)]
    b = b"SHMTASYN" + struct.pack("<IIIIQQ", 1, hosts, host, 0, n, 40)
    b += struct.pack("<" + "Q" * hosts, *([40] * hosts))
    b += async_part(3, 0, [0.5] * share[host], [40] * hosts)
    for j in range(hosts):
        out = pending and j != host
        b += async_part(2, 39 if out else 0, [0.25] * share[j], [38] * hosts,
                        [0.5] * share[j] if out else None)
    ck = checkpoint(1, 40, n, 0, "sgd lr 0.1")
    return crc(b + struct.pack("<Q", len(ck)) + ck)


put("async_state", "two_hosts", async_state(2, 1, 5, False))
put("async_state", "three_hosts_pushes_out", async_state(3, 0, 7, True))


# The segment target: flags, the mapped size, then a RunConfig (shm/layout.h) for flag 1.
def run_config(layers, workers=2, hosts=1, rows=10, features=None, eval_every=0, snapshots=0,
               states=0, shape=None, text=None):
    """An MLP of `layers` (the model text --layers gives), or `text` on input `shape`."""
    if text is None:
        parts = []
        for i in range(1, len(layers)):
            parts.append("linear(%d)" % layers[i])
            if i + 1 < len(layers):
                parts.append("tanh")
        text = ",".join(parts)
        shape = (layers[0], 1, 1)
        n = sum(layers[i + 1] * (layers[i] + 1) for i in range(len(layers) - 1))
    else:
        n = layers  # the caller's parameter count
    features = shape[0] * shape[1] * shape[2] if features is None else features
    b = struct.pack("<II", 0, 0)  # mode, loss
    b += struct.pack("<qqq", *shape)
    b += text.encode().ljust(4096, b"\0")
    b += struct.pack("<IIII", workers, hosts, 0, 0)
    b += struct.pack("<Q", n)
    b += struct.pack("<qqqqq", rows, features, 0, 100, 10)  # rows features batch steps log
    b += struct.pack("<Qd", 1, 120.0) + struct.pack("<qq", 0, 1)  # seed timeout spin pid
    b += struct.pack("<iIq", -1, 0, -1) + struct.pack("<II", 0, 0)  # fault; rule
    b += struct.pack("<dddq", 0.04, 0.95, 1e-7, -1) + struct.pack("<qq", 0, 0)
    b += struct.pack("<qq", eval_every, snapshots)
    b += struct.pack("<II", 0, states) + struct.pack("<8d", *([0.0] * 8))
    b += struct.pack("<ddd", 0.1, 0.0, 0.0) + struct.pack("<II", 0, 0)
    b += struct.pack("<qqddq", 0, 0, 0.0, 0.0, 100)
    return b


for name, cfg in [("small", run_config([1, 5, 1])),
                  ("adam_eval", run_config([4, 8, 3], workers=3, eval_every=5, snapshots=2, states=2)),
                  ("hosts", run_config([2, 2], workers=1, hosts=2)),
                  ("no_rows", run_config([3, 1], rows=0)),
                  ("cnn", run_config(32 * 9 + 32 + 32 * 13 * 13 * 10 + 10, shape=(1, 28, 28),
                                     text="conv2d(32,3),relu,maxpool2d(2),flatten,linear(10)"))]:
    put("segment", name, bytes([1 | 2 | 4]) + bytes(8) + cfg)
put("segment", "raw_zero", bytes(9 + 64))


# The command line: one argument per line.
for name, args in [
        ("train_csv", ["train", "--data", "d.csv", "--layers", "4,16,3", "--loss", "xent",
                       "--lr", "0.1", "--epochs", "2", "--workers", "2", "--batch", "32"]),
        ("async", ["train", "--example", "blobs", "--mode", "async", "--rule", "dc-asgd-c",
                   "--layers", "16,8,4", "--lr", "1e-2", "--steps", "100", "--lambda", "0.1"]),
        ("example", ["example", "parabola", "--workers", "3", "--barrier-timeout", "50ms"]),
        ("adam_schedule", ["train", "--data", "x.npz", "--layers", "784,10", "--loss", "xent",
                           "--optimizer", "adam", "--lr", "0.001", "--lr-schedule", "cosine",
                           "--warmup-steps", "10", "--steps", "1000", "--normalize", "standard",
                           "--val-split", "0.1", "--metrics-addr", "[::1]:0"]),
        ("multistep", ["train", "--example", "blobs", "--layers", "16,8,4", "--lr", "0.1",
                       "--batch", "16", "--epochs", "30", "--lr-schedule", "multistep",
                       "--lr-milestones", "30,80", "--lr-gamma", "0.5", "--warmup-steps", "5"]),
        ("cnn", ["train", "--data", "x.npy", "--model",
                 "conv2d(32,5,padding=2),relu,maxpool2d(2),flatten,dropout(p=0.25),linear(10)",
                 "--input-shape", "1,28,28", "--loss", "xent", "--lr", "0.01", "--steps", "5"]),
        ("simulate", ["simulate", "--workers", "1,2,4", "--layers", "1,5,1", "--lr", "0.1",
                      "--steps", "10", "--compare"]),
        ("predict", ["predict", "--model", "m.bin", "--data", "d.csv", "--out", "p.csv",
                     "--delimiter", "tab", "--header", "yes", "--label-col", "name"]),
        ("help", ["help", "train"]),
        ("cleanup", ["cleanup", "--dry-run"]),
        ("bad_list", ["train", "--layers", "1,,2", "--lr=0.1"]),
        # Regression: a refused value of raw bytes in a json run (once printed raw, as text).
        ("regress-json_raw_value", ["train", "--log-format", "json", "--lr", "\udcff\x01abc"])]:
    put("cli", name, ("\n".join(args) + "\n").encode("utf-8", "surrogateescape"))


# JPEG (data/image_jpeg.cc): written here by a small encoder of flat 8 x 8 blocks (each block
# its DC value only, the AC coefficients an end of block): Huffman-coded DC differences,
# baseline and progressive, grey and 4:2:0 colour, restart markers; and refusals (CMYK, 12
# bits). The DC table is the standard one (ITU T.81 Annex K.3), the AC table an EOB alone.
DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]


def huffman_codes(bits, values):
    codes, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            codes[values[k]] = (code, length)
            code, k = code + 1, k + 1
        code <<= 1
    return codes


DC_CODES = huffman_codes(DC_BITS, list(range(12)))


class Bits:
    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value, length):
        for i in range(length - 1, -1, -1):
            self.acc, self.n = (self.acc << 1) | ((value >> i) & 1), self.n + 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc, self.n = 0, 0

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def put_dc(bits, diff):
    cat = abs(diff).bit_length()
    bits.put(*DC_CODES[cat])
    if cat:
        bits.put(diff if diff > 0 else diff + (1 << cat) - 1, cat)


def segment(marker, body):
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg(w, h, comps, progressive=False, restart=0, precision=8):
    """comps: (id, h_samp, v_samp) each; block values come from their position."""
    hmax, vmax = max(c[1] for c in comps), max(c[2] for c in comps)
    mcux, mcuy = -(-w // (8 * hmax)), -(-h // (8 * vmax))
    sof = struct.pack(">BHHB", precision, h, w, len(comps))
    sof += b"".join(struct.pack(">BBB", c[0], (c[1] << 4) | c[2], 0) for c in comps)
    head = b"\xFF\xD8" + segment(0xDB, b"\x00" + bytes([1] * 64)) + segment(0xC2 if progressive else 0xC0, sof)
    head += segment(0xC4, b"\x00" + bytes(DC_BITS) + bytes(range(12)))
    head += segment(0xC4, b"\x10" + bytes([1] + [0] * 15) + b"\x00")
    if restart:
        head += segment(0xDD, struct.pack(">H", restart))
    sos = bytes([len(comps)]) + b"".join(bytes([c[0], 0x00]) for c in comps)
    head += segment(0xDA, sos + (b"\x00\x00\x00" if progressive else b"\x00\x3F\x00"))
    bits, pred, data, rst = Bits(), [0] * len(comps), b"", 0
    for m in range(mcux * mcuy):
        if restart and m and m % restart == 0:
            data += bits.flush() + bytes([0xFF, 0xD0 + rst % 8])
            bits, pred, rst = Bits(), [0] * len(comps), rst + 1
        for ci, (_, hs, vs) in enumerate(comps):
            for b in range(hs * vs):
                value = ((m * 37 + b * 11 + ci * 5) % 64 - 32) * 8
                put_dc(bits, value - pred[ci])
                pred[ci] = value
                if not progressive:
                    bits.put(0, 1)  # end of block
    data += bits.flush()
    if progressive:  # the first component's AC coefficients: an end of block each
        blocks = -(-w // 8) * -(-h // 8)
        ac = Bits()
        for _ in range(blocks):
            ac.put(0, 1)
        data += segment(0xDA, bytes([1, comps[0][0], 0x00, 1, 63, 0])) + ac.flush()
    return head + data + b"\xFF\xD9"


put("jpeg", "grey_8x8.jpg", jpeg(8, 8, [(1, 1, 1)]))
put("jpeg", "grey_33x17.jpg", jpeg(33, 17, [(1, 1, 1)]))
put("jpeg", "ycc420_32x16.jpg", jpeg(32, 16, [(1, 2, 2), (2, 1, 1), (3, 1, 1)]))
put("jpeg", "ycc444_restart.jpg", jpeg(24, 16, [(1, 1, 1), (2, 1, 1), (3, 1, 1)], restart=2))
put("jpeg", "grey_progressive.jpg", jpeg(16, 16, [(1, 1, 1)], progressive=True))
put("jpeg", "ycc420_progressive.jpg", jpeg(16, 16, [(1, 2, 2), (2, 1, 1), (3, 1, 1)], progressive=True))
put("jpeg", "cmyk.jpg", jpeg(8, 8, [(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1)]))
put("jpeg", "twelve_bits.jpg", jpeg(8, 8, [(1, 1, 1)], precision=12))
put("jpeg", "cut.jpg", jpeg(32, 16, [(1, 2, 2), (2, 1, 1), (3, 1, 1)])[:-20])
# A baseline grey header declaring 1000 x 1000 pixels in 155 bytes: its 15,625 blocks need a
# bit each at least, so it is refused from its header before anything is allocated for it.
put("jpeg", "regress-more_blocks_than_bits.jpg", bytes.fromhex(
    "ffd8ffdb00430001010101010101010101010101010101010101010101010101010101010101010101010101"
    "010101010101010101010101010101010101010101010101010101ffc0000b0803e803e801011100ffc4001f"
    "0000010501010101010100000000000000000102030405060708090a0bffc400141001000000000000000000"
    "00000000000000ffda0008010100003f00fcff007fffd9"))


# PNG (data/image_png.cc): every colour type and the bit depths of each, a palette with
# transparency, every row filter, an interlaced file, ancillary chunks (text, compressed text,
# an ICC profile, gamma); and refusals (16 bits, a cut file, a bad CRC).
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(w, h, depth, ctype, raw, interlace=0, extra=b""):
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
            png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))


def png_rows(w, h, channels, depth=8):
    row_bytes = -(-w * channels * depth // 8)
    return b"".join(bytes([y % 5]) + bytes((x * 7 + y * 13) % 256 for x in range(row_bytes))
                    for y in range(h))


put("png", "grey8.png", png(5, 5, 8, 0, png_rows(5, 5, 1)))
put("png", "grey1.png", png(9, 3, 1, 0, png_rows(9, 3, 1, 1)))
put("png", "grey4.png", png(5, 2, 4, 0, png_rows(5, 2, 1, 4)))
put("png", "rgb8.png", png(4, 5, 8, 2, png_rows(4, 5, 3)))
plte = png_chunk(b"PLTE", bytes(range(48))) + png_chunk(b"tRNS", b"\x00\x80")
put("png", "palette2_trns.png", png(7, 3, 2, 3, bytes([0, 0x1B, 0x1B]) * 3, extra=plte))
put("png", "grey_alpha.png", png(3, 3, 8, 4, png_rows(3, 3, 2)))
put("png", "rgba.png", png(3, 2, 8, 6, png_rows(3, 2, 4)))
adam7 = b""
for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
    cols, rows = len(range(x0, 9, dx)), len(range(y0, 9, dy))
    adam7 += b"".join(bytes([1]) + bytes((x + y) % 256 for x in range(cols * 3)) for y in range(rows))
put("png", "rgb_interlaced.png", png(9, 9, 8, 2, adam7, interlace=1))
extra = (png_chunk(b"gAMA", struct.pack(">I", 45455)) + png_chunk(b"tEXt", b"Title\0seed") +
         png_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"a comment " * 20)) +
         png_chunk(b"iCCP", b"icc\0\0" + zlib.compress(bytes(200))))
put("png", "ancillary.png", png(2, 2, 8, 0, png_rows(2, 2, 1), extra=extra))
put("png", "grey16.png", png(2, 2, 16, 0, png_rows(2, 2, 2)))
put("png", "cut.png", png(4, 5, 8, 2, png_rows(4, 5, 3))[:-30])
bad_crc = bytearray(png(4, 5, 8, 2, png_rows(4, 5, 3)))
bad_crc[40] ^= 0x01
put("png", "bad_crc.png", bytes(bad_crc))
# Regression: a text chunk whose length claims 128 MiB, which libpng allocated before reading.
long_text = png(2, 2, 8, 0, png_rows(2, 2, 1), extra=extra)
put("png", "regress-chunk_longer_than_file.png", long_text[:71] + b"\x08" + long_text[72:])
