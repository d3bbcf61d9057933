#!/usr/bin/python3
"""PyTorch's side of tests/init_from_test.cc (InitFromTorch): a network built in PyTorch, its
state_dict saved as `shmtrain train --init-from` reads it, and its loss on the data.

  init_from_torch.py CASE DATA.csv OUT.npz

CASE is "mlp" or "cnn" (the networks below; tests/init_from_test.cc gives shmtrain the same
as --layers or --model). DATA.csv: rows of 36 values (a 1x6x6 image in (c, h, w) order) and a
class 0, 1 or 2 last, no header. Writes OUT.npz with numpy.savez from the state_dict, as
docs/models.md ("Starting from weights: --init-from") says to, then prints the mean softmax
cross-entropy of the network in training mode (batch norm by the batch's statistics) over all
the rows, one full batch, in float64: the loss of shmtrain's first step, which it computes
before it updates anything. Exits 3 when torch cannot be imported (the test skips then).
"""
import sys

try:
    import torch
    from torch import nn
except ImportError as e:  # python3-torch is not installed
    print("cannot import torch: %s" % e, file=sys.stderr)
    sys.exit(3)
import numpy


class Residual(nn.Module):
    """docs/models.md's residual block: body(x) + shortcut(x), an empty shortcut the identity."""

    def __init__(self, body, shortcut=()):
        super().__init__()
        self.body, self.shortcut = nn.Sequential(*body), nn.Sequential(*shortcut)

    def forward(self, x):
        return self.body(x) + self.shortcut(x)


def network(case):
    if case == "mlp":  # --layers 36,16,3 --activation tanh
        return nn.Sequential(nn.Linear(36, 16), nn.Tanh(), nn.Linear(16, 3))
    # --model conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,
    #   residual(conv2d(4,3,padding=1),relu,conv2d(4,3,padding=1,bias=false),batchnorm2d),
    #   relu,maxpool2d(2),flatten,linear(3)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        Residual([nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                  nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)]),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3))


def main():
    case, data, out = sys.argv[1:4]
    torch.manual_seed(7)
    model = network(case)
    with torch.no_grad():  # batch norm's parameters and buffers away from their defaults
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(17)
    sd = model.state_dict()
    numpy.savez(out, **{k: v.numpy() for k, v in sd.items()})

    rows = numpy.loadtxt(data, delimiter=",", dtype=numpy.float64)
    x = torch.from_numpy(rows[:, :36].astype(numpy.float32).astype(numpy.float64))
    y = torch.from_numpy(rows[:, 36].astype(numpy.int64))
    if case != "mlp":
        x = x.reshape(-1, 1, 6, 6)
    model = model.double().train()
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model(x), y)
    print("%.17g" % loss.item())


if __name__ == "__main__":
    main()
