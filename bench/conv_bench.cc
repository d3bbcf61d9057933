// One core training cnn-small (the convolutional network of docs/models.md, "Models") in float and,
// where the CPU has avx512_bf16, in bf16 products (--precision bf16), against the core's own
// peaks measured in the same run (the float FMA peak; vdpbf16ps's for bf16: bench/peak.h), and
// against PyTorch when it is installed.
//
// Prints, at batch 64 and 128, one thread, per precision: each layer's forward and backward
// time and GFLOP/s (multiply-adds count 2; pooling, activations and flatten count none), the
// whole training step's samples/s and GFLOP/s, and the ratio of the step's rate to the peak.
// With `/usr/bin/python3 -c "import torch"` working (Debian's python3-torch, for Debian's own
// python3 whatever python3 PATH finds first: never installed by the scripts, not a test
// dependency), bench/cnn_torch.py trains the same net in PyTorch in float (NCHW and
// channels_last) and under bf16 autocast (channels_last), interleaved with ours, and the ratios
// are printed. Medians of several runs, with the spread of the whole steps.
//
// Then sync scaling: the real `shmtrain train` on cnn-small (Fashion-MNIST from Debian's
// dataset-fashion-mnist, batch 64), then on the MLP below (batch 128), at P = 1 and P = 2 in
// each precision, interleaved,
// samples/s of the summary; P2/P1 against this machine's two-core limit measured in the same
// run (two processes running the GEMM at once against one); and, with PyTorch,
// DistributedDataParallel at P = 2 (bench/cnn_ddp.py: gloo, channels_last, half the batch per
// rank) beside its serial run.
//
// Then the same step measurements on the benchmarks' 1M-parameter MLP (784-1024-256-10, relu)
// at batch 128, with PyTorch's (its layout makes no difference there: its rows for NCHW and
// channels_last are two float runs).
//
// Usage: conv_bench [runs=5] [steps per run=20] [steps of a training run=400]
#include <sys/wait.h>
#include <unistd.h>

#include <Eigen/Core>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <array>
#include <vector>

#include "bench/bench_util.h"
#include "bench/peak.h"
#include "nn/cpu.h"
#include "nn/gemm.h"
#include "nn/layer.h"
#include "nn/model.h"

using namespace shmtrain;
using nn::Net;

using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kCnnSmall =
    "conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,5,padding=2),relu,maxpool2d(2),"
    "flatten,linear(128),relu,linear(10)";

// A model the step is measured on: its name (bench/cnn_torch.py's too) and model text, on
// 1x28x28 images.
struct BenchModel {
  const char* name;
  const char* text;
};
constexpr BenchModel kCnn{"cnn-small", kCnnSmall};
constexpr BenchModel kMlp{"mlp", "flatten,linear(1024),relu,linear(256),relu,linear(10)"};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Single-core GEMM rate: the median of `samples` runs of products of the shape of cnn-small's
// largest one (its second convolution's forward at a chunk of 8 samples: 64 x 800 by 800 x
// 1568), and of a 1024^3 product; the larger of the two rates is the limit.
double GemmGflops(int samples, bool print = true) {
  double best = 0;
  for (auto [m, k, n, iters] : {std::array<int, 4>{64, 800, 1568, 40},
                                std::array<int, 4>{1024, 1024, 1024, 4}}) {
    const Eigen::MatrixXf a = Eigen::MatrixXf::Random(m, k), b = Eigen::MatrixXf::Random(k, n);
    Eigen::MatrixXf c(m, n);
    c.noalias() = a * b;
    std::vector<double> rates;
    volatile float sink = 0;
    for (int s = 0; s < samples; ++s) {
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        c.noalias() = a * b;
        sink = sink + c(i % m, 0);
      }
      rates.push_back(2.0 * m * k * n * iters / Seconds(t0, Clock::now()) / 1e9);
    }
    const double r = bench::Median(rates);
    if (print) {
      std::printf("GEMM %dx%d * %dx%d (float, Eigen, 1 thread): %.1f GFLOP/s\n", m, k, k, n, r);
    }
    best = std::max(best, r);
  }
  return best;
}

// FLOPs of one layer's forward for n samples, and of its backward (dx only when wanted).
void LayerFlops(const LayerSpec& l, Shape in, Shape out, int64_t n, bool dx,
                double* fwd, double* bwd) {
  *fwd = *bwd = 0;
  if (l.kind == "conv2d") {
    const double macs = static_cast<double>(out.Size()) * in.c * l.Int(1) * l.Int(1) * n;
    *fwd = 2 * macs;
    *bwd = 2 * macs * (dx ? 2 : 1);
  } else if (l.kind == "linear") {
    const double macs = static_cast<double>(in.Size()) * out.Size() * n;
    *fwd = 2 * macs;
    *bwd = 2 * macs * (dx ? 2 : 1);
  }
}

