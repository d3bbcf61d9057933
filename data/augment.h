// Augmentation of image rows for training (--augment), as torchvision's transforms define it:
//
//   crop=P  RandomCrop(size=(H, W), padding=P), zero padding: the image padded by P zeros on
//           every side, then the H x W window at (dx, dy), each uniform in [0, 2P];
//   hflip   RandomHorizontalFlip(0.5): the columns reversed, with probability 1/2.
//
// Items apply in the order given, each at most once. A row is one sample's c x h x w values,
// channels first, as the conv layers read it.
//
// The draw is a pure function of (seed, epoch, row): nn::Rng seeded with
// MixSeed(MixSeed(MixSeed(seed, kAugmentStream), epoch), row), which draws, item by item in
// the spec's order, crop's dy then dx (Below(2P + 1) each; torchvision draws the top first)
// and hflip's coin (Below(2) == 1 flips). So every worker of any P, a redone step and a
// resumed run see the same images. Only the workers augment, and only the training rows of a
// step: validation, eval and predict (the master's) read the rows as stored.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// The draws' own stream (as kSplitStream is the validation split's): "AUGMENT".
inline constexpr uint64_t kAugmentStream = 0x4155474D454E54ull;
// The items a spec holds: each kind once.
inline constexpr int kMaxAugmentItems = 4;

// Values stored in the segment (shm::RunConfig::augment): append only.
enum class AugmentKind : uint32_t { kNone = 0, kCrop = 1, kHflip = 2 };

struct AugmentItem {
  AugmentKind kind = AugmentKind::kNone;
  int64_t pad = 0;  // crop: the padding P, >= 1
};

struct AugmentSpec {
  std::array<AugmentItem, kMaxAugmentItems> items{};
  int count = 0;
  bool empty() const { return count == 0; }
  // "crop=4,hflip": the canonical text, in the items' order ("" when empty).
  std::string Text() const;
  // The segment's form: item i in word i as kind | pad << 8, unused words 0.
  std::array<uint32_t, kMaxAugmentItems> Encode() const;
  // kData when a word is not an item (an unknown kind, a repeated one, a gap).
  static Status Decode(const uint32_t (&words)[kMaxAugmentItems], AugmentSpec* out);
};

// "crop=4,hflip": kUsage saying what is wrong (an unknown or repeated item, a padding that is
// not a number >= 1). The caller names the flag.
Status ParseAugment(std::string_view text, AugmentSpec* out);

// The spec on a model input: kUsage (naming the spec) unless the input is an image (h, w >= 2) and
// every crop's padding is 1..min(h, w) - 1 (so that every window keeps part of the image).
Status CheckAugment(const AugmentSpec& spec, Shape input);

// One row's draw.
struct AugmentDraw {
  int64_t dx = 0, dy = 0;  // the crop's window in the padded image (0, 0 without a crop)
  bool flip = false;
};
AugmentDraw DrawAugment(const AugmentSpec& spec, uint64_t seed, int64_t epoch, int64_t row);

// The row `in` (shape c x h x w) augmented by `draw` into `out` (as many values; not `in`).
void ApplyAugment(const AugmentSpec& spec, const AugmentDraw& draw, Shape shape, const float* in,
                  float* out);

// DrawAugment then ApplyAugment: the training row `row` of `epoch`, augmented.
void AugmentRow(const AugmentSpec& spec, uint64_t seed, int64_t epoch, int64_t row, Shape shape,
                const float* in, float* out);

}  // namespace shmtrain::data
