// The small image set of the CNN tests (tests/cnn_test.cc, tests/resnet_head_test.cc): 30
// images of 1x6x6 in 3 classes, made the same way for every test that trains on it.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nn/rng.h"

namespace shmtrain::test {

// 30 images of 1x6x6 in 3 classes (a bright row, column or diagonal, with noise), as CSV rows
// of 36 pixels in (c, h, w) order and the class; each value a multiple of 1/1000, which the
// CSV holds exactly.
struct Images {
  static constexpr int kRows = 30, kSide = 6, kPixels = 36;
  std::vector<double> x;
  std::vector<int> y;
  Images() {
    nn::Rng rng(11);
    for (int i = 0; i < kRows; ++i) {
      const int k = i % 3, at = static_cast<int>(rng.Below(kSide));
      for (int r = 0; r < kSide; ++r) {
        for (int c = 0; c < kSide; ++c) {
          const bool on = k == 0 ? r == at : k == 1 ? c == at : r == c;
          x.push_back(std::round((on ? 0.8 : 0.1) * 1000 + 100 * rng.Uniform()) / 1000);
        }
      }
      y.push_back(k);
    }
  }
  std::string Csv() const {
    std::string s;
    char buf[32];
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kPixels; ++j) {
        std::snprintf(buf, sizeof buf, "%g,", x[i * kPixels + j]);
        s += buf;
      }
      s += std::to_string(y[i]) + "\n";
    }
    return s;
  }
};

}  // namespace shmtrain::test
