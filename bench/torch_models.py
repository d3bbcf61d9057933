"""The PyTorch peers of the benchmarks' models, and the timed loop of their scripts.

Models: cnn-small (docs/models.md, "Models"), the benchmarks' 1M-parameter MLP and ResNet-20
(examples/resnet20.txt, module for module, so that shmtrain's export of it loads strictly),
each defined here only: bench/cnn_torch.py, bench/cnn_ddp.py and bench/torch_resnet20.py
import them. The timed loop of bench/cnn_torch.py and bench/cnn_ddp.py: 3 warm-up steps, then
`steps` timed ones.
"""
import sys
import time

from torch import nn


def cnn_small():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def mlp():
    """784-1024-256-10 with ReLUs on the 1x28x28 images, flattened."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(),
        nn.Linear(256, 10))


class Residual(nn.Module):
    """The README's module: body(x) + shortcut(x); no shortcut layers is the identity."""

    def __init__(self, body, shortcut=()):
        super().__init__()
        self.body, self.shortcut = nn.Sequential(*body), nn.Sequential(*shortcut)

    def forward(self, x):
        return self.body(x) + self.shortcut(x)


def conv_bn(cin, cout, kernel, stride):
    pad = kernel // 2
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, bias=False),
            nn.BatchNorm2d(cout)]


def resnet20():
    """examples/resnet20.txt, module for module (so an export's names load strictly)."""
    layers = conv_bn(3, 16, 3, 1) + [nn.ReLU()]
    cin = 16
    for cout in (16, 32, 64):
        for block in range(3):
            stride = 2 if cout != cin else 1
            body = conv_bn(cin, cout, 3, stride) + [nn.ReLU()] + conv_bn(cout, cout, 3, 1)
            shortcut = conv_bn(cin, cout, 1, stride) if stride == 2 else []
            layers += [Residual(body, shortcut), nn.ReLU()]
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


# The benchmarks' models by name (bench/conv_bench.cc's), with the shape of an input sample.
MODELS = {"cnn-small": (cnn_small, (1, 28, 28)), "mlp": (mlp, (1, 28, 28)),
          "resnet20": (resnet20, (3, 32, 32))}


def model_and_shape(name):
    if name not in MODELS:
        sys.exit(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
    make, shape = MODELS[name]
    return make(), shape


def timed_steps(step, steps, sync=lambda: None):
    """Seconds of `steps` calls of step() after 3 untimed ones; sync() runs before the clock
    starts and before it stops (a barrier, for several processes)."""
    for _ in range(3):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return time.perf_counter() - t0
