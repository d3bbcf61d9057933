// The layer seam: one unit per layer type, a registry, and the model text.
//
// A model is an input shape, a sequence of layers and a loss (nn/net.h). A layer type is a
// LayerType: its name and arguments as the model text writes them (PyTorch's names and
// argument order: "conv2d(32,5,padding=2)"), its output shape for an input shape, its
// parameter blocks as PyTorch names and shapes them, their initialisation, and a Layer<S>
// built for one input shape that runs forward and backward over a batch. The flat parameter
// vector is the concatenation of the layers' blocks; nothing outside nn/ sees more than that
// vector. Adding a layer type: its file in nn/layers/, one line in the registry
// (nn/layer.cc), a row in docs/models.md's layer table. The gradient check of tests/layer_test.cc
// runs on every registered type without a test of its own.
//
// This header's parts are defined one job a file: the registry (nn/layer.cc), the model text's
// grammar and canonical form (nn/model_text.cc), shape resolution (nn/shapes.cc), the parameter,
// statistics and block walks (nn/layer_walks.cc), and ModelSpec's methods (nn/model_spec.cc).
//
// Blocks. A layer may hold layers: residual(BODY) computes BODY(x) + x and
// residual(BODY | SHORTCUT) computes BODY(x) + SHORTCUT(x) (nn/layers/residual.cc), BODY and
// SHORTCUT being layer lists as the model text writes them (blocks nest). Its type is
// Spatial::kBlock and its LayerSpec holds the lists (body, shortcut); its functions and its
// Layer compose its layers', and its parameters are theirs, the body's then the shortcut's,
// named "body.<j>.<name>" and "shortcut.<k>.<name>" as PyTorch names the members of a module
// whose body and shortcut are nn.Sequential. The walks here (ResolveShapes, TakesImages,
// LayerSites, the text) go into blocks; everything else sees a block as one layer.
//
// Tensors. A sample's tensor has a Shape (c channels of h x w; flat data is (features, 1, 1))
// and is stored channels-last: pixel after pixel, row after row, the c values of a pixel
// together (PyTorch's channels_last). A batch is n such tensors one after another: the
// column-major (Size() x n) matrix, so that a linear layer is one matrix product and a
// convolution of the whole batch is one too, whose result is already channels-last.
// flatten turns channels-last into PyTorch's (c, h, w) order, so the layers after it see the
// features in PyTorch's order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {

class Rng;
class OnnxGraph;

// One argument of a layer type. The model text gives the required ones in this order, then
// any by name; an argument left out takes its default.
struct LayerArg {
  const char* name;  // "padding"
  bool required;
  double default_value;
  double lo, hi;  // inclusive limits
  bool integer;
  // A switch (conv2d's bias): written true or false (PyTorch's True and False read too),
  // held as 1 or 0.
  bool boolean = false;
};

// A block of a layer's parameters as PyTorch names and shapes it: ("weight", {32, 1, 5, 5}).
//
// A buffer (batch norm's running_mean, running_var, num_batches_tracked) is a block of the
// flat vector too, so that checkpoints, model files, validation snapshots and export carry it
// as they carry the weights; it is not trained: its gradient is 0, and the training loops set
// it from the batch statistics after the optimizer's step (nn/batch_norm.h), which never
// moves it. A buffer that PyTorch keeps as an integer (num_batches_tracked) is exported as one.
struct ParamBlock {
  std::string name;
  std::vector<int64_t> torch_shape;
  bool buffer = false;
  bool integer = false;
  // The product of the shape; -1 when a dimension is negative or the product passes 2^63 - 1
  // (a shape read from a segment must not wrap into a plausible size).
  int64_t Size() const;
};

// Batch statistics that cross workers (batch norm: nn/layers/batchnorm.cc). A training pass
// hands each of its crossings the sums over its own rows; Sum replaces them by the sums over
// the whole global batch (every worker's, in rank order, then host order), the same bits on
// every worker, so P workers normalise as one process at the full batch. `offset` places the
// crossing among the model's statistics (LayerType::stats, Layer::stats_offset()); `count`
// doubles. A crossing that fails (a deadline, an abort) returns the sums it was given, and
// its owner ends the pass's worker afterwards (worker/sync_loop.cc): no layer sees a failure.
class StatsCrossing {
 public:
  virtual ~StatsCrossing() = default;
  virtual void Sum(int64_t offset, double* sums, int64_t count) = 0;
};

