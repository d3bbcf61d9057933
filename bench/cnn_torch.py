#!/usr/bin/env python3
"""cnn-small, the 1M-parameter MLP or ResNet-20 in PyTorch for bench/conv_bench.cc: trains it
with SGD on random images (1x28x28; 3x32x32 for ResNet-20) at one batch size, one thread, NCHW
or channels_last, in float or under bf16 autocast (the one line a PyTorch user adds:
torch.autocast("cpu", dtype=torch.bfloat16)), and prints the samples/s of its steps and what
they ran on (bench/torch_models.py, report()):

  samples/s 1234.5 torch 1.13.0a0 blas openblas-pthread conv mkldnn[jit:avx512_core] isa ...

With the reference BLAS, or an AVX2 mode that did not take effect, it prints why on stderr
and exits 3 without a rate.

Usage: cnn_torch.py BATCH nchw|channels_last STEPS [float|bf16] [cnn-small|mlp|resnet20]
"""
import contextlib
import sys

# First: torch_models sets the environment that torch's libraries read as they load.
import torch_models
from torch_models import Refused, model_and_shape, report, timed_steps

import torch  # noqa: E402
from torch import nn  # noqa: E402

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


try:
    seconds = timed_steps(step, steps)
    ran = report(model, step)
except Refused as e:
    sys.exit(f"cnn_torch.py: not reporting: {e}")
except RuntimeError as e:
    sys.exit(f"cnn_torch.py: {precision} {layout} failed: {torch_models.why_failed(e, precision)}")
print(f"samples/s {batch * steps / seconds:.1f} torch {torch.__version__} {ran}")
