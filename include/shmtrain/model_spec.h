// The model vocabulary: layer sizes, activation, loss, initialisation.
//
// The numeric values of the enums are stored in the segment header and in saved model files:
// never renumber them, only append.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shmtrain {

enum class Activation : uint32_t { kTanh = 0, kRelu = 1, kSigmoid = 2, kIdentity = 3 };
enum class Loss : uint32_t { kMse = 0, kXent = 1 };
// kTorch is PyTorch's nn.Linear default. Init is not stored today (the parameters are), but it
// shares the append-only rule so it can be.
enum class Init : uint32_t { kNormal = 0, kXavier = 1, kHe = 2, kTorch = 3 };

std::optional<Activation> ParseActivation(std::string_view s);
std::optional<Loss> ParseLoss(std::string_view s);
std::optional<Init> ParseInit(std::string_view s);
const char* ToString(Activation a);
const char* ToString(Loss l);
const char* ToString(Init i);

// A dense MLP. layers = {inputs, hidden..., outputs}; at least two entries, each >= 1.
// Hidden layers use `activation`; the output layer is always linear (identity): `mse` compares
// it with the target directly, `xent` applies softmax inside the loss.
//
// Parameter vector layout (float32, the same in the segment and in model files): for each
// layer l = 0..L-1 with in = layers[l], out = layers[l+1]: W_l (out x in, column-major,
// i.e. W_l(i, j) at offset i + j*out), then b_l (out). Layers follow each other without gaps.
struct ModelSpec {
  std::vector<int> layers;
  Activation activation = Activation::kTanh;
  Loss loss = Loss::kMse;

  size_t ParamCount() const;
  int inputs() const { return layers.front(); }
  int outputs() const { return layers.back(); }
};

}  // namespace shmtrain
