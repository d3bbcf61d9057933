#include "data/augment.h"

#include <algorithm>
#include <charconv>

#include "nn/rng.h"

namespace shmtrain::data {
namespace {

const char* KindName(AugmentKind k) {
  switch (k) {
    case AugmentKind::kCrop: return "crop";
    case AugmentKind::kHflip: return "hflip";
    case AugmentKind::kNone: break;
  }
  return "none";
}

bool Has(const AugmentSpec& s, AugmentKind k) {
  for (int i = 0; i < s.count; ++i) {
    if (s.items[i].kind == k) return true;
  }
  return false;
}

// The largest padding stored (24 bits of a word); CheckAugment bounds it by the image.
constexpr int64_t kMaxPad = (int64_t{1} << 24) - 1;

Status ParseItem(std::string_view item, AugmentItem* out) {
  const size_t eq = item.find('=');
  const std::string_view name = item.substr(0, eq);
  if (name == "hflip") {
    if (eq != std::string_view::npos) {
      return Status::Usage("'" + std::string(item) + "': hflip takes no value");
    }
    *out = {AugmentKind::kHflip, 0};
    return Status::Ok();
  }
  if (name != "crop") {
    return Status::Usage("unknown item '" + std::string(item) + "' (known: crop=P, hflip)");
  }
  const std::string_view v = eq == std::string_view::npos ? "" : item.substr(eq + 1);
  int64_t pad = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), pad);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || pad < 1 || pad > kMaxPad) {
    return Status::Usage("'" + std::string(item) +
                         "': crop needs its padding, a whole number >= 1, as in crop=4");
  }
  *out = {AugmentKind::kCrop, pad};
  return Status::Ok();
}

}  // namespace

std::string AugmentSpec::Text() const {
  std::string s;
  for (int i = 0; i < count; ++i) {
    if (i > 0) s += ',';
    s += KindName(items[i].kind);
    if (items[i].kind == AugmentKind::kCrop) s += "=" + std::to_string(items[i].pad);
  }
  return s;
}

std::array<uint32_t, kMaxAugmentItems> AugmentSpec::Encode() const {
  std::array<uint32_t, kMaxAugmentItems> w{};
  for (int i = 0; i < count; ++i) {
    w[i] = static_cast<uint32_t>(items[i].kind) | static_cast<uint32_t>(items[i].pad) << 8;
  }
  return w;
}

Status AugmentSpec::Decode(const uint32_t (&words)[kMaxAugmentItems], AugmentSpec* out) {
  AugmentSpec s;
  for (int i = 0; i < kMaxAugmentItems; ++i) {
    const uint32_t kind = words[i] & 0xFF, pad = words[i] >> 8;
    if (kind == 0 && pad == 0) {
      // The items end at the first empty word; none may follow it.
      for (int j = i + 1; j < kMaxAugmentItems; ++j) {
        if (words[j] != 0)
          return Status::Data("augmentation item " + std::to_string(j) + " after an empty one");
      }
      break;
    }
    const auto k = static_cast<AugmentKind>(kind);
    const bool known =
        (k == AugmentKind::kCrop && pad >= 1) || (k == AugmentKind::kHflip && pad == 0);
    if (!known || Has(s, k)) {
      return Status::Data("augmentation word " + std::to_string(words[i]) + " is not an item");
    }
    s.items[s.count++] = {k, static_cast<int64_t>(pad)};
  }
  *out = s;
  return Status::Ok();
}

Status ParseAugment(std::string_view text, AugmentSpec* out) {
  AugmentSpec s;
  if (text.empty()) return Status::Usage("needs items such as crop=4,hflip");
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string_view item =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    AugmentItem it;
    if (Status st = ParseItem(item, &it); !st.ok()) return st;
    if (Has(s, it.kind)) {
      return Status::Usage(std::string(KindName(it.kind)) + " is given twice (each item once)");
    }
    s.items[s.count++] = it;  // two kinds: never more than kMaxAugmentItems
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  *out = s;
  return Status::Ok();
}

