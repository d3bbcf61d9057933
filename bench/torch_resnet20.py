#!/usr/bin/env python3
"""ResNet-20 (examples/resnet20.txt; the module is bench/torch_models.py's) on CIFAR-10 image
folders in PyTorch, the peer of `shmtrain train --model "$(cat examples/resnet20.txt)"` in
docs/benchmarks.md.

Train: PROCS DistributedDataParallel processes (gloo over loopback, one thread each,
channels_last), each taking its half of every global batch; the data set is read once from
DIR/train and DIR/test (a folder per class, sorted, as shmtrain reads them), scaled per channel
with the training images' mean and population stddev (--normalize channel), augmented with a
random crop of zero padding 4 and a horizontal flip, SGD with momentum, weight decay and a
cosine or multistep rate stepped every update (as shmtrain's schedules), optionally under bf16
autocast. Each rank normalises with its own share of the batch (PyTorch's BatchNorm2d: DDP
has no CPU SyncBatchNorm). Prints one JSON line: test accuracy, training seconds (test passes
left out) and samples/s.

Check: --check-model M.npz loads shmtrain's `export` of ResNet-20 strictly and prints the test
accuracy with the running statistics (eval mode, what shmtrain's eval uses) and with each test
batch's own statistics (train mode), to show that the running statistics track the batches'.

Usage:
  torch_resnet20.py --data DIR [--procs 2] [--bf16] [--epochs 10] [--schedule cosine]
  torch_resnet20.py --data DIR --check-model resnet20.npz
"""
import argparse
import json
import math
import os
import socket
import sys
import time

# First: torch_models sets the environment that torch's libraries read as they load.
from torch_models import resnet20

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def read_folder(root):
    """Images (N, 3, 32, 32) uint8 and labels of a folder per class, both in sorted order."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    xs, ys = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        for f in sorted(os.listdir(folder)):
            with Image.open(os.path.join(folder, f)) as im:
                xs.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
            ys.append(label)
    x = torch.from_numpy(np.stack(xs).transpose(0, 3, 1, 2).copy())
    return x, torch.tensor(ys, dtype=torch.int64)


def normalised(x, mean, std):
    return ((x.double() - mean) / std).float()


def load(data):
    xtr, ytr = read_folder(os.path.join(data, "train"))
    xte, yte = read_folder(os.path.join(data, "test"))
    mean = xtr.double().mean(dim=(0, 2, 3), keepdim=True)
    std = xtr.double().std(dim=(0, 2, 3), keepdim=True, unbiased=False)
    return normalised(xtr, mean, std), ytr, normalised(xte, mean, std), yte


def augment(x, gen):
    """RandomCrop(32, padding=4) with zeros (the scaled mean) and RandomHorizontalFlip."""
    n, _, h, w = x.shape
    padded = nn.functional.pad(x, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (n,), generator=gen)
    dx = torch.randint(0, 9, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop.flip(2) if flip[i] else crop
    return out


def rate(args, update, total):
    if args.schedule == "cosine":
        return args.lr * (1 + math.cos(math.pi * update / total)) / 2
    return args.lr * 0.1 ** sum(update >= m for m in args.milestones)


def accuracy(model, x, y, batch=1000, bf16=False):
    correct = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(y), batch):
            xb = x[i:i + batch].contiguous(memory_format=torch.channels_last)
            correct += (model(xb).argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(y)


def train(rank, args, port, data, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    xtr, ytr, xte, yte = data
    torch.manual_seed(args.seed)
    model = resnet20().to(memory_format=torch.channels_last)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    share = args.batch // args.procs
    per_epoch = len(ytr) // args.batch
    total = per_epoch * args.epochs
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    order = torch.Generator().manual_seed(args.seed)
    dist.barrier()
    t0 = time.perf_counter()
    update = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(len(ytr), generator=order)
        ddp.train()
        for b in range(per_epoch):
            rows = perm[b * args.batch + rank * share:b * args.batch + (rank + 1) * share]
            xb = augment(xtr[rows], gen).contiguous(memory_format=torch.channels_last)
            for g in opt.param_groups:
                g["lr"] = rate(args, update, total)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = loss_fn(ddp(xb), ytr[rows])
            loss.backward()
            opt.step()
            update += 1
        if rank == 0 and args.eval_every and (epoch + 1) % args.eval_every == 0:
            model.eval()
            print(json.dumps({"epoch": epoch + 1, "s": round(time.perf_counter() - t0, 1),
                              "loss": round(loss.item(), 4),
                              "test_accuracy": accuracy(model, xte, yte, bf16=args.bf16)}),
                  file=sys.stderr, flush=True)
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        model.eval()
        queue.put({"epochs": args.epochs, "train_s": round(seconds, 1),
                   "samples_per_s": round(total * args.batch / seconds, 1),
                   "test_accuracy": accuracy(model, xte, yte, bf16=args.bf16),
                   "last_loss": round(loss.item(), 4), "procs": args.procs, "bf16": args.bf16,
                   "torch": torch.__version__})
    dist.destroy_process_group()


def check_model(args):
    """The export's own input scaling (input.offset, input.scale) on the raw test images."""
    z = np.load(args.check_model)
    raw, yte = read_folder(os.path.join(args.data, "test"))
    offset = torch.from_numpy(z["input.offset"]).double().reshape(1, 3, 32, 32)
    scale = torch.from_numpy(z["input.scale"]).double().reshape(1, 3, 32, 32)
    xte = ((raw.double() - offset) * scale).float()
    model = resnet20()
    model.load_state_dict({k: torch.from_numpy(z[k]) for k in z.files if k[0].isdigit()})
    model.eval()
    running = accuracy(model, xte, yte)
    model.train()  # each test batch normalised by its own statistics: batches of mixed classes
    perm = torch.randperm(len(yte), generator=torch.Generator().manual_seed(args.seed))
    batch_stats = {b: accuracy(model, xte[perm], yte[perm], batch=b) for b in (128, 1000)}
    print(json.dumps({"running_stats": running, "batch_stats_128": batch_stats[128],
                      "batch_stats_1000": batch_stats[1000]}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="folder with train/ and test/")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=0,
                   help="rank 0 prints the test accuracy to stderr every E epochs")
    p.add_argument("--batch", type=int, default=128, help="global batch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--schedule", choices=("cosine", "multistep"), default="cosine")
    p.add_argument("--milestones", type=lambda s: [int(v) for v in s.split(",")],
                   default=[], help="multistep: updates at which the rate drops tenfold")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check-model", help="an export (.npz) of ResNet-20 to evaluate")
    args = p.parse_args()
    if args.check_model:
        check_model(args)
        return
    data = load(args.data)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=train, args=(r, args, port, data, queue))
             for r in range(args.procs)]
    for proc in procs:
        proc.start()
    result = queue.get()
    for proc in procs:
        proc.join()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
