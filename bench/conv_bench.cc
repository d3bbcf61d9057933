// One core training cnn-small (the convolutional network of docs/models.md, "Models"), the
// benchmarks' 1M-parameter MLP and ResNet-20 (examples/resnet20.txt, on 3x32x32 images) in
// float and, where the CPU has avx512_bf16, in bf16 products (--precision bf16), against the
// core's own peaks measured in the same run (the float FMA peak; vdpbf16ps's for bf16:
// bench/peak.h, each the median of 7 runs, printed with their spread), and against PyTorch when
// it is installed.
//
// Prints, per model and batch (cnn-small at 64 and 128, the MLP and ResNet-20 at 128), one
// thread, per precision: each top-level layer's forward and backward time and GFLOP/s
// (multiply-adds count 2; pooling, activations, batch norm and flatten count none; a residual
// block counts its layers'), the whole training step's samples/s and GFLOP/s, and the ratio of
// the step's rate to the peak. With `/usr/bin/python3 -c "import torch"` working (Debian's
// python3-torch with libopenblas0-pthread, for Debian's own python3 whatever python3 PATH finds
// first: never installed by the scripts, not a test dependency), bench/cnn_torch.py trains the
// same net in PyTorch in float (NCHW and channels_last) and under bf16 autocast
// (channels_last), interleaved with ours; the ratios to each are printed, and the ratio to
// PyTorch's best configuration in the step's precision (ResNet-20's target: 1.3), with what that
// target asks of the core: its rate as a share of the peak, beside PyTorch's share and the
// share a square GEMM of 1024 reaches in the same run (the best shape our products have; a
// whole step also runs batch norm, activations and small products). What PyTorch
// ran on (its BLAS, what ran its convolutions, the ISAs: bench/torch_models.py) is printed once
// for each different report. PyTorch on the reference BLAS is not compared: the scripts refuse,
// and the reason is printed. Medians of several runs, with the spread of the whole steps.
//
// When our kernels run on AVX2 on an AVX-512 CPU (SHMTRAIN_CPU=avx2: nn/cpu.h), PyTorch's
// libraries are held to AVX2 too (ATen, oneDNN, OpenBLAS: bench/torch_models.py), and the
// scripts check that it took effect.
//
// Then sync scaling: the real `shmtrain train` at P = 1 and P = 2 in each precision,
// interleaved: cnn-small (Fashion-MNIST from Debian's dataset-fashion-mnist, batch 64), the MLP
// (Fashion-MNIST, batch 128) and ResNet-20 (random 3x32x32 images written as .npy files to a
// temporary directory and removed after, batch 128; TRAIN_STEPS / 16 steps, as ResNet-20's
// steps are long: 25 at the default 400, about 70 s a run in all on 2 Zen 4 cores with bf16
// and PyTorch); samples/s of the summary; P2/P1 against this machine's two-core limit
// measured in the same run (two processes running the GEMM at once against one); and, with
// PyTorch, DistributedDataParallel at P = 2 in the same precision (bench/cnn_ddp.py: gloo,
// channels_last, half the batch per rank; bf16 autocast for bf16) beside its serial run.
//
// Usage: conv_bench [runs=5] [steps per run=20] [steps of a training run=400] [parts]
// PARTS lists what runs, separated by commas: models (cnn-small, mlp, resnet20) and scaling.
// Models alone run their step comparisons; with scaling, their sync scaling too; scaling
// alone runs every model's sync scaling only. Default: everything.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/conv_bench.h"
#include "bench/peak.h"
#include "bench/torch_peer.h"
#include "nn/cpu.h"
#include "nn/gemm.h"
#include "nn/layer.h"
#include "nn/model.h"

using namespace shmtrain;
using nn::Net;

using Clock = std::chrono::steady_clock;

namespace shmtrain::bench {

TorchRun TorchRate(const BenchModel& model, int batch, const char* layout, int steps,
                   const char* precision) {
  return RunTorchScript("cnn_torch.py", std::to_string(batch) + " " + layout + " " +
                                            std::to_string(steps) + " " + precision + " " +
                                            model.name);
}

std::string Verdict(double value, double target) {
  if (target <= 0) return "";
  char text[64];
  std::snprintf(text, sizeof text, " (target >= %.1f: %s)", target,
                value >= target ? "met" : "MISSED");
  return text;
}

}  // namespace shmtrain::bench

