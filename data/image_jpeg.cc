// JPEG through libjpeg-turbo: the default DCT method and fancy upsampling, so that the samples
// are those PIL's decode of the same file gives (PIL uses the same library and defaults).
//
// libjpeg reports a fatal error through error_exit, which must not return: ours longjmps back
// into the function that called the library. Only the two functions below call setjmp, and
// they hold nothing with a destructor, so the jump skips no C++ object. A warning that means
// data is missing or damaged (the file ends early, a bad Huffman code) is refused like an
// error: libjpeg would go on and fill the rest with grey.
#include <setjmp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

// jpeglib.h needs size_t and FILE declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include "data/image_codec.h"

namespace shmtrain::data::image_internal {
namespace {

// The least entropy-coded data a file needs for the blocks its header declares, so that a
// small file declaring a large image is refused before its pixels are allocated (as a PNG is
// by deflate's ratio). Every scan codes each block of its components with at least one bit:
// a Huffman code is 1 to 16 bits long (a sequential scan codes a DC difference and an end of
// block per block, a progressive DC scan one difference per block; only the AC scans' runs of
// ends of block span blocks, and they follow a DC scan of the same component). A file has at
// least one scan, so it holds at least one bit per block of its component with the fewest
// blocks: with sampling factors up to 4, a block of 32 x 32 pixels, 8192 pixels a byte at
// most. Real images need far more (a flat 8 x 8 block costs 2 bits at the least and a photo's
// tens), so the bound refuses only files cut short or lying. An arithmetic-coded file can code
// a flat block in less than a bit; it is held to the same bound, which only a nearly constant
// image of that rare coding (few encoders write it) undercuts.
int64_t LeastBits(const jpeg_decompress_struct& c) {
  int64_t least = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < c.num_components; ++i) {
    const jpeg_component_info& k = c.comp_info[i];
    least = std::min(least, int64_t{k.width_in_blocks} * k.height_in_blocks);
  }
  return least;
}

// A progressive file may hold any number of scans, and each one walks the whole image: a
// small file of many empty scans would take minutes. Real files have at most a few dozen.
constexpr int kMaxScans = 1000;

struct JpegError {
  jpeg_error_mgr mgr;  // first: libjpeg hands the callbacks a pointer to it
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

struct Jpeg {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress;
  bool created = false;
  ~Jpeg() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// level -1 is a warning; the others are trace messages, which are dropped.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level != -1) return;
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
      reinterpret_cast<JpegError*>(cinfo->err)->truncated = true;
      OnError(cinfo);
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      OnError(cinfo);
    default:
      return;  // harmless: extraneous bytes before a marker, an unknown JFIF version, ...
  }
}

void OnProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number <= kMaxScans) return;
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  std::snprintf(err->message, sizeof err->message, "more than %d scans", kMaxScans);
  longjmp(err->jump, 1);
}

// Creates the decompressor and reads the header. False when libjpeg refused (its message in
// j->err.message).
bool ReadHeader(Jpeg* j, const uint8_t* bytes, size_t n) {
  j->cinfo.err = jpeg_std_error(&j->err.mgr);
  j->err.mgr.error_exit = OnError;
  j->err.mgr.emit_message = OnMessage;
  j->err.truncated = false;
  j->err.message[0] = '\0';
  if (setjmp(j->err.jump)) return false;
  jpeg_create_decompress(&j->cinfo);
  j->created = true;
  j->progress.progress_monitor = OnProgress;
  j->cinfo.progress = &j->progress;
  jpeg_mem_src(&j->cinfo, bytes, static_cast<unsigned long>(n));
  jpeg_read_header(&j->cinfo, TRUE);
  return true;
}

