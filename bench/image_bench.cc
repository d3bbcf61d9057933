// Loading an image folder (data/image_folder.h) against PIL decoding the same files, in one run.
//
// For N interleaved runs: (a) data::LoadImageFolder with 1 decoding thread, (b) with the
// machine's cores, (c) Debian's python3-pil decoding the same files, one thread: for each file
// Image.open(path).convert(mode), then numpy.asarray (the pixels in memory, as ours end), timed
// inside Python so the interpreter's start is not counted. Prints the medians in files/s, the
// ratios ours / PIL, and what the loaded data holds: rows x features float32.
// Usage: image_bench DIR [runs (default 3)]   (e.g. CIFAR-10's train folder, extracted from
// ../shared/data/cifar10-jpeg.tar.gz to a temporary directory)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "data/image_folder.h"

namespace {

using shmtrain::bench::Median;
using Clock = std::chrono::steady_clock;

constexpr const char* kPil = R"(
import sys, time
import numpy as np
from PIL import Image
paths = open(sys.argv[1]).read().split("\n")[:-1]
t0 = time.perf_counter()
for p in paths:
    np.asarray(Image.open(p).convert(sys.argv[2]))
print(time.perf_counter() - t0)
)";

double LoadSeconds(const std::string& dir, int threads, shmtrain::data::Dataset* d) {
  shmtrain::data::LoadOptions o;
  o.task = shmtrain::Task::kClassification;
  o.threads = threads;
  const auto t0 = Clock::now();
  const shmtrain::Status s = shmtrain::data::LoadImageFolder(dir, o, d);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!s.ok()) {
    std::fprintf(stderr, "image_bench: %s\n", s.message().c_str());
    std::exit(1);
  }
  return took;
}

double PilSeconds(const std::string& list, const std::string& script, const char* mode) {
  const std::string cmd = "/usr/bin/python3 " + script + " " + list + " " + mode;
  FILE* p = popen(cmd.c_str(), "r");
  double s = -1;
  if (p == nullptr || std::fscanf(p, "%lf", &s) != 1) s = -1;
  if (p != nullptr) pclose(p);
  if (s <= 0) {
    std::fprintf(stderr, "image_bench: %s failed (python3-pil installed?)\n", cmd.c_str());
    std::exit(1);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: image_bench DIR [runs]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int runs = argc > 2 ? std::atoi(argv[2]) : 3;
  shmtrain::data::ImageFolderFiles files;
  if (shmtrain::Status s = shmtrain::data::ListImageFolder(dir, false, &files); !s.ok()) {
    std::fprintf(stderr, "image_bench: %s\n", s.message().c_str());
    return 1;
  }
  const std::string list = "/tmp/image_bench_paths.txt", script = "/tmp/image_bench_pil.py";
  {
    std::ofstream l(list), py(script);
    for (const std::string& p : files.paths) l << p << "\n";
    py << kPil;
  }
  std::vector<double> one, all, pil;
  shmtrain::data::Dataset d;
  for (int r = 0; r < runs; ++r) {
    one.push_back(LoadSeconds(dir, 1, &d));
    all.push_back(LoadSeconds(dir, 0, &d));
    pil.push_back(PilSeconds(list, script, d.features % 3 == 0 && d.features > 1 ? "RGB" : "L"));
  }
  const double n = static_cast<double>(files.paths.size());
  const double f1 = n / Median(one), fa = n / Median(all), fp = n / Median(pil);
  std::printf("image_bench files %.0f classes %zu ours_1_thread %.0f files/s ours_all_threads "
              "%.0f files/s pil_1_thread %.0f files/s ratio_1_thread %.2f ratio_all %.2f "
              "load_s %.2f data_mb %.0f\n",
              n, files.classes.size(), f1, fa, fp, f1 / fp, fa / fp, Median(all),
              static_cast<double>(d.x.size()) * 4 / 1e6);
  std::remove(list.c_str());
  std::remove(script.c_str());
  return 0;
}