namespace {

using bench::BenchModel;
using bench::Precision;
using bench::Verdict;

constexpr const char* kCnnSmall =
    "conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,5,padding=2),relu,maxpool2d(2),"
    "flatten,linear(128),relu,linear(10)";

BenchModel CnnSmall() {
  return {"cnn-small", kCnnSmall, {1, 28, 28}, {64, 128}, 1, 0, 64, 1, {1.8, 0}};
}

BenchModel Mlp() {
  return {"mlp", "flatten,linear(1024),relu,linear(256),relu,linear(10)", {1, 28, 28}, {128}, 4,
          0, 128, 4, {0, 2.8}};
}

// ResNet-20 as examples/resnet20.txt writes it, on CIFAR-10's 3x32x32 images.
BenchModel ResNet20() {
  const char* path = SHMTRAIN_SOURCE_DIR "/examples/resnet20.txt";
  std::ifstream in(path);
  const std::string text = bench::Trimmed({std::istreambuf_iterator<char>(in), {}});
  if (text.empty()) {
    std::fprintf(stderr, "conv_bench: cannot read the model text %s\n", path);
    std::exit(1);
  }
  return {"resnet20", text, {3, 32, 32}, {128}, 1, 1.3, 128, 1.0 / 16, {0, 1.3}};
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// FLOPs of one layer's forward for n samples, and of its backward (dx only when wanted). A
// residual block's are its layers'; without dx, the layers of each of its lists up to the
// first with parameters compute no input gradient (nn/layers/residual.cc), nor does that one.
void LayerFlops(const LayerSpec& l, Shape in, Shape out, int64_t n, bool dx, double* fwd,
                double* bwd) {
  *fwd = *bwd = 0;
  if (l.kind == "conv2d" || l.kind == "linear") {
    const double macs = l.kind == "conv2d"
                            ? static_cast<double>(out.Size()) * in.c * l.Int(1) * l.Int(1) * n
                            : static_cast<double>(in.Size()) * out.Size() * n;
    *fwd = 2 * macs;
    *bwd = 2 * macs * (dx ? 2 : 1);
  } else if (l.kind == "residual") {
    bool params_before[2] = {false, false};  // the body's, the shortcut's
    for (const nn::BlockMember& m : nn::BlockMembers(l, in)) {
      bool& before = params_before[m.shortcut ? 1 : 0];
      double f = 0, b = 0;
      LayerFlops(*m.spec, m.in, m.out, n, dx || before, &f, &b);
      *fwd += f;
      *bwd += b;
      before = before || nn::ParamSize(*m.type, *m.spec, m.in) > 0;
    }
  }
}

// A model built for the step measurements at one batch: the net, its parameters, a batch of
// images, each top-level layer's activations and FLOPs.
struct StepBench {
  StepBench(const BenchModel& model, int n) : batch(n) {
    spec.input = model.input;
    spec.loss = Loss::kXent;
    if (!nn::ParseModelText(model.text, &spec.layers).ok()) std::abort();
    if (!nn::ResolveShapes(spec.input, spec.layers, &shapes).ok()) std::abort();
    net = std::make_unique<Net<float>>(spec);
    params.resize(net->ParamCount());
    grad.resize(net->ParamCount());
    nn::InitParams(spec, Init::kTorch, 1, params.data());
    x.resize(spec.input.Size() * batch);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>((i * 2654435761u) % 256) / 255;
    }
    for (int i = 0; i < batch; ++i) y.push_back(static_cast<float>(i % 10));
    acts.resize(spec.layers.size() + 1);
    acts[0] = x;
    fwd_flops.resize(spec.layers.size());
    bwd_flops.resize(spec.layers.size());
    Shape in = spec.input;
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      acts[i + 1].resize(shapes[i].Size() * batch);
      LayerFlops(spec.layers[i], in, shapes[i], batch, net->NeedsInputGradient(i),
                 &fwd_flops[i], &bwd_flops[i]);
      if (!net->RunsBackward(i)) bwd_flops[i] = 0;
      step_flops += fwd_flops[i] + bwd_flops[i];
      in = shapes[i];
    }
  }
  StepBench(const StepBench&) = delete;
  StepBench& operator=(const StepBench&) = delete;

  // The table's name of top-level layer i: its text, or for a block its number and shapes.
  std::string LayerLabel(size_t i) const {
    if (spec.layers[i].kind != "residual") return nn::ModelText({spec.layers[i]});
    int number = 0;
    for (size_t j = 0; j <= i; ++j) number += spec.layers[j].kind == "residual";
    const Shape in = i == 0 ? spec.input : shapes[i - 1];
    return "residual #" + std::to_string(number) + " " + nn::ImageText(in) + "->" +
           nn::ImageText(shapes[i]);
  }

