"""cnn-small (docs/models.md, "Models") and the benchmarks' 1M-parameter MLP in PyTorch, and the timed loop of bench/cnn_torch.py and
bench/cnn_ddp.py: 3 warm-up steps, then `steps` timed ones."""
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
