#!/usr/bin/env python3
"""cnn-small, the benchmarks' MLP or ResNet-20 in PyTorch DistributedDataParallel for
bench/conv_bench.cc: WORLD processes on this host (gloo over loopback), one thread each,
channels_last, PER_RANK random images per rank and step (1x28x28; 3x32x32 for ResNet-20), SGD
with momentum; prints the global samples/s of the timed steps.

Usage: cnn_ddp.py WORLD PER_RANK STEPS [cnn-small|mlp|resnet20]
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torch_models import model_and_shape, timed_steps


def worker(rank, world, per_rank, steps, model_name, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model, shape = model_and_shape(model_name)
    model = model.to(memory_format=torch.channels_last)
    ddp = DistributedDataParallel(model)
    torch.manual_seed(2 + rank)
    x = torch.rand(per_rank, *shape).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (per_rank,))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()

    seconds = timed_steps(step, steps, sync=dist.barrier)
    if rank == 0:
        queue.put(world * per_rank * steps / seconds)
    dist.destroy_process_group()


def main():
    world, per_rank, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model_name = sys.argv[4] if len(sys.argv) > 4 else "cnn-small"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(world, per_rank, steps, model_name, port, queue), nprocs=world, join=True)
    print("samples/s %.1f torch %s" % (queue.get(), torch.__version__))


if __name__ == "__main__":
    main()
