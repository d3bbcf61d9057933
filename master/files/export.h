// `shmtrain export`: a saved model as a NumPy .npz archive (data/npz_writer.h) for other tools.
//
// The arrays are named as PyTorch names the state dict of the nn.Sequential of the model's
// layers. An MLP (--layers) is
//   nn.Sequential(nn.Linear(n0, n1), act, nn.Linear(n1, n2), act, ..., nn.Linear(nL-1, nL))
// (act: nn.Tanh, nn.ReLU, nn.Sigmoid or nn.Identity, after every hidden layer; the output
// layer is linear), so layer l's parameters are "{2l}.weight" (float32, out x in, row-major:
// nn.Linear's weight) and "{2l}.bias" (float32, out), as before layered models. Any other
// model is nn.Sequential(<its layers in order>): layer i's parameters are "{i}.weight" and
// "{i}.bias" in PyTorch's shapes (nn.Conv2d's weight: out, in, kh, kw). Beside them:
//   "input.offset", "input.scale"  float32 (F): features are used as (x - offset) * scale
//                                  (offset 0 and scale 1 for a model without normalisation,
//                                  so the code that uses them is the same for every model)
//   "classes"     classification only: output k is classes[k]; float64 when the labels are
//                 numbers, else a '<U' text array
//   "layers"      an MLP: int64 (L), the layer sizes, inputs first
//   "activation"  an MLP: 0-d '<U', "tanh", "relu", "sigmoid" or "identity"
//   "model"       other models: 0-d '<U', the model text (docs/models.md, "Models")
//   "input_shape" other models: int64 (3), C, H, W of a sample (its F values in that order)
//   "loss"        0-d '<U': "xent" (the outputs are logits: softmax gives the probabilities
//                 predict prints) or "mse"
// docs/models.md, "Using a model in PyTorch", shows the lines that load it.
#pragma once

#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "master/flags/command.h"
#include "master/log/log.h"
#include "nn/layer.h"
#include "master/files/model_file.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Each layer's module name: its index in the nn.Sequential above (an MLP's linear layer l:
// 2l, its activation 2l + 1).
std::vector<std::string> ModuleNames(const ModelSpec& spec);

// A layer with parameters as the export names them: its blocks named "{module}.{block}" in the
// order and PyTorch shapes of its type (a residual block's "{i}.body.{j}.weight": its layers'),
// module being its index in the nn.Sequential above (an MLP's: 2l), and where its parameters
// start in the flat vector. nn::ToTorch and nn::FromTorch turn its parameters (size of them)
// into the blocks' data, one after another, and back. The spec must resolve (abort otherwise).
struct TorchLayer {
  const nn::LayerType* type;
  const LayerSpec* spec;  // points into the model's
  Shape in;
  int64_t offset, size;
  std::vector<nn::ParamBlock> blocks;
};
std::vector<TorchLayer> TorchLayers(const ModelSpec& spec);

// The arrays of every layer's parameter blocks (TorchLayers) of spec's flat vector p, appended
// to *out in PyTorch's layouts (nn::ToTorch); a buffer PyTorch keeps as an integer is int64.
void AppendParamArrays(const ModelSpec& spec, const float* p, std::vector<data::NpyArray>* out);

// Whether `name` is one of the arrays above that are not parameters ("input.offset", "classes",
// "model", ...): what --init-from accepts beside the parameters and never reads.
bool IsExportNonParameter(const std::string& name);

// The arrays above for model `m`, in that order (layers first). `path` (the model's) is for
// messages only. kData when a text class label is not UTF-8.
Status ExportArrays(const Model& m, const std::string& path, std::vector<data::NpyArray>* out);

// Reads cmd.model_path and writes its arrays to cmd.out_path, durably (whole or not at all).
// --out must not be the model file. Errors: kUsage for a bad --out, kData for a model file
// that cannot be read or is damaged (both exit 2), kResource when the file cannot be written.
Status RunExport(const Command& cmd, Logger& log);

}  // namespace shmtrain::master
