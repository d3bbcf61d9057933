#include "worker/run_model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace shmtrain::worker {

Status ReadRunModel(const shm::RunConfig& c, RunModel* out) {
  ModelSpec spec;
  spec.input = {c.input_shape[0], c.input_shape[1], c.input_shape[2]};
  if (c.loss > static_cast<uint32_t>(Loss::kXent)) {
    return Status::Data("loss " + std::to_string(c.loss));
  }
  spec.loss = static_cast<Loss>(c.loss);
  if (Status s = nn::ParseStoredModelText(c.model, &spec.layers); !s.ok()) {
    return Status::Data("model: " + s.message());
  }
  nn::ResolvedModel model;
  if (Status s = nn::ResolveModel(spec, /*flat_input=*/false, &model); !s.ok()) {
    return Status::Data("model: " + s.message());
  }
  if (c.features != spec.inputs()) {
    return Status::Data(std::to_string(c.features) + " features for a model input of " +
                        spec.input.Text() + " (" + std::to_string(spec.inputs()) + " values)");
  }
  if (const std::optional<uint64_t> n = model.param_count; n != c.param_count) {
    return Status::Data("param_count " + std::to_string(c.param_count) +
                        " is not the layers' count" +
                        (n ? " (" + std::to_string(*n) + ")" : " (more than 2^64)"));
  }
  if (const auto n = static_cast<uint64_t>(model.stats_count); n != c.stats_count) {
    return Status::Data("stats_count " + std::to_string(c.stats_count) +
                        " is not the batch norm layers' count (" + std::to_string(n) + ")");
  }
  out->spec = std::move(model.spec);
  out->shapes = std::move(model.shapes);
  return Status::Ok();
}

}  // namespace shmtrain::worker