// What a pass knows besides its tensors. Dropout drops only when training, and its mask is a
// pure function of (seed, step, the sample's global row, the unit): P workers drop what one
// drops, and a redone pass drops the same.
struct PassInfo {
  bool train = false;
  uint64_t seed = 0;
  int64_t step = 0;
  const int64_t* rows = nullptr;  // the global row of each sample; null: first_row + i
  int64_t first_row = 0;
  int64_t Row(int64_t i) const { return rows == nullptr ? first_row + i : rows[i]; }
  // Training: where batch statistics cross; null: each pass normalises with its own rows.
  StatsCrossing* stats = nullptr;
};

// A layer built for one input shape. x: n input tensors (in().Size() x n), y: n outputs
// (out().Size() x n); params and dparams: the layer's slice of the flat vector. A layer keeps
// no state between calls (scratch aside): Backward recomputes what it needs from x and y. A
// block is the exception: the activations of its layers are its scratch, and its Backward
// reads those its last Forward wrote, so the two come in pairs on the same x and n, as Net
// calls them (a block checks the pointer and the count).
template <class S>
class Layer {
 public:
  Layer(Shape in, Shape out) : in_(in), out_(out) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  Shape in() const { return in_; }
  Shape out() const { return out_; }
  // Where this layer's crossings sit among the model's statistics (StatsCrossing), set by the
  // net that holds it; a layer holding layers (residual) places theirs from it.
  virtual void SetStatsOffset(int64_t offset) { stats_offset_ = offset; }
  int64_t stats_offset() const { return stats_offset_; }

  virtual void Forward(const S* params, const S* x, int64_t n, const PassInfo& pass, S* y) = 0;
  // From dy = dLoss/dy: dparams = dLoss/dparams (overwritten) and, unless dx is null (the
  // first layer), dx = dLoss/dx (overwritten). x and y are what Forward read and wrote.
  virtual void Backward(const S* params, const S* x, const S* y, const S* dy, int64_t n,
                        const PassInfo& pass, S* dx, S* dparams) = 0;

 private:
  Shape in_, out_;
  int64_t stats_offset_ = 0;
};

template <class S>
using LayerMaker = std::unique_ptr<Layer<S>> (*)(const LayerSpec& spec, Shape in, Shape out);

// What a layer makes of the spatial shape of its input, as PyTorch's modules do. kWindows
// slides a window over an image (conv2d, the pools) and gives an image, down to 1x1; flat data
// and the vectors kFlattens layers give (linear, flatten) have no image shape for it (PyTorch's
// conv2d refuses an (n, features) tensor). kKeeps layers give what they get (activations,
// dropout). kBlock layers hold layers (residual): what they make of it is what their layers
// make of it, which ResolveShapes and TakesImages find by going into them.
enum class Spatial { kKeeps, kWindows, kFlattens, kBlock };

struct LayerType {
  const char* name;     // in the model text: "conv2d"
  const char* torch;    // the PyTorch module: "Conv2d"
  const char* summary;  // one line for --help and docs/models.md
  std::vector<LayerArg> args;
  Spatial spatial;
  // The output shape for input shape `in`; a Status saying what does not fit otherwise (the
  // caller names the layer). A kWindows layer is given images only (ResolveShapes).
  Status (*out_shape)(const LayerSpec& spec, Shape in, Shape* out);
  // The parameter blocks in the flat vector's order; null: none.
  std::vector<ParamBlock> (*params)(const LayerSpec& spec, Shape in) = nullptr;
  // Fills the blocks (their sizes' sum) from rng, in the flat vector's order; null: none.
  void (*init)(const LayerSpec& spec, Shape in, Init init, Rng& rng, float* params) = nullptr;
  // PyTorch's layout of the blocks (block after block, each row-major in its torch_shape) as a
  // permutation of ours: element t of PyTorch's is ours[from[t]], indices within the layer's
  // parameters (ParamSize of them); null: the layouts are the same. One definition serves both
  // ways (ToTorch, FromTorch below): export and weights read in (--init-from).
  void (*torch_order)(const LayerSpec& spec, Shape in, int64_t* from) = nullptr;
  // The layer in an ONNX graph (nn/onnx.h): adds the nodes that compute its output (of shape
  // out) from value x (of shape in) and returns the output's value. Its parameters are the
  // graph's tensors "{module}.{block}", module being its name in the export ("3",
  // "3.body.0": master/files/export.h). Every type has one (tests/onnx_test.cc).
  std::string (*to_onnx)(const LayerSpec& spec, Shape in, Shape out, const std::string& module,
                         const std::string& x, OnnxGraph& g) = nullptr;
  // The elements of the layer's own scratch (besides its input and output) after passes over up
  // to n samples, forward only or (backward) forward and backward: what the layer allocates,
  // from the same computation (an upper bound where more decides it: the first layer's backward
  // pass computes no dx), since nn::PassBytes counts it for the memory check. Null: none.
  int64_t (*scratch)(const LayerSpec& spec, Shape in, Shape out, int64_t n,
                     bool backward) = nullptr;
  // Set by TypeOf (nn/layers/type_of.h).
  LayerMaker<float> make_float = nullptr;
  LayerMaker<double> make_double = nullptr;
  // The doubles a training pass of this layer hands to StatsCrossing (batch norm: 4 per
  // channel); null: none.
  int64_t (*stats)(const LayerSpec& spec, Shape in) = nullptr;