struct Row {
  std::vector<double> fwd_s, bwd_s;
};

// samples/s of PyTorch's run (bench/cnn_torch.py), or 0 when it does not run; its version.
std::string g_torch_version = "?";
double TorchRate(int batch, const char* layout, int steps, const char* precision = "float",
                 const char* model = "cnn-small") {
  const std::string cmd = std::string(TORCH_PYTHON) + " " + SHMTRAIN_SOURCE_DIR "/bench/cnn_torch.py " +
                          std::to_string(batch) + " " + layout + " " + std::to_string(steps) +
                          " " + precision + " " + model + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return 0;
  double rate = 0;
  char version[64] = "";
  if (std::fscanf(f, "samples/s %lf torch %63s", &rate, version) != 2) rate = 0;
  if (rate > 0) g_torch_version = version;
  pclose(f);
  return rate;
}

bool TorchWorks() {
  return std::system((std::string(TORCH_PYTHON) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

// A precision the step is measured in: its name, what the workers' products take, and the peak
// its ratio is taken against (the float FMA peak, or vdpbf16ps's for bf16).
struct Precision {
  const char* name;
  ComputeType type;
  double peak;
};

// One pass of the whole step and of each layer in `p`, appended to step_s and rows.
void MeasureOnce(Net<float>& net, const Precision& p, std::vector<float>& params,
                 std::vector<float>& grad, const std::vector<float>& x, const std::vector<float>& y,
                 int batch, int steps, std::vector<std::vector<float>>& acts,
                 std::vector<double>* step_s, std::vector<Row>* rows) {
  if (!nn::SetProductInputs(p.type)) std::abort();
  nn::PassInfo pass;
  pass.train = true;
  net.LossAndGrad(params.data(), x.data(), y.data(), batch, pass, grad.data());
  auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    pass.step = s;
    net.LossAndGrad(params.data(), x.data(), y.data(), batch, pass, grad.data());
  }
  step_s->push_back(Seconds(t0, Clock::now()) / steps);
  for (size_t i = 0; i < rows->size(); ++i) {
    auto& layer = const_cast<nn::Layer<float>&>(net.layer(i));
    const float* w = params.data() + net.param_offset(i);
    std::vector<float> dy(acts[i + 1].size(), 0.01f), dx(acts[i].size());
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) layer.Forward(w, acts[i].data(), batch, pass, acts[i + 1].data());
    (*rows)[i].fwd_s.push_back(Seconds(t0, Clock::now()) / steps);
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      layer.Backward(w, acts[i].data(), acts[i + 1].data(), dy.data(), batch, pass,
                     net.NeedsInputGradient(i) ? dx.data() : nullptr,
                     grad.data() + net.param_offset(i));
    }
    (*rows)[i].bwd_s.push_back(Seconds(t0, Clock::now()) / steps);
  }
  nn::SetProductInputs(ComputeType::kFloat);
}

