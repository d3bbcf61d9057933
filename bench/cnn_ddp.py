#!/usr/bin/env python3
"""cnn-small, the benchmarks' MLP or ResNet-20 in PyTorch DistributedDataParallel for
bench/conv_bench.cc: WORLD processes on this host (gloo over loopback), one thread each,
channels_last, PER_RANK random images per rank and step (1x28x28; 3x32x32 for ResNet-20), SGD
with momentum, in float or under bf16 autocast; prints the global samples/s of the timed steps
and what rank 0 ran on, as bench/cnn_torch.py does (bench/torch_models.py, report()), or why
not on stderr, exiting 1.

Usage: cnn_ddp.py WORLD PER_RANK STEPS [cnn-small|mlp|resnet20] [float|bf16]
"""
import os
import socket
import sys

# First: torch_models sets the environment that torch's libraries read as they load.
import torch_models
from torch_models import Refused, model_and_shape, report, timed_steps

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def worker(rank, world, per_rank, steps, model_name, precision, port, queue):
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()

    try:  # every rank runs the report's step: it is a DDP step, which needs them all
        seconds = timed_steps(step, steps, sync=dist.barrier)
        result = (world * per_rank * steps / seconds, report(model, step))
    except Refused as e:
        result = (0, f"not reporting: {e}")
    except RuntimeError as e:
        result = (0, f"{precision} failed: {torch_models.why_failed(e, precision)}")
    if rank == 0:
        queue.put(result)
    dist.destroy_process_group()


def main():
    world, per_rank, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model_name = sys.argv[4] if len(sys.argv) > 4 else "cnn-small"
    precision = sys.argv[5] if len(sys.argv) > 5 else "float"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(world, per_rank, steps, model_name, precision, port, queue),
             nprocs=world, join=True)
    rate, ran = queue.get()
    if rate == 0:
        sys.exit(f"cnn_ddp.py: {ran}")
    print(f"samples/s {rate:.1f} torch {torch.__version__} {ran}")


if __name__ == "__main__":
    main()