  int batch;
  ModelSpec spec;  // before net, which points into it
  std::vector<Shape> shapes;
  std::unique_ptr<Net<float>> net;
  std::vector<float> params, grad, x, y;
  std::vector<std::vector<float>> acts;
  std::vector<double> fwd_flops, bwd_flops;
  double step_flops = 0;
};

// Our runs in one precision: the whole steps' seconds, and each layer's forward and backward.
struct Measured {
  std::vector<double> step_s;
  std::vector<std::vector<double>> fwd_s, bwd_s;
};

// One pass of the whole step and of each layer in `p`, appended to *m.
void MeasureOnce(StepBench& b, const Precision& p, int steps, Measured* m) {
  if (!nn::SetProductInputs(p.type)) std::abort();
  Net<float>& net = *b.net;
  nn::PassInfo pass;
  pass.train = true;
  net.LossAndGrad(b.params.data(), b.x.data(), b.y.data(), b.batch, pass, b.grad.data());
  auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    pass.step = s;
    net.LossAndGrad(b.params.data(), b.x.data(), b.y.data(), b.batch, pass, b.grad.data());
  }
  m->step_s.push_back(Seconds(t0, Clock::now()) / steps);
  m->fwd_s.resize(b.spec.layers.size());
  m->bwd_s.resize(b.spec.layers.size());
  for (size_t i = 0; i < b.spec.layers.size(); ++i) {
    auto& layer = const_cast<nn::Layer<float>&>(net.layer(i));
    const float* w = b.params.data() + net.param_offset(i);
    std::vector<float> dy(b.acts[i + 1].size(), 0.01f), dx(b.acts[i].size());
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      layer.Forward(w, b.acts[i].data(), b.batch, pass, b.acts[i + 1].data());
    }
    m->fwd_s[i].push_back(Seconds(t0, Clock::now()) / steps);
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      layer.Backward(w, b.acts[i].data(), b.acts[i + 1].data(), dy.data(), b.batch, pass,
                     net.NeedsInputGradient(i) ? dx.data() : nullptr,
                     b.grad.data() + net.param_offset(i));
    }
    m->bwd_s[i].push_back(Seconds(t0, Clock::now()) / steps);
  }
  nn::SetProductInputs(ComputeType::kFloat);
}

// Whether PyTorch can be compared; says why not: torch does not import, or one step of
// bench/cnn_torch.py gives no figure (the reference BLAS; an AVX2 mode that did not hold).
bool TorchUsable() {
  const std::string import = std::string(TORCH_PYTHON) + " -c 'import torch' >/dev/null 2>&1";
  if (std::system(import.c_str()) != 0) {
    std::printf("PyTorch: not compared (%s -c 'import torch' fails: Debian's python3-torch is "
                "not installed)\n", TORCH_PYTHON);
    return false;
  }
  const bench::TorchRun r = bench::RunTorchScript("cnn_torch.py", "8 channels_last 1");
  if (r.rate <= 0) {
    std::printf("PyTorch: not compared: bench/cnn_torch.py gave no figure: %s\n", r.why.c_str());
    return false;
  }
  bench::PrintTorchRanOnce(r, "");
  return true;
}

// PyTorch's configurations beside our step, in the order each run measures them.
struct TorchConfigs {
  bench::TorchSeries nchw, channels_last, autocast;
};

void RunTorchConfigs(const BenchModel& model, int batch, int steps, TorchConfigs* t) {
  const std::string what = model.name + " batch " + std::to_string(batch);
  t->nchw.Add(TorchRate(model, batch, "nchw", steps, "float"), what + " float NCHW");
  t->channels_last.Add(TorchRate(model, batch, "channels_last", steps, "float"),
                       what + " float channels_last");
  t->autocast.Add(TorchRate(model, batch, "channels_last", steps, "bf16"),
                  what + " bf16 autocast channels_last");
}

// "float NCHW 2081 samples/s (ours 1.25x)", with the runs' spread when asked; or "float NCHW
// not run (why)".
std::string ConfigText(const char* label, const bench::TorchSeries& s, double ours, bool spread) {
  if (!s.Ok()) return std::string(label) + " " + s.Failures();
  char text[160];
  if (spread) {
    std::snprintf(text, sizeof text, "%s %.0f samples/s (runs %.0f..%.0f; ours %.2fx)", label,
                  s.Median(), s.Min(), s.Max(), ours / s.Median());
  } else {
    std::snprintf(text, sizeof text, "%s %.0f samples/s (ours %.2fx)", label, s.Median(),
                  ours / s.Median());
  }
  return text + s.Failures();
}

