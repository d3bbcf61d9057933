#include "nn/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/model.h"

namespace shmtrain::nn {

std::string NonFiniteRows::Text() const {
  std::string list;
  for (size_t i = 0; i < first.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == first.size() ? " and " : ", ") + std::to_string(first[i]);
  }
  if (count == 1) return "row " + list + " (0-based)";
  if (count <= static_cast<int64_t>(kFirst)) return "rows " + list + " (0-based)";
  return std::to_string(count) + " rows, the first " + list + " (0-based)";
}

uint64_t EvaluateBytes(const ModelSpec& spec, int64_t rows) {
  const int64_t chunk = std::min(EvalChunk(spec), rows);
  const uint64_t outputs = static_cast<uint64_t>(SatMul(chunk, spec.outputs())) * sizeof(float);
  const uint64_t pass = PassBytes(spec, chunk, /*backward=*/false);
  return pass > UINT64_MAX - outputs ? UINT64_MAX : pass + outputs;
}

Metrics Evaluate(const ModelSpec& spec, const float* params, const float* x, const float* y,
                 int64_t rows) {
  const int64_t kChunk = EvalChunk(spec);
  Metrics m;
  m.rows = rows;
  if (rows == 0) return m;
  Workspace<float> ws;
  const int64_t in = spec.inputs(), out = spec.outputs();
  std::vector<float> pred;
  double loss = 0, correct = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t k = std::min(kChunk, rows - r0);
    const float* xs = x + r0 * in;
    const float* ys = y + r0;
    const double chunk = LossSum<float>(spec, params, xs, ys, k, ws);
    loss += chunk;
    if (!std::isfinite(chunk)) {
      for (int64_t i = 0; i < k; ++i) {
        if (!std::isfinite(LossSum<float>(spec, params, xs + i * in, ys + i, 1, ws))) {
          m.nonfinite.Add(r0 + i);
        }
      }
    }
    if (spec.loss == Loss::kXent) {
      pred.resize(static_cast<size_t>(k * out));
      Predict<float>(spec, params, xs, k, pred.data(), ws);
      for (int64_t i = 0; i < k; ++i) {
        const float* p = pred.data() + i * out;
        int best = 0;
        for (int j = 1; j < static_cast<int>(out); ++j) {
          if (p[j] > p[best]) best = j;
        }
        correct += best == static_cast<int>(ys[i]);
      }
    }
  }
  m.loss = loss / static_cast<double>(rows);
  if (spec.loss == Loss::kXent) {
    m.accuracy = correct / static_cast<double>(rows);
  } else {
    m.rmse = std::sqrt(m.loss / out);
  }
  return m;
}

}  // namespace shmtrain::nn
