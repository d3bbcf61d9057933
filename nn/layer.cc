// The layer registry: every layer type, in the order of docs/models.md's table.
#include "nn/layer.h"

#include "nn/registry.h"

namespace shmtrain::nn {

extern const LayerType kLinear, kConv2d, kMaxPool2d, kAvgPool2d, kAdaptiveAvgPool2d,
    kBatchNorm2d, kBatchNorm1d, kFlatten, kRelu, kTanh, kSigmoid, kDropout, kResidual;

const std::vector<const LayerType*>& LayerTypes() {
  static const std::vector<const LayerType*> all = {
      &kLinear, &kConv2d, &kMaxPool2d, &kAvgPool2d, &kAdaptiveAvgPool2d, &kBatchNorm2d,
      &kBatchNorm1d, &kFlatten, &kRelu, &kTanh, &kSigmoid, &kDropout, &kResidual};
  return all;
}

const LayerType* FindLayerType(std::string_view name) { return FindByName(LayerTypes(), name); }

}  // namespace shmtrain::nn