Status CheckAugment(const AugmentSpec& spec, Shape input) {
  if (spec.empty()) return Status::Ok();
  if (input.h < 2 || input.w < 2) {
    return Status::Usage(spec.Text() + " augments images, and the model's input " + input.Text() +
                         " is not one (it needs C x H x W with H, W >= 2, e.g. --input-shape "
                         "3,32,32)");
  }
  const int64_t limit = std::min(input.h, input.w) - 1;
  for (int i = 0; i < spec.count; ++i) {
    const AugmentItem& it = spec.items[i];
    if (it.kind == AugmentKind::kCrop && it.pad > limit) {
      return Status::Usage("crop=" + std::to_string(it.pad) + " on images of " + input.Text() +
                           ": the padding must be 1.." + std::to_string(limit) +
                           " (min(H, W) - 1, so that every window keeps part of the image)");
    }
  }
  return Status::Ok();
}

AugmentDraw DrawAugment(const AugmentSpec& spec, uint64_t seed, int64_t epoch, int64_t row) {
  nn::Rng rng(
      nn::MixSeed(nn::MixSeed(nn::MixSeed(seed, kAugmentStream), static_cast<uint64_t>(epoch)),
                  static_cast<uint64_t>(row)));
  AugmentDraw d;
  for (int i = 0; i < spec.count; ++i) {
    const AugmentItem& it = spec.items[i];
    if (it.kind == AugmentKind::kCrop) {
      const auto span = static_cast<uint64_t>(2 * it.pad + 1);
      d.dy = static_cast<int64_t>(rng.Below(span));
      d.dx = static_cast<int64_t>(rng.Below(span));
    } else if (it.kind == AugmentKind::kHflip) {
      d.flip = rng.Below(2) == 1;
    }
  }
  return d;
}

// The items compose into one map from an output pixel (y, x) to the input's (y + dy0,
// a * x + bx), a = +-1, zero where that falls outside the image: traced from the last item
// back to the first, a crop adds its window's offset minus the padding (column X of its
// output is X + dx - P of its input) and a flip mirrors the column (X is W - 1 - X). (A spec holds
// one crop, and a flip keeps the image's bounds, so the pixels a crop zeroes are exactly those
// whose source is outside the input.)
void ApplyAugment(const AugmentSpec& spec, const AugmentDraw& draw, Shape shape, const float* in,
                  float* out) {
  const int64_t H = shape.h, W = shape.w;
  int64_t a = 1, bx = 0, dy0 = 0;
  for (int i = spec.count - 1; i >= 0; --i) {
    const AugmentItem& it = spec.items[i];
    if (it.kind == AugmentKind::kCrop) {
      bx += draw.dx - it.pad;
      dy0 += draw.dy - it.pad;
    } else if (it.kind == AugmentKind::kHflip && draw.flip) {
      bx = W - 1 - bx;
      a = -a;
    }
  }
  // The columns x whose source a * x + bx is inside [0, W).
  const int64_t x0 = std::clamp<int64_t>(a > 0 ? -bx : bx - W + 1, 0, W);
  const int64_t x1 = std::clamp<int64_t>(a > 0 ? W - bx : bx + 1, x0, W);
  for (int64_t c = 0; c < shape.c; ++c) {
    for (int64_t y = 0; y < H; ++y) {
      float* o = out + (c * H + y) * W;
      const int64_t sy = y + dy0;
      if (sy < 0 || sy >= H) {
        std::fill(o, o + W, 0.0f);
        continue;
      }
      const float* s = in + (c * H + sy) * W;
      std::fill(o, o + x0, 0.0f);
      if (a > 0) {
        std::copy(s + x0 + bx, s + x1 + bx, o + x0);
      } else {
        for (int64_t x = x0; x < x1; ++x) o[x] = s[bx - x];
      }
      std::fill(o + x1, o + W, 0.0f);
    }
  }
}

void AugmentRow(const AugmentSpec& spec, uint64_t seed, int64_t epoch, int64_t row, Shape shape,
                const float* in, float* out) {
  ApplyAugment(spec, DrawAugment(spec, seed, epoch, row), shape, in, out);
}

}  // namespace shmtrain::data
