#!/usr/bin/python3
"""docs/models.md's way to use an export, with numpy itself (Debian's python3-numpy):

  npz_numpy_forward.py NPZ CSV   np.load(NPZ) without pickle, the state-dict arrays applied to
                                 the first F cells of each CSV row (a first line with a
                                 non-number is a header), printed as tests/npz_forward.py
                                 prints them: the class label TAB each probability, or the value

An MLP's export is nn.Sequential(Linear, act, ..., Linear); any other model's names its layers
("model", the model text) and its input shape, and each layer is written here from PyTorch's
definitions in numpy, NCHW (conv2d with or without a bias, max, average and adaptive average
pooling, flatten, activations; dropout is the identity outside training, and batch norm
normalises with its running statistics, num_batches_tracked an int64 as PyTorch keeps it). A
residual block, residual(BODY) or residual(BODY|SHORTCUT) at module i, is docs/models.md's
Residual module, body(x) + shortcut(x) (the identity without a shortcut), its layers' arrays
found under the prefixes "i.body.j." and "i.shortcut.k.", nested alike. The parameter arrays
must be exactly the state dict's keys (load_state_dict(strict=True)): a conv2d(bias=false) has
"i.weight" alone.
"""
import csv
import sys

import numpy as np

z = np.load(sys.argv[1], allow_pickle=False)
rows = list(csv.reader(open(sys.argv[2])))
try:
    float(rows[0][0])
except ValueError:
    rows = rows[1:]
ACT = {"relu": lambda a: np.maximum(a, 0), "tanh": np.tanh,
       "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "identity": lambda a: a}


def split_top(text, sep):
    """text split at each sep outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text + sep):
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts


def layers_of(text):
    """The model text's layers as (name, positional args, named args); a residual block as
    ("residual", [body layers, shortcut layers if any], {})."""
    out = []
    for part in split_top(text, ","):
        name, _, rest = part.partition("(")
        if name == "residual":
            out.append((name, [layers_of(l) for l in split_top(rest[:-1], "|")], {}))
            continue
        pos, named = [], {}
        for arg in filter(None, rest.rstrip(")").split(",")):
            k, eq, v = arg.partition("=")
            if eq:
                named[k] = {"true": 1.0, "false": 0.0}.get(v, None)
                named[k] = float(v) if named[k] is None else named[k]
            else:
                pos.append(float(k))
        out.append((name, pos, named))
    return out


def conv2d(a, w, b, stride, pad):
    """torch.nn.functional.conv2d on NCHW a with weight (out, in, k, k)."""
    n, c, h, wd = a.shape
    o, _, k, _ = w.shape
    a = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, o, ho, wo)) + b.reshape(1, o, 1, 1)
    for ky in range(k):
        for kx in range(k):
            patch = a[:, :, ky:ky + stride * ho:stride, kx:kx + stride * wo:stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.float64))
    return y


def adaptive_avg_pool2d(a, o):
    """torch.nn.functional.adaptive_avg_pool2d: output row i averages the input rows
    [floor(i*h/o), ceil((i+1)*h/o)), columns alike."""
    n, c, h, w = a.shape
    y = np.zeros((n, c, o, o))
    for i in range(o):
        for j in range(o):
            y0, y1 = i * h // o, -(-(i + 1) * h // o)
            x0, x1 = j * w // o, -(-(j + 1) * w // o)
            y[:, :, i, j] = a[:, :, y0:y1, x0:x1].mean(axis=(2, 3))
    return y


def pool(a, k, stride, reduce):
    n, c, h, w = a.shape
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    windows = [a[:, :, ky:ky + stride * ho:stride, kx:kx + stride * wo:stride]
               for ky in range(k) for kx in range(k)]
    return reduce(np.stack(windows), axis=0)


def forward(layers, a, prefix, keys):
    """nn.Sequential of `layers` on a, its module i's arrays named prefix + "i." + name; the
    names it reads are added to keys."""
    for i, (name, pos, named) in enumerate(layers):
        p = f"{prefix}{i}."
        if name == "residual":
            body = forward(pos[0], a, p + "body.", keys)
            a = body + (forward(pos[1], a, p + "shortcut.", keys) if len(pos) > 1 else a)
        elif name == "linear":
            keys |= {p + "weight", p + "bias"}
            a = a @ z[p + "weight"].T.astype(np.float64) + z[p + "bias"]
        elif name == "conv2d":
            w = z[p + "weight"]
            keys.add(p + "weight")
            bias = named.get("bias", 1.0) != 0
            if bias:
                keys.add(p + "bias")
            a = conv2d(a, w, z[p + "bias"] if bias else np.zeros(w.shape[0]),
                       int(named.get("stride", 1)), int(named.get("padding", 0)))
        elif name in ("batchnorm2d", "batchnorm1d"):
            blocks = ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
            keys |= {p + b for b in blocks}
            if z[p + "num_batches_tracked"].dtype != np.int64:
                sys.exit(f"npz_numpy_forward: {p}num_batches_tracked is not int64")
            shape = (1, -1) + (1,) * (a.ndim - 2)  # the channels (features) are axis 1
            w, b, mean, var = (z[p + k].astype(np.float64).reshape(shape) for k in blocks[:4])
            a = (a - mean) / np.sqrt(var + named.get("eps", 1e-5)) * w + b
        elif name == "adaptiveavgpool2d":
            a = adaptive_avg_pool2d(a, int(pos[0] if pos else named["output_size"]))
        elif name in ("maxpool2d", "avgpool2d"):
            k = int(pos[0])
            stride = int(named.get("stride", 0)) or k
            a = pool(a, k, stride, np.max if name == "maxpool2d" else np.mean)
        elif name == "flatten":
            a = a.reshape(len(a), -1)
        elif name == "dropout":
            pass  # identity outside training
        else:
            a = ACT[name](a)
    return a


if "model" in z.files:
    # Any model: nn.Sequential of the model text's layers, module i for layer i.
    shape = [int(v) for v in z["input_shape"]]
    f = shape[0] * shape[1] * shape[2]
    x = np.array([[float(c) for c in r[:f]] for r in rows], dtype=np.float64)
    a = ((x - z["input.offset"]) * z["input.scale"]).reshape(len(rows), *shape)
    keys = set()
    a = forward(layers_of(str(z["model"])), a, "", keys)
    params = {k for k in z.files if k[:1].isdigit()}
    if params != keys:
        sys.exit(f"npz_numpy_forward: parameter arrays {sorted(params)}, but load_state_dict "
                 f"of the model's nn.Sequential wants {sorted(keys)}")
else:
    layers = [int(n) for n in z["layers"]]
    act = ACT[str(z["activation"])]
    x = np.array([[float(c) for c in r[: layers[0]]] for r in rows], dtype=np.float64)
    a = (x - z["input.offset"]) * z["input.scale"]
    for l in range(len(layers) - 1):
        w, b = z[f"{2 * l}.weight"], z[f"{2 * l}.bias"]
        assert w.shape == (layers[l + 1], layers[l]) and b.shape == (layers[l + 1],), (l, w.shape)
        a = a @ w.T.astype(np.float64) + b
        if l + 2 < len(layers):
            a = act(a)
if str(z["loss"]) == "xent":
    p = np.exp(a - a.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    classes = z["classes"]
    for row in p:
        label = classes[int(np.argmax(row))]
        text = ("%.17g" % label) if classes.dtype.kind == "f" else str(label)
        print(text + "\t" + "\t".join("%.9g" % v for v in row))
else:
    for v in a[:, 0]:
        print("%.9g" % v)
