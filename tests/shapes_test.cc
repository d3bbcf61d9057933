// Shapes a run is given, checked at its start: a run configuration the workers would refuse,
// image shapes that differ between a model and its data, and the memory a model's
// activations need. Each is refused before a worker starts, naming the flag or the file.
#include <cstdint>
#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "gtest/gtest.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ExitedWith;
using test::ProcResult;

constexpr const char* kBin = SHMTRAIN_BIN;
constexpr test::milliseconds kTimeout{120'000};

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

ProcResult Shm(std::vector<std::string> args) {
  if (!args.empty() && args[0] == "train") {
    args.insert(args.begin() + 1, {"--no-metrics", "--no-progress", "--log-every", "0"});
  }
  args.insert(args.begin(), kBin);
  const ProcResult r = test::RunProcess(args, kTimeout);
  EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>()) << "segments left by " << r.pid;
  return r;
}

// An .npy file of float32 `shape` in dir, its values 0, 1/n, 2/n, ...
std::string Npy(const test::TempDir& dir, const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) / static_cast<float>(n);
  std::string bytes;
  const std::string path = dir.File(name);
  const Status s = data::EncodeNpy(data::NpyArray::Float32("x", std::move(shape), v), path, &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir.Write(name, bytes);
}

// Labels 0, 1, 0, 1, ... of n rows as an .npy file.
std::string Labels(const test::TempDir& dir, const std::string& name, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 2);
  std::string bytes;
  const Status s = data::EncodeNpy(data::NpyArray::Float32("y", {n}, v), dir.File(name), &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir.Write(name, bytes);
}

// An IDX file of uint8 images of h x w.
std::string Idx(const test::TempDir& dir, const std::string& name, int n, int h, int w) {
  std::string b = {0, 0, 0x08, 3};
  for (uint32_t d : {static_cast<uint32_t>(n), static_cast<uint32_t>(h), static_cast<uint32_t>(w)}) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<char>((d >> (8 * k)) & 0xFF));
  }
  for (int64_t i = 0; i < int64_t{n} * h * w; ++i) b.push_back(static_cast<char>(i % 251));
  return dir.Write(name, b);
}

// Trial 3: an input wider than a run takes passed the master, and every worker refused the
// segment (exit 14) until --max-restarts gave up. The master now makes the workers' own check
// of the run configuration before a row is stored: exit 2, naming where the width came from.
TEST(RunConfig, WhatTheWorkersRefuseIsRefusedAtTheStart) {
  test::TempDir dir;
  const std::string y = Labels(dir, "y.npy", 4);
  const std::string flat = Npy(dir, "flat.npy", {4, 70000});
  const std::string idx = Idx(dir, "wide-idx3-ubyte", 4, 1, 70000);
  struct Case {
    std::vector<std::string> args;
    std::string named;
  };
  const std::vector<std::string> run = {"--loss", "xent", "--lr", "0.1", "--steps", "5",
                                        "--max-restarts", "0"};
  for (const Case& c : std::vector<Case>{
           {{"--example", "blobs", "--rows", "20", "--features", "100000", "--model", "linear(4)"},
            "--features: "},
           {{"--data", flat, "--labels", y, "--model", "linear(2)"}, flat + ": "},
           {{"--data", idx, "--labels", y, "--model", "flatten,linear(2)"}, idx + ": "},
       }) {
    std::vector<std::string> a = {"train"};
    a.insert(a.end(), c.args.begin(), c.args.end());
    a.insert(a.end(), run.begin(), run.end());
    const ProcResult r = Shm(a);
    EXPECT_TRUE(ExitedWith(r, 2)) << c.named;
    EXPECT_TRUE(Has(r.err, "shmtrain: error: " + c.named)) << r.err;
    EXPECT_TRUE(Has(r.err, "(each must be 1 to 65536)")) << r.err;
    EXPECT_FALSE(Has(r.err, "shmtrain-worker") || Has(r.err, "exited with code"))
        << "no worker may start: " << r.err;
  }
}

}  // namespace
}  // namespace shmtrain