void Run(const BenchModel& model, int batch, int runs, int steps,
         const std::vector<Precision>& precisions, bool torch) {
  ModelSpec spec;
  spec.input = {1, 28, 28};
  spec.loss = Loss::kXent;
  if (!nn::ParseModelText(model.text, &spec.layers).ok()) std::abort();
  std::vector<Shape> shapes;
  if (!nn::ResolveShapes(spec.input, spec.layers, &shapes).ok()) std::abort();
  Net<float> net(spec);
  std::vector<float> params(net.ParamCount()), grad(net.ParamCount());
  nn::InitParams(spec, Init::kTorch, 1, params.data());
  std::vector<float> x(784 * batch), y(batch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 256) / 255;
  for (int i = 0; i < batch; ++i) y[i] = static_cast<float>(i % 10);

  std::vector<std::vector<float>> acts(spec.layers.size() + 1);
  acts[0] = x;
  for (size_t i = 0; i < spec.layers.size(); ++i) acts[i + 1].resize(shapes[i].Size() * batch);
  double step_flops = 0;
  std::vector<double> layer_fwd(spec.layers.size()), layer_bwd(spec.layers.size());
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    LayerFlops(spec.layers[i], in, shapes[i], batch, net.NeedsInputGradient(i), &layer_fwd[i],
               &layer_bwd[i]);
    if (!net.RunsBackward(i)) layer_bwd[i] = 0;
    step_flops += layer_fwd[i] + layer_bwd[i];
    in = shapes[i];
  }
  // Interleaved: each run measures PyTorch (float NCHW, float channels_last, bf16 autocast
  // channels_last) and then ours in each precision.
  std::vector<std::vector<double>> step_s(precisions.size());
  std::vector<std::vector<Row>> rows(precisions.size(), std::vector<Row>(spec.layers.size()));
  std::vector<double> nchw, channels_last, autocast;
  for (int r = 0; r < runs; ++r) {
    if (torch) {
      nchw.push_back(TorchRate(batch, "nchw", steps, "float", model.name));
      channels_last.push_back(TorchRate(batch, "channels_last", steps, "float", model.name));
      autocast.push_back(TorchRate(batch, "channels_last", steps, "bf16", model.name));
    }
    for (size_t k = 0; k < precisions.size(); ++k) {
      MeasureOnce(net, precisions[k], params, grad, x, y, batch, steps, acts, &step_s[k],
                  &rows[k]);
    }
  }
  auto rate = [](double flops, double sec) {
    return flops > 0 ? std::to_string(static_cast<int>(flops / sec / 1e9 * 10) / 10.0).substr(0, 5)
                     : std::string("-");
  };
  for (size_t k = 0; k < precisions.size(); ++k) {
    const Precision& p = precisions[k];
    std::printf("\n%s, batch %d, 1 thread, %s products (%.1f MFLOP a training sample):\n",
                model.name, batch, p.name, step_flops / batch / 1e6);
    std::printf("  %-28s %10s %9s %10s %9s\n", "layer", "fwd ms", "GFLOP/s", "bwd ms",
                "GFLOP/s");
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      const double f = bench::Median(rows[k][i].fwd_s), b = bench::Median(rows[k][i].bwd_s);
      std::printf("  %-28s %10.3f %9s %10.3f %9s\n", nn::ModelText({spec.layers[i]}).c_str(),
                  f * 1e3, rate(layer_fwd[i], f).c_str(), b * 1e3, rate(layer_bwd[i], b).c_str());
    }
    const double sec = bench::Median(step_s[k]);
    const double g = step_flops / sec / 1e9;
    std::printf("  whole step (%s): %.2f ms, %.0f samples/s (runs %.0f..%.0f), %.1f GFLOP/s = "
                "%.2f of the %s peak (%.1f GFLOP/s; median of %d runs of %d steps)\n",
                p.name, sec * 1e3, batch / sec,
                batch / *std::max_element(step_s[k].begin(), step_s[k].end()),
                batch / *std::min_element(step_s[k].begin(), step_s[k].end()), g, g / p.peak,
                p.name, p.peak, runs, steps);
    if (torch) {
      const double a = bench::Median(nchw), b = bench::Median(channels_last),
                   c = bench::Median(autocast);
      std::printf("  PyTorch %s, 1 thread, interleaved: float NCHW %.0f samples/s (ours %.2fx), "
                  "float channels_last %.0f (ours %.2fx), bf16 autocast channels_last %.0f "
                  "(runs %.0f..%.0f; ours %.2fx)\n",
                  g_torch_version.c_str(), a, batch / sec / a, b, batch / sec / b, c,
                  *std::min_element(autocast.begin(), autocast.end()),
                  *std::max_element(autocast.begin(), autocast.end()), batch / sec / c);
    }
  }
  if (!torch) {
    std::printf("  PyTorch: not run (%s -c 'import torch' fails: Debian's python3-torch is not "
                "installed)\n", TORCH_PYTHON);
  }
}

// The machine's two-core limit: the GEMM rate of two processes at once, summed, over one
// process's (1.0: the second core adds nothing; 2.0: it adds a whole core).
double TwoCoreLimit(int samples) {
  const double one = GemmGflops(samples, false);
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    if (k == 0) {
      const double r = GemmGflops(samples, false);
      if (write(fds[1], &r, sizeof r) != sizeof r) _exit(1);
      _exit(0);
    }
  }
  close(fds[1]);
  double sum = 0, r = 0;
  while (read(fds[0], &r, sizeof r) == sizeof r) sum += r;
  close(fds[0]);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  return sum / one;
}

// samples/s of `shmtrain train` on `model` over Fashion-MNIST, P workers.
double TrainRate(const BenchModel& model, int batch, int workers, int steps,
                 const char* precision) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string cmd = std::string(SHMTRAIN_BIN) + " train --data " + dir +
                          "train-images-idx3-ubyte.gz --labels " + dir +
                          "train-labels-idx1-ubyte.gz --normalize minmax --loss xent --model '" +
                          model.text + "' --batch " + std::to_string(batch) +
                          " --lr 0.02 --momentum 0.9 --steps " + std::to_string(steps) +
                          " --workers " + std::to_string(workers) + " --precision " + precision +
                          " --log-format json --log-every 0 --no-progress --no-metrics";
  return bench::ParseSyncSummary(bench::RunEvents(cmd, {"summary"}).at("summary"), false)
      .samples_per_s;
}

