// Shape resolution (nn/layer.h): the shape after each layer, into blocks, and whether a
// model takes images.
#include <string>
#include <vector>

#include "nn/layer.h"

namespace shmtrain::nn {

constexpr int64_t kMaxTensor = int64_t{1} << 31;

Status SameShape(const LayerSpec&, Shape in, Shape* out) {
  *out = in;
  return Status::Ok();
}

std::string ImageText(Shape s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

namespace {

// What a list of layers first does with a 1x1 input: read it as an image (a kWindows layer),
// flatten it (a kFlattens layer, or one this build does not know), or neither. A block reads
// an image if its body or its shortcut does.
enum class FirstUse { kImage, kFlat, kNeither };

FirstUse FirstUseOf(const std::vector<LayerSpec>& layers) {
  for (const LayerSpec& l : layers) {
    const LayerType* t = FindLayerType(l.kind);
    if (t == nullptr || t->spatial == Spatial::kFlattens) return FirstUse::kFlat;
    if (t->spatial == Spatial::kWindows) return FirstUse::kImage;
    if (t->spatial == Spatial::kBlock) {
      const FirstUse body = FirstUseOf(l.body), shortcut = FirstUseOf(l.shortcut);
      if (body == FirstUse::kImage || shortcut == FirstUse::kImage) return FirstUse::kImage;
      if (body == FirstUse::kFlat || shortcut == FirstUse::kFlat) return FirstUse::kFlat;
    }
  }
  return FirstUse::kNeither;
}

// Each tensor of one sample holds at most 2^31 values: the parameter blocks' sizes (a linear
// layer's out x in) then fit in 64 bits.
bool TooLarge(Shape s) {
  int64_t n = 0;
  return s.c < 1 || s.h < 1 || s.w < 1 || __builtin_mul_overflow(s.c, s.h, &n) ||
         __builtin_mul_overflow(n, s.w, &n) || n > kMaxTensor;
}

// What the tensor between two layers is: an image, flat (with what a kWindows layer's message
// says of it: " has no image shape (...)" for the input, " is flat (the output of ...), not an
// image" for a layer's output), or either: a block's out_shape and BlockMembers are not told
// which their input is, and leave the checks that need to know to ResolveShapes, which is.
struct Flatness {
  enum Kind { kImage, kFlat, kEither } kind = kImage;
  std::string why;  // kFlat
};

Flatness FlatOutputOf(const std::vector<LayerSpec>& layers, size_t i) {
  return {Flatness::kFlat, " is flat (the output of " + LayerName(layers, i) + "), not an image"};
}

std::string ShapeOf(Shape s, const Flatness& flat) {
  return flat.kind == Flatness::kFlat ? s.Text() + " (flat)" : ImageText(s);
}

Status ResolveBlockIn(const LayerSpec& block, Shape in, Flatness* flat, Shape* out);

// ResolveShapes of a list whose input is as *flat says; *flat becomes its output's.
Status ResolveList(Shape in, const std::vector<LayerSpec>& layers, Flatness* flat,
                   std::vector<Shape>* shapes) {
  shapes->clear();
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const LayerType* t = FindLayerType(l.kind);
    const bool block = t != nullptr && t->spatial == Spatial::kBlock;
    if (t == nullptr || l.args.size() != t->args.size() ||
        (!block && !(l.body.empty() && l.shortcut.empty()))) {
      return Status::Usage(LayerName(layers, i) + ": not a layer this build knows");
    }
    if (t->spatial == Spatial::kWindows && flat->kind == Flatness::kFlat) {
      return Status::Usage(LayerName(layers, i) + ": input " + in.Text() + flat->why);
    }
    if (t->spatial == Spatial::kWindows) *flat = {};
    if (t->spatial == Spatial::kFlattens) *flat = FlatOutputOf(layers, i);
    Shape out;
    Status s = block ? ResolveBlockIn(l, in, flat, &out) : t->out_shape(l, in, &out);
    if (!s.ok()) return Status::Usage(LayerName(layers, i) + ": " + s.message());
    if (block && flat->kind == Flatness::kFlat) *flat = FlatOutputOf(layers, i);
    if (TooLarge(out)) {
      return Status::Usage(LayerName(layers, i) +
                           ": its output would hold more than 2^31 values a sample");
    }
    shapes->push_back(out);
    in = out;
  }
  return Status::Ok();
}

// A block's body and shortcut on `in`: they must give one shape, both flat or both images
// (PyTorch would broadcast (n, C) and (n, C, 1, 1) into another shape).
Status ResolveBlockIn(const LayerSpec& block, Shape in, Flatness* flat, Shape* out) {
  if (block.body.empty()) return Status::Usage("an empty body");
  std::vector<Shape> shapes;
  Flatness body_flat = *flat, shortcut_flat = *flat;
  if (Status s = ResolveList(in, block.body, &body_flat, &shapes); !s.ok()) {
    return Status::Usage("in its body, " + s.message());
  }
  const Shape body = shapes.back();
  Shape shortcut = in;
  if (!block.shortcut.empty()) {
    if (Status s = ResolveList(in, block.shortcut, &shortcut_flat, &shapes); !s.ok()) {
      return Status::Usage("in its shortcut, " + s.message());
    }
    shortcut = shapes.back();
  }
  const bool known = body_flat.kind != Flatness::kEither && shortcut_flat.kind != Flatness::kEither;
  if (!(body == shortcut) || (known && body_flat.kind != shortcut_flat.kind)) {
    return Status::Usage("body gives " + ShapeOf(body, body_flat) + ", shortcut" +
                         (block.shortcut.empty() ? " (the identity)" : "") + " gives " +
                         ShapeOf(shortcut, shortcut_flat));
  }
  *flat = body_flat.kind != Flatness::kEither ? body_flat : shortcut_flat;
  *out = body;
  return Status::Ok();
}

}  // namespace

bool TakesImages(Shape input, const std::vector<LayerSpec>& layers) {
  return !input.Flat() || FirstUseOf(layers) == FirstUse::kImage;
}

Status ResolveShapes(Shape input, const std::vector<LayerSpec>& layers, std::vector<Shape>* shapes,
                     bool flat_input) {
  shapes->clear();
  if (TooLarge(input)) {
    return Status::Usage("input " + std::to_string(input.c) + "x" + std::to_string(input.h) + "x" +
                         std::to_string(input.w) +
                         ": each dimension at least 1, at most 2^31 values");
  }
  if (layers.empty()) return Status::Usage("a model without layers");
  Flatness flat;
  if (flat_input) {
    flat = {Flatness::kFlat, " has no image shape (--input-shape C,H,W gives flat data one)"};
  }
  return ResolveList(input, layers, &flat, shapes);
}

Status ResolveBlock(const LayerSpec& block, Shape in, Shape* out) {
  Flatness either{Flatness::kEither, ""};
  return ResolveBlockIn(block, in, &either, out);
}

std::vector<BlockMember> BlockMembers(const LayerSpec& block, Shape in) {
  std::vector<BlockMember> members;
  for (const bool shortcut : {false, true}) {
    const std::vector<LayerSpec>& list = shortcut ? block.shortcut : block.body;
    if (list.empty()) continue;
    std::vector<Shape> shapes;
    Flatness either{Flatness::kEither, ""};
    const Status s = ResolveList(in, list, &either, &shapes);
    SHMTRAIN_CHECK(s.ok(), "a block that does not resolve: " + s.message());
    Shape at = in;
    for (size_t j = 0; j < list.size(); ++j) {
      members.push_back({&list[j], FindLayerType(list[j].kind), at, shapes[j], shortcut, j});
      at = shapes[j];
    }
  }
  return members;
}

}  // namespace shmtrain::nn
