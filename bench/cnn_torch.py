#!/usr/bin/env python3
"""cnn-small, the 1M-parameter MLP or ResNet-20 in PyTorch for bench/conv_bench.cc: trains it
with SGD on random images (1x28x28; 3x32x32 for ResNet-20) at one batch size, one thread, NCHW
or channels_last, in float or under bf16 autocast (the one line a PyTorch user adds:
torch.autocast("cpu", dtype=torch.bfloat16)), and prints the samples/s of its steps.

Usage: cnn_torch.py BATCH nchw|channels_last STEPS [float|bf16] [cnn-small|mlp|resnet20]
"""
import contextlib
import sys

import torch
from torch import nn

from torch_models import model_and_shape, timed_steps

torch.set_num_threads(1)
batch, layout, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
precision = sys.argv[4] if len(sys.argv) > 4 else "float"
torch.manual_seed(1)
model, shape = model_and_shape(sys.argv[5] if len(sys.argv) > 5 else "cnn-small")
x = torch.rand(batch, *shape)
y = torch.randint(0, 10, (batch,))
if layout == "channels_last":
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss(reduction="sum")


def autocast():
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step():
    opt.zero_grad()
    with autocast():
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


print(f"samples/s {batch * steps / timed_steps(step, steps):.1f} torch {torch.__version__}")