  template <class S>
  LayerMaker<S> maker() const;
};

template <>
inline LayerMaker<float> LayerType::maker<float>() const {
  return make_float;
}
template <>
inline LayerMaker<double> LayerType::maker<double>() const {
  return make_double;
}

// The registry, in the order of docs/models.md's table.
const std::vector<const LayerType*>& LayerTypes();
const LayerType* FindLayerType(std::string_view name);

// The model text: layers separated by top-level commas, each "name" or "name(args)" with the
// required arguments by position, then any by name: "conv2d(32,5,padding=2),relu,flatten". A
// block is "residual(LAYERS)" or "residual(LAYERS | LAYERS)": its body, then its shortcut after
// the one top-level '|' (commas and bars inside parentheses belong to the layers there).
// Messages name the layer ("layer 4 'conv2d(64,x)'") and what is wrong with it, inside a
// block the block's too ("layer 2 'residual(relu,conv2d(8))': in its body, layer 2
// 'conv2d(8)': conv2d needs kernel ..."); callers say where the text came from (--model, a
// file). Blocks nest at most kMaxBlockDepth deep: the parser and every walk into blocks
// recurse, and --model's text is parsed before its length is checked.
Status ParseModelText(std::string_view text, std::vector<LayerSpec>* layers);
inline constexpr int kMaxBlockDepth = 32;
// The canonical text of layers: required arguments by position, the others by name only when
// they differ from their default; a block as "residual(A,B|C)", without spaces, and without
// the bar for an identity shortcut. ParseModelText(ModelText(l)) gives l back.
std::string ModelText(const std::vector<LayerSpec>& layers);
// A model text as a model file or the segment stores it: ParseModelText, refused unless the
// text is the canonical text of what it reads. --model takes any spelling ParseModelText
// reads (spaces, "relu()", "linear(out=4)", a default given) and every store holds ModelText
// of it, so one model is stored as one text: the same file bytes, fingerprint and segment.
// A stored text spelled otherwise was not written by shmtrain.
Status ParseStoredModelText(std::string_view text, std::vector<LayerSpec>* layers);
// "conv2d #2 (layer 4)": the second conv2d, fourth layer (1-based), as messages name it; within
// one list (the model's, or a block's body or shortcut: the messages about a block's layers
// name the block first).
std::string LayerName(const std::vector<LayerSpec>& layers, size_t index);

// The shape after each layer (shapes->size() == layers.size()), or a message naming the first
// layer that does not fit: "conv2d #2 (layer 4): input 32x14x14, kernel 15 with padding 0
// leaves no output". The input is an image (of C x H x W, 1 x 1 too) unless flat_input says
// that it is flat data (a row of features: data/pipeline.cc, for data without an image shape),
// which a kWindows layer refuses as it refuses a kFlattens layer's output.
//
// A block's body and shortcut are resolved on the block's input, and must give the same shape
// ("residual #2 (layer 5): body gives 32x16x16, shortcut gives 16x32x32"); without a shortcut,
// the body must give its input back. A message about a layer inside a block names the block
// and then the layer within its list ("residual #1 (layer 3): in its body, conv2d #1 (layer 1):
// ..."). shapes holds the model's layers' outputs only, a block's among them.
Status ResolveShapes(Shape input, const std::vector<LayerSpec>& layers, std::vector<Shape>* shapes,
                     bool flat_input = false);
