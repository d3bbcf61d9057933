// PNG through libpng. 8-bit samples out: a palette expanded to RGB, grey below 8 bits to 8,
// alpha (or a palette's transparency) dropped; 16 bits refused. Interlaced files are read in
// their passes by libpng.
//
// libpng reports a fatal error through the error function, which must not return: ours
// longjmps back into the function that called the library. Only the functions below that
// call setjmp call libpng after the read struct exists, and they hold nothing with a
// destructor, so the jump skips no C++ object. libpng allocates through operator new (so that
// what it takes counts with ours): a chunk no more than the file holds (CheckChunkLengths),
// what a compressed chunk inflates to up to kMaxChunkBytes.
#include <setjmp.h>

#include <png.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "data/image_codec.h"

namespace shmtrain::data::image_internal {
namespace {

// What libpng may allocate for an ancillary chunk (png_set_chunk_malloc_max: an ICC profile,
// compressed text): real ones are a few KiB to a few hundred. It did not stop libpng 1.6.39
// allocating a text chunk's declared length before reading it: CheckChunkLengths does.
constexpr png_alloc_size_t kMaxChunkBytes = png_alloc_size_t{4} << 20;
// How many ancillary chunks libpng keeps (text, sPLT, unknown): a file of a million tiny ones
// would cost time and memory for nothing.
constexpr png_uint_32 kMaxChunks = 256;
// Deflate inflates at most 1032 bytes out of one byte in: a file whose pixels (with each row's
// filter byte) are more than that times its size is missing data.
constexpr int64_t kMaxInflation = 1032;

struct PngState {
  const uint8_t* bytes;
  size_t n;
  size_t pos;
  bool truncated;
  char message[256];
};

struct Png {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngState st{};
  ~Png() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

[[noreturn]] void OnError(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::strncpy(st->message, msg, sizeof st->message - 1);
  st->message[sizeof st->message - 1] = '\0';
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}  // a damaged ancillary chunk, dropped

void OnRead(png_structp png, png_bytep data, size_t length) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (st->n - st->pos < length) {
    st->truncated = true;
    png_error(png, "the file ends early");
  }
  std::memcpy(data, st->bytes + st->pos, length);
  st->pos += length;
}

png_voidp Allocate(png_structp, png_alloc_size_t n) {
  return ::operator new(n, std::nothrow);
}

void Free(png_structp, png_voidp p) {
  ::operator delete(p);
}

// Creates the read struct and reads the header (every chunk up to the first IDAT). False
// when libpng refused (its message in p->st.message).
bool ReadHeader(Png* p, const ImageLimits& limits) {
  p->png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &p->st, OnError, OnWarning, nullptr,
                                    Allocate, Free);
  if (p->png == nullptr) {
    std::strcpy(p->st.message, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(p->png))) return false;
  p->info = png_create_info_struct(p->png);
  if (p->info == nullptr) png_error(p->png, "out of memory");
  png_set_read_fn(p->png, &p->st, OnRead);
  // Neither side can be more than the limit's pixels (CheckDeclaredSize names the product).
  const auto side =
      static_cast<png_uint_32>(std::clamp<int64_t>(limits.max_pixels, 1, PNG_UINT_31_MAX));
  png_set_user_limits(p->png, side, side);
  png_set_chunk_malloc_max(p->png, kMaxChunkBytes);
  png_set_chunk_cache_max(p->png, kMaxChunks);
  png_read_info(p->png, p->info);
  return true;
}

// Sets the transformations to 8-bit grey or RGB and checks libpng agrees on the row size.
bool SetTransforms(Png* p, int channels, size_t row_bytes) {
  if (setjmp(png_jmpbuf(p->png))) return false;
  const int type = png_get_color_type(p->png, p->info);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p->png);  // tRNS to alpha too
  if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(p->png, p->info) < 8) {
    png_set_expand_gray_1_2_4_to_8(p->png);
  }
  png_set_strip_alpha(p->png);
  png_set_interlace_handling(p->png);
  png_read_update_info(p->png, p->info);
  if (png_get_channels(p->png, p->info) != channels ||
      png_get_rowbytes(p->png, p->info) != row_bytes) {
    png_error(p->png, "libpng's rows are not 8-bit grey or RGB");
  }
  return true;
}

