// conv_bench's sync scaling (bench/conv_bench.cc says what it prints): the real `shmtrain
// train` at P = 1 and P = 2 in each precision, on Fashion-MNIST for the models of its 1x28x28
// images and on random images written for the run otherwise; the machine's two-core limit;
// PyTorch DDP at P = 2 in the same precision and its serial run.
#include <sys/wait.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/conv_bench.h"
#include "nn/layer.h"

namespace shmtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Single-core GEMM rate: the median of `samples` runs of products of the shape of cnn-small's
// largest one (its second convolution's forward at a chunk of 8 samples: 64 x 800 by 800 x
// 1568), and of a 1024^3 product; the larger of the two rates is the limit.
double GemmGflops(int samples) {
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
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      rates.push_back(2.0 * m * k * n * iters / sec / 1e9);
    }
    best = std::max(best, Median(rates));
  }
  return best;
}

// The machine's two-core limit: the GEMM rate of two processes at once, summed, over one
// process's (1.0: the second core adds nothing; 2.0: it adds a whole core).
double TwoCoreLimit(int samples) {
  const double one = GemmGflops(samples);
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    if (k == 0) {
      const double r = GemmGflops(samples);
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

// Where a scaling run's data comes from: what it is, and the flags of `shmtrain train` that
// read it.
struct TrainData {
  std::string what, flags;
};

// A NumPy .npy file (format version 1.0: the magic, the header's length, a Python dict literal
// padded with spaces so that the data starts at a multiple of 64 bytes) of uint8 elements of
// `shape`, as numpy.save writes it. Exits on failure.
void WriteNpyU8(const std::string& path, const std::vector<int64_t>& shape,
                const std::vector<uint8_t>& v) {
  std::string dims = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (i + 1 < shape.size() ? ", " : shape.size() == 1 ? "," : "");
  }
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': " + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string head("\x93NUMPY\x01\x00", 8);
  head += static_cast<char>(header.size() & 0xff);
  head += static_cast<char>(header.size() >> 8);
  head += header;
  FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            std::fwrite(v.data(), 1, v.size(), f) == v.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::fprintf(stderr, "conv_bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
}

// The files and directory of the SyntheticImages that exist (empty: none), as C strings so
// that a signal handler may remove them: a failed trainer run ends the benchmark through
// std::exit (bench::RunEvents) and Ctrl-C through SIGINT, both past the destructor.
char g_images[3][512];

void RemoveImages() {
  if (g_images[2][0] == '\0') return;
  unlink(g_images[0]);
  unlink(g_images[1]);
  rmdir(g_images[2]);
  g_images[2][0] = '\0';
}

void RemoveImagesAndDie(int sig) {
  RemoveImages();
  signal(sig, SIG_DFL);
  raise(sig);
}

// Random images for one scaling part, removed when it ends: n uint8 images of `shape` in
// (C, H, W) order and their labels (0..9) as .npy files (x.npy, y.npy), which shmtrain's NumPy
// loader reads as C x H x W images, in a directory of their own under TMPDIR (or /tmp).
class SyntheticImages {
 public:
  SyntheticImages(Shape shape, int64_t n) {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                      "/conv_bench.XXXXXX";
    if (dir.size() + 8 > sizeof g_images[0] || mkdtemp(dir.data()) == nullptr) {
      std::fprintf(stderr, "conv_bench: mkdtemp %s: %s\n", dir.c_str(), std::strerror(errno));
      std::exit(1);
    }
    dir_ = dir;
    std::snprintf(g_images[0], sizeof g_images[0], "%s/x.npy", dir_.c_str());
    std::snprintf(g_images[1], sizeof g_images[1], "%s/y.npy", dir_.c_str());
    std::snprintf(g_images[2], sizeof g_images[2], "%s", dir_.c_str());
    static const bool registered = [] {
      std::atexit(RemoveImages);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, RemoveImagesAndDie);
      return true;
    }();
    (void)registered;
    std::vector<uint8_t> x(static_cast<size_t>(n * shape.Size())), y(static_cast<size_t>(n));
    uint64_t s = 88172645463325252ull;  // xorshift64
    for (uint8_t& v : x) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      v = static_cast<uint8_t>(s >> 56);
    }
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<uint8_t>((i * 7 + x[i]) % 10);
    WriteNpyU8(g_images[0], {n, shape.c, shape.h, shape.w}, x);
    WriteNpyU8(g_images[1], {n}, y);
    data_ = {std::to_string(n) + " random " + nn::ImageText(shape) + " images (uint8 .npy in " +
                 dir_ + ", removed after)",
             "--data " + dir_ + "/x.npy --labels " + dir_ + "/y.npy"};
  }
  ~SyntheticImages() { RemoveImages(); }
  SyntheticImages(const SyntheticImages&) = delete;
  SyntheticImages& operator=(const SyntheticImages&) = delete;
  const TrainData& data() const { return data_; }

 private:
  std::string dir_;
  TrainData data_;
};

// samples/s of `shmtrain train` on `model` over `data`, P workers.
double TrainRate(const BenchModel& model, const TrainData& data, int workers, int steps,
                 const char* precision) {
  const std::string cmd = std::string(SHMTRAIN_BIN) + " train " + data.flags +
                          " --normalize minmax --loss xent --model '" + model.text +
                          "' --batch " + std::to_string(model.scaling_batch) +
                          " --lr 0.02 --momentum 0.9 --steps " + std::to_string(steps) +
                          " --workers " + std::to_string(workers) + " --precision " + precision +
                          " --log-format json --log-every 0 --no-progress --no-metrics";
  return ParseSyncSummary(RunEvents(cmd, {"summary"}).at("summary"), false).samples_per_s;
}