// For block types: the out_shape of a kBlock layer, not told whether its input is an image or
// flat data (ResolveShapes, which knows, resolves blocks itself and checks what depends on it).
Status ResolveBlock(const LayerSpec& block, Shape in, Shape* out);

// Whether a model on `input` takes images: an input of more than one pixel, or a 1x1 one that
// a kWindows layer reads before any kFlattens layer. Data whose samples have an image shape
// must then have the input's (data/pipeline.h, CheckImage); a model that takes no images takes
// any of as many values, as it takes flat data.
bool TakesImages(Shape input, const std::vector<LayerSpec>& layers);

// Every layer that computes, in the flat vector's order: the model's layers, and in place of a
// residual block the layers of its body then of its shortcut (nested blocks alike). With its
// input and output shapes, its first parameter in the flat vector and its first statistic
// among the model's crossings (StatsCrossing). `spec` points into the model.
struct LayerSite {
  const LayerSpec* spec;
  const LayerType* type;
  Shape in, out;
  int64_t param_offset, stats_offset;
};
// The spec must resolve (abort otherwise).
std::vector<LayerSite> LayerSites(const ModelSpec& spec);
// The same of a spec whose shapes are known (ResolveShapes' shapes of it).
std::vector<LayerSite> LayerSites(const ModelSpec& spec, const std::vector<Shape>& shapes);
// The doubles a training pass of the model hands to StatsCrossing (0 without batch norm).
int64_t StatsCount(const ModelSpec& spec);
// The doubles layer `spec` of type `t` crosses on input `in` (LayerType::stats; 0 if none).
int64_t StatsSize(const LayerType& t, const LayerSpec& spec, Shape in);

// A model resolved once: its spec (the input known), the shape after each layer, and what
// follows from them, so that nothing after the resolution walks the layers again for them: the
// outputs, the parameters (the flat vector's length; nullopt when their count passes 2^64, as
// ModelSpec::CheckedParamCount) and the doubles a training pass crosses (StatsCount).
struct ResolvedModel {
  ModelSpec spec;
  std::vector<Shape> shapes;
  int64_t outputs = 0;
  std::optional<uint64_t> param_count;
  int64_t stats_count = 0;
};
// ResolveShapes of spec (flat_input as there), then the counts; its message otherwise.
Status ResolveModel(const ModelSpec& spec, bool flat_input, ResolvedModel* out);

// The layers a block holds, each with its input and output shape, in the flat vector's order:
// its body's, then its shortcut's (`shortcut` tells which), resolved on the block's input
// `in`. The block must resolve (abort otherwise). Not nested: a block inside is one entry.
struct BlockMember {
  const LayerSpec* spec;
  const LayerType* type;
  Shape in, out;
  bool shortcut;  // false: the body's
  size_t index;   // within its list
};
std::vector<BlockMember> BlockMembers(const LayerSpec& block, Shape in);

// The number of parameters of layer `spec` of type `t` on input `in` (its blocks' sizes); -1
// when it does not fit in int64_t (ParamBlock::Size).
int64_t ParamSize(const LayerType& t, const LayerSpec& spec, Shape in);

// Layer `spec`'s parameters (ParamSize of them) in PyTorch's layout from ours, and back
// (LayerType::torch_order; a copy for a layer without one).
void ToTorch(const LayerType& t, const LayerSpec& spec, Shape in, const float* ours, float* torch);
void FromTorch(const LayerType& t, const LayerSpec& spec, Shape in, const float* torch,
               float* ours);

// For layer files: an out_shape for layers that keep their input's shape.
Status SameShape(const LayerSpec& spec, Shape in, Shape* out);
// For layer files' messages: "8x1x1", c x h x w even where Shape::Text() says a flat "8".
std::string ImageText(Shape s);

// For layer files: the initialisations of nn/model.h's InitParams for `weights` weights then
// `biases` biases, with the fans of the layer (kTorch: U(+-1/sqrt(fan_in)) for both).
void InitWeightsAndBias(Init init, int64_t fan_in, int64_t fan_out, int64_t weights,
                        int64_t biases, Rng& rng, float* params);

// For sizes: the sum and the product of non-negative counts, INT64_MAX where they would pass it.
inline int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
inline int64_t SatMul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

// For layer files: builds the Layer of type L.
template <template <class> class L, class S>
std::unique_ptr<Layer<S>> MakeLayer(const LayerSpec& spec, Shape in, Shape out) {
  return std::make_unique<L<S>>(spec, in, out);
}

}  // namespace shmtrain::nn