// Decodes every row into `pixels` (output_height rows of `row_bytes`).
bool ReadPixels(Jpeg* j, uint8_t* pixels, size_t row_bytes) {
  if (setjmp(j->err.jump)) return false;
  jpeg_start_decompress(&j->cinfo);
  if (j->cinfo.output_components * static_cast<size_t>(j->cinfo.output_width) != row_bytes) {
    std::snprintf(j->err.message, sizeof j->err.message,
                  "libjpeg gives %d samples a pixel, not the header's", j->cinfo.output_components);
    return false;
  }
  while (j->cinfo.output_scanline < j->cinfo.output_height) {
    JSAMPROW row = pixels + j->cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&j->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&j->cinfo);
  return true;
}

Status LibraryFailure(const std::string& name, const Jpeg& j) {
  if (j.err.truncated) {
    return Bad(name, "truncated JPEG: the file ends before the image does");
  }
  if (j.err.mgr.msg_code == JERR_IMAGE_TOO_BIG) {  // its SOF is read: the size is known
    return Bad(name, "JPEG too large: its header declares " +
                         std::to_string(j.cinfo.image_width) + " x " +
                         std::to_string(j.cinfo.image_height) + " pixels, more than the " +
                         std::to_string(JPEG_MAX_DIMENSION) + " a side libjpeg decodes");
  }
  if (j.err.mgr.msg_code == JERR_NO_BACKING_STORE) {
    return Bad(name, "the JPEG needs more memory to decode than its declared size allows");
  }
  return Bad(name, std::string("corrupt or unsupported JPEG: ") + j.err.message);
}

// What a colour space decodes to: 1 or 3 channels, or 0 when it is refused.
int ChannelsOf(J_COLOR_SPACE space, const char** refused) {
  switch (space) {
    case JCS_GRAYSCALE: return 1;
    case JCS_YCbCr:
    case JCS_RGB: return 3;
    case JCS_CMYK: *refused = "CMYK"; return 0;
    case JCS_YCCK: *refused = "YCCK"; return 0;
    default: *refused = "an unknown colour space"; return 0;
  }
}

}  // namespace

Status DecodeJpeg(const uint8_t* bytes, size_t n, const std::string& name,
                  const ImageLimits& limits, bool header_only, Image* out) {
  Jpeg j;
  if (!ReadHeader(&j, bytes, n)) return LibraryFailure(name, j);
  const char* refused = "";
  const int channels = ChannelsOf(j.cinfo.jpeg_color_space, &refused);
  if (channels == 0) {
    return Bad(name, std::string("a JPEG in ") + refused + " (" +
                         std::to_string(j.cinfo.num_components) +
                         " components): only grey and colour (YCbCr or RGB) JPEGs are read");
  }
  const int64_t w = j.cinfo.image_width, h = j.cinfo.image_height;
  if (Status s = CheckDeclaredSize(name, "JPEG", w, h, limits); !s.ok()) return s;
  if (const int64_t bits = LeastBits(j.cinfo); bits > 8 * static_cast<int64_t>(n)) {
    return Bad(name, "truncated JPEG: its header declares " + std::to_string(w) + " x " +
                         std::to_string(h) + " pixels, at least " + std::to_string(bits) +
                         " blocks of 8 x 8 samples coded with a bit each at the least, which a "
                         "file of " + std::to_string(n) + " bytes cannot hold");
  }
  out->header = ImageHeader{ImageKind::kJpeg, static_cast<int>(w), static_cast<int>(h), channels};
  out->pixels.clear();
  if (header_only) return Status::Ok();
  j.cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  // libjpeg's own buffers: a multi-scan file's coefficients (2 bytes a sample, each component
  // padded to its blocks) and rows of at most 65535 pixels. More is a file that lies.
  j.cinfo.mem->max_memory_to_use =
      static_cast<long>((int64_t{64} << 20) +
                        2 * int64_t{j.cinfo.num_components} * (w + 32) * (h + 32));
  const size_t row_bytes = static_cast<size_t>(w) * channels;
  out->pixels.resize(row_bytes * static_cast<size_t>(h));
  if (!ReadPixels(&j, out->pixels.data(), row_bytes)) {
    *out = Image{};  // nothing of a refused image is kept
    return LibraryFailure(name, j);
  }
  return Status::Ok();
}

}  // namespace shmtrain::data::image_internal
