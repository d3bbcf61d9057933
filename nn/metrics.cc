#include "nn/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/loss.h"
#include "nn/model.h"
#include "nn/net.h"

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

uint64_t EvaluateBytes(const ResolvedModel& model, int64_t rows) {
  const int64_t chunk = std::min(EvalChunk(model), rows);
  const uint64_t outputs = static_cast<uint64_t>(SatMul(chunk, model.outputs)) * sizeof(float);
  const uint64_t pass = PassBytes(model, chunk, /*backward=*/false);
  return pass > UINT64_MAX - outputs ? UINT64_MAX : pass + outputs;
}

Metrics Evaluate(const ModelSpec& spec, const float* params, const float* x, const float* y,
                 int64_t rows) {
  ResolvedModel model;
  const Status s = ResolveModel(spec, /*flat_input=*/false, &model);
  SHMTRAIN_CHECK(s.ok(), "Evaluate: a model that does not resolve: " + s.message());
  return Evaluate(model, params, x, y, rows);
}

Metrics Evaluate(const ResolvedModel& model, const float* params, const float* x, const float* y,
                 int64_t rows) {
  const ModelSpec& spec = model.spec;
  const int64_t kChunk = EvalChunk(model);
  Metrics m;
  m.rows = rows;
  if (rows == 0) return m;
  Net<float> net(model);
  const int64_t in = spec.inputs(), out = model.outputs;
  double loss = 0, correct = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t k = std::min(kChunk, rows - r0);
    const float* ys = y + r0;
    // One forward pass for both the loss and the predictions: the loss of the outputs is
    // LossSum's to the bit, and the largest output is the largest probability.
    const float* z = net.RawOutputs(params, x + r0 * in, k);
    const double chunk = OutputLoss<float>(spec.loss, z, ys, out, k, nullptr);
    loss += chunk;
    if (!std::isfinite(chunk)) {
      for (int64_t i = 0; i < k; ++i) {
        if (!std::isfinite(OutputLoss<float>(spec.loss, z + i * out, ys + i, out, 1, nullptr))) {
          m.nonfinite.Add(r0 + i);
        }
      }
    }
    if (spec.loss == Loss::kXent) {
      for (int64_t i = 0; i < k; ++i) {
        const float* p = z + i * out;
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
