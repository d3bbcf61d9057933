#!/usr/bin/python3
"""The README's way to use an export, with numpy itself (Debian's python3-numpy):

  npz_numpy_forward.py NPZ CSV   np.load(NPZ) without pickle, the state-dict arrays applied to
                                 the first F cells of each CSV row (a first line with a
                                 non-number is a header), printed as tests/npz_forward.py
                                 prints them: the class label TAB each probability, or the value
"""
import csv
import sys

import numpy as np

z = np.load(sys.argv[1], allow_pickle=False)
layers = [int(n) for n in z["layers"]]
act = {"relu": lambda a: np.maximum(a, 0), "tanh": np.tanh,
       "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "identity": lambda a: a}[str(z["activation"])]
rows = list(csv.reader(open(sys.argv[2])))
try:
    float(rows[0][0])
except ValueError:
    rows = rows[1:]
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
