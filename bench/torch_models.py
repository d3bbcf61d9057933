"""The PyTorch peers of the benchmarks' models, and what their scripts share.

Models: cnn-small (docs/models.md, "Models"), the benchmarks' 1M-parameter MLP and ResNet-20
(examples/resnet20.txt, module for module, so that shmtrain's export of it loads strictly).

For bench/cnn_torch.py and bench/cnn_ddp.py: the timed loop (3 warm-up steps, then `steps`
timed ones), the CPU environment of their runs, and the report of what PyTorch ran on.

Environment. Import this module before torch and numpy: OpenBLAS, oneDNN and ATen read their
variables when they load or first run. It removes OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, so
that OpenBLAS picks its kernels for this CPU as it does for a user, unless BENCH_TORCH_ISA=avx2
asks for AVX2 (bench/conv_bench.cc sets it when it runs its own kernels on AVX2 on an AVX-512
CPU): then ATen, oneDNN and OpenBLAS are held to AVX2 (AVX2_ENVIRONMENT), and report() checks
that each took effect. It sets OPENBLAS_NUM_THREADS=1: the scripts run one thread (a rank), and
torch.set_num_threads does not reach the threads of OpenBLAS's pthread build, which starts one
per core (Debian's torch is built with BLAS_INFO=generic: it does not know its BLAS).

Report. report() runs one step (after the warm-up) with oneDNN's verbose output captured, and
returns what ran: "blas openblas-pthread conv mkldnn[jit:avx512_core] isa
aten:AVX2,onednn:avx512_core_bf16,openblas:Cooperlake". The BLAS is the library mapped into the
process (/proc/self/maps); with the reference BLAS (Debian's libblas3 alone) it raises Refused:
its products run many times slower than an optimised BLAS, and a comparison with it says
nothing about PyTorch.
"""
import ctypes
import os
import sys
import tempfile
import time

AVX2_ENVIRONMENT = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "DNNL_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"}
ISA = os.environ.get("BENCH_TORCH_ISA", "native")


def _set_cpu_environment():
    if "torch" in sys.modules or "numpy" in sys.modules:
        sys.exit("torch_models: import it before torch and numpy (their libraries read the "
                 "environment it sets when they load)")
    if ISA not in ("native", "avx2"):
        sys.exit(f"torch_models: BENCH_TORCH_ISA={ISA}: expected native or avx2")
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(name, None)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if ISA == "avx2":
        os.environ.update(AVX2_ENVIRONMENT)


_set_cpu_environment()

import torch  # noqa: E402  (after the environment, which torch's libraries read)
from torch import nn  # noqa: E402

REFERENCE_BLAS_HELP = ("install Debian's libopenblas0-pthread (apt-get install "
                       "libopenblas0-pthread), which PyTorch then loads through libblas.so.3")


class Refused(Exception):
    """PyTorch ran on something that makes its figures meaningless (the reference BLAS), or
    the AVX2 environment did not take effect."""


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


def why_failed(error, precision):
    """The first line of a step's RuntimeError, and what it means where that is known: oneDNN
    2.6 has no bf16 convolution below AVX-512 ("could not create a primitive descriptor
    iterator" when autocast runs with oneDNN held to AVX2)."""
    text = str(error).splitlines()[0]
    if precision == "bf16" and ISA == "avx2":
        text += " (oneDNN held to AVX2 has no bf16 kernel for it)"
    return text


def _mapped_files():
    with open("/proc/self/maps") as maps:
        return {f[5] for f in (line.split() for line in maps) if len(f) >= 6}


def blas_library(files):
    """The BLAS in this process: "reference" (Debian's libblas3:
    /usr/lib/x86_64-linux-gnu/blas/libblas.so.3), the folder of the libblas.so.3 that
    libblas.so.3 resolved to ("openblas-pthread", "openblas-openmp", "blis-pthread"), or
    "openblas" for a libopenblas linked directly; with its path."""
    blas = sorted(p for p in files if os.path.basename(p).startswith("libblas.so"))
    for path in blas:  # mapped beside another (LD_PRELOAD), the reference one is the one used
        if os.path.basename(os.path.dirname(path)) == "blas":
            return "reference", path
    if blas:
        return os.path.basename(os.path.dirname(blas[0])), blas[0]
    openblas = sorted(p for p in files if os.path.basename(p).startswith("libopenblas"))
    if openblas:
        return "openblas", openblas[0]
    return "none", ""


def _openblas_core(files):
    """OpenBLAS's kernels ("Haswell", "Cooperlake") and its threads; ("none", 0) without it."""
    for path in sorted(files):
        if os.path.basename(path).startswith("libopenblas"):
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()
    return "none", 0


def _onednn_isa(files):
    """oneDNN's effective ISA (its ceiling: the CPU's, lowered by ONEDNN_MAX_CPU_ISA)."""
    for path in sorted(files):
        if os.path.basename(path).startswith("libdnnl.so"):
            lib = ctypes.CDLL(path)
            lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
            lib.dnnl_cpu_isa2str.restype = ctypes.c_char_p
            name = lib.dnnl_cpu_isa2str(lib.dnnl_get_effective_cpu_isa()).decode()
            return name.replace("cpu_isa_", "")
    return "none"


def _aten_capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip().replace(" ", "_")
    return "unknown"


def _onednn_verbose(step):
    """The lines oneDNN's verbose mode prints during one step(): it prints them on fd 1,
    which is the report's pipe, so they go to a file instead."""
    if not torch.backends.mkldnn.is_available():
        step()
        return []
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as out:
        os.dup2(out.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                step()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        return [line.split(",") for line in out.read().splitlines()
                if line.startswith("onednn_verbose,exec,")]


def _conv_backend(model, lines):
    """What ran the convolutions of one step: mkldnn[its implementations] (oneDNN), native
    (ATen's own kernels: mkldnn disabled or not taken), none (no convolution)."""
    if not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        return "none"
    impls = sorted({f[4] for f in lines if len(f) > 4 and f[3] == "convolution"})
    if impls and torch.backends.mkldnn.enabled:
        return "mkldnn[" + "+".join(impls) + "]"
    return "native"


def report(model, step):
    """What one more step() ran on, as one line's tokens; raises Refused on the reference
    BLAS, and in AVX2 mode when any of the libraries was not held to AVX2."""
    lines = _onednn_verbose(step)
    files = _mapped_files()
    blas, path = blas_library(files)
    if blas == "reference":
        raise Refused(f"PyTorch's BLAS is the reference one ({path}), many times slower than "
                      f"an optimised BLAS, so its figures would not be PyTorch's: "
                      f"{REFERENCE_BLAS_HELP}")
    conv = _conv_backend(model, lines)
    aten, onednn = _aten_capability(), _onednn_isa(files)
    core, blas_threads = _openblas_core(files)
    if ISA == "avx2":
        wrong = []
        if aten != "AVX2":
            wrong.append(f"ATEN_CPU_CAPABILITY=avx2 (ATen runs {aten})")
        if onednn != "avx2" or "avx512" in conv:
            wrong.append(f"ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's ISA {onednn}, convolutions {conv})")
        if core not in ("Haswell", "none"):
            wrong.append(f"OPENBLAS_CORETYPE=Haswell (OpenBLAS runs {core})")
        if wrong:
            raise Refused("AVX2 mode did not take effect: " + "; ".join(wrong))
    return (f"blas {blas} conv {conv} isa aten:{aten},onednn:{onednn},openblas:{core} "
            f"threads aten:{torch.get_num_threads()},openblas:{blas_threads}")
