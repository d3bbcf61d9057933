// Image files: JPEG (libjpeg-turbo) and PNG (libpng), each decoded to 8-bit samples.
//
// What a decoder accepts: 8-bit grey or colour. A PNG's palette is expanded to RGB, its alpha
// dropped (grey + alpha is grey, RGBA is RGB: as torchvision's loader keeps the colours), a
// 16-bit PNG refused; a JPEG in CMYK or YCCK refused. What it refuses is a Status (kData) that
// names the file and what is wrong: truncated, corrupt, not a JPEG or PNG, too large, not a
// regular file. A name in a message shows its control bytes as \xNN (Printable, core/utf8.h).
//
// A JPEG warning that means data is missing or damaged (the file ends early, a bad Huffman
// code) is refused like an error: libjpeg would fill the rest with grey.
//
// Memory: a file is read whole into memory, and one over 64 MiB is refused before it is read.
// The header is read first and the image's declared size checked against the limits before
// any pixel buffer is allocated (a JPEG claiming 65000 x 65000; libjpeg itself refuses a side
// over 65500). A PNG bomb, a small file that inflates to gigabytes, is stopped at its declared
// size, which must fit the limits and fit the file: pixels more than 1032 times the file's
// bytes (deflate's largest ratio) are refused as truncated before they are allocated. So is a
// JPEG whose blocks need more bits than its file holds (every scan codes a block with a bit at
// least: at most 8192 pixels a byte, data/image_jpeg.cc).
// libjpeg's own buffers are capped (max_memory_to_use: its coefficients for the declared size
// and 64 MiB of rows) and so are its scans (1000). libpng allocates through operator new; a
// PNG chunk that declares more bytes than the file holds is refused before libpng reads it
// (libpng 1.6.39 allocates a text chunk's declared length first, chunk_malloc_max or not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain::data {

enum class ImageKind { kJpeg, kPng };

// What a header says, before the pixels.
struct ImageHeader {
  ImageKind kind = ImageKind::kJpeg;
  int width = 0;
  int height = 0;
  int channels = 0;  // as decoded: 1 (grey) or 3 (colour)
};

struct ImageLimits {
  int64_t max_pixels = int64_t{1} << 26;  // width x height (64 Mpx)
};

// An image's samples, 8 bits each, row by row, channels interleaved (height x width x
// channels, as the decoders give them).
struct Image {
  ImageHeader header;
  std::vector<uint8_t> pixels;
};

// The kind of a file by its first bytes (the JPEG SOI marker FF D8 FF, the PNG signature);
// false when it is neither.
bool SniffImage(const uint8_t* bytes, size_t n, ImageKind* kind);

// Whether `path` (after symbolic links) is a regular file, found without opening it: kData
// naming it and what it is (a FIFO, a socket, a device, a directory) otherwise, or why it
// cannot be found. Opening a FIFO would wait for a writer, and opening a device may act on it;
// the readers below make this check, then open without blocking and check the descriptor.
Status CheckImageFile(const std::string& path);

// Decodes only the header of `path` (the file is still read whole): its kind, size and
// channels as decoded, with DecodeImage's refusals of a header (too large, 16 bits, CMYK).
Status ReadImageHeader(const std::string& path, const ImageLimits& limits, ImageHeader* out);

// Decodes `path` whole. `bytes`/`n`: the same from memory (the fuzz targets), with `name` in
// the messages.
Status DecodeImage(const std::string& path, const ImageLimits& limits, Image* out);
Status DecodeImage(const uint8_t* bytes, size_t n, const std::string& name,
                   const ImageLimits& limits, Image* out);

}  // namespace shmtrain::data
