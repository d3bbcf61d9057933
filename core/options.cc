#include "shmtrain/options.h"

#include <cmath>
#include <string>

namespace shmtrain {
namespace {

Status Bad(const std::string& flag, const std::string& what) {
  return Status::Usage(flag + ": " + what);
}

}  // namespace

Status TrainOptions::Validate() const {
  if (workers < 1 || workers > 256) {
    return Bad("--workers", "must be between 1 and 256, got " + std::to_string(workers));
  }
  if (data_path.empty() == example.empty()) {
    return Status::Usage("give exactly one of --data FILE and --example parabola");
  }
  if (!example.empty() && example != "parabola") {
    return Bad("--example", "unknown example '" + example + "' (known: parabola)");
  }
  if (example_rows < 1 || example_rows > 10'000'000) {
    return Bad("--rows", "must be between 1 and 10000000, got " + std::to_string(example_rows));
  }
  if (label_col < -1) {
    return Bad("--label-col",
               "must be >= 0 or -1 (the last column), got " + std::to_string(label_col));
  }
  const auto& layers = model.layers;
  if (layers.size() < 2 || layers.size() > 64) {
    return Bad("--layers", "needs 2 to 64 sizes, e.g. 1,5,1; got " +
                               std::to_string(layers.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > 65536) {
      return Bad("--layers", "size " + std::to_string(i + 1) + " must be between 1 and 65536, got " +
                                 std::to_string(layers[i]));
    }
  }
  if (model.loss == Loss::kMse && model.outputs() != 1) {
    return Bad("--layers", "loss mse needs one output, the last layer has " +
                               std::to_string(model.outputs()));
  }
  if (model.loss == Loss::kXent && model.outputs() < 2) {
    return Bad("--layers", "loss xent needs an output per class (at least 2), the last layer has " +
                               std::to_string(model.outputs()));
  }
  if (!(lr > 0) || !std::isfinite(lr)) {
    return Bad("--lr", "must be a finite number > 0, got " + std::to_string(lr));
  }
  if (!(momentum >= 0 && momentum < 1)) {
    return Bad("--momentum", "must be in [0, 1), got " + std::to_string(momentum));
  }
  if ((steps > 0) == (epochs > 0)) {
    if (steps < 0 || epochs < 0) return Status::Usage("--steps and --epochs must be >= 1");
    return Status::Usage("give exactly one of --steps N and --epochs E");
  }
  if (steps < 0 || epochs < 0) return Status::Usage("--steps and --epochs must be >= 1");
  if (batch < 0) return Bad("--batch", "must be >= 1, got " + std::to_string(batch));
  if (log_every < 0) return Bad("--log-every", "must be >= 0, got " + std::to_string(log_every));
  if (!(barrier_timeout_s >= 0.01 && barrier_timeout_s <= 86400)) {
    return Bad("--barrier-timeout", "must be between 0.01 and 86400 seconds");
  }
  if (mode != Mode::kSync) return Bad("--mode", "only sync is available in this version");
  return Status::Ok();
}

int64_t TrainOptions::TotalSteps(int64_t rows) const {
  if (steps > 0) return steps;
  const int64_t per_epoch = batch > 0 ? (rows + batch - 1) / batch : 1;
  return epochs * per_epoch;
}

}  // namespace shmtrain