// One run of PyTorch DDP at P = 2 (bench/cnn_ddp.py).
TorchRun DdpRate(const BenchModel& model, int per_rank, int steps, const char* precision) {
  return RunTorchScript("cnn_ddp.py", "2 " + std::to_string(per_rank) + " " +
                                          std::to_string(steps) + " " + model.name + " " +
                                          precision);
}

// Every run's figures of one model's scaling, per precision where they have one.
struct ScalingRuns {
  std::vector<double> limit;
  std::vector<std::vector<double>> one, two;
  std::vector<TorchSeries> ddp, serial;
};

// `runs` interleaved runs: the two-core limit, then per precision shmtrain at P = 1 and 2,
// then per precision PyTorch's DDP at P = 2 and its serial run (channels_last, `torch_steps`).
ScalingRuns MeasureScaling(const BenchModel& model, const TrainData& data, int runs, int steps,
                           int torch_steps, const std::vector<Precision>& precisions,
                           bool torch) {
  const size_t n = precisions.size();
  ScalingRuns s{{}, std::vector<std::vector<double>>(n), std::vector<std::vector<double>>(n),
                std::vector<TorchSeries>(n), std::vector<TorchSeries>(n)};
  for (int r = 0; r < runs; ++r) {
    s.limit.push_back(TwoCoreLimit(3));
    for (size_t k = 0; k < n; ++k) {
      s.one[k].push_back(TrainRate(model, data, 1, steps, precisions[k].name));
      s.two[k].push_back(TrainRate(model, data, 2, steps, precisions[k].name));
    }
    for (size_t k = 0; torch && k < n; ++k) {
      const std::string what = model.name + " " + precisions[k].name;
      s.ddp[k].Add(DdpRate(model, model.scaling_batch / 2, torch_steps, precisions[k].name),
                   what + " DDP P=2");
      s.serial[k].Add(TorchRate(model, model.scaling_batch, "channels_last", torch_steps,
                                precisions[k].name),
                      what + " channels_last serial");
    }
  }
  return s;
}

// DDP's line of precision k: its rate against its serial run, and ours at P = 2 over it.
void PrintDdp(const BenchModel& model, const Precision& p, const ScalingRuns& s, size_t k) {
  const char* kind = p.type == ComputeType::kBf16 ? "bf16 autocast" : "float";
  if (!s.ddp[k].Ok()) {
    std::printf("  PyTorch DDP P=2 %s: %s\n", kind, s.ddp[k].Failures().c_str());
    return;
  }
  const double d = s.ddp[k].Median(), p2 = Median(s.two[k]);
  const double serial = s.serial[k].Median();
  char vs_serial[64] = "its serial run gave no figure";
  if (s.serial[k].Ok()) {
    std::snprintf(vs_serial, sizeof vs_serial, "%.2fx its serial run (%.0f)", d / serial,
                  serial);
  }
  std::printf("  PyTorch DDP P=2 %s (gloo, channels_last, %d per rank) %.0f samples/s = %s%s; "
              "shmtrain %s P=2 / DDP P=2 = %.2f%s\n",
              kind, model.scaling_batch / 2, d, vs_serial, s.ddp[k].Failures().c_str(), p.name,
              p2 / d, Verdict(p2 / d, model.scaling.over_ddp).c_str());
}

}  // namespace

void Scaling(const BenchModel& model, int runs, int train_steps,
             const std::vector<Precision>& precisions, bool torch) {
  const int steps = std::max(2, static_cast<int>(train_steps * model.train_scale));
  const int torch_steps = std::max(1, steps / 2);
  const bool fashion = model.input == Shape{1, 28, 28};
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (fashion && access((dir + "train-images-idx3-ubyte.gz").c_str(), R_OK) != 0) {
    std::printf("\nsync scaling, %s: not run (no Fashion-MNIST: Debian's dataset-fashion-mnist)\n",
                model.name.c_str());
    return;
  }
  std::unique_ptr<SyntheticImages> images;
  TrainData data{"Fashion-MNIST", "--data " + dir + "train-images-idx3-ubyte.gz --labels " + dir +
                                      "train-labels-idx1-ubyte.gz"};
  if (!fashion) {
    images = std::make_unique<SyntheticImages>(model.input, 1024);
    data = images->data();
  }
  const auto t0 = Clock::now();
  const ScalingRuns s = MeasureScaling(model, data, runs, steps, torch_steps, precisions, torch);
  const double l = Median(s.limit);
  std::printf("\nsync scaling, %s, %s, batch %d (median of %d interleaved runs of %d steps; "
              "PyTorch's of %d; %.0f s):\n", model.name.c_str(), data.what.c_str(),
              model.scaling_batch, runs, steps, torch_steps,
              std::chrono::duration<double>(Clock::now() - t0).count());
  std::printf("  two-core limit (two GEMM processes at once / one): %.2f\n", l);
  for (size_t k = 0; k < precisions.size(); ++k) {
    const double p1 = Median(s.one[k]), p2 = Median(s.two[k]);
    std::printf("  shmtrain %s: P=1 %.0f samples/s, P=2 %.0f samples/s: P2/P1 = %.2f%s, %.2f of "
                "the two-core limit\n", precisions[k].name, p1, p2, p2 / p1,
                Verdict(p2 / p1, model.scaling.p2_over_p1).c_str(), p2 / p1 / l);
  }
  for (size_t k = 0; torch && k < precisions.size(); ++k) PrintDdp(model, precisions[k], s, k);
}

}  // namespace shmtrain::bench
