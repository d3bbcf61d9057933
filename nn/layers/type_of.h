// What every layer file's registration shares: its LayerType is its text form, its shape rules
// and its other hooks (the ones it has: a hook left out is null), with the makers of its layer
// class template for float and double added here, and what the to_onnx hooks build with.
#pragma once

#include "nn/layer.h"
#include "nn/onnx.h"  // the to_onnx hooks

namespace shmtrain::nn {

template <template <class> class L>
LayerType TypeOf(LayerType t) {
  t.make_float = MakeLayer<L, float>;
  t.make_double = MakeLayer<L, double>;
  return t;
}

}  // namespace shmtrain::nn