// PyTorch's rates beside ours (`ours` samples/s in precision p), and our ratio to its best
// configuration in p: float NCHW or channels_last for float, bf16 autocast for bf16.
void PrintTorch(const BenchModel& model, const Precision& p, double ours, double sample_flops,
                const TorchConfigs& t) {
  std::printf("  PyTorch, 1 thread, interleaved: %s, %s, %s\n",
              ConfigText("float NCHW", t.nchw, ours, false).c_str(),
              ConfigText("float channels_last", t.channels_last, ours, false).c_str(),
              ConfigText("bf16 autocast channels_last", t.autocast, ours, true).c_str());
  const bool bf16 = p.type == ComputeType::kBf16;
  const bool nchw_best = t.nchw.Median() > t.channels_last.Median();
  const bench::TorchSeries& best = bf16 ? t.autocast : nchw_best ? t.nchw : t.channels_last;
  const char* label = bf16 ? "bf16 autocast channels_last"
                           : nchw_best ? "float NCHW" : "float channels_last";
  if (!best.Ok()) {
    std::printf("  ours / PyTorch's best %s configuration: not compared (%s)\n", p.name,
                best.why.c_str());
    return;
  }
  const double ratio = ours / best.Median();
  std::printf("  ours / PyTorch's best %s configuration (%s, %.0f samples/s): %.2f%s\n", p.name,
              label, best.Median(), ratio, Verdict(ratio, model.step_target).c_str());
  if (model.step_target <= 0) return;
  // What the target asks of this core, against what its best product reaches.
  const double need = model.step_target * best.Median() * sample_flops / 1e9;
  std::printf("  the target asks %.0f samples/s = %.1f GFLOP/s = %.2f of the %s peak over the "
              "whole step; PyTorch's best runs at %.2f of it, this run's best product (GEMM "
              "1024^3) at %.2f\n",
              model.step_target * best.Median(), need, need / p.peak.median, p.name,
              best.Median() * sample_flops / 1e9 / p.peak.median,
              p.product.median / p.peak.median);
}

