#!/usr/bin/env python3
"""cnn-small in PyTorch for bench/conv_bench.cc: trains it with SGD on random images at one
batch size, one thread, NCHW or channels_last, and prints the samples/s of its steps.

Usage: cnn_torch.py BATCH nchw|channels_last STEPS
"""
import sys
import time

import torch
from torch import nn

torch.set_num_threads(1)
batch, layout, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.manual_seed(1)
model = nn.Sequential(
    nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
x = torch.rand(batch, 1, 28, 28)
y = torch.randint(0, 10, (batch,))
if layout == "channels_last":
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss(reduction="sum")


def step():
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()


for _ in range(3):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
print(f"samples/s {batch * steps / (time.perf_counter() - t0):.1f} torch {torch.__version__}")