// samples/s of PyTorch DDP at P = 2 (bench/cnn_ddp.py), 0 when it does not run.
double DdpRate(const BenchModel& model, int per_rank, int steps) {
  const std::string cmd = std::string(TORCH_PYTHON) + " " + SHMTRAIN_SOURCE_DIR +
                          "/bench/cnn_ddp.py 2 " + std::to_string(per_rank) + " " +
                          std::to_string(steps) + " " + model.name + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return 0;
  double rate = 0;
  if (std::fscanf(f, "samples/s %lf", &rate) != 1) rate = 0;
  pclose(f);
  return rate;
}

// The figures a model's sync scaling is held to (0: none): P2/P1, and P = 2 over DDP's P = 2.
struct ScalingTargets {
  double p2_over_p1, over_ddp;
};

// " (target >= t: met)", or "" without a target.
std::string Verdict(double value, double target) {
  if (target <= 0) return "";
  char text[64];
  std::snprintf(text, sizeof text, " (target >= %.1f: %s)", target,
                value >= target ? "met" : "MISSED");
  return text;
}

// Sync P2/P1 of `model` at `batch` in each precision, against the two-core limit and, with
// PyTorch, against DDP at P = 2 (batch / 2 a rank).
void Scaling(const BenchModel& model, int batch, int runs, int steps,
             const std::vector<Precision>& precisions, bool torch, ScalingTargets target) {
  if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
    std::printf("\nsync scaling: not run (no Fashion-MNIST: Debian's dataset-fashion-mnist)\n");
    return;
  }
  const size_t n = precisions.size();
  std::vector<std::vector<double>> one(n), two(n);
  std::vector<double> limit, ddp, serial;
  for (int r = 0; r < runs; ++r) {
    limit.push_back(TwoCoreLimit(3));
    for (size_t k = 0; k < n; ++k) {
      one[k].push_back(TrainRate(model, batch, 1, steps, precisions[k].name));
      two[k].push_back(TrainRate(model, batch, 2, steps, precisions[k].name));
    }
    if (torch) {
      ddp.push_back(DdpRate(model, batch / 2, steps / 2));
      serial.push_back(TorchRate(batch, "channels_last", steps / 2, "float", model.name));
    }
  }
  const double l = bench::Median(limit);
  std::printf("\nsync scaling, %s, Fashion-MNIST, batch %d (median of %d interleaved runs "
              "of %d steps):\n", model.name, batch, runs, steps);
  std::printf("  two-core limit (two GEMM processes at once / one): %.2f\n", l);
  for (size_t k = 0; k < n; ++k) {
    const double p1 = bench::Median(one[k]), p2 = bench::Median(two[k]);
    std::printf("  shmtrain %s: P=1 %.0f samples/s, P=2 %.0f samples/s: P2/P1 = %.2f%s, %.2f of "
                "the two-core limit\n",
                precisions[k].name, p1, p2, p2 / p1, Verdict(p2 / p1, target.p2_over_p1).c_str(),
                p2 / p1 / l);
  }
  if (torch) {
    const double d = bench::Median(ddp), s1 = bench::Median(serial), p2 = bench::Median(two[0]);
    std::printf("  PyTorch DDP P=2 (gloo, channels_last, %d per rank) %.0f samples/s = %.2fx its "
                "serial run (%.0f); shmtrain float P=2 / DDP P=2 = %.2f%s\n",
                batch / 2, d, d / s1, s1, p2 / d, Verdict(p2 / d, target.over_ddp).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, into a file too
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int train_steps = argc > 3 ? std::atoi(argv[3]) : 400;
  if (runs < 1 || steps < 1 || train_steps < 2) {
    std::fprintf(stderr, "usage: conv_bench [runs>=1] [steps>=1] [training steps>=2]\n");
    return 2;
  }
  const nn::CpuFeatures cpu = nn::UsedCpu();
  std::vector<Precision> precisions = {
      {"float", ComputeType::kFloat, cpu.avx512 ? bench::Fma512Peak() : bench::Fma256Peak()}};
  if (cpu.avx512_bf16) precisions.push_back({"bf16", ComputeType::kBf16, bench::Bf16DotPeak()});
  std::printf("kernels: %s; float FMA peak %.1f GFLOP/s", nn::PathName(nn::UsedPath()),
              precisions[0].peak);
  if (precisions.size() > 1) std::printf(", bf16 dot-product peak %.1f GFLOP/s", precisions[1].peak);
  std::printf(" (one core, this run)\n");
  const bool torch = TorchWorks();
  for (int batch : {64, 128}) Run(kCnn, batch, runs, steps, precisions, torch);
  Run(kMlp, 128, runs, 4 * steps, precisions, torch);
  Scaling(kCnn, 64, runs, train_steps, precisions, torch, {1.8, 0});
  Scaling(kMlp, 128, runs, 4 * train_steps, precisions, torch, {0, 2.8});
  return 0;
}