// The table of one precision's layers and its whole step.
void PrintPrecision(const BenchModel& model, const StepBench& b, const Precision& p,
                    const Measured& m, int runs, int steps) {
  auto rate = [](double flops, double sec) {
    return flops > 0 ? std::to_string(static_cast<int>(flops / sec / 1e9 * 10) / 10.0).substr(0, 5)
                     : std::string("-");
  };
  std::printf("\n%s, batch %d, 1 thread, %s products (%.1f MFLOP a training sample):\n",
              model.name.c_str(), b.batch, p.name, b.step_flops / b.batch / 1e6);
  std::printf("  %-34s %10s %9s %10s %9s\n", "layer", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s");
  for (size_t i = 0; i < b.spec.layers.size(); ++i) {
    const double f = bench::Median(m.fwd_s[i]), bw = bench::Median(m.bwd_s[i]);
    std::printf("  %-34s %10.3f %9s %10.3f %9s\n", b.LayerLabel(i).c_str(), f * 1e3,
                rate(b.fwd_flops[i], f).c_str(), bw * 1e3, rate(b.bwd_flops[i], bw).c_str());
  }
  const double sec = bench::Median(m.step_s);
  const double g = b.step_flops / sec / 1e9;
  const auto [lo, hi] = std::minmax_element(m.step_s.begin(), m.step_s.end());
  std::printf("  whole step (%s): %.2f ms, %.0f samples/s (runs %.0f..%.0f), %.1f GFLOP/s = "
              "%.2f of the %s peak (%s; median of %d runs of %d steps)\n",
              p.name, sec * 1e3, b.batch / sec, b.batch / *hi, b.batch / *lo, g,
              g / p.peak.median, p.name, p.peak.Text().c_str(), runs, steps);
}

void Run(const BenchModel& model, int batch, int runs, int steps,
         const std::vector<Precision>& precisions, bool torch) {
  StepBench b(model, batch);
  // Interleaved: each run measures PyTorch (float NCHW, float channels_last, bf16 autocast
  // channels_last) and then ours in each precision.
  std::vector<Measured> ours(precisions.size());
  TorchConfigs t;
  for (int r = 0; r < runs; ++r) {
    if (torch) RunTorchConfigs(model, batch, steps, &t);
    for (size_t k = 0; k < precisions.size(); ++k) {
      MeasureOnce(b, precisions[k], steps, &ours[k]);
    }
  }
  for (size_t k = 0; k < precisions.size(); ++k) {
    PrintPrecision(model, b, precisions[k], ours[k], runs, steps);
    if (torch) {
      PrintTorch(model, precisions[k], batch / bench::Median(ours[k].step_s),
                 b.step_flops / batch, t);
    }
  }
}

// The 4th argument: models (cnn-small, mlp, resnet20) and "scaling", separated by commas; the
// models listed, or all three when none is; whether their step comparisons run (some model
// listed) and their sync scaling ("scaling" listed). False on an unknown name.
bool ParseParts(const std::string& arg, std::vector<BenchModel>* models, bool* steps,
                bool* scaling) {
  *steps = *scaling = false;
  size_t begin = 0;
  while (begin <= arg.size()) {
    const size_t end = std::min(arg.find(',', begin), arg.size());
    const std::string part = arg.substr(begin, end - begin);
    if (part == "cnn-small") {
      models->push_back(CnnSmall());
    } else if (part == "mlp") {
      models->push_back(Mlp());
    } else if (part == "resnet20") {
      models->push_back(ResNet20());
    } else if (part == "scaling") {
      *scaling = true;
    } else {
      return false;
    }
    begin = end + 1;
  }
  *steps = !models->empty();
  if (models->empty()) *models = {CnnSmall(), Mlp(), ResNet20()};
  return true;
}

// GFLOP/s of one square product of 1024 in the product inputs set now, the kernel's best shape.
double SquareProductRate() {
  constexpr int64_t n = 1024;
  static const std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f);
  static std::vector<float> c(n * n);
  nn::Gemm(n, n, n, {a.data(), n}, {b.data(), n}, c.data(), n, false);  // warm, packed once
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int reps = 4;
  for (int r = 0; r < reps; ++r) {
    nn::Gemm(n, n, n, {a.data(), n}, {b.data(), n}, c.data(), n, false);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * n * n * n * reps / s / 1e9;
}

// The rate of that product in product inputs t, the median of 7.
bench::Peak ProductPeak(ComputeType t) {
  if (!nn::SetProductInputs(t)) std::abort();
  const bench::Peak p = bench::MeasurePeak(SquareProductRate);
  nn::SetProductInputs(ComputeType::kFloat);
  return p;
}

// The precisions this CPU's kernels run, with their peaks; PyTorch held to AVX2 when ours are
// on an AVX-512 CPU.
std::vector<Precision> Precisions() {
  const nn::CpuFeatures cpu = nn::UsedCpu();
  std::vector<Precision> precisions = {
      {"float", ComputeType::kFloat,
       bench::MeasurePeak(cpu.avx512 ? bench::Fma512Peak : bench::Fma256Peak),
       ProductPeak(ComputeType::kFloat)}};
  if (cpu.avx512_bf16) {
    precisions.push_back({"bf16", ComputeType::kBf16, bench::MeasurePeak(bench::Bf16DotPeak),
                          ProductPeak(ComputeType::kBf16)});
  }
  std::printf("kernels: %s; float FMA peak %s, GEMM 1024^3 %s", nn::PathName(nn::UsedPath()),
              precisions[0].peak.Text().c_str(), precisions[0].product.Text().c_str());
  if (precisions.size() > 1) {
    std::printf(", bf16 dot-product peak %s, bf16 GEMM 1024^3 %s",
                precisions[1].peak.Text().c_str(), precisions[1].product.Text().c_str());
  }
  std::printf(" (one core, this run)\n");
  if (nn::UsedPath() == nn::CpuPath::kAvx2 && nn::DetectedCpu().avx512) {
    bench::g_torch_isa = "avx2";
    std::printf("PyTorch held to AVX2 as our kernels are (SHMTRAIN_CPU=avx2 on an AVX-512 CPU): "
                "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 "
                "OPENBLAS_CORETYPE=Haswell\n");
  }
  return precisions;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, into a file too
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int train_steps = argc > 3 ? std::atoi(argv[3]) : 400;
  std::vector<BenchModel> models;
  bool step_parts = false, scaling = false;
  if (runs < 1 || steps < 1 || train_steps < 2 || argc > 5 ||
      !ParseParts(argc > 4 ? argv[4] : "cnn-small,mlp,resnet20,scaling", &models, &step_parts,
                  &scaling)) {
    std::fprintf(stderr, "usage: conv_bench [runs>=1] [steps>=1] [training steps>=2] "
                         "[parts: cnn-small,mlp,resnet20,scaling]\n");
    return 2;
  }
  const std::vector<Precision> precisions = Precisions();
  const bool torch = TorchUsable();
  for (const BenchModel& m : models) {
    for (int batch : step_parts ? m.batches : std::vector<int>{}) {
      Run(m, batch, runs, steps * m.step_scale, precisions, torch);
    }
  }
  for (const BenchModel& m : scaling ? models : std::vector<BenchModel>{}) {
    bench::Scaling(m, runs, train_steps, precisions, torch);
  }
  return 0;
}
