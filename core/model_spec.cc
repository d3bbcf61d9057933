#include "shmtrain/model_spec.h"

namespace shmtrain {

// Names are exact and lower-case: they appear in flags, logs and model files, so one spelling
// per value keeps those round-trippable.

std::optional<Activation> ParseActivation(std::string_view s) {
  if (s == "tanh") return Activation::kTanh;
  if (s == "relu") return Activation::kRelu;
  if (s == "sigmoid") return Activation::kSigmoid;
  if (s == "identity") return Activation::kIdentity;
  return std::nullopt;
}

std::optional<Loss> ParseLoss(std::string_view s) {
  if (s == "mse") return Loss::kMse;
  if (s == "xent") return Loss::kXent;
  return std::nullopt;
}

std::optional<Init> ParseInit(std::string_view s) {
  if (s == "normal") return Init::kNormal;
  if (s == "xavier") return Init::kXavier;
  if (s == "he") return Init::kHe;
  if (s == "torch") return Init::kTorch;
  return std::nullopt;
}

// Values outside the enum can only come from a corrupt file or segment; they get a name that
// no parser accepts, so a message can still be printed.
const char* ToString(Activation a) {
  switch (a) {
    case Activation::kTanh:
      return "tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kIdentity:
      return "identity";
  }
  return "unknown";
}

const char* ToString(Loss l) {
  switch (l) {
    case Loss::kMse:
      return "mse";
    case Loss::kXent:
      return "xent";
  }
  return "unknown";
}

const char* ToString(Init i) {
  switch (i) {
    case Init::kNormal:
      return "normal";
    case Init::kXavier:
      return "xavier";
    case Init::kHe:
      return "he";
    case Init::kTorch:
      return "torch";
  }
  return "unknown";
}

}  // namespace shmtrain
