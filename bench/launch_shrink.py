#!/usr/bin/python3
"""Throughput of a sync job before and after `shmtrain launch` loses a host (docs/hosts.md).

Two "machines" on this one: the slot named localhost is core 0, the slot named 127.0.0.1 is
core 1. Open MPI takes both names for this machine; an mpirun wrapper (SHMTRAIN_MPIRUN, written
here) binds each rank to its slot's core with a rankfile, and a host master's worker inherits
its core. The job: H = 2 host masters x 1 worker, sync, an MLP whose batch splits evenly over
the hosts. Once host 0 has logged KILL_AT steps, host 1 (slot 127.0.0.1) and its worker are
SIGKILLed; the launcher relaunches both host masters on the slot left, one core. The rates are
host 0's logged steps over the time they reached this script, fitted over each job (the
relaunched job from its first logged step); the limit is (H - 1) / H of the rate before, what
the machine left can do at best, and the target asks for 0.9 of it.

  bench/launch_shrink.py BUILD_DIR [RUNS]   (as root or not; Open MPI over loopback)
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

STEPS, KILL_AT, HOSTS = 600, 200, 2

WRAPPER = r'''#!/usr/bin/python3
import os, sys
args, out, hosts, i = sys.argv[1:], [], "", 0
while i < len(args):
    if args[i] == "--bind-to":
        i += 2
        continue
    if args[i] == "--host":
        hosts = args[i + 1]
    out.append(args[i])
    i += 1
cores, lines, r = {"localhost": 0, "127.0.0.1": 1}, [], 0
for entry in hosts.split(","):
    name, _, count = entry.partition(":")
    for _ in range(int(count or 1)):
        lines.append("rank %d=%s slot=%d\n" % (r, name, cores[name]))
        r += 1
path = os.path.join(os.environ["SHRINK_DIR"], "rankfile")
with open(path, "w") as f:
    f.writelines(lines)
os.execvp("mpirun", ["mpirun", "--rankfile", path] + out)
'''


def kill_host(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    for p in [pid] + children:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def rate(points):
    """Steps per second from (time, step) points: the first and last, the first dropped."""
    points = points[1:]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return float("nan")
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def run_once(shmtrain, work, env):
    cmd = [shmtrain, "launch", "--hosts", "localhost,127.0.0.1", "--", "train", "--workers", "1",
           "--example", "blobs", "--rows", "20000", "--features", "256", "--layers", "256,1024,1024,10",
           "--loss", "xent", "--lr", "0.01", "--batch", "512", "--steps", str(STEPS),
           "--log-every", "10", "--no-metrics", "--no-progress", "--log-format", "json",
           "--checkpoint", os.path.join(work, "ck")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    job, pids, steps, killed = 0, {}, {1: [], 2: []}, False
    for line in p.stdout:
        now = time.monotonic()
        try:
            e = json.loads(line)
        except ValueError:
            continue
        event = e.get("event")
        if event == "launch":
            job = e["job"]
        elif event == "host":
            pids[(job, e["host"])] = e["pid"]
        elif event == "step" and job in steps:
            steps[job].append((now, e["step"]))
            if job == 1 and e["step"] >= KILL_AT and not killed and (1, 1) in pids:
                kill_host(pids[(1, 1)])
                killed = True
    p.wait()
    if p.returncode != 0 or not killed:
        sys.exit(f"launch_shrink: the launch ended with {p.returncode}, killed: {killed}")
    return rate(steps[1]), rate(steps[2])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    shmtrain = os.path.join(sys.argv[1], "shmtrain")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,tcp", OMPI_MCA_btl_tcp_if_include="lo",
               OMPI_MCA_oob_tcp_if_include="lo", OMPI_MCA_rmaps_base_oversubscribe="1")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
    print(f"launch_shrink: {model}; sync, H = {HOSTS} host masters x 1 worker, one core a slot; "
          f"host 1 SIGKILLed at step {KILL_AT} of {STEPS}")
    ratios = []
    for r in range(runs):
        work = tempfile.mkdtemp(prefix="shrink-")
        try:
            wrapper = os.path.join(work, "mpirun-bind")
            with open(wrapper, "w") as f:
                f.write(WRAPPER)
            os.chmod(wrapper, 0o755)
            before, after = run_once(shmtrain, work, dict(env, SHMTRAIN_MPIRUN=wrapper, SHRINK_DIR=work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        limit = (HOSTS - 1) / HOSTS
        ratios.append(after / before / limit)
        print(f"run {r + 1}: {before:.1f} steps/s on 2 slots, {after:.1f} after the shrink: "
              f"{after / before:.3f} of before, {after / before / limit:.3f} of the limit "
              f"(H-1)/H = {limit:.2f} (target >= 0.9)")
    print(f"median: {statistics.median(ratios):.3f} of the limit over {runs} runs")


if __name__ == "__main__":
    main()
