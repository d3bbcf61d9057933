// PyTorch beside bench/conv_bench.cc: runs bench/cnn_torch.py and bench/cnn_ddp.py with
// Debian's python3 (TORCH_PYTHON, SHMTRAIN_SOURCE_DIR: compile definitions), reads the line
// they print ("samples/s R torch V" and what the run ran on: bench/torch_models.py, report())
// and keeps why a run gave no figure (the last line it printed: the reference BLAS, an AVX2
// mode that did not take effect, bf16 without oneDNN's bf16 kernels).
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace shmtrain::bench {

// One run of a PyTorch script: samples/s (0: no figure, and `why` says why), PyTorch's
// version, and what it ran on ("blas openblas-pthread conv mkldnn[jit:avx512_core] isa ...").
struct TorchRun {
  double rate = 0;
  std::string version, ran, why;
};

// What PyTorch's libraries may use: "native" (what the CPU has) or "avx2" (ATen, oneDNN and
// OpenBLAS held to AVX2: bench/torch_models.py's BENCH_TORCH_ISA).
inline std::string g_torch_isa = "native";

inline std::string Trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Runs bench/`script` with `args` (its stderr into its stdout, so that a refusal is read).
inline TorchRun RunTorchScript(const std::string& script, const std::string& args) {
  const std::string cmd = "BENCH_TORCH_ISA=" + g_torch_isa + " " + TORCH_PYTHON + " " +
                          SHMTRAIN_SOURCE_DIR + "/bench/" + script + " " + args + " 2>&1";
  TorchRun r;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    r.why = "could not start " + cmd;
    return r;
  }
  char line[8192];
  std::string last;
  while (std::fgets(line, sizeof line, f)) {
    double rate = 0;
    char version[64] = "";
    int rest = 0;
    if (std::sscanf(line, "samples/s %lf torch %63s %n", &rate, version, &rest) == 2) {
      r.rate = rate;
      r.version = version;
      r.ran = rest > 0 ? Trimmed(line + rest) : "";
    } else if (!Trimmed(line).empty()) {
      last = Trimmed(line);
    }
  }
  const int status = pclose(f);
  if (status != 0 || r.rate <= 0) {
    r.rate = 0;
    r.why = !last.empty() ? last
                          : script + " exited with status " +
                                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return r;
}

// Prints what a PyTorch run ran on, each thing once: the BLAS, the ISAs and the threads when
// they first appear or change, and what ran the convolutions of configuration `what` (a model
// and its settings; "" for none) when it first appears or changes.
inline void PrintTorchRanOnce(const TorchRun& r, const std::string& what) {
  static std::set<std::string> seen;
  std::string rest = r.ran, conv;
  const size_t at = rest.find(" conv ");
  if (at != std::string::npos) {
    const size_t end = std::min(rest.find(' ', at + 6), rest.size());
    conv = rest.substr(at + 6, end - at - 6);
    rest.erase(at, end - at);
  }
  if (!rest.empty() && seen.insert(rest).second) {
    std::printf("PyTorch %s ran on: %s\n", r.version.c_str(), rest.c_str());
  }
  if (!what.empty() && !conv.empty() && conv != "none" && seen.insert(what + conv).second) {
    std::printf("  PyTorch's convolutions, %s: %s\n", what.c_str(), conv.c_str());
  }
}

// Several runs of one PyTorch configuration: the rates of those that gave one, and why the
// last of the others did not.
struct TorchSeries {
  std::vector<double> rates;
  std::string why;
  int failed = 0;

  void Add(const TorchRun& r, const std::string& what) {
    if (r.rate > 0) {
      rates.push_back(r.rate);
      PrintTorchRanOnce(r, what);
    } else {
      why = r.why;
      ++failed;
    }
  }
  bool Ok() const { return !rates.empty(); }
  double Median() const { return rates.empty() ? 0 : bench::Median(rates); }
  double Min() const { return rates.empty() ? 0 : *std::min_element(rates.begin(), rates.end()); }
  double Max() const { return rates.empty() ? 0 : *std::max_element(rates.begin(), rates.end()); }
  // "not run (why)" when no run gave a figure, " (k of n runs gave none: why)" when some did
  // not, "" when all did.
  std::string Failures() const {
    if (failed == 0) return "";
    if (!Ok()) return "not run (" + why + ")";
    return " (" + std::to_string(failed) + " of " + std::to_string(failed + rates.size()) +
           " runs gave none: " + why + ")";
  }
};

}  // namespace shmtrain::bench
