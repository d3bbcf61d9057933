#!/usr/bin/env python3
"""Wall time of the digits acceptance run from the command line, at P = 1 and P = 2.

  python3 bench/digits_wall.py [--bin build/shmtrain] [--data ../shared/data/digits.csv] [--runs 5]

Runs `shmtrain train` (sync, one hidden layer 64-64-10, --normalize minmax, 20% held out with
seed 7, batch 32, 30 epochs, validation every epoch) RUNS times per worker count, interleaved,
and prints the median wall time of the whole command (process start to exit), the trainer's
own wall_s (first step to last), the validation accuracy, and P=2 / P=1 ratios. A second
table times `shmtrain eval` of the saved model on the same held-out rows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("failed (exit %d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    events = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return wall, events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "shmtrain"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data", "digits.csv"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not os.path.exists(a.data):
        sys.exit("no data file at %s" % a.data)
    tmp = tempfile.mkdtemp(prefix="digits_wall.")
    res = {1: [], 2: []}
    for _ in range(a.runs):
        for p in (1, 2):
            model = os.path.join(tmp, "m%d.bin" % p)
            wall, ev = run([a.bin, "train", "--workers", str(p), "--data", a.data, "--task",
                            "classification", "--layers", "64,64,10", "--init", "xavier",
                            "--normalize", "minmax", "--val-split", "0.2", "--seed", "7",
                            "--lr", "0.2", "--batch", "32", "--epochs", "30", "--log-every",
                            "0", "--no-metrics", "--no-progress", "--log-format", "json",
                            "--save", model])
            s = [e for e in ev if e["event"] == "summary"][0]
            vals = [e for e in ev if e["event"] == "validation"]
            res[p].append((wall, s["wall_s"], s["val_accuracy"], len(vals), s["steps"]))
    evals = []
    for _ in range(a.runs):
        wall, ev = run([a.bin, "eval", "--model", os.path.join(tmp, "m2.bin"), "--data", a.data,
                        "--val-split", "0.2", "--seed", "7", "--log-format", "json"])
        evals.append((wall, [e for e in ev if e["event"] == "eval"][0]["accuracy"]))
    med = {p: (statistics.median(r[0] for r in res[p]), statistics.median(r[1] for r in res[p]))
           for p in res}
    print("digits (1797 rows, 64-64-10, sync, batch 32, 30 epochs = %d steps, %d validations), %d runs each:"
          % (res[1][0][4], res[1][0][3], a.runs))
    for p in (1, 2):
        accs = sorted(set("%.4f" % r[2] for r in res[p]))
        print("  P=%d: command wall median %.3f s (min %.3f, max %.3f); training wall_s median %.4f s; val accuracy %s"
              % (p, med[p][0], min(r[0] for r in res[p]), max(r[0] for r in res[p]), med[p][1],
                 ", ".join(accs)))
    print("  P=2 / P=1: command %.3f, training %.3f" % (med[2][0] / med[1][0], med[2][1] / med[1][1]))
    print("  eval of the P=2 model on the held-out rows: wall median %.3f s, accuracy %.4f"
          % (statistics.median(e[0] for e in evals), evals[0][1]))


if __name__ == "__main__":
    main()
