#!/usr/bin/env python3
"""The path of calls of `shmtrain train`'s start, from RunTrain to the first worker's start
(Supervisor::Start), as docs/design.md ("The start, in one pass") lists it.

Runs the trainer under gdb with a breakpoint on every function of the project (namespace
shmtrain), records each call made while RunTrain is on the stack with its depth below it, and
prints the calls DEPTH deep (default 2) grouped into stays (consecutive calls into one file),
then the files entered more than once. A build without inlining gives every call a frame:

  cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Debug && ninja -C build-trace shmtrain
  python3 scripts/start-path.py build-trace/shmtrain [DEPTH...] -- train --data ... --lr 0.1

Takes a few minutes (every call of the start stops once). Exit 1 when a file is entered twice.
"""
import json
import os
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def in_gdb(out_path):
    import gdb  # noqa: only inside gdb

    calls = []

    def rel(symtab):
        if symtab is None:
            return None
        path = os.path.normpath(symtab.fullname())
        return path[len(SOURCE) + 1:] if path.startswith(SOURCE + "/") else None

    class Call(gdb.Breakpoint):
        def stop(self):
            frames = []
            f = gdb.newest_frame()
            while f is not None:
                frames.append(f)
                f = f.older()
            # The RunTrain given the run's kind, which the one without it calls once it has
            # picked the kind: the inner of two.
            trains = [i for i, fr in enumerate(frames) if (fr.name() or "").endswith("RunTrain")]
            top = rel(frames[0].find_sal().symtab)
            if len(trains) < 2 or trains[0] == 0 or top is None:
                return False
            depth = sum(1 for fr in frames[:trains[0]] if rel(fr.find_sal().symtab) is not None)
            calls.append((depth, top, frames[0].name() or "?"))
            if "Supervisor::Start" in (frames[0].name() or ""):
                with open(out_path, "w") as fh:
                    json.dump(calls, fh)
                gdb.execute("kill")
            return False

    gdb.execute("set pagination off")
    gdb.execute("set breakpoint pending on")
    exe = gdb.current_progspace().filename
    nm = subprocess.run(["nm", "-C", "--defined-only", exe], capture_output=True, text=True)
    for line in nm.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tT" and parts[2].startswith("shmtrain::") \
                and "[clone" not in parts[2]:
            try:
                Call("'" + parts[2] + "'", internal=True)
            except gdb.error:
                pass
    gdb.execute("run")


def short(name):
    base = name.replace("(anonymous namespace)::", "").split("(")[0]
    return base.replace("shmtrain::", "").replace("master::", "")


def report(calls, depth):
    stays = []
    for d, f, n in calls:
        if d > depth:
            continue
        if stays and stays[-1][0] == f:
            if short(n) not in stays[-1][1]:
                stays[-1][1].append(short(n))
        else:
            stays.append([f, [short(n)]])
    files = [f for f, _ in stays]
    twice = sorted({f for f in files if files.count(f) > 1})
    print(f"{sum(1 for c in calls if c[0] <= depth)} calls {depth} deep in {len(stays)} stays, "
          f"{len(set(files))} files ({len(calls)} calls in all)")
    for f, names in stays:
        print(f"  {f}: {', '.join(names)}")
    print("files entered more than once: " + (", ".join(twice) if twice else "none"))
    return 1 if twice else 0


def main():
    if "START_PATH_OUT" in os.environ:  # inside gdb
        in_gdb(os.environ["START_PATH_OUT"])
        return 0
    if "--" not in sys.argv or len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    split = sys.argv.index("--")
    exe, rest = sys.argv[1], sys.argv[split + 1:]
    depths = [int(d) for d in sys.argv[2:split]] or [2]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "calls.json")
        env = dict(os.environ, START_PATH_OUT=out)
        subprocess.run(["gdb", "-q", "-batch", "-x", os.path.abspath(__file__), "--args", exe] +
                       rest, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not os.path.exists(out):
            print("start-path: the run did not reach Supervisor::Start", file=sys.stderr)
            return 2
        with open(out) as fh:
            calls = json.load(fh)
    return max(report(calls, depth) for depth in depths)


if __name__ == "__main__":
    sys.exit(main())