// Reads every row (every pass of an interlaced file) and the chunks after the pixels.
bool ReadRows(Png* p, png_bytepp rows) {
  if (setjmp(png_jmpbuf(p->png))) return false;
  png_read_image(p->png, rows);
  png_read_end(p->png, nullptr);
  return true;
}

// Every chunk's declared length against the bytes that follow it, before libpng sees the
// file: libpng allocates a chunk's declared length before it reads the chunk (a 100-byte file
// whose text chunk claims 128 MiB made it ask for 128 MiB), so no chunk may claim more than
// the file holds. The walk stops at IEND; libpng checks everything else.
Status CheckChunkLengths(const std::string& name, const uint8_t* bytes, size_t n) {
  size_t pos = 8;  // after the signature
  while (n - pos >= 8) {
    const uint32_t length = (uint32_t{bytes[pos]} << 24) | (uint32_t{bytes[pos + 1]} << 16) |
                            (uint32_t{bytes[pos + 2]} << 8) | bytes[pos + 3];
    const size_t left = n - pos - 8;  // after the length and type
    if (length > left) {
      return Bad(name, "truncated PNG: the chunk at byte " + std::to_string(pos) + " declares " +
                           std::to_string(length) + " bytes, the file has only " +
                           std::to_string(left) + " more");
    }
    if (std::memcmp(bytes + pos + 4, "IEND", 4) == 0) break;
    pos += 8 + size_t{length} + std::min<size_t>(4, left - length);  // its CRC, if there
  }
  return Status::Ok();
}

Status LibraryFailure(const std::string& name, const Png& p) {
  if (p.st.truncated) return Bad(name, "truncated PNG: the file ends before the image does");
  return Bad(name, std::string("corrupt or unsupported PNG: ") + p.st.message);
}

// The header's checks beyond libpng's: bit depth, then the size against the limits and
// against what the file can hold.
Status CheckHeader(const std::string& name, const Png& p, size_t n, const ImageLimits& limits,
                   int* channels) {
  const int64_t w = png_get_image_width(p.png, p.info), h = png_get_image_height(p.png, p.info);
  const int type = png_get_color_type(p.png, p.info);
  if (png_get_bit_depth(p.png, p.info) == 16) {
    return Bad(name, "a 16-bit PNG: only 8-bit samples are read (save it with 8 bits)");
  }
  if (Status s = CheckDeclaredSize(name, "PNG", w, h, limits); !s.ok()) return s;
  *channels = (type & PNG_COLOR_MASK_COLOR) != 0 ? 3 : 1;
  const int64_t packed = h * (1 + static_cast<int64_t>(png_get_rowbytes(p.png, p.info)));
  if (packed > kMaxInflation * static_cast<int64_t>(n)) {
    return Bad(name, "truncated PNG: its header declares " + std::to_string(w) + " x " +
                         std::to_string(h) + " pixels, " + std::to_string(packed) +
                         " bytes inflated, which a file of " + std::to_string(n) +
                         " bytes cannot hold (deflate inflates at most 1032 times)");
  }
  return Status::Ok();
}

}  // namespace

Status DecodePng(const uint8_t* bytes, size_t n, const std::string& name,
                 const ImageLimits& limits, bool header_only, Image* out) {
  if (Status s = CheckChunkLengths(name, bytes, n); !s.ok()) return s;
  Png p;
  p.st.bytes = bytes;
  p.st.n = n;
  if (!ReadHeader(&p, limits)) return LibraryFailure(name, p);
  int channels = 0;
  if (Status s = CheckHeader(name, p, n, limits, &channels); !s.ok()) return s;
  const int w = static_cast<int>(png_get_image_width(p.png, p.info));
  const int h = static_cast<int>(png_get_image_height(p.png, p.info));
  out->header = ImageHeader{ImageKind::kPng, w, h, channels};
  out->pixels.clear();
  if (header_only) return Status::Ok();
  const size_t row_bytes = static_cast<size_t>(w) * channels;
  if (!SetTransforms(&p, channels, row_bytes)) return LibraryFailure(name, p);
  out->pixels.resize(row_bytes * static_cast<size_t>(h));
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = out->pixels.data() + r * row_bytes;
  if (!ReadRows(&p, rows.data())) {
    *out = Image{};  // nothing of a refused image is kept
    return LibraryFailure(name, p);
  }
  return Status::Ok();
}

}  // namespace shmtrain::data::image_internal
